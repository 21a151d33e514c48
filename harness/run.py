"""`harness run`: cells, one after another, into one results directory, judged.

`RunRequest -> RunReport`, as check, mutate, bisect and shell have theirs; the CLI turns
its options into the request (which cells, what they are told) and prints the report.
Each cell goes through `pipeline.run_cell`. results.json is written before the first cell
(a run stopped from there on says so), after every cell (a killed run keeps what it
finished) and when a signal stops the run (its state, the cell and stage it stopped in,
the cells not run).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import atomic, doctor, matrix, paths, pipeline, results
from .errors import signal_of
from .matrix import Cell
from .model import Accel, CellResult


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    cells: tuple[Cell, ...]
    what: str  # what this run tests, as the terminal's first lines said it
    out: Path  # the results directory (prepared: new, empty or an earlier run's)
    accel: Accel = Accel.AUTO
    strict: bool = False  # an unexpected pass fails the run
    repeat: int | None = None  # each test N times in one boot
    build_only: bool = False
    baseline: bool = False  # the cells come in (base, cell) pairs: compare each pair
    bisect_exit: bool = False  # exit codes for `git bisect run`
    argv: tuple[str, ...] = ("run",)  # the command line (reproduce.sh, results.json)


@dataclass(frozen=True, kw_only=True)
class RunReport:
    cells: tuple[CellResult, ...]
    results: Path  # results.json
    exit_code: int


def baseline_cells(cells: list[Cell]) -> list[Cell]:
    """Each cell preceded by its base: the same kernel, configs and tests without the series
    and patches, and without the cell's expectations (they are about the series)."""
    bare = [c.name for c in cells if not c.series and not c.patches]
    if bare:
        raise matrix.MatrixError(f"--baseline: cell(s) {', '.join(bare)} apply no series or "
                                 "patch: there is nothing to compare with the base",
                                 fix="give --series/--patch, or select cells that have one")
    return [x for c in cells for x in (replace(c, name=f"{c.name}.base", series=(), patches=(),
                                               expect_status=None, expect=()), c)]


def _baseline_comparison(out: Path, cells: tuple[Cell, ...], done: list[CellResult]) -> int:
    """Compare each cell with its base (as results.json has them); print and write it.
    1 when the series made anything worse."""
    from . import compare

    doc = {"cells": [results.cell_json(c, base=out) for c in done]}
    ran = {c.cell for c in done}
    pairs = [(f"{c.name}.base", c.name) for c in cells
             if not c.name.endswith(".base") and {c.name, f"{c.name}.base"} <= ran]
    merged = [compare.compare(doc, doc, labels=(a, b), cells=(a, b)) for a, b in pairs]
    result = compare.Comparison(before="the base", after="the series",
                                cells=tuple(p for m in merged for p in m.cells),
                                differences=tuple(d for m in merged for d in m.differences))
    atomic.write_json(out / "comparison.json", compare.to_json(result))
    atomic.write_text(out / "comparison.md", compare.render_markdown(result))
    print("\nwhat the series changed (--baseline):")
    print(compare.render_terminal(result))
    return 1 if result.regressed else 0


def run(request: RunRequest) -> RunReport:
    """Every cell, judged; the summary printed; the exit code of the whole."""
    out, cells, accel = request.out, request.cells, request.accel
    meta: dict[str, Any] = {
        "run_id": out.name,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": ["harness", *request.argv],
        "host": {"kernel": os.uname().release, "cpus": os.cpu_count()},
        "strict": request.strict,
        "repeat": request.repeat,
        "what": request.what,
    }
    done: list[CellResult] = []
    current = ""
    try:
        # First thing: a run stopped from here on leaves a results.json that says so.
        results.write_json(out / "results.json", done, meta=meta, state="running")
        meta["harness_rev"] = results.harness_rev()
        meta["tools"] = doctor.tool_versions()
        results.write_reproduce(out / "reproduce.sh", argv=list(request.argv),
                                repo=paths.repo_root(), harness_rev=meta["harness_rev"])
        for cell in cells:
            current = cell.name
            cell_dir = out / cell.name
            cell_dir.mkdir(parents=True, exist_ok=True)
            results.write_reproduce(cell_dir / "reproduce.sh",
                                    argv=pipeline.cell_argv(cell, accel),
                                    repo=paths.repo_root(), harness_rev=meta["harness_rev"])
            res = pipeline.run_cell(cell, cell_dir, accel=accel,
                                    options=pipeline.RunOptions(strict=request.strict,
                                                                repeat=request.repeat,
                                                                build_only=request.build_only))
            done.append(res)
            # Written after every cell, so a killed run still leaves what it finished.
            results.write_json(out / "results.json", done, meta=meta,
                               state="complete" if len(done) == len(cells) else "running")
    except KeyboardInterrupt as exc:
        # Finish the record: a second signal must not cut it short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stage = ""
        if isinstance(exc, pipeline.CellInterrupted):
            done.append(exc.partial)
            stage = exc.where
        not_run = [c.name for c in cells if c.name not in {d.cell for d in done}]
        meta["interrupted"] = {"signal": str(exc), "cell": current, "stage": stage,
                               "not_run": not_run}
        results.write_json(out / "results.json", done, meta=meta, state="interrupted",
                           code=128 + signal_of(exc))
        print(results.summary(done, base=out))
        print(f"\ninterrupted ({exc}) in cell {current}" + (f", stage {stage}" if stage else "")
              + (f"; not run: {', '.join(not_run)}" if not_run else "")
              + f"\nresults: {out / 'results.json'}", flush=True)
        raise
    print(results.summary(done, base=out))
    if request.baseline:  # the base cells say what the series changed, not whether it passed
        code = max(results.exit_code([c for c in done if not c.cell.endswith(".base")]),
                   _baseline_comparison(out, cells, done))
        print(f"comparison: {out / 'comparison.md'}")
    else:
        code = results.exit_code(done)
    if request.bisect_exit:
        code = results.bisect_exit_code(done)
    return RunReport(cells=tuple(done), results=out / "results.json", exit_code=code)
