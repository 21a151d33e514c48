"""The commands over finished runs and saved logs: parse, compare, explain, report, export,
merge, history.

Each takes what its options name and returns the command's exit code; what it prints is
what the user reads. None of them builds or boots anything.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from harness import target
from harness.base import atomic
from harness.base.errors import EnvironmentProblem, HarnessError, from_os_error
from harness.base.model import CellResult, PatchState, RunResult, TestResult
from harness.drivers import matrix, shard
from harness.drivers.matrix import Tier
from harness.judge import ktap
from harness.output import bundle, junit, kcidb, report, results, terminal
from harness.output import compare as comparison

log = logging.getLogger("harness")
T = TypeVar("T")


def parse_log(file: str, *, name: str | None, out: Path | None, argv: tuple[str, ...]) -> int:
    """A saved KTAP log (or - for stdin) judged as a run judges a test's output."""
    if out is not None and out.exists() and not out.is_dir():
        raise EnvironmentProblem(f"--out {out} is a file, not a directory",
                                 fix="give a new or empty directory")
    if file == "-":
        parsed = ktap.parse(sys.stdin)
        name = name or "stdin"
    else:
        path = Path(file)
        if path.is_dir():
            raise EnvironmentProblem(f"{path} is a directory, not a log file",
                                     fix="give the log file itself (e.g. a test's .out file "
                                         "in a run's guest/ directory), or - for stdin")
        try:
            with path.open(errors="replace") as stream:
                parsed = ktap.parse(stream)
        except OSError as exc:
            raise from_os_error(exc, f"reading {path}") from None
        name = name or path.name
    test = TestResult(name=name, status=parsed.status, duration_s=0.0, exit_code=None,
                      ktap=parsed, reason="; ".join(parsed.errors))
    cell = CellResult(cell="parse", kernel="", kernel_version="", status=parsed.status,
                      patches=(), config=None, stages=(), tests=(test,),
                      arch=target.DEFAULT_ARCH, toolchain=target.DEFAULT_TOOLCHAIN)
    print(terminal.summary([cell]))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        results.write_json(out / "results.json", RunResult(
            cells=(cell,), exit_code=results.exit_code([cell]), command=("harness", *argv),
            source_log=file))
    return results.exit_code([cell])


@dataclass(frozen=True, kw_only=True)
class CompareRequest:
    before: str  # RUN, RUN/results.json or RUN:CELL
    after: str
    json: Path | None = None  # also written as JSON, markdown, a web page
    markdown: Path | None = None
    html: Path | None = None


def compare(request: CompareRequest) -> int:
    """What changed from one run to the other; 1 when anything regressed."""
    a, cell_a, _ = results.load_run(request.before)
    b, cell_b, _ = results.load_run(request.after)
    labels = (request.before, request.after)
    try:
        result = comparison.compare(a, b, labels=labels, cells=(cell_a, cell_b))
    except KeyError as exc:
        raise EnvironmentProblem(str(exc.args[0]), fix="name a cell the run has") from None
    if not result.cells:
        raise EnvironmentProblem(f"{labels[0]} and {labels[1]} have no cell in common",
                                 fix="compare one cell of each: A:CELL B:CELL")
    print(comparison.render_terminal(result))
    _tell_history(b)
    if request.json:
        atomic.write_json(request.json, comparison.to_json(result))
    if request.markdown:
        atomic.write_text(request.markdown, comparison.render_markdown(result))
    if request.html:
        atomic.write_text(request.html, report.render_comparison(result))
    return 1 if result.regressed else 0


def verdicts(specs: tuple[str, ...], markdown: Path | None = None) -> int:
    """`harness verdicts`: each check's verdict in each run (or RUN:CELL), side by side;
    1 when a check's verdict differs between them."""
    columns: list[tuple[str, CellResult]] = []
    for spec in specs:
        run, name, _ = results.load_run(spec)
        cells = [c for c in run.cells if name is None or c.cell == name]
        if not cells:
            raise EnvironmentProblem(f"{spec}: no cell {name!r} (its cells: "
                                     f"{', '.join(c.cell for c in run.cells) or 'none'})",
                                     fix="name a cell the run has: RUN:CELL")
        columns += [(c.cell if len(specs) == 1 or name else f"{spec}:{c.cell}", c)
                    for c in cells]
    table = comparison.verdict_table(columns)
    print(comparison.render_table_terminal(table))
    if markdown:
        atomic.write_text(markdown, comparison.render_table_markdown(table))
    return 1 if any(len(set(r.verdicts) - {"-"}) > 1 for r in table.rows) else 0


def _from_history(read: Callable[[sqlite3.Connection], T], otherwise: T) -> T:
    """What `read` finds in the history; `otherwise` when there is none yet, or (with a
    warning) when it cannot be read: the history informs a command, never fails it."""
    from harness.output import history as recorded

    if not recorded.default_path().exists():
        return otherwise
    try:
        with recorded.opened() as db:
            return read(db)
    except recorded.HistoryError as exc:
        log.warning("history not read: %s", exc)
        return otherwise


def _shards_recorded(sources: set[Path]) -> bool:
    """Whether the history holds every shard run the merge took cells from (shards run
    on this machine recorded themselves: the merge would count their tests twice)."""
    from harness.output import history as recorded

    try:
        keys = {recorded.run_key(results.load_run(str(s / "results.json"))[0])
                for s in sources}
    except HarnessError:
        return False
    return bool(keys) and _from_history(lambda db: all(
        db.execute("SELECT 1 FROM runs WHERE run_key = ?", (k,)).fetchone() for k in keys),
        False)


def _memory(run: RunResult) -> tuple[dict[tuple[str, str], str],
                                      dict[tuple[str, str], str]]:
    """Each test's recent outcomes and each failure's and splat's "new" or "known since"
    from the history, for the report; nothing without one."""
    from harness.output import history as recorded

    nothing: dict[tuple[str, str], str] = {}
    return _from_history(lambda db: (recorded.strips(db, run), recorded.labels(db, run)),
                         (nothing, nothing))


def _labels(run: RunResult) -> dict[tuple[str, str], str]:
    """Each failure's and splat's "new" or "known since" by the history; none without one
    (a history that cannot be read is a warning, not the command's failure)."""
    from harness.output import history as recorded

    nothing: dict[tuple[str, str], str] = {}
    return _from_history(lambda db: recorded.labels(db, run), nothing)


def _tell_history(run: RunResult) -> None:
    """Each failure of a run: new, or known since when, by the history."""
    told = _labels(run)
    if told:
        print("\nits failures in the history:")
        for (cell, test), label in told.items():
            print(f"  {cell}/{test}: {label}")


TAIL_BYTES = 4000  # of each failing test's output, in `explain`
SHOWN_LINES = 12  # of that tail, on the terminal
EXPLAINED_OK = ("PASS", "XFAIL", "SKIP", "DONE")  # statuses explain leaves out


@dataclass(frozen=True, kw_only=True)
class FailingTest:
    """A test of a run that did not pass, as explain tells it."""

    result: TestResult
    checks: tuple[str, ...]  # its failing KTAP checks, by path
    history: str  # "new" or "known since ..." by the history; "" without one
    output_tail: str  # the end of its output file


@dataclass(frozen=True, kw_only=True)
class Explanation:
    """Why a run (or one cell of it) failed."""

    run_dir: Path
    run: RunResult
    cells: tuple[tuple[CellResult, tuple[FailingTest, ...]], ...]


def explain(run: str) -> Explanation:
    """A run's failures, from its results.json: per cell its status, error (cause and
    fix) and the patches it applied; per failing test its status, reason, failing checks,
    splats (with where the kernel says they happened), whether the history knew it, and
    the end of its output."""
    found, only, file = results.load_run(run)
    names = [c.cell for c in found.cells]
    if only and only not in names:
        raise EnvironmentProblem(f"{run}: the run has no cell {only}",
                                 fix=f"name one of its cells: {', '.join(names) or 'none'}")
    tails = results.log_tails(found, file.parent, cap=TAIL_BYTES)
    known = _labels(found)
    cells = tuple((c, tuple(FailingTest(
        result=t, history=known.get((c.cell, t.name), ""),
        output_tail=tails.get((c.cell, t.name), ""),
        checks=tuple(name for name, status in report.checks(t.ktap.cases if t.ktap else ())
                     if status.value not in EXPLAINED_OK))
        for t in c.tests if t.status.value not in EXPLAINED_OK))
        for c in found.cells if not only or c.cell == only)
    return Explanation(run_dir=file.parent, run=found, cells=cells)


def explain_json(told: Explanation) -> dict[str, Any]:
    """An explanation as `harness explain --json` and the MCP tool give it."""
    return {"run": str(told.run_dir),
            "status": told.run.status.value if told.run.status else None,
            "exit_code": told.run.exit_code,
            "cells": [{"cell": c.cell, "status": c.status.value, "kernel": c.kernel_version,
                       "error": c.error,
                       "patches": [{"name": p.name, "state": p.state.value}
                                   for p in c.patches],
                       "failing": [_failing_json(f) for f in failing]}
                      for c, failing in told.cells]}


def _failing_json(f: FailingTest) -> dict[str, Any]:
    t = f.result
    return {"test": t.name, "status": t.status.value, "reason": t.reason,
            "declared": t.expected_status is t.status, "failing_checks": list(f.checks),
            "diagnosis": t.diagnosis,
            "splats": [{"title": s.title, "function": s.function, "where": s.where or None}
                       for s in t.splats],
            "history": f.history, "output_tail": f.output_tail}


def explain_command(run: str, *, as_json: bool) -> int:
    """`harness explain RUN[:CELL]`: why it failed, on the terminal (or as JSON). Exit 0
    when it could be read."""
    told = explain(run)
    if as_json:
        print(json.dumps(explain_json(told), indent=2))
        return 0
    status = told.run.status.value if told.run.status else None
    print(f"run {told.run_dir}: {status} (exit {told.run.exit_code})")
    for c, failing in told.cells:
        print(f"\n== {c.cell} [{c.kernel_version or '?'}] {c.status.value}")
        if c.error:
            print("   " + c.error.replace("\n", "\n   "))
        if c.patches:
            print(f"   patches ({len(c.patches)}):")
            for p in c.patches:
                print(f"      {p.name}" + ("" if p.state is PatchState.APPLIED else
                                           f" ({p.state.value})"))
        for f in failing:
            print("\n".join(_failing_lines(f)))
        if not failing and not c.error:
            print("   nothing failed")
    return 0


def _failing_lines(f: FailingTest) -> list[str]:
    t = f.result
    lines = [f"   {t.name}  {t.status.value}"
             + (" (as the cell declares)" if t.expected_status is t.status else "")
             + (f": {t.reason}" if t.reason else "")]
    if f.history:
        lines.append(f"      history: {f.history}")
    if f.checks:
        lines.append("      failing checks: " + ", ".join(f.checks))
    if t.diagnosis:
        lines.append(f"      first failure: {t.diagnosis}")
    for s in t.splats:
        where = f" ({s.where})" if s.where else ""
        lines.append(f"      splat: {s.title} in {s.function or '?'}(){where}")
    tail = f.output_tail.rstrip("\n").splitlines()[-SHOWN_LINES:]
    if tail:
        lines.append("      output, last lines:")
        lines += [f"        {line}" for line in tail]
    return lines


def report_page(run: str, out: Path | None = None) -> Path:
    """A run's HTML page, with what the history says of it, into `out` (default:
    RUN/report); its path."""
    found, _cell, file = results.load_run(run)
    where = (out or file.parent / "report").resolve()
    where.mkdir(parents=True, exist_ok=True)
    recent, known = _memory(found)
    atomic.write_text(where / "index.html", report.render(
        found, results.log_tails(found, file.parent), recent=recent, known=known))
    return where / "index.html"


def write_report(run: str, out: Path | None) -> int:
    """`harness report RUN`."""
    print(f"report: {report_page(run, out)}")
    return 0


@dataclass(frozen=True, kw_only=True)
class KcidbOptions:
    run_id: str | None = None  # None: from the CI system's environment, else the run's
    origin: str = kcidb.ORIGIN
    include_broken: bool = False


def export(run: str, fmt: str, output: Path | None, kcidb_options: KcidbOptions) -> int:
    """A run in a format CI systems read: junit or kcidb."""
    found, _cell, _file = results.load_run(run)
    if fmt == "kcidb":
        run_id = kcidb.resolve_run_id(found, given=kcidb_options.run_id, env=os.environ)
        text = json.dumps(kcidb.export(found, run_id=run_id, origin=kcidb_options.origin,
                                       include_broken=kcidb_options.include_broken),
                          indent=1) + "\n"
    else:
        text = junit.render(found)
    results.write_or_print(text, output, fmt)
    return 0


def export_bundle(run: str, output: Path | None) -> int:
    """`harness export --bundle RUN`: the run's directory as one archive a reviewer
    receives (by mail, from CI) and reproduces: `harness reproduce ARCHIVE`."""
    found, _cell, file = results.load_run(run)
    if not any(c.inputs is not None for c in found.cells):
        log.warning("%s records no inputs (an older harness wrote it): its bundle cannot "
                    "be reproduced", file.parent)
    written = bundle.write(file.parent, output or bundle.default_name(file.parent))
    print(f"bundle: {written.path} ({written.files} files, {written.size} bytes)"
          + (f"; left out: {', '.join(written.left_out)}" if written.left_out else ""))
    print(f"reproduce it anywhere: harness reproduce {written.path}")
    return 0


@dataclass(frozen=True, kw_only=True)
class MergeRequest:
    runs: tuple[Path, ...]
    out: Path
    tier: str | None = None  # the cells expected: a tier's, named cells', or a plan's
    cells: tuple[str, ...] = ()
    matrix: Path | None = None
    plan: Path | None = None
    builds: tuple[Path, ...] = ()  # CI build jobs' --build-only runs (shard.merge)


def expected_cells(request: MergeRequest) -> tuple[shard.Planned, ...] | None:
    """The cells a merge expects, or None: no plan given (then nothing can be MISSING)."""
    if request.plan is not None:
        if request.tier or request.cells:
            raise EnvironmentProblem("--plan and --tier/--cell both name the cells expected",
                                     fix="give the plan file, or the matrix cells")
        return shard.read_plan(request.plan)
    if not (request.tier or request.cells):
        return None
    every = matrix.load(request.matrix)
    names = {c.name for c in matrix.select(every, Tier.FULL, request.cells)} \
        if request.cells else set()
    if request.tier:
        names |= {c.name for c in matrix.select(every, Tier(request.tier))}
    return shard.planned([c for c in every if c.name in names])


def merge(request: MergeRequest, argv: tuple[str, ...]) -> int:
    """Shards' run directories joined into one. Exit: the merged run's (shard.merge): 1
    also for a MISSING cell, 2 for a conflict, an incomplete run, or an unreadable run
    when no plan says what it held."""
    out = request.out.resolve()
    runs = [r.resolve() for r in request.runs]
    if out in runs:
        raise EnvironmentProblem("--out is one of the runs merged", fix="give a new directory")
    expected = expected_cells(request)
    results.prepare_out(out)
    merged = shard.merge(runs, expected=expected, builds=[b.resolve() for b in request.builds],
                         run_id=f"merge-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}",
                         merged_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    for cell, source in merged.sources.items():
        if (source / cell).is_dir():
            shutil.copytree(source / cell, out / cell, symlinks=True)
    results.write_json(out / "results.json", replace(merged.run, command=("harness", *argv)))
    print(shard.summary(merged))
    if not _shards_recorded(set(merged.sources.values())):
        from harness.drivers import run

        run.remember(out / "results.json")
    code = merged.run.exit_code
    print(f"\nresults: {out / 'results.json'}  (exit {code})")
    return code


def history(what: tuple[str, ...], *, last: int, as_json: bool, path: Path | None,
            flakes: bool = False) -> int:
    """`harness history [CELL|TEST|TEST:SUBTEST]`, `--flakes`, or `import RUN...`."""
    if flakes:
        return show_flakes(as_json=as_json, path=path)
    if what[:1] == ("import",):
        return import_history(what[1:], path)
    if len(what) > 1:
        raise EnvironmentProblem("harness history shows one CELL, TEST or TEST:SUBTEST",
                                 fix="harness history TEST (or none: every test)")
    return show_history(what[0] if what else "", last=last, as_json=as_json, path=path)


def show_history(selector: str, *, last: int, as_json: bool, path: Path | None) -> int:
    """Each test's record over the last runs; exit 1 when the selector names nothing."""
    from harness.output import history

    with history.opened(path) as db:
        found = history.records(db, selector, last=last)
    if as_json:
        print(json.dumps(history.to_json(found), indent=1))
    else:
        print(history.render(found))
    return 0 if found or not selector else 1


def import_history(runs: tuple[str, ...], path: Path | None) -> int:
    """`harness history import RUN...`: runs made elsewhere (a CI merge job's shards)."""
    from harness.output import history

    if not runs:
        raise EnvironmentProblem("harness history import needs the runs",
                                 fix="harness history import results/RUN [RUN...]")
    for given in runs:
        run, _cell, file = results.load_run(given)
        with history.opened(path) as db:
            added = history.record(db, run)
        print(f"{'recorded' if added else 'already recorded'}: {file}")
    return 0


def show_flakes(*, as_json: bool, path: Path | None) -> int:
    """Flakes measured: every declared-flaky test's rate over fresh boots and every test
    that fails intermittently without a declaration; exit 1 when the data contradicts a
    declaration or its absence."""
    from harness.drivers import pipeline
    from harness.judge import verdict
    from harness.output import history as recorded

    declared = verdict.load_expectations(pipeline.expectations_path()).failures
    with recorded.opened(path) as db:
        found = recorded.flakes(db, declared)
    if as_json:
        print(json.dumps([{"test": f.test, "kernel": f.kernel, "failed": f.failed,
                           "boots": f.boots, "declared": f.declared, "advice": f.advice()}
                          for f in found], indent=1))
    else:
        for f in found:
            print(f"{'!' if f.warn else ' '} {f.test} ({f.kernel}): {f.advice()}")
        if not found:
            print("no declared flaky test and no intermittent failure in the history")
    return 1 if any(f.warn for f in found) else 0
