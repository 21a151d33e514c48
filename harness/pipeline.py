"""One matrix cell, stage by stage: source, series, kconfig, build, selftests, vm, results.

Each stage is timed and recorded as it finishes, so a cell that stops early still leaves
a results entry that says which stage stopped it and why.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import build, features, kconfig, outcome, paths, proc, selftests, series, sources, vm
from .matrix import Cell
from .model import (
    Accel,
    CellResult,
    ConfigResult,
    FeatureReport,
    KernelImage,
    PatchResult,
    SourceKind,
    Splat,
    StageTiming,
    Status,
    TestResult,
    worst,
)

log = logging.getLogger(__name__)

BOOT_ALLOWANCE_S = 120  # boot + runner start + dmesg dump + power-off, TCG, generous
GUEST_MEMORY = "2G"
GUEST_CPUS = 2


class StageFailedError(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class CellRun:
    """Mutable while the cell runs; frozen into a CellResult at the end."""

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

    @contextmanager
    def stage(self, name: str, error_status: Status) -> Iterator[None]:
        start = time.monotonic()
        log.info("[%s] %s", self.cell.name, name)
        try:
            yield
        except StageFailedError as exc:
            self.stages.append(StageTiming(stage=name, status=exc.status,
                                           duration_s=time.monotonic() - start,
                                           detail=str(exc)))
            raise
        except (sources.SourceError, series.SeriesError, kconfig.ConfigError,
                build.BuildError, selftests.SelftestError, vm.BootError, proc.CommandError,
                proc.ToolMissingError, series.PatchConflictError,
                features.FeatureError) as exc:
            status = error_status
            if isinstance(exc, series.PatchConflictError):
                self.patches = exc.results
                status = Status.PATCH_CONFLICT
            if isinstance(exc, kconfig.ConfigError) and self.config is None:
                status = Status.CONFIG_ERROR
            self.stages.append(StageTiming(stage=name, status=status,
                                           duration_s=time.monotonic() - start,
                                           detail=str(exc)))
            raise StageFailedError(status, str(exc)) from exc
        self.stages.append(StageTiming(stage=name, status=Status.PASS,
                                       duration_s=time.monotonic() - start))

    def result(self, status: Status, error: str = "") -> CellResult:
        return CellResult(
            cell=self.cell.name, kernel=self.cell.kernel, kernel_version=self.kernel_version,
            status=status, patches=self.patches, config=self.config,
            stages=tuple(self.stages), tests=tuple(self.tests), source=self.source_describe,
            package_version=self.package_version, error=error, accel=self.accel,
            retries=tuple(self.retries), features=self.features,
        )


def run_cell(cell: Cell, out_dir: Path, *, accel: Accel) -> CellResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    run = CellRun(cell=cell, out_dir=out_dir, accel_request=accel)
    try:
        kernel, tree = _prepare_kernel(run)
        tests = _build_tests(run, kernel, tree)
        _boot_and_test(run, kernel, tests)
    except StageFailedError as exc:
        return run.result(exc.status, str(exc))
    status = worst([t.status for t in run.tests])
    return run.result(status)


def _prepare_kernel(run: CellRun) -> tuple[KernelImage, Path | None]:
    cell, logs = run.cell, run.out_dir
    with run.stage("spec", Status.SETUP_ERROR):
        spec = sources.parse_spec(cell.kernel)
    if spec.kind is SourceKind.IMAGE:
        if cell.series or cell.patches:
            with run.stage("series", Status.SETUP_ERROR):
                raise StageFailedError(Status.SETUP_ERROR,
                                       f"{spec.text} is a prebuilt image: it cannot take "
                                       "patches; drop --series/--patch or use debian:/git:")
        with run.stage("image", Status.SETUP_ERROR):
            kernel = build.image_from_file(Path(spec.value))
        run.kernel_version = kernel.version
        run.source_describe = f"prebuilt image {spec.value}"
        with run.stage("features", Status.SETUP_ERROR):
            funcs = _btf_funcs(run, kernel)
            run.features = features.from_btf_only(features.known_features(), funcs)
        return kernel, None
    with run.stage("source", Status.SETUP_ERROR):
        source = sources.prepare(spec, log_dir=logs)
        # Our fragments are checked now; the tree's own (tree:PATH) once the series is in.
        for c in cell.configs:
            if not kconfig.is_tree_fragment(c):
                kconfig.resolve_fragment(c)
        tree = sources.worktree(source, kconfig.config_slug(cell.configs), log_dir=logs)
        build_dir = paths.sub("build") / tree.name
        run.source_describe = source.describe
        run.package_version = source.package_version
        extras = []
        for extra in cell.patches:
            path = Path(extra)
            if not path.is_absolute():
                path = (paths.repo_root() / path) if (paths.repo_root() / path).exists() \
                    else path.resolve()
            extras.append(path)
        patch_list = series.collect(cell.series, extras, series.base_name(spec))
    # One lock from checkout to the end of the build: no other run moves this tree meanwhile.
    with sources.locked(f"tree-{tree.name}", wait_message=f"using {tree}"):
        with run.stage("series", Status.PATCH_CONFLICT):
            known = features.known_features()
            base_defs = features.source_definitions(source.repo, source.base_commit, known)
            provided = features.series_in_base(
                {name: series.series_dir(name) for name in cell.series}, base_defs)
            run.patches = series.apply(tree, source.base_commit, patch_list, log_dir=logs,
                                       in_base=provided)
            head_defs = features.source_definitions(tree, "HEAD", known)
            run.features = features.from_sources(known, base_defs, head_defs)
        with run.stage("kconfig", Status.CONFIG_ERROR):
            tree_id = sources.git(tree, "rev-parse", "HEAD^{tree}", what="git rev-parse").strip()
            fragments = [kconfig.resolve_fragment(c, tree) for c in cell.configs]
            lenient = [f for c, f in zip(cell.configs, fragments, strict=True)
                       if kconfig.is_tree_fragment(c)]
            run.config = kconfig.configure(tree, tree_id, build_dir, fragments, log_dir=logs,
                                           lenient=lenient)
        with run.stage("build", Status.BUILD_ERROR):
            kernel = build.build(tree, build_dir, log_dir=logs, tools=build.toolchain())
        run.kernel_version = kernel.version
        funcs = _btf_funcs(run, kernel)
        if funcs is not None:
            run.features = features.confirm_with_btf(run.features, funcs)
        if kernel.config is not None:
            (logs / "config").write_bytes(kernel.config.read_bytes())
        # kselftests build from the same tree state: still under the lock.
        with run.stage("kselftests-build", Status.BUILD_ERROR):
            run_kselftest_builds(run, tree, build_dir, kernel)
    return kernel, tree


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


def run_kselftest_builds(run: CellRun, tree: Path, build_dir: Path,
                         kernel: KernelImage) -> None:
    """The tests that build from the kernel tree itself (kselftest:, test_progs:)."""
    for text in run.cell.tests:
        ref = selftests.resolve(text)
        if ref.kind == "kselftest":
            run.kselftest_dirs[ref.target] = selftests.build_kselftest(
                ref.target, tree, build_dir, log_dir=run.out_dir)
        elif ref.kind == "test_progs" and "test_progs:" not in run.kselftest_dirs:
            names = tuple(selftests.resolve(t).target for t in run.cell.tests
                          if t.startswith("test_progs:"))
            run.kselftest_dirs["test_progs:"] = selftests.build_test_progs(
                tree, build_dir, kernel, names, log_dir=run.out_dir)


def _build_tests(run: CellRun, kernel: KernelImage,
                 tree: Path | None) -> list[selftests.GuestTest]:
    planned: list[selftests.GuestTest] = []
    with run.stage("selftests-build", Status.BUILD_ERROR):
        for text in run.cell.tests:
            ref = selftests.resolve(text)
            if ref.kind == "own":
                assert ref.manifest is not None
                built = selftests.build_own(ref.manifest, kernel, log_dir=run.out_dir)
                planned.append(selftests.plan_own(ref.manifest, built))
            elif ref.kind == "test_progs":
                if "test_progs:" not in run.kselftest_dirs:
                    raise selftests.SelftestError(
                        f"{text} needs a kernel source tree; {run.cell.kernel} has none")
                planned.append(selftests.plan_test_progs(ref, run.kselftest_dirs["test_progs:"]))
            else:
                if tree is None or ref.target not in run.kselftest_dirs:
                    raise selftests.SelftestError(
                        f"{text} needs a kernel source tree; {run.cell.kernel} has none")
                # Not re-read from the tree: another run may have moved it since.
                planned.extend(selftests.plan_kselftest(ref, run.kselftest_dirs[ref.target]))
    return planned


def _boot_and_test(run: CellRun, kernel: KernelImage,
                   planned: list[selftests.GuestTest]) -> None:
    with run.stage("accel", Status.BOOT_ERROR):
        accel, why = vm.choose_accel(run.accel_request, kernel.bzimage,
                                     log_path=run.out_dir / "kvm-probe.log")
        run.accel = f"{accel.value} ({why})"
    if not planned:
        log.warning("[%s] no tests planned; booting only to check the kernel comes up",
                    run.cell.name)
    for attempt in (1, 2):
        guest_dir = run.out_dir / "guest" if attempt == 1 else run.out_dir / f"guest-{attempt}"
        results, boot_error = _one_boot(run, kernel, accel, planned, guest_dir)
        if boot_error and attempt == 1:
            # A guest that never reached the runner (and did not panic) gets one more boot.
            run.retries.append(f"boot: {boot_error}; booted again")
            log.warning("[%s] %s; booting once more", run.cell.name, boot_error)
            continue
        if boot_error:
            raise StageFailedError(Status.BOOT_ERROR, boot_error)
        break
    run.tests = results


def _one_boot(run: CellRun, kernel: KernelImage, accel: Accel,
              planned: list[selftests.GuestTest],
              guest_dir: Path) -> tuple[list[TestResult], str]:
    guest_dir.mkdir(parents=True, exist_ok=True)
    plan_file = guest_dir / "plan.tsv"
    selftests.write_plan(planned, plan_file)
    runner = paths.repo_root() / "harness" / "guest" / "runner.sh"
    timeout = BOOT_ALLOWANCE_S + sum(t.timeout_s + 15 for t in planned)
    console = guest_dir / "console.log"
    start = time.monotonic()
    guest = vm.run_guest(kernel, accel, rwdirs=[guest_dir],
                         command=["/bin/sh", str(runner), str(guest_dir), str(plan_file)],
                         timeout=timeout, console_log=console, memory=GUEST_MEMORY,
                         cpus=GUEST_CPUS)
    run.stages.append(StageTiming(stage="boot+tests", status=Status.PASS,
                                  duration_s=time.monotonic() - start,
                                  detail=vm.shell_join(guest.argv)))
    console_text = console.read_text(errors="replace") if console.exists() else ""
    info = guest_dir / "guest-info.tsv"
    if not info.exists():
        if "Kernel panic" in console_text:
            panic = next(ln for ln in console_text.splitlines() if "Kernel panic" in ln)
            raise StageFailedError(Status.BOOT_ERROR,
                                   f"kernel panicked during boot: {panic.strip()} "
                                   f"(console: {console})")
        why = "timed out" if guest.timed_out else f"exited {guest.returncode}"
        return [], (f"the guest never started the test runner (vng {why} after "
                    f"{guest.duration_s:.0f}s; console: {console})")
    dmesg_file = guest_dir / "dmesg.txt"
    kernel_log = dmesg_file.read_text(errors="replace") if dmesg_file.exists() else console_text
    status_file = guest_dir / "status.tsv"
    outputs = {t.name: (guest_dir / f"{t.name}.out").read_text(errors="replace")
               for t in planned if (guest_dir / f"{t.name}.out").exists()}
    # Result files a test wrote next to its output (test_progs -J).
    artifacts = {t.name: (guest_dir / f"{t.name}.json").read_text(errors="replace")
                 for t in planned if (guest_dir / f"{t.name}.json").exists()}
    results = outcome.evaluate(
        planned,
        status_text=status_file.read_text() if status_file.exists() else "",
        outputs=outputs, kernel_log=kernel_log, vm_timed_out=guest.timed_out,
        artifacts=artifacts,
    )
    expectations = outcome.load_expectations(paths.repo_root() / "selftests" /
                                              "expectations.toml")
    results = outcome.apply_expectations(results, expectations, run.kernel_version)
    final = []
    for res in results:
        decoded = tuple(_decode(s, kernel) for s in res.splats)
        extra = dict(res.extra)
        metrics = guest_dir / f"{res.name}.metrics.json"
        if metrics.exists():
            try:
                extra["metrics"] = json.loads(metrics.read_text())
            except ValueError as exc:
                extra["metrics_error"] = f"{metrics.name}: {exc}"
        final.append(replace(res, splats=decoded, log=guest_dir / f"{res.name}.out",
                             extra=extra))
    return final, ""


def _decode(s: Splat, kernel: KernelImage) -> Splat:
    """file:line for each frame, with the tree's own scripts/decode_stacktrace.sh."""
    if kernel.vmlinux is None or kernel.source_dir is None:
        return s
    script = kernel.source_dir / "scripts" / "decode_stacktrace.sh"
    if not script.exists():
        return s
    res = proc.run([str(script), str(kernel.vmlinux), str(kernel.source_dir)],
                   stdin_data=s.text.encode(), timeout=120)
    if not res.ok:
        return replace(s, decoded=f"decode failed: {res.tail(5)}")
    # O= builds record sources as BUILD/../../work/TREE/path: show paths relative to the tree.
    tree = re.escape(kernel.source_dir.name)
    decoded = re.sub(rf"(?:/[^\s()]*)?(?:\.\./)+work/{tree}/", "", res.output)
    return replace(s, decoded=decoded)


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
    argv += ["--accel", accel.value]
    return argv


def describe_argv(argv: list[str]) -> str:
    return shlex.join(argv)
