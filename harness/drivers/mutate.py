"""`harness mutate`: which wrong kernels would the tests pass? A driver over `run`'s pipeline.

A mutant is one extra patch on a matrix cell (a one-line bug from mutants.py). The
unmutated kernel runs first with the same tests, twice (the baseline): a test that is not
PASS in every baseline run is left out of the verdicts, and the summary says so. Then each
mutant:
- its object file is compiled first: a compile error makes it stillborn, an object equal
  to the baseline's (debug info aside) makes it equivalent, without a boot;
- otherwise the cell runs with the mutant patch (incremental build, boot, tests, with the
  baseline's boot retry), and it is killed only by what its kernel did: a counted result
  (boot and shutdown included) that differs from the green baseline's, a boot that failed
  with the kernel's own complaint (a splat, a panic), or the harness's feature check (a
  declared kfunc gone). A stage error of the environment or the harness (set-up, patch,
  config, the test builds, a boot that never started without a word from the kernel) is
  an "error": run once more, never cached, never a kill. A kill only by declared-flaky
  tests is confirmed by a second run. Survived otherwise.
Verdicts are cached by (the series tree, the mutant, the config, the tests' sources, the
harness revision); `--fresh` ignores the cache. Mutant kernels are removed from the store
after their run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import testkinds
from harness.base import atomic, gitcmd, paths, proc, sandbox
from harness.base.errors import HarnessError
from harness.base.model import Accel, CellResult, KernelSpec, Phase, RunResult, Status
from harness.drivers import matrix, pipeline
from harness.drivers.matrix import Cell
from harness.judge import mutants, verdict, w1_warnings
from harness.kernel import build, sources
from harness.kernel import series as series_mod
from harness.kernel.tree import KernelTree
from harness.output import results
from harness.target import select as select_target
from harness.testkinds import own as own_tests

log = logging.getLogger(__name__)

EQUIVALENTS = "equivalent-mutants.toml"  # per series: mutants declared equivalent, with why


class MutateError(HarnessError):
    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class Request:
    series: str
    targets: tuple[str, ...] = ()  # FILE or FILE:FUNCTION
    tests: tuple[str, ...] = ()
    cell: str | None = None
    max: int | None = None
    seed: int = 0
    accel: Accel = Accel.AUTO
    only: tuple[str, ...] = ()  # mutant ids: run just these (a survivor again, say)
    fresh: bool = False  # ignore cached verdicts (they are still written)
    baseline_runs: int = 2  # a test must be PASS in each to count
    # series: the lines the series adds; callees: and the .c functions its functions call;
    # FILE[:FUNCTION]: that code alone
    scope: str = "series"
    coverage: bool = False  # gcov on the baseline: a mutant on a line no test ran is not run
    # each mutant runs only the checks the cell's map says its line can affect (the
    # baseline runs every test); each verdict is told beside the full tests' cached one
    affected: bool = False


@dataclass(frozen=True, kw_only=True)
class Verdict:
    mutant: mutants.Mutant
    outcome: str  # killed | survived | equivalent | stillborn
    why: str = ""
    killed_by: tuple[str, ...] = ()  # results that differed from the baseline
    passed: tuple[str, ...] = ()  # the tests a survivor passed
    run: str = ""  # its run directory, relative to the output
    cached: bool = False
    seconds: float = 0.0
    # --affected: the verdict of the full tests on the same mutant (from the verdict cache:
    # a run of the same mutants without --affected, same harness); "" when none is cached
    full: str = ""


OUTCOMES = ("killed", "survived", "not covered", "equivalent", "stillborn", "error")


# ---- the verdict of one run against the baseline (pure) ----


def statuses(cell: CellResult) -> dict[str, str]:
    return {t.name: t.status.value for t in cell.tests}


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What a verdict needs of one run of the cell."""

    statuses: Mapping[str, str]
    stage: str = ""  # the first stage that did not pass
    stage_status: str = ""  # its status, when a stage error
    kernel_fault: bool = False  # the kernel complained: a counted splat in any result


def run_facts(cell: CellResult) -> RunFacts:
    """The facts of one run of the cell."""
    failed = next((s for s in cell.stages if s.status is not Status.PASS), None)
    return RunFacts(
        statuses={t.name: t.status.value for t in cell.tests},
        stage=failed.stage if failed else "",
        stage_status=cell.status.value if cell.status.is_stage_error else "",
        kernel_fault=any(not s.expected for t in cell.tests for s in t.splats))


def excluded_tests(runs: list[Mapping[str, str]]) -> dict[str, str]:
    """The results that cannot judge a mutant, with why: not PASS in every baseline run,
    or not present in every one."""
    names = sorted({n for r in runs for n in r})
    out = {}
    for n in names:
        seen = [r.get(n, "missing") for r in runs]
        if any(v != Status.PASS.value for v in seen):
            out[n] = f"baseline {' / '.join(seen)} over {len(runs)} runs: not green"
    return out


def compare(baseline: Mapping[str, str], mutant: Mapping[str, str], *, stage: str,
            stage_status: str = "", excluded: frozenset[str] = frozenset(),
            kernel_fault: bool = False) -> tuple[str, tuple[str, ...]]:
    """("killed" | "survived" | "stillborn" | "error", what differed) of one mutant run.

    A build that failed is stillborn. The harness's own feature check after the build (a
    declared kfunc is gone) is a kill, and so is a boot that failed while the kernel
    complained (`kernel_fault`: a splat, a panic). Any other stage error is the
    environment's or the harness's: "error". Otherwise each result that is not excluded
    (see `excluded_tests`) is compared with the green baseline's, boot and shutdown
    included. A stage stopped by the host (SETUP_ERROR: a full disk) is "error" in any
    stage, the build's too: a mutant whose build found no space is not stillborn.
    """
    if stage and stage_status == Status.SETUP_ERROR.value:
        return "error", (f"stage {stage}: {stage_status}",)
    if stage == "build" or (stage_status == Status.BUILD_ERROR.value and stage != "features"):
        return "stillborn", ()
    if stage == "features":
        return "killed", (f"stage {stage}: {stage_status}",)
    if stage.startswith("boot+tests") and stage_status == Status.BOOT_ERROR.value \
            and kernel_fault:
        return "killed", (f"stage {stage}: {stage_status} (the kernel complained)",)
    if stage:
        return "error", (f"stage {stage}: {stage_status}",)
    differ = tuple(sorted(n for n in set(baseline) | set(mutant)
                          if n not in excluded and baseline.get(n) != mutant.get(n)))
    return ("killed", differ) if differ else ("survived", ())


def to_confirm(outcome: str, differ: tuple[str, ...], flaky: frozenset[str]) -> bool:
    """Whether a kill must be seen twice: every result that made it is a declared-flaky
    test (its status may differ from the baseline's on an unmutated kernel too)."""
    return outcome == "killed" and bool(differ) and all(d in flaky for d in differ)


def flaky_tests(expectations: verdict.Expectations, kernel_version: str) -> frozenset[str]:
    return frozenset(e.test for e in expectations.failures
                     if e.flaky and verdict.version_matches(kernel_version, e.kernel))


# ---- cache keys ----


def tests_digest(tests: tuple[str, ...]) -> str:
    """What the selected tests are: our own by their sources, the tree's by name (their
    sources are in the tree id), each with the checks asked of it (a verdict of two checks
    is not the whole test's)."""
    h = hashlib.sha256()
    for text in tests:
        ref = testkinds.resolve(text)
        h.update(ref.name.encode() + b"\0")
        if ref.checks:
            h.update(b"checks:" + ",".join(ref.checks).encode() + b"\0")
        if ref.manifest is not None:
            for d in (ref.manifest.directory, *ref.manifest.include):
                h.update(own_tests.tree_hash(d).encode())
    return h.hexdigest()


def verdict_key(*, tree_id: str, mutant: mutants.Mutant, config: str, tests: str,
                harness_rev: str) -> str:
    text = "\n".join([tree_id, mutant.id, mutant.summary, config, tests, harness_rev])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# ---- equivalent mutants declared by hand ----


def declared_equivalents(series_dir: Path) -> dict[str, str]:
    """mutant id -> the argument why it cannot change behaviour (patches/S/EQUIVALENTS)."""
    path = series_dir / EQUIVALENTS
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
        return {str(e["mutant"]): str(e["why"]) for e in data.get("equivalent", [])}
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        raise MutateError(f"{path}: {exc}", fix="each [[equivalent]] needs mutant and why"
                          ) from None


# ---- the driver ----


@dataclass
class State:
    request: Request
    out: Path
    cell: Cell
    verdicts: list[Verdict] = field(default_factory=list)
    baseline: CellResult | None = None
    excluded: dict[str, str] = field(default_factory=dict)  # result -> why it cannot judge
    not_run: frozenset[tuple[str, int]] = frozenset()  # --coverage: lines no test ran
    full_keys: dict[str, str] | None = None  # --affected: the full tests' verdict key parts
    generated: int = 0
    sources_count: dict[str, int] = field(default_factory=dict)


def choose_cell(request: Request, cells: list[Cell]) -> Cell:
    """The cell to mutate in: --cell, else the first default/ci cell that applies the
    series and declares no expectations; its tests unless --test names others."""
    candidates = [c for c in cells if request.series in c.series and not c.has_expectations]
    if request.cell is not None:
        chosen = next((c for c in cells if c.name == request.cell), None)
        if chosen is None or request.series not in chosen.series:
            raise MutateError(f"no matrix cell {request.cell!r} applies series "
                              f"{request.series}",
                              fix=f"cells that do: {', '.join(c.name for c in candidates)}")
    else:
        tiered = [c for c in candidates if matrix.Tier.CI.includes(c.tier)]
        if not tiered:
            raise MutateError(f"no default or ci matrix cell applies series {request.series} "
                              "without expectations", fix="pass --cell")
        chosen = tiered[0]
    tests = request.tests or chosen.tests
    cell = replace(chosen, name=f"mutate-{request.series}", tests=tests, expect_status=None,
                   expect=(), patches=())
    return matrix.with_coverage(cell) if request.coverage else cell


def run(request: Request, out: Path) -> State:
    cell = choose_cell(request, matrix.load())
    state = State(request=request, out=out, cell=cell)
    out.mkdir(parents=True, exist_ok=True)
    log.info("mutating series %s in cell %s (tests: %s)", request.series, cell.kernel,
             ", ".join(cell.tests))
    runs = []
    for k in range(max(1, request.baseline_runs)):
        run_dir = out / ("baseline" if k == 0 else f"baseline-{k + 1}")
        runs.append(_run(cell, run_dir, request.accel))
        if runs[-1].status.is_stage_error:
            raise MutateError(f"the baseline (no mutant) did not run: "
                              f"{runs[-1].status.value}: {runs[-1].error}",
                              fix=f"see {run_dir}/results.json and its logs; the same "
                                  f"cell with `harness run --cell {cell.name}` shows it alone")
    baseline = runs[0]
    state.baseline = baseline
    state.excluded = excluded_tests([statuses(r) for r in runs])
    if request.coverage:
        state.not_run = frozenset((x.file, x.line) for r in runs for pc in r.coverage or ()
                                  for x in pc.not_run)
        log.info("coverage: %d of the series' lines no test ran", len(state.not_run))
    for name, why in state.excluded.items():
        log.warning("%s cannot judge a mutant: %s", name, why)
    if not set(statuses(baseline)) - set(state.excluded):
        raise MutateError("no result of the baseline is green in every run: nothing could "
                          "tell a mutant from it",
                          fix="make the cell pass with `harness run` first")
    spec = sources.parse_spec(cell.kernel)
    tree = KernelTree.open(spec, cell.configs, log_dir=out,
                           target=select_target(cell.arch, cell.toolchain))
    tools = build.tools(tree.target)
    with tree.locked():
        head, before = _series_commits(tree, cell, request.series, spec, log_dir=out)
        generated = _generate(tree.path, before, head, request, tree.build_dir)
    state.generated = len(generated)
    for m in generated:
        state.sources_count[m.source] = state.sources_count.get(m.source, 0) + 1
    if request.only:
        unknown = set(request.only) - {m.id for m in generated}
        if unknown:
            raise MutateError(f"no mutant {', '.join(sorted(unknown))} among the "
                              f"{len(generated)} generated",
                              fix="take the ids from mutants.json of a run of the same "
                                  "series, targets and harness")
        generated = [m for m in generated if m.id in request.only]
    chosen = mutants.sample(generated, request.max, request.seed)
    log.info("%d mutants generated; %d to run", len(generated), len(chosen))
    tree_id = tree.tree_id(head)
    config = hashlib.sha256((out / "baseline" / "config").read_bytes()).hexdigest()
    key_parts = {"tree_id": tree_id, "config": config, "tests": tests_digest(cell.tests),
                 "harness_rev": harness_revision()}
    if request.affected:
        full_parts = dict(key_parts)
        key_parts = {**key_parts, "tests": key_parts["tests"] + "|affected"}
        state.full_keys = full_parts
    declared = declared_equivalents(series_mod.series_dir(request.series))
    exp = verdict.load_expectations(pipeline.expectations_path())
    flaky = flaky_tests(exp, baseline.kernel_version)
    objects: dict[str, ObjectBuild] = {}
    try:
        for i, m in enumerate(chosen, 1):
            log.info("[mutant %d/%d] %s", i, len(chosen), m.summary)
            v = _one(state, m, tree=tree, head=head, tools=tools,
                     objects=objects, declared=declared, flaky=flaky, key_parts=key_parts)
            if state.full_keys is not None:
                v = replace(v, full=full_verdict(m, state.full_keys))
            state.verdicts.append(v)
            log.info("[mutant %d/%d] %s%s", i, len(chosen), v.outcome.upper(),
                     f": {v.why}" if v.why else "")
    finally:
        # Whatever happened: the worktree at the series, as `run` leaves it.
        with tree.locked():
            tree.reset_to(head)
    return state


def _series_commits(tree: KernelTree, cell: Cell, name: str, spec: KernelSpec, *,
                    log_dir: Path) -> tuple[str, str]:
    """(the commit with every series of the cell, the commit before the named one); both
    applied before by the baseline run, so these are checkouts."""
    base_name = series_mod.base_name(spec)
    cut = cell.series.index(name)
    tree.apply(series_mod.collect(cell.series[:cut], [], base_name), log_dir=log_dir)
    before = tree.rev()
    tree.apply(series_mod.collect(cell.series, [], base_name), log_dir=log_dir)
    return tree.rev(), before


def _generate(tree: Path, before: str, head: str, request: Request,
              build_dir: Path) -> list[mutants.Mutant]:
    operators = mutants.load_operators()
    diff = gitcmd.git(tree, "diff", "-U0", before, head, "--", "*.c", what="git diff")
    out: list[mutants.Mutant] = []
    added = mutants.added_lines(diff)
    targets = list(request.targets)
    if request.scope in ("series", "callees"):
        for file, new in sorted(added.items()):
            text = sandbox.tree_file(tree / file, tree).read_text(errors="replace")
            out += mutants.generate(file, text, new, operators,
                                    source=f"series {request.series}",
                                    functions=mutants.defined_functions(text))
    else:
        targets.insert(0, request.scope)
    if request.scope == "callees":
        targets += [t for t in callees(tree, added, build_dir) if t not in targets]
    for target in targets:
        span: range | None
        file, _, function = target.partition(":")
        path = tree / file
        if not path.is_file() or not file.endswith(".c"):
            raise MutateError(f"--target {target}: no C file {file} in the tree",
                              fix="a path relative to the kernel tree, e.g. "
                                  "kernel/cgroup/rstat.c:cgroup_rstat_flush_locked")
        text = sandbox.tree_file(path, tree).read_text(errors="replace")
        if function:
            span = mutants.function_lines(text, function)
            if span is None:
                raise MutateError(f"--target {target}: {file} defines no function {function}")
        else:
            span = range(1, text.count("\n") + 2)
        out += mutants.generate(file, text, span, operators, source=f"target {target}",
                                functions=mutants.defined_functions(text))
    return out


def callees(tree: Path, added: Mapping[str, set[int]], build_dir: Path) -> list[str]:
    """FILE:FUNCTION of each function the series' changed functions call that the tree
    defines in a .c file built into this kernel (its object is in `build_dir`; not in a
    header: a mutant there rebuilds most of the kernel)."""
    changed: list[tuple[str, str]] = []
    called: set[str] = set()
    for file, lines in added.items():
        text = sandbox.tree_file(tree / file, tree).read_text(errors="replace")
        for name in sorted(mutants.defined_functions(text)):
            span = mutants.function_lines(text, name)
            if span is not None and lines & set(span):
                changed.append((file, name))
                body = "\n".join(text.split("\n")[span.start - 1:span.stop - 1])
                called |= mutants.called_functions(body) - {name}
    mine = {name for _, name in changed}
    out = []
    for name in sorted(called - mine):
        where = gitcmd.git_run(tree, "grep", "-n", "-E", rf"^([A-Za-z_].*[ *])?{name}\(",
                               "--", "*.c", timeout=120)
        for file in dict.fromkeys(h.partition(":")[0] for h in where.output.splitlines()):
            built = (build_dir / file).with_suffix(".o").exists()
            if built and mutants.function_lines((tree / file).read_text(errors="replace"),
                                                name) is not None:
                out.append(f"{file}:{name}")
                break
    return out


@dataclass(frozen=True, kw_only=True)
class ObjectBuild:
    digest: str | None  # of the object without debug info; None: it did not compile
    errors: str = ""
    warnings: frozenset[str] = frozenset()  # without line and column


def compiler_warnings(output: str) -> frozenset[str]:
    """The compiler's warnings, "file: warning: text" (a mutant keeps the line numbers, but
    a warning is the same warning wherever it moved)."""
    out = set()
    for line in output.splitlines():
        m = re.match(r"^(?:\S*/)?([^/\s:]+\.[ch]):\d+(?::\d+)?: warning: (.*)$", line)
        if m is not None:
            out.add(f"{m.group(1)}: warning: {m.group(2)}")
    return frozenset(out)


def _object(tree: KernelTree, tools: build.Tools, file: str,
            log_path: Path) -> ObjectBuild:
    """FILE's object, built in the cell's build directory (so that the build that follows
    takes it from ccache)."""
    obj = file.removesuffix(".c") + ".o"
    build_dir = tree.build_dir
    res = tree.compile_object(file, tools=tools, log_path=log_path, timeout=600)
    if not res.ok:
        errors = [ln for ln in res.output.splitlines() if "error" in ln][:5]
        return ObjectBuild(digest=None, errors="\n".join(errors) or res.tail(5))
    stripped = build_dir / (obj + ".nodebug")
    proc.check(["objcopy", "--strip-debug", str(build_dir / obj), str(stripped)],
               what="objcopy --strip-debug", timeout=120)
    digest = hashlib.sha256(stripped.read_bytes()).hexdigest()
    stripped.unlink()
    return ObjectBuild(digest=digest, warnings=compiler_warnings(res.output))


def _one(state: State, m: mutants.Mutant, *, tree: KernelTree, head: str,
         tools: build.Tools, objects: dict[str, ObjectBuild], declared: Mapping[str, str],
         flaky: frozenset[str], key_parts: Mapping[str, str]) -> Verdict:
    out = state.out
    logs = out / "objects"
    logs.mkdir(parents=True, exist_ok=True)
    patch = out / "mutants" / f"{m.id}.patch"
    patch.parent.mkdir(parents=True, exist_ok=True)
    source = tree.path / m.file
    cache = paths.sub("mutants") / f"{verdict_key(mutant=m, **key_parts)}.json"
    with tree.locked():
        # Every mutant's patch is kept, whatever decides its verdict (the cache, a
        # declaration, the compiler). The last mutant's run left its commit checked out.
        tree.reset_to(head)
        # a file of the tree, not a link out of it (the harness writes the mutant itself)
        original = sandbox.tree_file(source, tree.path).read_text(errors="replace")
        atomic.write_text(patch, m.patch(original))
        if cache.exists() and not state.request.fresh:
            data = json.loads(cache.read_text())
            # The run it came from belongs to an earlier results directory: not linked.
            return Verdict(mutant=m, outcome=data["outcome"], why=data["why"],
                           killed_by=tuple(data["killed_by"]), passed=tuple(data["passed"]),
                           run="", cached=True)
        if m.id in declared:
            return Verdict(mutant=m, outcome="equivalent", why=f"declared: {declared[m.id]}")
        if (m.file, m.start) in state.not_run:
            # not cached: the same mutant is judged when a test comes to run its line
            return Verdict(mutant=m, outcome="not covered",
                           why=f"no test runs {m.file}:{m.start} (the baseline's gcov)")
        built: ObjectBuild | None = None
        # the tree's own tools (perf) are built by their test's build, whose failure
        # makes the mutant stillborn: no object of theirs to compare without a run
        if built_by_kbuild(m.file):
            with tree.build_locked("compiling a mutant"):
                if m.file not in objects:
                    objects[m.file] = _object(tree, tools, m.file, logs / "baseline.log")
                source.write_text(m.apply(original))
                try:
                    built = _object(tree, tools, m.file, logs / f"{m.id}.log")
                finally:
                    source.write_text(original)
    v: Verdict
    if built is None:
        v = _run_mutant(state, m, patch, flaky)
    elif built.digest is None:
        v = Verdict(mutant=m, outcome="stillborn", why=f"does not compile: {built.errors}")
    elif new_warnings := sorted(built.warnings - objects[m.file].warnings):
        # A kernel developer does not ship a new warning (CONFIG_WERROR fails the build).
        v = Verdict(mutant=m, outcome="stillborn",
                    why=f"the compiler warns: {'; '.join(new_warnings)[:300]}")
    elif objects[m.file].digest is not None and built.digest == objects[m.file].digest:
        v = Verdict(mutant=m, outcome="equivalent", why="the object file is unchanged in "
                                                        "this config (debug info aside)")
    else:
        v = _run_mutant(state, m, patch, flaky)
    if v.outcome != "error":  # an error says nothing about the mutant: judged anew next time
        atomic.write_text(cache, json.dumps({"outcome": v.outcome, "why": v.why,
                                             "killed_by": list(v.killed_by),
                                             "passed": list(v.passed), "run": v.run}))
    return v


def built_by_kbuild(file: str) -> bool:
    """Whether the kernel's build compiles FILE (tools/ is userspace, built by its tests)."""
    return not file.startswith(w1_warnings.NOT_KERNEL_OBJECTS)


def _run_mutant(state: State, m: mutants.Mutant, patch: Path,
                flaky: frozenset[str]) -> Verdict:
    """Runs the mutant once, twice when the first run was an error or a kill only by
    declared-flaky tests."""
    assert state.baseline is not None
    base = statuses(state.baseline)
    excluded = frozenset(state.excluded)
    cell = replace(state.cell, patches=(str(patch),), affected=state.request.affected)
    for attempt in (1, 2):
        run_dir = state.out / "runs" / (m.id if attempt == 1 else f"{m.id}-again")
        result = _run(cell, run_dir, state.request.accel, mutant_timeouts(state.baseline))
        _forget_kernel(result, state.baseline)
        facts = run_facts(result)
        got = facts.statuses
        if cell.affected:
            # the tests the change could not affect did not run: not a difference
            base = {n: v for n, v in statuses(state.baseline).items() if n in got}
        outcome, differ = compare(base, got, stage=facts.stage, stage_status=facts.stage_status,
                                  excluded=excluded, kernel_fault=facts.kernel_fault)
        if attempt == 1 and outcome == "error":
            log.info("not judged (%s): running it again", ", ".join(differ))
            continue
        if attempt == 1 and to_confirm(outcome, differ, flaky):
            log.info("killed only by declared-flaky tests (%s): running it again",
                     ", ".join(differ))
            continue
        rel = str(run_dir.relative_to(state.out))
        if outcome == "error":
            return Verdict(mutant=m, outcome="error", run=rel,
                           why=f"twice not judged: {'; '.join(differ)}: {result.error}"[:400])
        if outcome == "killed":
            why = "; ".join(f"{d}: {base.get(d, '-')} -> {got.get(d, '-')}"
                            for d in differ if not d.startswith("stage "))
            why = why or "; ".join(differ)
            return Verdict(mutant=m, outcome="killed", why=why, killed_by=differ, run=rel)
        if outcome == "stillborn":
            return Verdict(mutant=m, outcome="stillborn", why=result.error.splitlines()[0]
                           if result.error else "build failed", run=rel)
        passed = tuple(t.name for t in result.tests if t.name not in excluded)
        return Verdict(mutant=m, outcome="survived", passed=passed, run=rel,
                       why="a flaky kill not confirmed" if attempt == 2 else "")
    raise AssertionError("unreachable")


def full_verdict(m: mutants.Mutant, key_parts: Mapping[str, str]) -> str:
    """The full tests' cached verdict on this mutant ("" when none is cached)."""
    cache = paths.sub("mutants") / f"{verdict_key(mutant=m, **key_parts)}.json"
    try:
        return str(json.loads(cache.read_text())["outcome"])
    except (OSError, ValueError, KeyError):
        return ""


def mutant_timeouts(baseline: CellResult) -> dict[str, int]:
    """A mutant's test may take ten times as long as the baseline's (at least 30 s): one
    that hangs (a deadlock, a lost wakeup) is a TIMEOUT in seconds, not in the test's own
    minutes."""
    return {t.name: max(30, int(10 * t.duration_s)) for t in baseline.tests
            if t.phase is Phase.TEST and t.duration_s > 0}


def _run(cell: Cell, run_dir: Path, accel: Accel,
         timeouts: Mapping[str, int] | None = None) -> CellResult:
    """One run of the cell, with its results.json as `harness run` writes it. Mutant runs
    stop after a test that killed the kernel, and have the baseline's timeouts."""
    # The same boot retry as the baseline's: a boot that fails once for the environment
    # must not be a kill.
    options = pipeline.RunOptions() if timeouts is None else pipeline.RunOptions(
        fail_fast=True, timeouts=timeouts)
    result = pipeline.run_cell(cell, run_dir, accel=accel, options=options)
    results.write_json(run_dir / "results.json", RunResult(
        cells=(result,), exit_code=results.exit_code([result]),
        command=("harness", "mutate"), mutated_cell=cell.name))
    return result


def _forget_kernel(result: CellResult, baseline: CellResult) -> None:
    """Mutant kernels are not kept: ~120 MB each in the store."""
    if result.image and result.image != baseline.image:
        stored = Path(result.image).parent
        if stored.parent == paths.sub("kernels"):
            shutil.rmtree(stored, ignore_errors=True)


def harness_revision() -> str:
    """The harness as it is on disk (its code, the guest runner, the operators), committed
    or not: a changed harness judges anew."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".sh", ".toml", ".j2"):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


# ---- the report ----


def table(state: State) -> dict[str, dict[str, int]]:
    """operator -> outcome -> count."""
    out: dict[str, dict[str, int]] = {}
    for v in state.verdicts:
        row = out.setdefault(v.mutant.operator, dict.fromkeys(OUTCOMES, 0))
        row[v.outcome] += 1
    return out


def to_json(state: State) -> dict[str, Any]:
    return {
        "series": state.request.series, "cell": state.cell.kernel,
        "tests": list(state.cell.tests), "targets": list(state.request.targets),
        "seed": state.request.seed, "max": state.request.max,
        "generated": state.generated, "by_source": state.sources_count,
        "baseline": {"status": state.baseline.status.value if state.baseline else None,
                     "results": statuses(state.baseline) if state.baseline else {},
                     "runs": state.request.baseline_runs, "excluded": state.excluded},
        "fresh": state.request.fresh,
        "table": table(state),
        "mutants": [{"id": v.mutant.id, "operator": v.mutant.operator,
                     "source": v.mutant.source, "file": v.mutant.file,
                     "line": v.mutant.start, "before": list(v.mutant.before),
                     "after": list(v.mutant.after), "outcome": v.outcome, "why": v.why,
                     "killed_by": list(v.killed_by), "passed": list(v.passed),
                     "patch": f"mutants/{v.mutant.id}.patch", "run": v.run,
                     "cached": v.cached, **({"full": v.full} if state.request.affected
                                            else {})} for v in state.verdicts],
        **({"affected": yardstick(state)} if state.request.affected else {}),
    }


def yardstick(state: State) -> dict[str, Any]:
    """--affected against the full tests: of the mutants the full tests killed (their
    cached verdicts), how many the affected checks alone killed, and the misses."""
    judged = [v for v in state.verdicts if v.full == "killed"]
    killed = [v for v in judged if v.outcome == "killed"]
    return {"full_killed": len(judged), "affected_killed": len(killed),
            "full_unknown": sum(1 for v in state.verdicts if not v.full and
                                v.outcome not in ("equivalent", "stillborn")),
            "misses": [{"id": v.mutant.id, "summary": v.mutant.summary, "outcome": v.outcome,
                        "why": v.why} for v in judged if v.outcome != "killed"]}


def summary(state: State) -> str:
    rows = table(state)
    lines = [f"mutants of {state.request.series} in {state.cell.kernel}: "
             f"{state.generated} generated, {len(state.verdicts)} run "
             f"(tests: {', '.join(state.cell.tests)})"]
    lines += [f"  not judging by {name}: {why}" for name, why in sorted(state.excluded.items())]
    lines.append("")
    head = f"{'operator':<22}" + "".join(f"{o:>13}" for o in OUTCOMES)
    lines.append(head)
    totals = dict.fromkeys(OUTCOMES, 0)
    for op, row in sorted(rows.items()):
        lines.append(f"{op:<22}" + "".join(f"{row[o]:>13}" for o in OUTCOMES))
        for o in OUTCOMES:
            totals[o] += row[o]
    lines.append(f"{'total':<22}" + "".join(f"{totals[o]:>13}" for o in OUTCOMES))
    for v in state.verdicts:
        if v.outcome == "error":
            lines += ["", f"ERROR {v.mutant.id}: {v.mutant.summary}", f"  {v.why}"]
    if state.request.affected:
        y = yardstick(state)
        lines += ["", f"--affected against the full tests: of the {y['full_killed']} mutants "
                      f"the full tests killed, the affected checks alone killed "
                      f"{y['affected_killed']}"
                  + (f" ({y['full_unknown']} without a cached full verdict: run them without "
                     "--affected first)" if y["full_unknown"] else "")]
        lines += [f"  MISSED {x['id']}: {x['summary']} ({x['outcome']})" for x in y["misses"]]
    survivors = [v for v in state.verdicts if v.outcome == "survived"]
    for v in survivors:
        lines += ["", f"SURVIVED {v.mutant.id}: {v.mutant.summary}",
                  f"  passed: {', '.join(v.passed)}",
                  f"  patch: {state.out.name}/mutants/{v.mutant.id}.patch"]
        lines += [f"  - {b}" for b in v.mutant.before] + [f"  + {a}" for a in v.mutant.after]
    return "\n".join(lines)


def exit_code(state: State) -> int:
    """1 when a mutant survived, else 2 when one could not be judged, else 0."""
    if any(v.outcome == "survived" for v in state.verdicts):
        return 1
    return 2 if any(v.outcome == "error" for v in state.verdicts) else 0



def command(request: Request, out: Path) -> int:
    """`harness mutate`: the mutants run, mutants.json written even when the run stops
    (what was judged so far is kept), and the verdict on the terminal."""
    state = State(request=request, out=out, cell=choose_cell(request, matrix.load()))
    try:
        state = run(request, out)
    finally:
        atomic.write_json(out / "mutants.json", to_json(state))
    print(summary(state))
    code = exit_code(state)
    print(f"\nmutants: {out / 'mutants.json'}  (exit {code})")
    return code
