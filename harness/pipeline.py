"""One matrix cell, stage by stage: plan, source, series, kconfig, build, selftests, boot.

Each stage is timed and recorded as it finishes, so a cell that stops early still leaves
a results entry that says which stage stopped it and why. Everything that can be
checked without building is checked first (the `plan` stage: kernel spec, test names,
config fragments, patch files). The final statuses are `verdict.judge`'s.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import (
    build,
    features,
    kconfig,
    outcome,
    paths,
    proc,
    selftests,
    series,
    sources,
    splat,
    vm,
)
from . import verdict as verdicts
from .errors import HarnessError, from_os_error
from .guest import protocol
from .matrix import Cell
from .model import (
    Accel,
    CellResult,
    ConfigResult,
    FeatureReport,
    FeatureState,
    KernelImage,
    KernelSpec,
    PatchResult,
    PatchState,
    SourceKind,
    Splat,
    StageTiming,
    Status,
    TestResult,
    worst,
)

log = logging.getLogger(__name__)

BOOT_ALLOWANCE_S = 120  # boot + runner start + dmesg dump + power-off, TCG, generous
MAX_METRICS_BYTES = 2**20  # what a test writes to $HARNESS_METRICS
GUEST_MEMORY = "2G"
GUEST_CPUS = 2


def expectations_path() -> Path:
    return paths.repo_root() / "selftests" / "expectations.toml"


class CellInterrupted(KeyboardInterrupt):
    """A signal stopped the cell; carries what it had done, for results.json."""

    def __init__(self, partial: CellResult, signal_name: str, where: str) -> None:
        super().__init__(signal_name)
        self.partial = partial
        self.where = where  # the stage it stopped in, or "after STAGE" between two


@dataclass
class CellRun:
    """Mutable while the cell runs; judged and frozen into a CellResult at the end."""

    cell: Cell
    out_dir: Path
    accel_request: Accel
    stages: list[StageTiming] = field(default_factory=list)
    patches: tuple[PatchResult, ...] = ()
    config: ConfigResult | None = None
    tests: list[TestResult] = field(default_factory=list)
    kernel_version: str = ""
    source_describe: str = ""
    package_version: str | None = None
    accel: str = ""
    retries: list[str] = field(default_factory=list)
    # kselftest target -> its installed directory, decided while the tree was locked
    kselftest_dirs: dict[str, Path] = field(default_factory=dict)
    features: tuple[FeatureReport, ...] = ()
    current_stage: str = ""  # the stage running now, "" between stages
    image: str = ""

    @contextmanager
    def stage(self, name: str, error_status: Status) -> Iterator[None]:
        start = time.monotonic()
        self.current_stage = name
        log.info("[%s] %s", self.cell.name, name)
        try:
            yield
        except HarnessError as exc:
            if exc.status is None:
                exc.status = error_status
            if isinstance(exc, series.PatchConflictError):
                self.patches = exc.results
            self._record(name, exc.status, start, str(exc))
            raise
        except OSError as exc:
            problem = from_os_error(exc, f"[{name}]")
            self._record(name, Status.SETUP_ERROR, start, str(problem))
            raise problem from exc
        except KeyboardInterrupt:
            self._record(name, Status.INTERRUPTED, start, "interrupted by a signal")
            raise
        self._record(name, Status.PASS, start)
        self.current_stage = ""

    def _record(self, name: str, status: Status, start: float, detail: str = "") -> None:
        self.stages.append(StageTiming(stage=name, status=status,
                                       duration_s=time.monotonic() - start, detail=detail))

    def result(self, verdict: verdicts.CellVerdict) -> CellResult:
        return CellResult(
            cell=self.cell.name, kernel=self.cell.kernel, kernel_version=self.kernel_version,
            status=verdict.status, patches=self.patches, config=self.config,
            stages=tuple(self.stages), tests=verdict.results, source=self.source_describe,
            package_version=self.package_version, error=verdict.error, accel=self.accel,
            retries=tuple(self.retries), features=self.features, notes=verdict.notes,
            boot_only=self.cell.boot_only, image=self.image,
        )


@dataclass(frozen=True, kw_only=True)
class CellPlan:
    """What the cell will do, all checked before anything is imported or built."""

    spec: KernelSpec
    tests: tuple[selftests.TestRef, ...]
    patches: tuple[series.Patch, ...]  # every series' files, then --patch files: checked


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    strict: bool = False  # an unexpected pass fails the cell
    fail_fast: bool = False  # no test runs after one that made the kernel die
    timeouts: Mapping[str, int] = field(default_factory=dict)  # by test name, seconds (lower)
    retry_boot: bool = True  # a first boot that never reached the runner gets a second


def run_cell(cell: Cell, out_dir: Path, *, accel: Accel,
             options: RunOptions = RunOptions()) -> CellResult:
    """One cell, judged."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run = CellRun(cell=cell, out_dir=out_dir, accel_request=accel)
    rules = verdicts.CellRules(expect_status=Status(cell.expect_status)
                               if cell.expect_status else None,
                               expect=cell.expect_map, boot_only=cell.boot_only,
                               strict=options.strict)
    stage_error: Status | None = None
    error = ""
    try:
        expectations = verdicts.load_expectations(expectations_path())
        plan = _plan(run)
        kernel = _prepare_kernel(run, plan)
        planned = [replace(t, timeout_s=min(t.timeout_s, options.timeouts.get(t.name,
                                                                               t.timeout_s)))
                   for t in _build_tests(run, kernel, plan)]
        _boot_and_test(run, kernel, planned, options)
    except HarnessError as exc:
        stage_error = exc.status or Status.SETUP_ERROR
        error = str(exc)
        expectations = verdicts.Expectations()
    except KeyboardInterrupt as exc:
        where = run.current_stage or (f"after {run.stages[-1].stage}" if run.stages else
                                      "before the first stage")
        partial = run.result(verdicts.CellVerdict(
            results=tuple(run.tests), status=Status.INTERRUPTED,
            error=f"interrupted by {exc or 'a signal'} ({where})"))
        raise CellInterrupted(partial, str(exc), where) from exc
    judged = verdicts.judge(run.tests, kernel_version=run.kernel_version,
                            expectations=expectations, rules=rules, stage_error=stage_error,
                            error=error)
    return run.result(judged)


@contextmanager
def _collected(problems: list[HarnessError]) -> Iterator[None]:
    try:
        yield
    except HarnessError as exc:
        problems.append(exc)


def _plan(run: CellRun) -> CellPlan:
    """Everything that can be wrong with the request, found before the expensive work, and
    told all at once (a typo in a test name and a bad fragment line: both)."""
    cell = run.cell
    problems: list[HarnessError] = []
    with run.stage("plan", Status.SETUP_ERROR):
        spec: KernelSpec | None = None
        with _collected(problems):
            spec = sources.parse_spec(cell.kernel)
        found: list[selftests.TestRef] = []
        for text in cell.tests:
            with _collected(problems):
                found.append(selftests.resolve(text))
        refs = tuple(found)
        names = [r.name for r in refs]
        if dups := sorted({n for n in names if names.count(n) > 1}):
            problems.append(selftests.SelftestError(
                f"tests named twice: {', '.join(dups)}", fix="name each test once",
                status=Status.SETUP_ERROR))
        known: set[str] = set()
        with _collected(problems):
            known = {f.name for f in features.known_features()}
        for ref in refs:
            if unknown := [r for r in ref.requires if r not in known]:
                problems.append(selftests.SelftestError(
                    f"test {ref.name} requires unknown feature(s) {', '.join(unknown)}",
                    fix=f"use the names the feature probe knows: {', '.join(sorted(known))} "
                        "(or declare them in a series' provides.toml)",
                    status=Status.SETUP_ERROR))
        for c in cell.configs:
            if not kconfig.is_tree_fragment(c):
                with _collected(problems):
                    kconfig.check_fragment(kconfig.resolve_fragment(c), c)
        patches: tuple[series.Patch, ...] = ()
        if spec is not None and spec.kind is SourceKind.IMAGE:
            if cell.series or cell.patches:
                problems.append(sources.SourceError(
                    f"{spec.text} is a prebuilt image: it cannot take patches",
                    fix="drop --series/--patch, or use debian:/git:"))
            if bad := [r.name for r in refs if r.kind != "own"]:
                problems.append(selftests.SelftestError(
                    f"{', '.join(bad)} need(s) a kernel source tree; {spec.text} has none",
                    fix="use a debian:/git: kernel for tests built from the tree",
                    status=Status.SETUP_ERROR))
        elif spec is not None:
            # Reads and checks every patch file of the series (not yet the tree).
            with _collected(problems):
                patches = tuple(series.collect(cell.series,
                                               [_patch_path(p) for p in cell.patches],
                                               series.base_name(spec)))
        if len(problems) == 1:
            raise problems[0]
        if problems:
            raise HarnessError(
                f"{len(problems)} problems, found before anything was built:\n" + "\n".join(
                    "  " + str(p).replace("\n", "\n    ") for p in problems),
                status=worst([p.status or Status.SETUP_ERROR for p in problems]))
    assert spec is not None
    return CellPlan(spec=spec, tests=refs, patches=patches)


def _patch_path(text: str) -> Path:
    path = Path(text)
    if not path.is_absolute():
        in_repo = paths.repo_root() / path
        path = in_repo if in_repo.exists() else path.resolve()
    return path


def _prepare_kernel(run: CellRun, plan: CellPlan) -> KernelImage:
    cell, logs, spec = run.cell, run.out_dir, plan.spec
    if spec.kind is SourceKind.IMAGE:
        with run.stage("image", Status.SETUP_ERROR):
            kernel = build.image_from_file(Path(spec.value))
        run.kernel_version = kernel.version
        run.source_describe = f"prebuilt image {spec.value}"
        with run.stage("features", Status.SETUP_ERROR):
            funcs = _btf_funcs(run, kernel)
            run.features = features.from_btf_only(features.known_features(), funcs)
        return kernel
    with run.stage("source", Status.SETUP_ERROR):
        source = sources.prepare(spec, log_dir=logs)
        tree = sources.worktree(source, kconfig.config_slug(cell.configs), log_dir=logs)
        build_dir = paths.sub("build") / tree.name
        run.source_describe = source.describe
        run.package_version = source.package_version
    # One lock from checkout to the end of the build: no other run moves this tree meanwhile.
    with sources.locked(f"tree-{tree.name}", wait_message=f"using {tree}"):
        with run.stage("series", Status.PATCH_CONFLICT):
            known = features.known_features()
            base_defs = features.source_definitions(source.repo, source.base_commit, known)
            provided = features.series_in_base(
                {name: series.series_dir(name) for name in cell.series}, base_defs)
            run.patches = series.apply(tree, source.base_commit, list(plan.patches),
                                       log_dir=logs, in_base=provided)
            head_defs = features.definitions_after(tree, source.base_commit, base_defs, "HEAD",
                                                   known)
            run.features = features.from_sources(known, base_defs, head_defs)
            # Tests and fragments from the tree itself: checked now, before any build.
            for ref in plan.tests:
                selftests.check_in_tree(ref, tree)
        with run.stage("kconfig", Status.CONFIG_ERROR):
            fragments = [kconfig.resolve_fragment(c, tree) for c in cell.configs]
            lenient = [f for c, f in zip(cell.configs, fragments, strict=True)
                       if kconfig.is_tree_fragment(c)]
            run.config = kconfig.configure(tree, build_dir, fragments, log_dir=logs,
                                           lenient=lenient)
        with run.stage("build", Status.BUILD_ERROR):
            kernel = build.build(tree, build_dir, log_dir=logs, tools=build.toolchain())
        run.kernel_version = kernel.version
        funcs = _btf_funcs(run, kernel)
        if funcs is not None:
            run.features = features.confirm_with_btf(run.features, funcs)
            with run.stage("features", Status.BUILD_ERROR):
                _check_declared(run, plan)
        if kernel.config is not None:
            (logs / "config").write_bytes(kernel.config.read_bytes())
        # kselftests build from the same tree state: still under the lock.
        with run.stage("kselftests-build", Status.BUILD_ERROR):
            _build_tree_tests(run, plan, tree, build_dir, kernel)
    return kernel


def _check_declared(run: CellRun, plan: CellPlan) -> None:
    """What a series applied here says it adds must be in the built kernel: otherwise the
    tests that need it would be skipped and the cell could pass on a kernel without it."""
    applied = {p.series for p, r in zip(plan.patches, run.patches, strict=False)
               if r.state is PatchState.APPLIED}
    lacking = features.declared_but_absent(run.features, applied)
    if lacking:
        raise build.BuildError(
            "the built kernel lacks what its series declare (patches/*/provides.toml):\n"
            + "\n".join(f"  {r.feature.label} of {', '.join(r.feature.declared_by)}: {r.note}"
                        for r in lacking),
            run.out_dir / "config",
            fix="check that the series still defines and registers them, and that the "
                "config enables the code they are in")


def _btf_funcs(run: CellRun, kernel: KernelImage) -> frozenset[str] | None:
    """The kernel's BTF FUNCs for the feature report; None when there is none to read."""
    if kernel.vmlinux is None:
        return None
    try:
        return features.btf_funcs(kernel.vmlinux)
    except (proc.CommandError, proc.ToolMissingError) as exc:
        # Not a reason to stop the cell: the selftests will say what BTF lacks.
        log.warning("[%s] cannot read the kernel's BTF: %s", run.cell.name, exc)
        run.features = tuple(replace(r, note=f"BTF unreadable, source verdict only: {exc}")
                             for r in run.features)
        return None


def _build_tree_tests(run: CellRun, plan: CellPlan, tree: Path, build_dir: Path,
                      kernel: KernelImage) -> None:
    """The tests that build from the kernel tree itself (kselftest:, test_progs:)."""
    progs = tuple(r.target for r in plan.tests if r.kind == "test_progs")
    for ref in plan.tests:
        if ref.kind == "kselftest":
            run.kselftest_dirs[ref.target] = selftests.build_kselftest(
                ref.target, tree, build_dir, log_dir=run.out_dir)
    if progs:
        run.kselftest_dirs["test_progs:"] = selftests.build_test_progs(
            tree, build_dir, kernel, progs, log_dir=run.out_dir)


def missing_features(ref: selftests.TestRef,
                     reports: tuple[FeatureReport, ...]) -> list[str]:
    """What a test requires that the feature probe found absent, each with the probe's why."""
    by_name = {r.feature.name: r for r in reports}
    out = []
    for name in ref.requires:
        r = by_name.get(name)
        if r is None or r.state is FeatureState.ABSENT:
            note = f": {r.note}" if r is not None and r.note else ""
            out.append(f"{name} ({r.feature.kind.value if r else 'feature'}{note})")
    return out


def _build_tests(run: CellRun, kernel: KernelImage,
                 plan: CellPlan) -> list[protocol.GuestTest]:
    planned: list[protocol.GuestTest] = []
    with run.stage("selftests-build", Status.BUILD_ERROR):
        for ref in plan.tests:
            missing = missing_features(ref, run.features)
            if missing:
                # Not built, not booted: the kernel cannot run it.
                run.tests.append(TestResult(
                    name=ref.name, status=Status.SKIP, duration_s=0.0, exit_code=None,
                    ktap=None, reason="skipped by the harness: the kernel lacks "
                                      + ", ".join(missing)))
                continue
            if ref.kind == "own":
                assert ref.manifest is not None
                built = selftests.build_own(ref.manifest, kernel, log_dir=run.out_dir)
                planned.append(selftests.plan_own(ref.manifest, built))
            elif ref.kind == "test_progs":
                planned.append(selftests.plan_test_progs(ref, run.kselftest_dirs["test_progs:"]))
            else:
                # Not re-read from the tree: another run may have moved it since.
                planned.extend(selftests.plan_kselftest(ref, run.kselftest_dirs[ref.target]))
    return planned


def _boot_and_test(run: CellRun, kernel: KernelImage, planned: list[protocol.GuestTest],
                   options: RunOptions = RunOptions()) -> None:
    run.image = str(kernel.bzimage)
    with run.stage("accel", Status.BOOT_ERROR):
        accel, why = vm.choose_accel(run.accel_request, kernel.bzimage,
                                     log_path=run.out_dir / "kvm-probe.log")
        run.accel = f"{accel.value} ({why})"
    skipped = list(run.tests)
    earlier: list[Splat] = []
    for attempt in (1, 2):
        guest_dir = run.out_dir / "guest" if attempt == 1 else run.out_dir / f"guest-{attempt}"
        retry = False
        with run.stage("boot+tests" if attempt == 1 else f"boot+tests (attempt {attempt})",
                       Status.BOOT_ERROR):
            results = _one_boot(run, kernel, accel, planned, guest_dir,
                                fail_fast=options.fail_fast)
            boot = results[0]
            if earlier:
                boot = replace(boot, splats=(*earlier, *boot.splats))
                results[0] = boot
            run.tests = skipped + results
            if boot.status is Status.BOOT_ERROR:
                panicked = any(s.kind == "PANIC" for s in boot.splats)
                # The splats are the boot result's, shown with it.
                if attempt > 1 or panicked or not options.retry_boot:
                    raise vm.BootError(boot.reason, log=guest_dir / "console.log")
                # A guest that never reached the runner (and did not panic) gets one more
                # boot; what its kernel printed still counts.
                retry = True
                run.retries.append(f"boot: {boot.reason}; booted again")
                log.warning("[%s] %s; booting once more", run.cell.name, boot.reason)
                earlier = [replace(s, where="first boot (failed; booted again)")
                           for s in boot.splats]
        if not retry:
            break
        run.stages[-1] = replace(run.stages[-1], status=Status.BOOT_ERROR, detail=boot.reason)


def _one_boot(run: CellRun, kernel: KernelImage, accel: Accel,
              planned: list[protocol.GuestTest], guest_dir: Path, *,
              fail_fast: bool = False) -> list[TestResult]:
    guest_dir.mkdir(parents=True, exist_ok=True)
    plan_file = guest_dir / "plan.tsv"
    protocol.write_plan(planned, plan_file)
    timeout = BOOT_ALLOWANCE_S + sum(t.timeout_s + 15 for t in planned)
    console = guest_dir / "console.log"
    guest = vm.run_guest(kernel, accel, rwdirs=[guest_dir],
                         command=protocol.runner_argv(guest_dir, plan_file,
                                                      fail_fast=fail_fast),
                         timeout=timeout, console_log=console, memory=GUEST_MEMORY,
                         cpus=GUEST_CPUS, append=run.cell.append)

    def read(name: str) -> str:
        path = guest_dir / name
        return read_bounded(path) if path.exists() else ""

    record = outcome.BootRecord(
        status_text=read("status.tsv"), info_text=read("guest-info.tsv"),
        outputs={t.name: read(f"{t.name}.out") for t in planned
                 if (guest_dir / f"{t.name}.out").exists()},
        # Result files a test wrote next to its output (test_progs -J), bounded like logs.
        artifacts={t.name: read(f"{t.name}.json") for t in planned
                   if (guest_dir / f"{t.name}.json").exists()
                   and (guest_dir / f"{t.name}.json").stat().st_size <= LOG_READ_CAP},
        dmesg=read("dmesg.txt"), console=read("console.log"),
        runner_done=(guest_dir / "runner-done").exists(),
        vm_timed_out=guest.timed_out, vm_exit=guest.returncode)
    final = []
    for res in outcome.evaluate(planned, record):
        extra = dict(res.extra)
        metrics = guest_dir / f"{res.name}.metrics.json"
        if metrics.exists() and metrics.stat().st_size > MAX_METRICS_BYTES:
            extra["metrics_error"] = (f"{metrics.name}: {metrics.stat().st_size} bytes, over "
                                      f"the {MAX_METRICS_BYTES}-byte limit: not read")
        elif metrics.exists():
            try:
                extra["metrics"] = json.loads(metrics.read_text())
            except ValueError as exc:
                extra["metrics_error"] = f"{metrics.name}: {exc}"
        final.append(replace(res, splats=tuple(_decode(s, kernel) for s in res.splats),
                             log=guest_dir / res.log if res.log and
                             (guest_dir / res.log).exists() else None, extra=extra))
    return final


LOG_READ_CAP = 32 * 2**20


def read_bounded(path: Path, cap: int = LOG_READ_CAP) -> str:
    """A guest file whole, or, past `cap` (a kernel printing in a loop fills the console),
    its first and last halves with a line that says what was left out. The boot is at the
    start, the shutdown at the end."""
    size = path.stat().st_size
    if size <= cap:
        return path.read_text(errors="replace")
    with path.open("rb") as f:
        head = f.read(cap // 2)
        f.seek(size - cap // 2)
        tail = f.read()
    return (head.decode(errors="replace")
            + f"\n[harness: {size - cap} bytes of {path.name} not read]\n"
            + tail.decode(errors="replace"))


def _decode(s: Splat, kernel: KernelImage) -> Splat:
    """file:line for each frame, with the tree's own scripts/decode_stacktrace.sh."""
    if kernel.vmlinux is None or kernel.source_dir is None or s.decoded:
        return s
    script = kernel.source_dir / "scripts" / "decode_stacktrace.sh"
    if not script.exists():
        return s
    res = proc.run([str(script), str(kernel.vmlinux), str(kernel.source_dir)],
                   stdin_data=s.text.encode(), timeout=120)
    if not res.ok:
        return replace(s, decoded=f"decode failed: {res.tail(5)}")
    return splat.relative_to_tree(replace(s, decoded=res.output), kernel.source_dir.name)


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
    if cell.append:
        argv += ["--append", cell.append]
    argv += ["--accel", accel.value]
    return argv
