"""`harness run`: cells, one after another, into one results directory, judged.

`Request -> RunReport`, as check, mutate, bisect and shell have theirs: the CLI turns
its options into one request (the selection of cells, the guest they boot in, how each
cell runs and is judged) and `command` runs it.
Each cell goes through `pipeline.run_cell`. results.json is written before the first cell
(a run stopped from there on says so), after every cell (a killed run keeps what it
finished) and when a signal stops the run (its state, the cell and stage it stopped in,
the cells not run).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.base import atomic
from harness.base import sandbox as sandboxes
from harness.base.errors import signal_of
from harness.base.model import (
    Accel,
    CellResult,
    GuestOptions,
    GuestSpec,
    Host,
    Interruption,
    RunIsolation,
    RunResult,
    RunState,
)
from harness.drivers import doctor, matrix, pipeline
from harness.drivers.matrix import Cell, Tier
from harness.judge import verdict
from harness.kernel import sources
from harness.output import results, terminal
from harness.testkinds import command as command_kind

log = logging.getLogger("harness")


DEFAULT_KERNEL = sources.DEFAULT_KERNEL


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which cells `harness run`'s options name: matrix cells (a tier, cell names) or an
    ad-hoc cell per kernel, what each builds and runs, and the target it is built for."""

    kernels: tuple[str, ...] = ()
    series: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()
    boot_only: bool = False
    coverage: bool = False
    tier: str | None = None
    cells: tuple[str, ...] = ()
    matrix: Path | None = None
    arch: str | None = None
    toolchain: str | None = None
    guest_command: tuple[str, ...] = ()  # after --: run in the guest as one more test
    cwd: str | None = None  # the command's directory
    timeout: int = command_kind.DEFAULT_TIMEOUT_S  # the command's time limit
    shard: str | None = None  # K/N: only this shard of the cells
    costs: Path | None = None  # an earlier run whose cell durations balance the shards
    baseline: bool = False  # each cell also on its base without the series
    affected: bool = False  # only the checks the map says the change can affect
    record_map: bool = False  # on the gcov kernel, each check alone: the map


@dataclass(frozen=True, kw_only=True)
class Request:
    """`harness run` as its command line asks it: the cells (the selection), the guest
    they boot in (over each cell's own), how each cell runs and is judged, and where the
    run goes. The CLI builds it; `command` runs it."""

    selection: Selection
    here: Path  # where the command runs (inside a kernel git tree: that tree by default)
    guest: GuestOptions = field(default_factory=GuestOptions)
    # strict, repeat, retry_failed, build_only
    options: pipeline.RunOptions = field(default_factory=pipeline.RunOptions)
    accel: Accel = Accel.AUTO
    out: Path | None = None  # the results directory (default results/<run id>)
    bisect_exit: bool = False  # exit codes for `git bisect run`
    argv: tuple[str, ...] = ("run",)  # the command line (reproduce.sh, results.json)


@dataclass(frozen=True, kw_only=True)
class RunReport:
    cells: tuple[CellResult, ...]
    results: Path  # results.json
    exit_code: int


def plan(request: Request) -> tuple[list[Cell], str]:
    """The cells `harness run` runs, in order, and what the terminal says first: the
    selection's cells, built with gcov under --coverage, cut to one shard, each preceded
    by its base under --baseline."""
    from harness.drivers import shard

    sel = request.selection
    cells, what = cells_for(request)
    if sel.affected and (sel.record_map or sel.coverage or request.options.build_only or
                         sel.boot_only or request.options.prebuilt is not None):
        raise matrix.MatrixError("--affected narrows the tests of a build from a tree: not "
                                 "with --map, --coverage, --build-only, --boot-only or "
                                 "--prebuilt")
    if sel.record_map and (request.options.build_only or sel.boot_only):
        raise matrix.MatrixError("--map runs every check: not with --build-only or "
                                 "--boot-only")
    if sel.coverage or sel.record_map:
        cells = [matrix.with_coverage(c) for c in cells]
        what += "\ncoverage: the series' C files built with gcov (a kernel of their own)"
    if sel.record_map:
        cells = [replace(c, record_map=True) for c in cells]
        what += ("\nmap: each check alone on the gcov kernel; which kernel functions it "
                 "reaches is kept for --affected")
    if sel.affected:
        cells = [replace(c, affected=True) for c in cells]
        what += ("\naffected: only the checks the map says the change (the tree's last "
                 "commit) can affect")
    if sel.costs is not None and sel.shard is None:
        raise matrix.MatrixError("--costs balances shards: give --shard K/N with it")
    if sel.shard is not None:
        k, n = shard.parse(sel.shard)
        costs = shard.costs_from(sel.costs) if sel.costs is not None else {}
        cells = shard.plan(cells, n, costs)[k - 1]
        what += (f"\nshard {k}/{n}: " + (", ".join(c.name for c in cells) or
                                        "no cell (more shards than kernels)"))
    if sel.baseline:
        cells = baseline_cells(cells)
        what += "\n(--baseline: each cell also on its base without the series: <cell>.base)"
    return cells, what


def cells_for(request: Request) -> tuple[list[Cell], str]:
    """The cells a selection names, and the first lines of output: what this run tests."""
    sel, here = request.selection, request.here
    explicit = (sel.kernels or sel.series or sel.configs or sel.tests or sel.patches
                or sel.boot_only or request.guest.append)
    cmd: list[str] = list(sel.guest_command)
    if sel.boot_only and (sel.tests or cmd):
        raise matrix.MatrixError("--boot-only runs no test; drop it or the --test options "
                                 "and the -- command")
    prebuilt = request.options.prebuilt
    if prebuilt is not None and (request.options.build_only or sel.coverage or sel.baseline
                                 or explicit or cmd or not (sel.tier or sel.cells)):
        raise matrix.MatrixError("--prebuilt boots what a --build-only run of matrix cells "
                                 "built: give it with --cell/--tier alone",
                                 fix="harness run --cell CELL --prebuilt build/RUN")
    if request.options.build_only and (sel.boot_only or cmd or sel.coverage):
        raise matrix.MatrixError("--build-only boots nothing: drop it, or --boot-only, "
                                 "--coverage and the -- command")
    if explicit and (sel.tier or sel.cells):
        raise matrix.MatrixError("--tier/--cell select matrix cells; do not combine them with "
                                 "--kernel/--series/--config/--test/--patch/--boot-only/"
                                 "--append")
    if (sel.cwd is not None or sel.timeout != command_kind.DEFAULT_TIMEOUT_S) and not cmd:
        raise matrix.MatrixError("--cwd and --timeout are about a command: give it after --",
                                 fix="harness run [OPTIONS] -- CMD [ARGS...]")
    # what the kernel is built for and with: also for the matrix cells selected
    given: dict[str, Any] = {}
    if sel.arch is not None:
        given["arch"] = sel.arch
    if sel.toolchain is not None:
        given["toolchain"] = sel.toolchain
    if cmd:
        cwd = str(Path(sel.cwd).resolve()) if sel.cwd else str(here)
        command_kind.ref(cmd, cwd=cwd, timeout_s=sel.timeout)  # a bad command: told now
        given.update(command=tuple(cmd), command_cwd=cwd, command_timeout=sel.timeout)
    matrix.check_guest_size(request.guest.over(GuestSpec()))
    after = f"; then the command: {shlex.join(cmd)}" if cmd else ""
    # Your tree by default: run from inside a kernel git tree, with no kernel or cells named,
    # tests that tree (read-only: HEAD plus uncommitted changes, as git:PATH does).
    tree = None if sel.kernels or sel.tier or sel.cells else \
        sources.enclosing_kernel_tree(here)
    if not explicit and not tree and (sel.tier or sel.cells or not cmd):
        tier = Tier(sel.tier or "default")
        cells = [replace(c, guest=request.guest.over(c.guest), **given)
                 for c in matrix.select(matrix.load(sel.matrix), tier, sel.cells)]
        what = (f"matrix cells {', '.join(c.name for c in cells)}" if sel.cells else
                f"the {tier.value} tier of the matrix: {', '.join(c.name for c in cells)}")
        where = "" if sel.tier or sel.cells else " (not inside a kernel tree)"
        return cells, f"testing {what}{where}{after}"
    kernels = sel.kernels or ((f"git:{tree}",) if tree else (DEFAULT_KERNEL,))
    cells = []
    lines = []
    for i, k in enumerate(kernels):
        name = f"adhoc-{i}" if len(kernels) > 1 else "adhoc"
        tests: tuple[str, ...] = sel.tests
        origin = "the tests asked for"
        if cmd and not tests:
            origin = "the command alone (no --test given)"
        elif not tests and not sel.boot_only:
            tests, origin = matrix.default_tests(k, matrix.load(sel.matrix))
            origin += " (no --test given)"
        elif sel.boot_only:
            origin = "no tests (--boot-only)"
        cells.append(Cell(name=name, tier=Tier.DEFAULT, kernel=k, series=sel.series,
                          configs=sel.configs or ("base",), tests=tests,
                          patches=tuple(str(Path(p).resolve()) for p in sel.patches),
                          boot_only=sel.boot_only, guest=request.guest.over(GuestSpec()),
                          **given))
        extras = [f"series {', '.join(sel.series)}" if sel.series else "",
                  f"{len(sel.patches)} patch file(s)" if sel.patches else "",
                  f"config {'+'.join(sel.configs)}" if sel.configs else ""]
        source = f"your tree {tree} (HEAD + uncommitted changes)" if tree else k
        what = " + ".join(e for e in [source, *extras] if e)
        lines.append(f"testing {what} (cell {name}): {origin}" +
                     (f": {', '.join(tests)}" if tests else "") + after)
    return cells, "\n".join(lines)



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
    """Compare each cell with its base; print and write it.
    1 when the series made anything worse."""
    from harness.output import compare

    run = RunResult(cells=tuple(done))
    ran = {c.cell for c in done}
    pairs = [(f"{c.name}.base", c.name) for c in cells
             if not c.name.endswith(".base") and {c.name, f"{c.name}.base"} <= ran]
    merged = [compare.compare(run, run, labels=(a, b), cells=(a, b)) for a, b in pairs]
    result = compare.Comparison(before="the base", after="the series",
                                cells=tuple(p for m in merged for p in m.cells),
                                differences=tuple(d for m in merged for d in m.differences))
    atomic.write_json(out / "comparison.json", compare.to_json(result))
    atomic.write_text(out / "comparison.md", compare.render_markdown(result))
    print("\nwhat the series changed (--baseline):")
    print(compare.render_terminal(result))
    return 1 if result.regressed else 0


def run(request: Request, *, cells: tuple[Cell, ...], what: str, out: Path) -> RunReport:
    """Every cell, judged, into `out` (prepared: new, empty or an earlier run's); the
    summary printed; the exit code of the whole."""
    accel = request.accel
    record = RunResult(
        cells=(), state=RunState.RUNNING, run_id=out.name,
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), command=("harness", *request.argv),
        host=Host(kernel=os.uname().release, cpus=os.cpu_count(), os=os_release()),
        strict=request.options.strict, repeat=request.options.repeat, what=what,
        isolation=RunIsolation(sandbox=sandboxes.policy().describe(),
                               guest="the host's root (--host-root)"
                               if request.options.host_root else "a root of its own"))
    done: list[CellResult] = []
    current = ""
    started = time.monotonic()

    def write(state: RunState, code: int | None = None) -> None:
        results.write_json(out / "results.json", replace(
            record, cells=tuple(done), state=state,
            exit_code=results.exit_code(done) if code is None else code))

    try:
        # First thing: a run stopped from here on leaves a results.json that says so.
        write(RunState.RUNNING)
        rev = results.harness_rev()
        record = replace(record, harness_rev=rev, harness_dirty=results.harness_dirty(),
                         tools=tuple(doctor.tool_versions().items()))
        results.write_reproduce(out / "reproduce.sh", argv=list(request.argv),
                                harness_rev=rev)
        for cell in cells:
            current = cell.name
            cell_dir = out / cell.name
            cell_dir.mkdir(parents=True, exist_ok=True)
            results.write_reproduce(cell_dir / "reproduce.sh",
                                    argv=_isolation_flags(pipeline.cell_argv(cell, accel),
                                                          request.options.host_root),
                                    harness_rev=rev,
                                    cell=cell.name)
            res = pipeline.run_cell(cell, cell_dir, accel=accel, options=request.options)
            done.append(res)
            # the run's wall time so far, its own work (start, records) included
            record = replace(record, duration_s=round(time.monotonic() - started, 2))
            # Written after every cell, so a killed run still leaves what it finished.
            write(RunState.COMPLETE if len(done) == len(cells) else RunState.RUNNING)
    except KeyboardInterrupt as exc:
        # Finish the record: a second signal must not cut it short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stage = ""
        if isinstance(exc, pipeline.CellInterrupted):
            done.append(exc.partial)
            stage = exc.where
        not_run = [c.name for c in cells if c.name not in {d.cell for d in done}]
        record = replace(record, interrupted=Interruption(
            signal=str(exc), cell=current, stage=stage, not_run=tuple(not_run)))
        write(RunState.INTERRUPTED, code=128 + signal_of(exc))
        print(terminal.summary(done, base=out))
        print(f"\ninterrupted ({exc}) in cell {current}" + (f", stage {stage}" if stage else "")
              + (f"; not run: {', '.join(not_run)}" if not_run else "")
              + f"\nresults: {out / 'results.json'}", flush=True)
        raise
    print(terminal.summary(done, base=out))
    # the base cells say what the series changed, not whether it passed
    if request.selection.baseline:
        code = max(results.exit_code([c for c in done if not c.cell.endswith(".base")]),
                   _baseline_comparison(out, cells, done))
        print(f"comparison: {out / 'comparison.md'}")
    else:
        code = results.exit_code(done)
    if request.bisect_exit:
        code = results.bisect_exit_code(done)
    return RunReport(cells=tuple(done), results=out / "results.json", exit_code=code)


def _isolation_flags(argv: list[str], host_root: bool) -> list[str]:
    """A cell's command line with what this run turned off (--no-sandbox, --host-root),
    before a guest command's `--`: its reproduce.sh runs it the same way."""
    flags = (["--no-sandbox"] if not sandboxes.policy().enabled else []) + (
        ["--host-root"] if host_root else [])
    at = argv.index("--") if "--" in argv else len(argv)
    return [*argv[:at], *flags, *argv[at:]]


def os_release(path: Path = Path("/etc/os-release")) -> str:
    """The host's system, as its os-release names it (a native guest boots on its
    userspace): "Debian GNU/Linux 12 (bookworm)"; "" when it says nothing."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "PRETTY_NAME":
            return value.strip().strip('"')
    return ""


def command(request: Request) -> int:
    """`harness run`: the cells the request names (plan), what they test on the first
    lines, the run into --out (default results/<run id>), and where its results are."""
    cells, what = plan(request)
    print(what, flush=True)
    where = results.out_dir(request.out)
    report = run(request, cells=tuple(cells), what=what, out=where)
    remember(report.results)
    print(f"\nresults: {report.results}  (exit {report.exit_code})")
    return report.exit_code


def remember(results_json: Path, path: Path | None = None) -> None:
    """Each failure of the run told "new" or "known since RUN" by the history, then the
    run recorded in it. The history is a record beside the run: when it cannot be read
    or written, a warning says why and what to do, and the run's results stand."""
    from harness.output import history

    try:
        run, _cell, _file = results.load_run(str(results_json))
        declared = verdict.load_expectations(pipeline.expectations_path()).failures
        with history.opened(path) as db:
            told = history.labels(db, run)
            history.record(db, run)
            ran = {t.name for c in run.cells for t in c.tests}
            warned = [f for f in history.flakes(db, declared)
                      if f.warn and f.test.split(":")[0] in ran]
    except Exception as exc:  # the history is beside the run: never its failure
        log.warning("history not recorded: %s", exc)
        return
    if told or warned:
        print("\nhistory (" + str(path or history.default_path()) + "):")
        for (cell, test), label in told.items():
            print(f"  {cell}/{test}: {label}")
        for f in warned:  # the data against a declaration, or a flake not declared
            print(f"  {f.test} ({f.kernel}): {f.advice()}")
