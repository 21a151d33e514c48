"""Split the selected cells into N shards for N machines, and merge their runs back.

`plan()` is a pure function of (cells, N, costs). Cells that build the same kernel (same
kernel spec, series, configs and patches) stay in one shard, so that kernel is built once.
Those groups are placed largest first on the shard with the least cost so far (ties: the
lower shard). A group's cost is the sum of its cells' costs, taken from an earlier run's
results.json where one is given (`costs_from`: the durations of its stages, each kernel's
build counted once, a kernel taken from the store at the build time the store recorded;
a cell the costs lack weighs the mean of the measured ones, and is said), else one unit
per cell plus one per test. Every cell lands in exactly one shard, and the same inputs
give the same shards on every machine.

`merge()` joins the results.json of several runs (the shards) into one, against the cells
it expects (the plan: matrix cells, or a plan file `write_plan` wrote for a CI
generator), when it is given one:
- a planned cell that no run holds is a cell of its own with status MISSING (exit 1: a
  result is missing, which is red, not an environment error); its job failed before it
  uploaded its run, or its run could not be read;
- a run directory without a readable results.json does not stop the merge: it is
  reported (`unreadable_runs`), and the merge exits at least 1; with a plan the cells it
  held show as MISSING, without one nothing tells what was lost, so it exits 2;
- a cell a run holds that the plan does not expect is kept, and reported as unexpected;
- a cell that two runs both hold is a conflict: reported (exit 2), the first run's copy
  kept, neither overwritten; a run that did not complete makes the merge incomplete
  (exit 2);
- runs made by different harness revisions are merged, and said to differ (no effect on
  the exit code).
Without a plan, a cell whose run is missing cannot be detected: the summary says so. The
merged results.json keeps a new run id of its own, each run's id, start, state, harness
revision and tools (`runs`), the revision and tools they share, and the earliest start.
The merged status and exit code follow the same precedence as a single run.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from harness import target
from harness.base import atomic
from harness.base.errors import HarnessError
from harness.base.model import (
    BuildRun,
    CellResult,
    Merge,
    MergedRun,
    RunResult,
    RunState,
    Status,
    UnreadableRun,
)
from harness.drivers.matrix import Cell
from harness.output import results

log = logging.getLogger(__name__)


class ShardError(HarnessError):
    status = Status.SETUP_ERROR


def parse(text: str) -> tuple[int, int]:
    """'K/N' (1-based) -> (K, N)."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ShardError(f"--shard {text!r}: K/N with 1 <= K <= N, e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


KernelId = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], str]


def kernel_of(cell: Cell) -> KernelId:
    """What decides the kernel a cell builds: cells that share it share a shard."""
    return (cell.kernel, cell.series, cell.configs, cell.patches,
            f"{cell.arch}/{cell.toolchain}")


def cost(cell: Cell, costs: Mapping[str, float]) -> float:
    """A cell's seconds as measured. A cell the costs do not hold (new since, or stopped
    early then) weighs the mean of the measured ones: on their scale, neither free nor
    one unit among seconds. Without costs: one unit per cell and per test."""
    if cell.name in costs:
        return costs[cell.name]
    if costs:
        return sum(costs.values()) / len(costs)
    return 1.0 + len(cell.tests)


def plan(cells: Sequence[Cell], n: int, costs: Mapping[str, float] | None = None
         ) -> list[list[Cell]]:
    """The N shards, each in the cells' own order. A group's cost is the sum of its cells'
    (costs_from charges a shared kernel's build to one of them); cells the costs lack are
    said (a warning) and weigh the mean of the measured cells."""
    if n < 1:
        raise ShardError(f"{n} shards: at least 1")
    costs = costs or {}
    if costs and (unmeasured := [c.name for c in cells if c.name not in costs]):
        log.warning("--costs: no measurement of cell(s) %s: each weighs the mean of the "
                    "measured cells (%.0f s)", ", ".join(unmeasured),
                    sum(costs.values()) / len(costs))
    groups: dict[tuple[Any, ...], list[Cell]] = {}
    for c in cells:
        groups.setdefault(kernel_of(c), []).append(c)
    order = sorted(groups.values(),
                   key=lambda g: (-sum(cost(c, costs) for c in g), g[0].name))
    load = [0.0] * n
    placed: dict[str, int] = {}
    for group in order:
        k = min(range(n), key=lambda i: (load[i], i))
        load[k] += sum(cost(c, costs) for c in group)
        placed.update({c.name: k for c in group})
    return [[c for c in cells if placed[c.name] == k] for k in range(n)]


def costs_from(earlier: Path, build_seconds: Mapping[str, float] | None = None
               ) -> dict[str, float]:
    """Seconds per cell in an earlier run's results.json: what its stages took, each
    kernel's build counted once. Cells that booted the same stored kernel (one `image`)
    share its build: the longest of their build stages is charged to the first of them,
    the others pay their other stages (cells run as separate jobs each built it, and
    would pay it once per cell). A kernel no cell of the run built (every one took it from
    the kernel store) was not measured there: its build is the time the store recorded
    (`build_seconds`, image -> seconds; by default this machine's store), else it is left
    out, and said."""
    try:
        run = results.load_run(str(earlier))[0]
    except HarnessError as exc:
        raise ShardError(f"--costs {exc.message}",
                         fix="give the results.json of an earlier run") from None
    by_image: dict[str, list[CellResult]] = {}
    for c in run.cells:  # a cell stopped before its build is a group of its own
        by_image.setdefault(c.image or f"cell {c.cell}", []).append(c)

    def seconds(c: CellResult, build: bool) -> float:
        return float(sum(s.duration_s for s in c.stages if (s.stage == "build") == build))

    out: dict[str, float] = {}
    unbuilt: list[str] = []
    for image, group in by_image.items():
        built = max(seconds(c, True) for c in group)
        if all(c.kernel_from_store is True for c in group):
            if build_seconds is None:
                from harness.kernel.build import stored_build_seconds

                build_seconds = stored_build_seconds()
            recorded = build_seconds.get(image)
            if recorded is None:
                unbuilt += [c.cell for c in group]
            else:
                built = recorded
        first, *others = group
        out[first.cell] = built + seconds(first, False)
        out.update({c.cell: seconds(c, False) for c in others})
    if unbuilt:
        log.warning("--costs %s: cell(s) %s took their kernels from the store, which "
                    "recorded no build time for them: their build is not counted",
                    earlier, ", ".join(unbuilt))
    return out


# ---- the plan: the cells a merge expects ----

PLAN_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class Planned:
    """A cell the merge expects to find in one of the runs."""

    name: str
    kernel: str = ""  # the kernel spec, when the plan says it (a MISSING cell shows it)


def planned(cells: Sequence[Cell]) -> tuple[Planned, ...]:
    return tuple(Planned(name=c.name, kernel=c.kernel) for c in cells)


def plan_json(cells: Sequence[Cell]) -> dict[str, Any]:
    return {"schema": PLAN_SCHEMA,
            "cells": [{"name": c.name, "kernel": c.kernel, "tier": c.tier.value}
                      for c in cells]}


def write_plan(path: Path, cells: Sequence[Cell]) -> None:
    """The plan file `harness merge --plan FILE` reads: the cells the shards' jobs run."""
    atomic.write_json(path, plan_json(cells))


def read_plan(path: Path) -> tuple[Planned, ...]:
    """A plan file: {"cells": [NAME | {"name": NAME, "kernel": SPEC}, ...]} or that list."""
    fix = "give the plan file written for these jobs (shard.write_plan), or --tier/--cell"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ShardError(f"--plan {path}: not a readable plan: {exc}", fix=fix) from None
    entries = data.get("cells") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ShardError(f"--plan {path}: no list of cells in it", fix=fix)
    out: list[Planned] = []
    for i, e in enumerate(entries):
        name = e.get("name") if isinstance(e, dict) else e
        kernel = e.get("kernel", "") if isinstance(e, dict) else ""
        if not isinstance(name, str) or not name or not isinstance(kernel, str):
            raise ShardError(f"--plan {path}: cell #{i + 1} is not a name (or an object with "
                             f"a \"name\"): {e!r}", fix=fix)
        out.append(Planned(name=name, kernel=kernel))
    twice = sorted({p.name for p in out if [q.name for q in out].count(p.name) > 1})
    if twice:
        raise ShardError(f"--plan {path}: cell(s) named twice: {', '.join(twice)}", fix=fix)
    return tuple(out)


# ---- the merge ----

MISSING_REASON = "no run holds it: its job failed before uploading results?"


@dataclass(frozen=True, kw_only=True)
class Merged:
    run: RunResult  # the merged run (its merge facts in run.merge)
    sources: dict[str, Path]  # cell -> the run directory it came from
    conflicts: tuple[str, ...]  # cells that more than one run holds


def _read_runs(runs: Sequence[Path]) -> Iterator[tuple[Path, RunResult | str]]:
    """Each run with what it holds, or why it cannot be merged."""
    for run in runs:
        try:
            yield run, _read_run(run)
        except ShardError as exc:
            yield run, exc.message


def _read_run(run: Path) -> RunResult:
    """A run directory's results.json, or ShardError saying why it cannot be merged."""
    file = run / "results.json"
    if not run.is_dir():
        raise ShardError("no such directory")
    if not file.is_file():
        raise ShardError("no results.json in it (its job stopped before writing one?)")
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ShardError(f"results.json is not readable JSON: {exc}") from None
    try:
        return results.from_json(data)
    except HarnessError as exc:
        raise ShardError(f"results.json: {exc.message}") from None


def _missing_cell(p: Planned, unreadable: Sequence[UnreadableRun],
                  built: Mapping[str, Path] | None = None) -> CellResult:
    """A planned cell no run holds."""
    error = (BUILT_NOT_RUN.format(run=built[p.name]) if built and p.name in built
             else MISSING_REASON) + "".join(
        f"\na run that could not be read may have held it: {u.run} ({u.reason})"
        for u in unreadable)
    return CellResult(cell=p.name, kernel=p.kernel, kernel_version="", status=Status.MISSING,
                      patches=(), config=None, stages=(), tests=(), error=error,
                      arch=target.DEFAULT_ARCH, toolchain=target.DEFAULT_TOOLCHAIN)


def _earliest(times: Sequence[str]) -> str | None:
    parsed = []
    for t in times:
        try:
            parsed.append((datetime.strptime(t, "%Y-%m-%dT%H:%M:%S%z"), t))
        except ValueError:
            continue
    return min(parsed)[1] if parsed else None


BUILT_NOT_RUN = "no test run holds it, though its build run built it (run {run})"
FROM_BUILD = ("from its build job's run {run}: the kernel or the tests did not build, so no "
              "test job ran it")


def _from_builds(builds: Sequence[Path], held: Mapping[str, object]
                 ) -> tuple[dict[str, tuple[CellResult, Path]], dict[str, Path],
                            list[BuildRun]]:
    """What CI build jobs' --build-only runs say of the cells no test run holds: a cell
    whose kernel or tests failed to build (a stage error) is that run's record, the
    status of the cell; a cell they built is not a result (nothing booted it). -> the
    failed cells (record, run), the built ones (run), and each build run's summary."""
    failed: dict[str, tuple[CellResult, Path]] = {}
    passed: dict[str, Path] = {}
    metas: list[BuildRun] = []
    for run, found in _read_runs(builds):
        if isinstance(found, str):
            metas.append(BuildRun(dir=str(run), unreadable=found))
            continue
        metas.append(BuildRun(dir=str(run), run_id=found.run_id, state=found.state.value,
                              cells=tuple((c.cell, c.status.value) for c in found.cells)))
        for c in found.cells:
            if c.cell in held or c.cell in failed:
                continue
            if c.status.is_stage_error:
                note = FROM_BUILD.format(run=run)
                failed[c.cell] = (replace(c, notes=(*c.notes, note)), run)
            else:
                passed.setdefault(c.cell, run)
    return failed, passed, metas


def merge(runs: Sequence[Path], *, expected: Sequence[Planned] | None = None,
          run_id: str = "", merged_at: str = "", builds: Sequence[Path] = ()) -> Merged:
    """The runs merged, against `expected` (None: no plan, missing cells go unseen).
    `run_id`: the merged run's own id; `merged_at`: when (both written as given).
    `builds`: CI build jobs' --build-only runs, which give a cell no run holds the stage
    error that kept it from its test job (_from_builds)."""
    held: dict[str, CellResult] = {}
    sources: dict[str, Path] = {}
    conflicts: list[str] = []
    unreadable: list[UnreadableRun] = []
    metas: list[MergedRun] = []
    dirty: list[bool | None] = []
    for run, found in _read_runs(runs):
        if isinstance(found, str):
            unreadable.append(UnreadableRun(run=str(run), reason=found))
            continue
        dirty.append(found.harness_dirty)
        metas.append(MergedRun(dir=str(run), run_id=found.run_id, started=found.started,
                               state=found.state.value, harness_rev=found.harness_rev,
                               tools=found.tools or (), strict=bool(found.strict),
                               cells=tuple(c.cell for c in found.cells)))
        for c in found.cells:
            if c.cell in sources:
                conflicts.append(f"{c.cell} (in {sources[c.cell]} and {run})")
                continue
            sources[c.cell] = run
            held[c.cell] = c
    failed, built, build_metas = _from_builds(builds, held)
    for name, (record, source) in failed.items():
        held[name], sources[name] = record, source
    names = [p.name for p in expected] if expected is not None else None
    missing = [p for p in expected or () if p.name not in held]
    unexpected = [n for n in held if names is not None and n not in names]
    if expected is None:
        cells = list(held.values())
    else:
        cells = [held[p.name] if p.name in held else _missing_cell(p, unreadable, built)
                 for p in expected] + [held[n] for n in unexpected]
    incomplete = [m.dir for m in metas if m.state != RunState.COMPLETE.value]
    code = max((c.status.exit_code for c in cells), default=0)
    if conflicts or incomplete:
        code = max(code, 2)
    if unreadable:  # with a plan its cells are MISSING; without, what it held is unknown
        code = max(code, 1 if expected is not None else 2)
    revs = sorted({m.harness_rev for m in metas if m.harness_rev})
    revision_conflict = ("harness revision differs between the runs: " + "; ".join(
        f"{m.harness_rev} in {m.dir}" for m in metas)) if len(revs) > 1 else ""
    tools = dict(metas[0].tools) if metas else {}
    shared_tools = {k: v for k, v in tools.items()
                    if all(dict(m.tools).get(k) == v for m in metas)}
    merged = RunResult(
        cells=tuple(cells), run_id=run_id, exit_code=code,
        started=_earliest([m.started for m in metas if m.started]),
        harness_rev=revs[0] if len(revs) == 1 else None, tools=tuple(shared_tools.items()),
        # a checkout of any run dirty: the merged run is not exactly its revision
        harness_dirty=any(dirty) if dirty and None not in dirty else None,
        strict=bool(metas) and all(m.strict for m in metas),
        state=RunState.COMPLETE if not (incomplete or unreadable or missing)
        else RunState.INCOMPLETE,
        merge=Merge(merged_at=merged_at, merged_from=tuple(str(r) for r in runs),
                    runs=tuple(metas), plan=None if names is None else tuple(names),
                    incomplete_runs=tuple(incomplete), unreadable_runs=tuple(unreadable),
                    conflicts=tuple(conflicts), revision_conflict=revision_conflict,
                    missing=tuple(p.name for p in missing), unexpected=tuple(unexpected),
                    builds=tuple(build_metas)))
    return Merged(run=merged, sources=sources, conflicts=tuple(conflicts))


def summary(m: Merged) -> str:
    merge = m.run.merge
    assert merge is not None
    lines = []
    for c in m.run.cells:
        if c.status is Status.MISSING:
            lines.append(f"== {c.cell}  MISSING  ({MISSING_REASON})")
            continue
        version = c.kernel_version or c.kernel
        bad = [t.name for t in c.tests
               if t.status not in (Status.PASS, Status.SKIP, Status.XFAIL)
               and t.status is not t.expected_status]
        lines.append(f"== {c.cell} [{version}]  {c.status.value}"
                     + (f"  ({', '.join(bad)})" if bad else "")
                     + f"   from {m.sources[c.cell]}")
    for name in merge.unexpected:
        lines.append(f"unexpected: cell {name} (from {m.sources[name]}) is not in the plan: "
                     "kept")
    for u in merge.unreadable_runs:
        lines.append(f"unreadable: {u.run}: {u.reason}")
    for conflict in merge.conflicts:
        lines.append(f"conflict: cell {conflict}: the first run's kept, the other left "
                     "where it is")
    if merge.revision_conflict:
        lines.append(f"conflict: {merge.revision_conflict}")
    for run in merge.incomplete_runs:
        lines.append(f"incomplete: {run} did not finish (its results.json says so)")
    if merge.plan is None:
        lines.append("warning: no plan (--tier, --cell or --plan): a cell whose run is "
                     "missing cannot be detected"
                     + ("; an unreadable run may have held any cell (exit 2)"
                        if merge.unreadable_runs else ""))
    return "\n".join(lines)
