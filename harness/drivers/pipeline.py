"""One matrix cell, stage by stage; each stage returns a typed result that the next takes:

    Cell -> _plan -> CellPlan (spec, test refs, patch files: all checked before any work)
         -> _kernel -> BuiltKernel (KernelTree: source, series, kconfig, build, features,
                                    tests built from the tree, all under the tree lock)
         -> _test_plan -> TestPlan (guest commands; tests the kernel cannot run: SKIP)
         -> _boot_and_test -> BootOutcome (boot, each test, setup, shutdown judged)
         -> verdict.judge -> CellResult

Each stage is timed and recorded as it finishes (`stages.StageLog`), and what it found is
noted in the cell's `CellFacts` as soon as it is known, so a cell stopped by an error or a
signal still says which stage stopped it, why, and everything it had learnt before. The
final statuses are `verdict.judge`'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from harness import target, testkinds
from harness.base import paths, proc, sandbox
from harness.base.errors import HarnessError
from harness.base.model import (
    Accel,
    Affected,
    CellInputs,
    CellResult,
    ConfigResult,
    FeatureReport,
    GuestSpec,
    Isolation,
    KernelImage,
    KernelSpec,
    PatchCoverage,
    PatchResult,
    PatchState,
    Phase,
    SourceIdentity,
    Splat,
    Status,
    TestResult,
    worst,
)
from harness.drivers import affected, carry, prebuilt
from harness.drivers.matrix import Cell
from harness.drivers.stages import StageLog
from harness.guest import protocol, vm
from harness.judge import affected as judge_affected
from harness.judge import attempts, coverage, outcome, splat
from harness.judge import verdict as verdicts
from harness.kernel import build, cache, decode, features, gcov, kconfig, series, sources
from harness.kernel.tree import KernelTree
from harness.output import results
from harness.target import Target
from harness.testkinds import BuildContext, SelftestError, TestRef, own
from harness.testkinds.base import KselftestHeader

log = logging.getLogger(__name__)

BOOT_ALLOWANCE_S = 120  # boot + runner start + dmesg dump + power-off, TCG, generous
PER_TEST_ALLOWANCE_S = 15  # per test: set-up (swap, scratch), markers, the kill grace
MAX_METRICS_BYTES = 2**20  # what a test writes to $HARNESS_METRICS


def expectations_path() -> Path:
    return paths.repo_root() / "selftests" / "expectations.toml"


class CellInterrupted(KeyboardInterrupt):
    """A signal stopped the cell; carries what it had done, for results.json."""

    def __init__(self, partial: CellResult, signal_name: str, where: str) -> None:
        super().__init__(signal_name)
        self.partial = partial
        self.where = where  # the stage it stopped in, or "after STAGE" between two


@dataclass(frozen=True, kw_only=True)
class CellPlan:
    """What the cell will do, all checked before anything is imported or built."""

    spec: KernelSpec
    tests: tuple[TestRef, ...]
    patches: tuple[series.Patch, ...]  # every series' files, then --patch files: checked
    fragments: Mapping[str, Path]  # our config fragments (not tree:PATH), checked
    target: Target  # what the kernel is built for and with
    groups: tuple[series.PatchGroup, ...] = ()  # the patches by the --series/--patch given


@dataclass(frozen=True, kw_only=True)
class PreparedTree:
    """The worktree at the base plus the cell's patches, and what the sources define."""

    tree: KernelTree
    patches: tuple[PatchResult, ...]
    features: tuple[FeatureReport, ...]  # from the sources; the build confirms with BTF


@dataclass(frozen=True, kw_only=True)
class BuiltKernel:
    """What the later stages need of the kernel (what the user is told is in CellFacts)."""

    image: KernelImage
    features: tuple[FeatureReport, ...] = ()
    # tests built from the tree itself (kselftest:, test_progs:), while it was locked
    tree_tests: Mapping[str, Path] = field(default_factory=dict)
    # the tree's kselftest.h, which our own tests are built with
    kselftest: KselftestHeader | None = None
    # --coverage: the tree and the commit built (the counters are read against them)
    tree: KernelTree | None = None
    head: str = ""
    # bpftool built from the tree, for our BPF tests' vmlinux.h (None: the host's)
    bpftool: Path | None = None


@dataclass(frozen=True, kw_only=True)
class TestPlan:
    planned: tuple[protocol.GuestTest, ...]  # what the guest runs
    skipped: tuple[TestResult, ...]  # what the kernel cannot run: never booted for
    built: Mapping[str, Path] = field(default_factory=dict)  # test name -> its build
    # --map: each guest test's unit of the map (a check alone, a frame, a program)
    units: Mapping[str, affected.Unit] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class BootOutcome:
    results: tuple[TestResult, ...]  # boot, each test, setup, shutdown
    accel: str
    retries: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Known:
    """What a stage has just learnt of the cell (None: nothing new of that). Stages yield
    it as soon as they know it; run_cell notes it in its CellFacts at once, so that a cell
    stopped half-way (an error, a signal) still reports it."""

    source: tuple[str, str | None] | None = None  # (described, Debian package version)
    patches: tuple[PatchResult, ...] | None = None
    config: ConfigResult | None = None
    features: tuple[FeatureReport, ...] | None = None
    image: KernelImage | None = None
    built: bool = False  # the image came from a build (or the store of builds)
    kselftest_h: str | None = None
    accel: str | None = None
    retry: str | None = None  # one more boot, and why
    tests: tuple[TestResult, ...] | None = None
    guest_root: vm.GuestRun | None = None  # a boot ended: what root it had
    # --prebuilt: how the build job's run built the kernel (its sandbox or not, and why)
    built_sandboxed: tuple[bool, str, str] | None = None
    identity: SourceIdentity | None = None  # what the source is (the cell's inputs)


T = TypeVar("T")


def _drive(steps: Generator[Known, None, T], facts: CellFacts) -> T:
    """Run a stage's steps to their result, noting what each has learnt as it learns it."""
    try:
        while True:
            facts.learn(next(steps))
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        steps.close()  # stopped in between (a signal): its locks and stages end here


@dataclass
class CellFacts:
    """What is known of the cell so far: written by run_cell (and prepare_shell) alone, from
    what the stages yield (`Known`)."""

    patches: tuple[PatchResult, ...] = ()
    config: ConfigResult | None = None
    features: tuple[FeatureReport, ...] = ()
    kernel_version: str = ""
    source: str = ""
    package_version: str | None = None
    image: str = ""
    kselftest_h: str = ""  # where our tests' kselftest.h came from
    accel: str = ""
    retries: tuple[str, ...] = ()
    tests: tuple[TestResult, ...] = ()
    coverage: tuple[PatchCoverage, ...] | None = None
    kernel_from_store: bool | None = None
    compiler: str = ""
    pahole: str = ""
    arch: str = ""  # of the kernel booted ("": not known yet: the cell's)
    toolchain: str = ""
    # the build's sandbox (the run's policy) and the guest's root (known at the first boot)
    isolation: Isolation = field(default_factory=lambda: _sandbox_isolation())
    affected: Affected | None = None
    map_error: str = ""
    inputs: CellInputs | None = None  # what the cell is made from, carried

    def learn(self, k: Known) -> None:
        if k.source is not None:
            self.source, self.package_version = k.source
        if k.patches is not None:
            self.patches = k.patches
        if k.config is not None:
            self.config = k.config
        if k.features is not None:
            self.features = k.features
        if k.image is not None:
            self.kernel_version, self.image = k.image.version, str(k.image.boot_image)
            self.arch, self.toolchain = k.image.arch, k.image.toolchain
            if k.built:
                self.kernel_from_store, self.compiler = k.image.cached, k.image.compiler
                self.pahole = k.image.pahole
        if k.kselftest_h is not None:
            self.kselftest_h = k.kselftest_h
        if k.accel is not None:
            self.accel = k.accel
        if k.retry is not None:
            self.retries = (*self.retries, k.retry)
        if k.tests is not None:
            self.tests = k.tests
        if k.built_sandboxed is not None:
            on, why, tool = k.built_sandboxed
            self.isolation = replace(self.isolation, sandbox=on, sandbox_off=why,
                                     sandbox_tool=tool)
        if k.guest_root is not None:
            own = k.guest_root.root
            self.isolation = replace(
                self.isolation, guest_root=own.identity.digest if own else "",
                guest_root_size=own.identity.size if own else 0,
                guest_root_packages=own.identity.packages if own else 0,
                host_root="" if own else "--host-root")
        if k.identity is not None and self.inputs is not None:
            self.inputs = replace(self.inputs, source=k.identity)

    def result(self, cell: Cell, stages: StageLog, verdict: verdicts.CellVerdict) -> CellResult:
        return CellResult(
            cell=cell.name, kernel=cell.kernel, kernel_version=self.kernel_version,
            status=verdict.status, patches=self.patches, config=self.config,
            stages=tuple(stages.stages), tests=verdict.results, source=self.source,
            package_version=self.package_version, error=verdict.error, accel=self.accel,
            retries=self.retries, features=self.features, notes=verdict.notes,
            boot_only=cell.boot_only, image=self.image, kselftest_h=self.kselftest_h,
            guest=cell.guest, coverage=self.coverage,
            guest_seen=next((t.guest_seen for t in self.tests if t.name == "boot"), None),
            kernel_from_store=self.kernel_from_store, arch=self.arch or cell.arch,
            toolchain=self.toolchain or cell.toolchain,
            compiler=self.compiler, pahole=self.pahole, isolation=self.isolation,
            affected=self.affected,
            map_error=self.map_error,
            # the guest's root is known once it booted: the inputs carry its hash
            inputs=None if self.inputs is None else replace(
                self.inputs, guest_root=self.isolation.guest_root),
        )


def _sandbox_isolation() -> Isolation:
    """What the run's sandbox policy is (base/sandbox.py); the guest's root comes later."""
    chosen = sandbox.policy()
    return Isolation(sandbox=chosen.enabled, sandbox_off=chosen.why_off,
                     sandbox_tool=sandbox.version() if chosen.enabled else "")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    strict: bool = False  # an unexpected pass fails the cell
    fail_fast: bool = False  # no test runs after one that made the kernel die
    timeouts: Mapping[str, int] = field(default_factory=dict)  # by test name, seconds (lower)
    retry_boot: bool = True  # a first boot that never reached the runner gets a second
    repeat: int | None = None  # attempts of every test (--repeat); None: each test's own
    build_only: bool = False  # the kernel and the tests built (into the store), none booted
    retry_failed: int = 0  # each failed test again in this many fresh boots (flaky?)
    host_root: bool = False  # the guest boots on the host's root (--host-root), not its own
    # a build-only run's directory: the kernel and the tests it built, booted as they are
    # (no source, no build; drivers/prebuilt.py)
    prebuilt: Path | None = None


def run_cell(cell: Cell, out_dir: Path, *, accel: Accel,
             options: RunOptions = RunOptions()) -> CellResult:
    """One cell, judged: plan -> kernel -> test plan -> boot outcome -> verdict."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stages = StageLog(cell.name)
    facts = CellFacts()
    rules = verdicts.CellRules(expect_status=Status(cell.expect_status)
                               if cell.expect_status else None,
                               expect=cell.expect_map, boot_only=cell.boot_only,
                               strict=options.strict, build_only=options.build_only)
    stage_error: Status | None = None
    error = ""
    try:
        expectations = verdicts.load_expectations(expectations_path())
        plan = _plan(cell, stages, builds=options.prebuilt is None)
        facts.inputs = carry.cell_inputs(
            cell, plan.groups, plan.fragments, out_dir, accel=accel.value,
            strict=options.strict, repeat=options.repeat, retry_failed=options.retry_failed)
        if options.prebuilt is not None:
            record = _drive(_prebuilt_kernel(cell, options.prebuilt, out_dir, stages), facts)
            kernel = record.kernel
            tests = _drive(_test_plan(plan, kernel, out_dir, stages, options.repeat,
                                      built=record.tests), facts)
        else:
            kernel = _drive(_kernel(cell, plan, out_dir, stages), facts)
            if cell.affected:
                plan = _affected(cell, plan, kernel, stages, facts)
            tests = _drive(_test_plan(plan, kernel, out_dir, stages, options.repeat,
                                      record_map=cell.record_map), facts)
        if options.build_only:
            _write_prebuilt(cell, kernel, tests, facts, out_dir)
        timed = tuple(replace(t, timeout_s=min(t.timeout_s, options.timeouts.get(
            attempts.base_name(t.name), t.timeout_s))) for t in tests.planned)
        if not options.build_only:
            boot = _drive(_boot_and_test(cell, kernel.image, timed, tests.skipped, out_dir,
                                         stages, options, accel), facts)
            if options.retry_failed:
                explained = frozenset(
                    f.test for f in expectations.failures
                    if verdicts.version_matches(facts.kernel_version, f.kernel))
                _drive(_retry_failed(cell, kernel.image, timed, tests.skipped, boot, out_dir,
                                     stages, options.retry_failed, explained,
                                     host_root=options.host_root), facts)
        if cell.coverage and not options.build_only:
            with stages.stage("coverage", Status.SETUP_ERROR):
                facts.coverage = _coverage(kernel, facts.patches, out_dir, {
                    name: u.test for name, u in tests.units.items()})
        if cell.record_map and not options.build_only:
            _record_map(cell, plan, kernel, tests, out_dir, stages, facts)
    except HarnessError as exc:
        stage_error = exc.status or Status.SETUP_ERROR
        error = str(exc)
        expectations = verdicts.Expectations()
    except KeyboardInterrupt as exc:
        where = stages.where()
        partial = facts.result(cell, stages, verdicts.CellVerdict(
            results=facts.tests, status=Status.INTERRUPTED,
            error=f"interrupted by {exc or 'a signal'} ({where})"))
        raise CellInterrupted(partial, str(exc), where) from exc
    judged = verdicts.judge(list(facts.tests), kernel_version=facts.kernel_version,
                            expectations=expectations, rules=rules, stage_error=stage_error,
                            error=error)
    return facts.result(cell, stages, judged)


def prepare_shell(cell: Cell, out_dir: Path) -> tuple[BuiltKernel, TestPlan, CellFacts]:
    """`harness shell`: the cell's kernel and tests built as `run` builds them (stored ones
    reused), without booting; a HarnessError says which stage stopped."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stages, facts = StageLog(cell.name), CellFacts()
    plan = _plan(cell, stages)
    kernel = _drive(_kernel(cell, plan, out_dir, stages), facts)
    return kernel, _drive(_test_plan(plan, kernel, out_dir, stages), facts), facts


@contextmanager
def _collected(problems: list[HarnessError]) -> Iterator[None]:
    try:
        yield
    except HarnessError as exc:
        problems.append(exc)


def _plan(cell: Cell, stages: StageLog, *, builds: bool = True) -> CellPlan:
    """Everything that can be wrong with the request, found before the expensive work, and
    told all at once (a typo in a test name and a bad fragment line: both)."""
    problems: list[HarnessError] = []
    with stages.stage("plan", Status.SETUP_ERROR):
        spec: KernelSpec | None = None
        with _collected(problems):
            spec = sources.parse_spec(cell.kernel)
            sources.check(spec)
        with _collected(problems):
            # the tree's code runs in bubblewrap unless the user said --no-sandbox: a host
            # where it cannot run stops here, saying why and how to allow it (a cell booting
            # what a build job built, --prebuilt, runs none of the tree's code)
            if builds and sandbox.policy().enabled:
                sandbox.require()
        tgt: Target | None = None
        with _collected(problems):
            tgt = target.select(cell.arch, cell.toolchain)
        found: list[TestRef] = []
        copies = dict(cell.test_dirs)
        for text in cell.tests:
            with _collected(problems):
                found.append(testkinds.resolve(test_text(text, copies)))
        if cell.command:
            with _collected(problems):
                found.append(testkinds.command_ref(cell.command, cwd=cell.command_cwd,
                                                   timeout_s=cell.command_timeout))
        refs = merged_checks(found)
        names = [r.name for r in refs]
        if dups := sorted({n for n in names if names.count(n) > 1}):
            problems.append(SelftestError(
                f"tests named twice: {', '.join(dups)}", fix="name each test once",
                status=Status.SETUP_ERROR))
        known: set[str] = set()
        with _collected(problems):
            known = {f.name for f in features.known_features()}
        for ref in refs:
            if unknown := [n for r in ref.requires for n in features.alternatives(r)
                           if n not in known]:
                problems.append(SelftestError(
                    f"test {ref.name} requires unknown feature(s) {', '.join(unknown)}",
                    fix=f"use the names the feature probe knows: "
                        f"{', '.join(sorted(known | set(features.CAPABILITIES)))} "
                        "(or declare them in a series' provides.toml)",
                    status=Status.SETUP_ERROR))
        host_only = [r.name for r in refs if testkinds.kind_of(r).host_only]
        if tgt is not None and tgt.cross and host_only:
            problems.append(SelftestError(
                f"{', '.join(host_only)}: built for the host's arch ({tgt.host_uname}); "
                f"an {tgt.arch.name} guest cannot run them yet (its root is bash, "
                "coreutils and busybox)",
                fix=f"run them in an {tgt.host_uname} cell", status=Status.SETUP_ERROR))
        fragments: dict[str, Path] = {}
        carried = dict(cell.config_files)
        for c in cell.configs:
            if not kconfig.is_tree_fragment(c):
                with _collected(problems):
                    fragments[c] = _fragment(c, carried.get(c))
        groups: tuple[series.PatchGroup, ...] = ()
        if spec is not None and not sources.kind_of(spec).has_tree:
            if cell.series or cell.patches:
                problems.append(sources.SourceError(
                    f"{spec.text} is a prebuilt image: it cannot take patches",
                    fix="drop --series/--patch, or use debian:/git:"))
            if bad := [r.name for r in refs if testkinds.kind_of(r).from_tree]:
                problems.append(SelftestError(
                    f"{', '.join(bad)} need(s) a kernel source tree; {spec.text} has none",
                    fix="use a debian:/git: kernel for tests built from the tree",
                    status=Status.SETUP_ERROR))
        elif spec is not None:
            # Reads and checks every patch file of the series (not yet the tree).
            with _collected(problems):
                groups = tuple(series.groups(
                    cell.series, [_patch_path(p) for p in cell.patches],
                    series.base_name(spec), {n: Path(d) for n, d in cell.series_dirs}))
        if len(problems) == 1:
            raise problems[0]
        if problems:
            raise HarnessError(
                f"{len(problems)} problems, found before anything was built:\n" + "\n".join(
                    "  " + str(p).replace("\n", "\n    ") for p in problems),
                status=worst([p.status or Status.SETUP_ERROR for p in problems]))
    assert spec is not None and tgt is not None
    return CellPlan(spec=spec, tests=refs, patches=tuple(p for g in groups for p in g.patches),
                    fragments=fragments, target=tgt, groups=groups)


def test_text(text: str, copies: Mapping[str, str]) -> str:
    """A test as asked, or its carried copy (a reproduction: DIR[@VARIANT] -> COPY[@VARIANT])."""
    base, at, variant = text.partition("@")
    copy = copies.get(text) or copies.get(base)
    return text if copy is None else f"{copy}{at}{variant}"


def _fragment(name: str, carried: str | None) -> Path:
    """One of our fragments, checked: by its name, or its carried copy (a reproduction)."""
    if carried is None:
        return kconfig.checked_fragment(name)
    path = Path(carried)
    kconfig.check_fragment(path, name)
    return path


def merged_checks(refs: list[TestRef]) -> tuple[TestRef, ...]:
    """`--test T:a --test T:b` as `T:a,b`; with `--test T` too, all of T. (The same test
    twice without checks stays twice: an error the plan reports.)"""
    merged: list[TestRef] = []
    for ref in refs:
        i = next((k for k, x in enumerate(merged) if x.name == ref.name and x.kind == ref.kind
                  and x.manifest == ref.manifest and (x.checks or ref.checks)), None)
        if i is None:
            merged.append(ref)
            continue
        first = merged[i]
        both = () if not (first.checks and ref.checks) else tuple(
            dict.fromkeys((*first.checks, *ref.checks)))
        merged[i] = replace(first, checks=both, checks_why=first.checks_why or ref.checks_why)
    return tuple(merged)


def _patch_path(text: str) -> Path:
    path = Path(text)
    if not path.is_absolute():
        in_repo = paths.repo_root() / path
        path = in_repo if in_repo.exists() else path.resolve()
    return path


def _kernel(cell: Cell, plan: CellPlan, logs: Path,
            stages: StageLog) -> Generator[Known, None, BuiltKernel]:
    """The kernel to boot: a prebuilt image, or the tree patched, configured and built."""
    # our own tests print KTAP through a kernel tree's kselftest.h
    wants_kselftest_h = any(ref.kind == own.KIND.name for ref in plan.tests)
    header: KselftestHeader | None = None
    if not sources.kind_of(plan.spec).has_tree:
        with stages.stage("image", Status.SETUP_ERROR):
            image = build.image_from_file(Path(plan.spec.value))
            if image.arch != cell.arch and cell.arch != target.DEFAULT_ARCH:
                raise sources.SourceError(
                    f"{plan.spec.value} is an {image.arch} kernel image; the cell asks for "
                    f"{cell.arch}", fix=f"drop --arch (the image's arch is read from it), "
                                        f"or give an {cell.arch} image")
        yield Known(image=image, source=(f"prebuilt image {plan.spec.value}", None),
                    identity=carry.image_identity(plan.spec.text, Path(plan.spec.value)))
        with stages.stage("features", Status.SETUP_ERROR):
            found = features.of_image(image)
            yield Known(features=found)
            if wants_kselftest_h:
                header = own.stored_kselftest_h(image.version)
                yield Known(kselftest_h=header.origin)
        return BuiltKernel(image=image, features=found, kselftest=header)
    with stages.stage("source", Status.SETUP_ERROR):
        tree = KernelTree.open(plan.spec, cell.configs, log_dir=logs, checked=plan.fragments,
                               target=plan.target)
    yield Known(source=(tree.source.describe, tree.source.package_version),
                identity=carry.identity(tree.source))
    # One lock from checkout to the end of the build: no other run moves this tree.
    with tree.locked():
        prepared = yield from _series(cell, plan, tree, logs, stages)
        with stages.stage("kconfig", Status.CONFIG_ERROR):
            yield Known(config=tree.configure(log_dir=logs))
        with stages.stage("build", Status.BUILD_ERROR):
            image = tree.build(log_dir=logs)
            stages.parts(image.build_parts)
        yield Known(image=image, built=True)
        if image.config is not None:
            (logs / "config").write_bytes(image.config.read_bytes())
        with stages.stage("features", Status.BUILD_ERROR):
            applied = {p.series for p, r in zip(plan.patches, prepared.patches, strict=False)
                       if r.state is PatchState.APPLIED}
            found = features.of_built_kernel(prepared.features, image)
            yield Known(features=found)  # reported even when what follows refuses them
            features.check_declared(found, applied, log_path=logs / "config")
        used_for = describe(cell)
        for entry in (image.boot_image.parent, tree.path, tree.source.repo):
            cache.note_use(entry, used_for)
        # kselftests build from the same tree state: still under the lock.
        with stages.stage("kselftests-build", Status.BUILD_ERROR):
            tree_tests = _build_tests_of(plan.tests, found, BuildContext(
                kernel=image, log_dir=logs, tree=tree.path, build_dir=tree.build_dir,
                target=tree.target), from_tree=True)
        bpftool = None
        if any(r.manifest is not None and r.manifest.bpf for r in plan.tests
               if not features.missing_for(r.requires, found)):
            with stages.stage("bpftool", Status.BUILD_ERROR):
                bpftool = own.tree_bpftool(tree.path, log_dir=logs)
        # kept for images of this version whatever this cell runs (even --boot-only)
        header = own.capture_kselftest_h(tree.path, image.version, tree.source.describe)
        if wants_kselftest_h:
            if header is None:
                raise own.no_kselftest_h(tree.source.describe)
            yield Known(kselftest_h=header.origin)
        head = tree.rev()
    return BuiltKernel(image=image, features=found, tree_tests=tree_tests,
                       kselftest=header, tree=tree, head=head, bpftool=bpftool)


@dataclass(frozen=True, kw_only=True)
class Prebuilt:
    kernel: BuiltKernel
    tests: Mapping[str, Path]  # test name -> its build, in this cache


def _prebuilt_kernel(cell: Cell, run_dir: Path, logs: Path,
                     stages: StageLog) -> Generator[Known, None, Prebuilt]:
    """The kernel and the tests a build-only run made (its record, drivers/prebuilt.py),
    from this machine's cache: what the source, series, config and build stages would
    have said, said again, and nothing built."""
    with stages.stage("prebuilt", Status.SETUP_ERROR):
        if (failed := prebuilt.failed_build(run_dir, cell, logs)) is not None:
            raise failed
        rec = prebuilt.read(run_dir, cell)
        yield Known(source=(rec.source, rec.package_version), patches=rec.patches,
                    built_sandboxed=(rec.sandbox, rec.sandbox_off, rec.sandbox_tool),
                    identity=SourceIdentity(spec=cell.kernel, describe=rec.source,
                                            package_version=rec.package_version))
        image = prebuilt.image(rec, run_dir)
        config = rec.config
        if image.config is not None:
            (logs / "config").write_bytes(image.config.read_bytes())
            if config is not None:  # the build job's path means nothing here
                config = replace(config, config_path=logs / "config")
        yield Known(config=config, image=image, built=True, features=rec.features)
        built = prebuilt.tests(rec)
        header = None
        if (where := prebuilt.kselftest_dir(rec)) is not None:
            header = KselftestHeader(directory=where, origin=rec.kselftest_origin)
            yield Known(kselftest_h=rec.kselftest_origin)
        cache.note_use(image.boot_image.parent, describe(cell))
    log.info("[%s] kernel %s and %d test build(s) from %s: nothing built", cell.name,
             rec.kernel_entry, len(built), run_dir)
    return Prebuilt(kernel=BuiltKernel(image=image, features=rec.features, kselftest=header),
                    tests=built)


def _write_prebuilt(cell: Cell, kernel: BuiltKernel, tests: TestPlan, facts: CellFacts,
                    out_dir: Path) -> None:
    """A build-only run's record of the cell: what a run elsewhere boots without building
    (`harness run --prebuilt`)."""
    header = kernel.kselftest
    prebuilt.write(out_dir, prebuilt.record(
        cell, image=kernel.image, source=facts.source, package_version=facts.package_version,
        patches=facts.patches, config=facts.config, features=facts.features,
        kselftest=(header.directory, header.origin) if header is not None else None,
        tests=dict(tests.built),
        sandbox=(facts.isolation.sandbox, facts.isolation.sandbox_off,
                 facts.isolation.sandbox_tool)))


def _series(cell: Cell, plan: CellPlan, tree: KernelTree, logs: Path,
            stages: StageLog) -> Generator[Known, None, PreparedTree]:
    with stages.stage("series", Status.PATCH_CONFLICT):
        known = features.known_features()
        base_defs = features.source_definitions(tree.source.repo, tree.base_commit, known)
        carried = {n: Path(d) for n, d in cell.series_dirs}
        provided = features.series_in_base(
            {name: carried.get(name) or series.series_dir(name) for name in cell.series
             if not series.from_the_list(name)}, base_defs)
        try:
            patches = tree.apply(plan.patches, log_dir=logs, in_base=provided)
        except series.PatchConflictError as exc:
            yield Known(patches=exc.results)
            raise
        yield Known(patches=patches)
        if cell.coverage:
            profiled = gcov.profile(tree.path, tree.base_commit)
            log.info("[%s] coverage: gcov for %s", cell.name, ", ".join(profiled) or
                     "no C file (the series adds none)")
        head_defs = features.definitions_after(tree.path, tree.base_commit, base_defs, "HEAD",
                                               known)
        from_sources = features.from_sources(known, base_defs, head_defs)
        yield Known(features=from_sources)
        # Tests from the tree itself: checked now, before any build.
        for ref in plan.tests:
            testkinds.kind_of(ref).check_in_tree(ref, tree.path)
    return PreparedTree(tree=tree, patches=patches, features=from_sources)


def _coverage(kernel: BuiltKernel, patch_results: tuple[PatchResult, ...],
              logs: Path, tests_of: Mapping[str, str] | None = None
              ) -> tuple[PatchCoverage, ...]:
    """Per patch of the series, its lines gcov counts and which the tests ran: each test's
    counters (guest/gcov/TEST/) read against the tree as it was built; `tests_of`: the
    test each guest command belongs to (a map runs a test's checks one by one)."""
    tree = kernel.tree
    if tree is None:
        raise gcov.CoverageError("--coverage needs a kernel built from source here",
                                 fix="use a debian: or git: kernel, not image:")
    with tree.locked():
        if tree.rev() != kernel.head:
            raise gcov.CoverageError(
                "the kernel tree moved on before the counters were read (another run?)",
                fix="run again, one run per tree at a time")
        commits = tree.git("log", "--reverse", "--format=%H%x09%s",
                           f"{tree.base_commit}..{kernel.head}", what="git log").splitlines()
        applied = [p for p in patch_results if p.state is PatchState.APPLIED]
        ours = [c.split("\t", 1) for c in commits if not c.endswith("\t" + gcov.SUBJECT)]
        patches = [(commit, p.name, p.subject) for (commit, _), p in
                   zip(ours, applied, strict=False)]
        files = gcov.series_c_files(tree.path, tree.base_commit, kernel.head)
        blamed = gcov.blame(tree.path, files, kernel.head)
        per_test: dict[str, dict[str, dict[int, int]]] = {}
        guest = logs / "guest" / "gcov"
        notes = build.gcno_dir(kernel.image) or tree.build_dir
        for test_dir in sorted(guest.iterdir()) if guest.is_dir() else []:
            counts = gcov.line_counts(test_dir, tree.build_dir, gcno_dir=notes,
                                      sources=files, log_path=logs / "gcov.log")
            name = (tests_of or {}).get(test_dir.name, test_dir.name)
            per_test[name] = coverage.merge_counts([per_test.get(name, {}), counts])
    if not per_test:
        raise gcov.CoverageError(f"no gcov counters in {guest}: the guest wrote none",
                                 fix="is CONFIG_GCOV_KERNEL in the kernel? see its config")
    return coverage.patch_coverage(patches, blamed, per_test)


def _build_tests_of(refs: tuple[TestRef, ...], reports: tuple[FeatureReport, ...],
                    ctx: BuildContext, *, from_tree: bool) -> dict[str, Path]:
    """Build the runnable tests of the kinds built from the tree (or not), each kind's
    tests at once; ref name -> the directory the guest runs them from."""
    built: dict[str, Path] = {}
    for kind in testkinds.KINDS:
        mine = [r for r in refs
                if r.kind == kind.name and not features.missing_for(r.requires, reports)]
        if kind.from_tree is from_tree and mine:
            built.update(kind.build(mine, ctx))
    return built


def _test_plan(plan: CellPlan, kernel: BuiltKernel, logs: Path, stages: StageLog,
               repeat: int | None = None, *, built: Mapping[str, Path] | None = None,
               record_map: bool = False) -> Generator[Known, None, TestPlan]:
    """The guest's plan; `built`: the tests' builds as a build-only run made them (nothing
    is built then, and a test it did not build is a SETUP_ERROR)."""
    # Not built, not booted: what the kernel cannot run.
    skipped = tuple(
        TestResult(name=ref.name, status=Status.SKIP, duration_s=0.0, exit_code=None,
                   ktap=None, reason="skipped by the harness: the kernel lacks "
                                     + ", ".join(missing))
        for ref in plan.tests if (missing := features.missing_for(ref.requires, kernel.features)))
    yield Known(tests=skipped)
    if built is not None:
        # the build-only run's builds, as they are: planned, nothing built
        with stages.stage("tests-plan", Status.SETUP_ERROR):
            if absent := [r.name for r in plan.tests if r.name not in built
                          and not features.missing_for(r.requires, kernel.features)]:
                raise prebuilt.PrebuiltError(
                    f"test(s) {', '.join(absent)}: not built by the build-only run",
                    fix="build the cell's tests where its kernel is built: harness run "
                        "--cell CELL --build-only")
            planned, units = _guest_plan(plan, built, repeat, record_map)
    else:
        with stages.stage("selftests-build", Status.BUILD_ERROR):
            built = {**kernel.tree_tests, **_build_tests_of(
                plan.tests, kernel.features, BuildContext(
                    kernel=kernel.image, log_dir=logs, kselftest=kernel.kselftest,
                    bpftool=kernel.bpftool),
                from_tree=False)}
            planned, units = _guest_plan(plan, built, repeat, record_map)
    return TestPlan(planned=tuple(planned), skipped=skipped, built=dict(built), units=units)


def _guest_plan(plan: CellPlan, built: Mapping[str, Path], repeat: int | None,
                record_map: bool = False
                ) -> tuple[list[protocol.GuestTest], dict[str, affected.Unit]]:
    """Each built test's guest commands, as many attempts as asked; for a map, each
    check of a test alone (and its frame), and what unit of the map each command is."""
    planned: list[protocol.GuestTest] = []
    units: dict[str, affected.Unit] = {}
    for ref in plan.tests:
        if ref.name in built:
            commands = testkinds.kind_of(ref).plan(ref, built[ref.name])
            if record_map:
                for t, unit in affected.plan_units(ref, commands):
                    planned.append(t)
                    units[t.name] = unit
                continue
            times = repeat or (ref.manifest.repeat if ref.manifest is not None else 1)
            planned += attempts.expand(commands, times)
    return planned, units


def _affected(cell: Cell, plan: CellPlan, kernel: BuiltKernel, stages: StageLog,
              facts: CellFacts) -> CellPlan:
    """--affected: the plan's tests narrowed to what the map says the change (the tree's
    last commit) can affect; every test whole when the map cannot say."""
    with stages.stage("affected", Status.SETUP_ERROR):
        tree = kernel.tree
        if tree is None:
            raise affected.MapError("--affected maps a change of a kernel tree; an image has "
                                    "none", fix="use a debian: or git: kernel")
        diff, blobs = affected.change_of(tree.path, kernel.head)
        found, missing = affected.load(cell)
        current = {t: tuple(c.name for c in table)
                   for t, table in affected.tables_of(plan.tests).items()}
        decision = judge_affected.decide(found, judge_affected.changed_lines(diff), blobs,
                                         [r.name for r in plan.tests], missing=missing,
                                         current=current)
        refs, told = affected.narrow(plan.tests, decision, found)
        facts.affected = told
    log.info("[%s] --affected: %s", cell.name, "; ".join(
        f"{t.test}: {t.ran}" + (f" ({', '.join(t.checks)})" if t.checks else "")
        for t in told.tests) + (f" (every test: {told.fallback})" if told.fallback else ""))
    return replace(plan, tests=refs)


def _record_map(cell: Cell, plan: CellPlan, kernel: BuiltKernel, tests: TestPlan, logs: Path,
                stages: StageLog, facts: CellFacts) -> None:
    """--map: which kernel functions each check reached, from its counters; a map that
    cannot be made is said in the results (the run's tests stand)."""
    tree = kernel.tree
    try:
        with stages.stage("map", Status.SETUP_ERROR):
            if tree is None:
                raise affected.MapError("--map needs a kernel built from a tree here")
            m, path = affected.record(
                cell, tests.units, facts.tests, tables=affected.tables_of(plan.tests),
                image=kernel.image, tree=tree.path, head=kernel.head,
                build_dir=tree.build_dir, logs=logs, base=tree.base_commit)
        log.info("[%s] map of %d test(s) over %d file(s) stored in %s", cell.name,
                 len(m.tests), len(m.files), path)
    except HarnessError as exc:
        facts.map_error = str(exc)


def _boot_and_test(cell: Cell, kernel: KernelImage, planned: tuple[protocol.GuestTest, ...],
                   skipped: tuple[TestResult, ...], logs: Path, stages: StageLog,
                   options: RunOptions,
                   accel_request: Accel) -> Generator[Known, None, BootOutcome]:
    """Boot once (twice when the first never reached the runner and did not panic); the
    results, after the harness's own skips, are known as each boot ends."""
    with stages.stage("accel", Status.BOOT_ERROR):
        accel, why = vm.choose_accel(accel_request, kernel.boot_image, arch=kernel.arch,
                                     log_path=logs / "kvm-probe.log")
    chosen = f"{accel.value} ({why})"
    yield Known(accel=chosen)
    retries: tuple[str, ...] = ()
    earlier: list[Splat] = []
    for attempt in (1, 2):
        guest_dir = logs / "guest" if attempt == 1 else logs / f"guest-{attempt}"
        name = "boot+tests" if attempt == 1 else f"boot+tests (attempt {attempt})"
        with stages.stage(name, Status.BOOT_ERROR):
            got, guest = _one_boot(cell, kernel, accel, list(planned), guest_dir,
                                   fail_fast=options.fail_fast, host_root=options.host_root)
            yield Known(guest_root=guest)
            boot = got[0]
            # the kernel's boot to the runner, the tests; "other": QEMU's start, shutdown
            stages.parts((("boot", round(boot.duration_s, 2)),
                          ("tests", round(sum(t.duration_s for t in got[1:]), 2))))
            if earlier:
                boot = replace(boot, splats=(*earlier, *boot.splats))
                got[0] = boot
            yield Known(tests=(*skipped, *got))
            if boot.status is Status.BOOT_ERROR:
                # A kernel that died or hung (a panic, a stall it reported, a boot ended
                # for saying nothing) is not booted again: only a failure of the
                # environment (QEMU, the host) may pass on a second boot. The splats are
                # the boot result's, shown with it.
                kernel_failed = any(s.kind in KERNEL_HANGS and not s.expected
                                    for s in boot.splats)
                if attempt > 1 or kernel_failed or not options.retry_boot:
                    raise vm.BootError(boot.reason, log=guest_dir / "console.log")
        if boot.status is not Status.BOOT_ERROR:
            return BootOutcome(results=tuple(got), accel=chosen, retries=retries)
        # A guest that never reached the runner for the environment's reason gets one
        # more boot; what its kernel printed still counts.
        stages.stages[-1] = replace(stages.stages[-1], status=Status.BOOT_ERROR,
                                    detail=boot.reason)
        retry = f"boot: {boot.reason}; booted again"
        retries = (*retries, retry)
        yield Known(retry=retry)
        log.warning("[%s] %s; booting once more", cell.name, boot.reason)
        earlier = [replace(s, where="first boot (failed; booted again)") for s in boot.splats]
    raise AssertionError("the second attempt returns or raises")  # pragma: no cover


# What --retry-failed runs again: a failure or a timeout may be the test's luck. A crash
# is the kernel's (a splat, a taint) and stays what it is.
RETRIED = (Status.FAIL, Status.TIMEOUT)


def _retry_failed(cell: Cell, kernel: KernelImage, planned: tuple[protocol.GuestTest, ...],
                  skipped: tuple[TestResult, ...], boot: BootOutcome, logs: Path,
                  stages: StageLog, retries: int, explained: frozenset[str],
                  host_root: bool = False) -> Generator[Known, None, None]:
    """--retry-failed N: the tests that failed run again in N fresh boots of the same
    kernel (the guest's command line carries harness.retry=K, so a test can tell). One
    that passes in any is FLAKY, its reason counting the boots it failed in: a rate
    measured over independent boots, not attempts in one. One that fails in every boot
    keeps its status, its reason saying so.

    Only a test's own failures are retried (the kernel's boot, set-up and shutdown are
    not), and none the expectations already explain (`explained`: declared failures and
    flakes, judged as declared). A retry boot counts only when its runner started; what
    the kernel said at a retry boot's start, set-up or end stays in the results as that
    boot's own result, and a test that passed while the kernel complained did not pass."""
    failed = {t.name: t for t in boot.results if t.status in RETRIED
              and t.phase is Phase.TEST and t.name not in explained}
    again = tuple(t for t in planned if attempts.base_name(t.name) in failed)
    if not again:
        return
    passed = dict.fromkeys(failed, 0)
    counted = 0
    kernel_said: list[TestResult] = []
    with stages.stage("retry-failed", Status.BOOT_ERROR):
        for k in range(1, retries + 1):
            log.info("[%s] retry %d/%d of %s in a fresh boot", cell.name, k, retries,
                     ", ".join(failed))
            rerun = replace(cell, guest=replace(
                cell.guest, append=f"{cell.guest.append} harness.retry={k}".strip()))
            got, _ = _one_boot(rerun, kernel, Accel(boot.accel.split()[0]), list(again),
                               logs / f"guest-retry-{k}", host_root=host_root)
            kernel_said += [replace(r, name=f"{r.name} (retry {k})") for r in got
                            if r.phase is not Phase.TEST
                            and (r.status is not Status.PASS or r.splats)]
            if got[0].status is Status.BOOT_ERROR:
                continue  # the test never ran: this boot tells nothing about it
            counted += 1
            for res in got:
                if (res.name in passed and res.status is Status.PASS and not res.splats
                        and not res.taint):
                    passed[res.name] += 1
    boots = counted + 1
    updated = []
    for res in boot.results:
        if res.name not in failed:
            updated.append(res)
        elif passed[res.name]:
            first = f"{res.status.value}: {res.reason}" if res.reason else res.status.value
            updated.append(replace(res, status=Status.FLAKY, reason=(
                f"flaky: failed in {boots - passed[res.name]} of {boots} fresh boots "
                f"(the first: {first})")))
        elif counted:
            again_too = f"failed again in {counted} more fresh boot(s): not flaky"
            updated.append(replace(res, reason=f"{res.reason}; {again_too}" if res.reason
                                   else again_too))
        else:
            updated.append(replace(res, notes=(*res.notes, "no retry boot reached the "
                                               "runner: flakiness not measured")))
    yield Known(tests=(*skipped, *updated, *kernel_said))


def _one_boot(cell: Cell, kernel: KernelImage, accel: Accel,
              planned: list[protocol.GuestTest], guest_dir: Path, *,
              fail_fast: bool = False,
              host_root: bool = False) -> tuple[list[TestResult], vm.GuestRun]:
    guest_dir.mkdir(parents=True, exist_ok=True)
    plan_file = guest_dir / "plan.tsv"
    protocol.write_plan(planned, plan_file)
    timeout = BOOT_ALLOWANCE_S + sum(t.timeout_s + PER_TEST_ALLOWANCE_S for t in planned)
    console = guest_dir / "console.log"
    boot = vm.Boot(kernel=kernel, accel=accel, guest=cell.guest, rwdirs=(guest_dir,),
                   shared=(protocol.RUNNER.parent, *(t.cwd for t in planned)),
                   host_root=host_root)
    guest = vm.run_guest(boot, command=protocol.runner_argv(guest_dir, plan_file,
                                                            fail_fast=fail_fast,
                                                            gcov=cell.coverage),
                         timeout=timeout, console_log=console, quiet=BOOT_WATCH)

    def read(name: str) -> str:
        path = guest_dir / name
        return protocol.read_bounded(path) if path.exists() else ""

    record = outcome.BootRecord(
        status_text=read("status.tsv"), info_text=read("guest-info.tsv"),
        outputs={t.name: read(f"{t.name}.out") for t in planned
                 if (guest_dir / f"{t.name}.out").exists()},
        # Result files a test wrote next to its output (test_progs -J), bounded like logs.
        artifacts={t.name: read(f"{t.name}.json") for t in planned
                   if (guest_dir / f"{t.name}.json").exists()
                   and (guest_dir / f"{t.name}.json").stat().st_size <= protocol.LOG_READ_CAP},
        dmesg=read("dmesg.txt"), console=read("console.log"),
        runner_done=(guest_dir / "runner-done").exists(),
        vm_timed_out=guest.timed_out, vm_exit=guest.returncode,
        vm_stopped_by=guest.stopped_by)
    final = []
    shown = {t.name for t in planned if t.show_output}
    for res in outcome.evaluate(planned, record):
        if res.name in shown and res.name in record.outputs:
            lines = record.outputs[res.name].splitlines()
            res = replace(res, output_tail=tuple(lines[-OUTPUT_SHOWN:]), output_lines=len(lines))
        res = _with_metrics(res, guest_dir / f"{res.name}.metrics.json")
        final.append(replace(res, splats=tuple(decode.decoded(s, kernel) for s in res.splats),
                             log=guest_dir / res.log if res.log and
                             (guest_dir / res.log).exists() else None))
    if guest.removed and final:
        # the guest's tests planted links or special files in the results: removed before
        # anything was read (isolation.sanitize); said on the boot's result
        final[0] = replace(final[0], notes=(*final[0].notes, (
            f"the guest left {len(guest.removed)} entr(y/ies) in its results directory that "
            "are not regular files, removed before reading: " + "; ".join(
                f"{r.path} ({r.what})" for r in guest.removed[:10]))))
    return attempts.fold(final), guest


def _with_metrics(res: TestResult, file: Path) -> TestResult:
    """The result with what the test wrote to $HARNESS_METRICS, or why that was not read."""
    if not file.exists():
        return res
    if file.stat().st_size > MAX_METRICS_BYTES:
        return replace(res, metrics_error=f"{file.name}: {file.stat().st_size} bytes, over "
                                          f"the {MAX_METRICS_BYTES}-byte limit: not read")
    try:
        return replace(res, metrics=results.metrics_of(json.loads(file.read_text())))
    except ValueError as exc:
        return replace(res, metrics_error=f"{file.name}: {exc}")


OUTPUT_SHOWN = 30  # lines of a command's output kept in its result and shown

# A boot that makes no progress before the runner is ready (silent, or the kernel
# reporting a stall) is ended then, not at the VM's timeout; once the runner has started,
# each test has its own timeout (a silent test is not a hang).
# What a boot that never reached the runner said, that makes it the kernel's failure
KERNEL_HANGS = frozenset({"PANIC", "BOOT_HANG", "RCU_STALL", "SOFT_LOCKUP", "HUNG_TASK"})
BOOT_WATCH = proc.Quiet(seconds=vm.BOOT_SILENCE_S, until=protocol.READY, stop=splat.STALLS)


def describe(cell: Cell) -> str:
    """What a cell builds, in a few words (what a cache entry was last used for)."""
    extras = [f"series {'+'.join(cell.series)}" if cell.series else "",
              f"{len(cell.patches)} patch(es)" if cell.patches else "",
              f"config {'+'.join(cell.configs)}",
              target.label(cell.arch, cell.toolchain)]
    return " + ".join(e for e in [cell.kernel, *extras] if e)


def cell_argv(cell: Cell, accel: Accel) -> list[str]:
    """The harness command line that reruns exactly this cell."""
    argv = ["run", "--kernel", cell.kernel]
    for s in cell.series:
        argv += ["--series", s]
    for c in cell.configs:
        argv += ["--config", c]
    for t in cell.tests:
        argv += ["--test", t]
    for p in cell.patches:
        argv += ["--patch", p]
    if cell.boot_only:
        argv.append("--boot-only")
    if cell.guest.append:
        argv += ["--append", cell.guest.append]
    if cell.guest.memory != GuestSpec.memory:
        argv += ["--memory", cell.guest.memory]
    if cell.guest.cpus != GuestSpec.cpus:
        argv += ["--cpus", str(cell.guest.cpus)]
    if cell.arch != Cell.arch:
        argv += ["--arch", cell.arch]
    if cell.toolchain != Cell.toolchain:
        argv += ["--toolchain", cell.toolchain]
    if cell.affected:
        argv.append("--affected")
    if cell.record_map:
        argv.append("--map")
    argv += ["--accel", accel.value]
    if cell.command:
        argv += ["--cwd", cell.command_cwd, "--timeout", str(cell.command_timeout),
                 "--", *cell.command]
    return argv
