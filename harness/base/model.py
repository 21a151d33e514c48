"""The domain shared by every stage: statuses, specs and results as frozen dataclasses.

Stages pass these objects forward; nothing travels between stages as a dict of strings.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class Status(enum.Enum):
    """Outcome of a test, a stage or a whole cell.

    Ordered by severity: aggregation keeps the worst (see `worst`). Stage errors
    (the set-up could not even produce something to test) outrank test outcomes.
    """

    PASS = "PASS"
    XFAIL = "XFAIL"  # failed, and the expectations file says it is expected to
    XPASS = "XPASS"  # on the expectations list but passed
    SKIP = "SKIP"  # a test: skipped (by itself, or by the harness: a feature is missing);
    # a cell: every test was skipped, so nothing was tested
    NO_TESTS = "NO_TESTS"  # a cell with no test planned: nothing was tested
    FLAKY = "FLAKY"  # a repeated test that both passed and failed (attempts.fold)
    FAIL = "FAIL"
    TIMEOUT = "TIMEOUT"
    CRASHED = "CRASHED"  # kernel splat, panic or bad taint while it ran
    # a merged run (`harness merge`): the plan expects the cell, no run holds it (its job
    # failed before uploading results?); ranked above every test outcome, below the
    # stage errors that did produce a result
    MISSING = "MISSING"
    SETUP_ERROR = "SETUP_ERROR"
    PATCH_CONFLICT = "PATCH_CONFLICT"
    CONFIG_ERROR = "CONFIG_ERROR"
    BUILD_ERROR = "BUILD_ERROR"
    BOOT_ERROR = "BOOT_ERROR"
    INTERRUPTED = "INTERRUPTED"  # the run was stopped by a signal while this cell ran

    @property
    def is_stage_error(self) -> bool:
        return self in _STAGE_ERRORS

    @property
    def exit_code(self) -> int:
        """What a cell with this status contributes to the exit status of the run:
        0 passed; 1 a test failed, crashed or timed out, nothing was tested, or a merged
        run lacks the cell's results (MISSING: a result is missing, not the environment
        failing); 2 a stage error. (A skipped test inside a cell that ran others does not
        make the cell SKIP: see `verdict.judge`.)"""
        if self.is_stage_error:
            return 2
        if self in (Status.FAIL, Status.FLAKY, Status.TIMEOUT, Status.CRASHED, Status.SKIP,
                    Status.NO_TESTS, Status.MISSING):
            return 1
        return 0


_STAGE_ERRORS = frozenset(
    {
        Status.SETUP_ERROR,
        Status.PATCH_CONFLICT,
        Status.CONFIG_ERROR,
        Status.BUILD_ERROR,
        Status.BOOT_ERROR,
        Status.INTERRUPTED,
    }
)
_SEVERITY = list(Status)


def worst(statuses: Sequence[Status], *, empty: Status = Status.PASS) -> Status:
    """The most severe status of several (the order of the `Status` enum)."""
    if not statuses:
        return empty
    return max(statuses, key=_SEVERITY.index)


def combined(statuses: Sequence[Status], *, empty: Status) -> Status:
    """The status of something made of parts (a test of its subtests, a cell of its tests).

    Skipped parts do not count when others ran: nine passes and a skip is PASS. When
    every part skipped, the whole is SKIP, and with no parts at all it is `empty`.
    """
    if not statuses:
        return empty
    ran = [s for s in statuses if s is not Status.SKIP]
    return worst(ran) if ran else Status.SKIP


class Accel(enum.Enum):
    AUTO = "auto"
    KVM = "kvm"
    TCG = "tcg"


class PatchState(enum.Enum):
    APPLIED = "applied"
    ALREADY_IN_BASE = "already-in-base"
    CONFLICT = "conflict"
    NOT_TRIED = "not-tried"  # an earlier patch of the series conflicted


class SourceKind(enum.Enum):
    DEBIAN = "debian"
    GIT = "git"
    TARBALL = "tarball"
    IMAGE = "image"


@dataclass(frozen=True, kw_only=True)
class GuestSpec:
    """The guest a kernel boots in: its size and what its command line gets besides the
    harness's own (vng's --memory, --cpus and --append)."""

    memory: str = "2G"  # vng --memory: 2G, 1536M
    cpus: int = 2
    append: str = ""  # extra kernel command line (e.g. panic_on_warn=1)


@dataclass(frozen=True, kw_only=True)
class GuestOptions:
    """--memory, --cpus and --append as a command was given them: what is not given
    (None, "") is the cell's own."""

    memory: str | None = None
    cpus: int | None = None
    append: str = ""

    def over(self, spec: GuestSpec) -> GuestSpec:
        return GuestSpec(memory=spec.memory if self.memory is None else self.memory,
                         cpus=spec.cpus if self.cpus is None else self.cpus,
                         append=self.append or spec.append)


@dataclass(frozen=True, kw_only=True)
class GuestSeen:
    """What the guest had, as read inside it: its kernel command line, CPUs and RAM."""

    cmdline: str | None = None
    cpus: int | None = None
    memory_kb: int | None = None


@dataclass(frozen=True, kw_only=True)
class KernelSpec:
    """What the user asked for: `debian:6.12`, `git:PATH[@REV]`, `tarball:PATH` or
    `image:PATH` (harness/kernel/sources/ has a module for each)."""

    kind: SourceKind
    value: str  # the Debian version, or the path (tree, tarball, image)
    rev: str | None = None

    @property
    def text(self) -> str:
        if self.rev:
            return f"{self.kind.value}:{self.value}@{self.rev}"
        return f"{self.kind.value}:{self.value}"


@dataclass(frozen=True, kw_only=True)
class PreparedSource:
    """A git repository in the cache holding one base commit to build on."""

    spec: KernelSpec
    repo: Path
    base_commit: str
    describe: str  # e.g. "Debian linux-source-6.12 6.12.57-1" or the user's HEAD + dirty note
    package_version: str | None = None
    includes_uncommitted: bool = False
    package: str | None = None  # debian: the package (linux-source-6.12)
    digest: str | None = None  # tarball: the file's SHA-256
    commit: str | None = None  # git: the commit HEAD (or REV) was, under any snapshot


@dataclass(frozen=True, kw_only=True)
class PatchResult:
    name: str
    subject: str
    state: PatchState
    files: tuple[str, ...] = ()
    detail: str = ""
    message_id: str = ""  # a patch from the list: the mail it came in


@dataclass(frozen=True, kw_only=True)
class ConfigResult:
    requested: tuple[str, ...]
    dropped: tuple[DroppedSymbol, ...]
    fragments: tuple[str, ...]
    changed: bool
    config_path: Path | None = None  # the .config written (None: read back from results)


@dataclass(frozen=True, kw_only=True)
class DroppedSymbol:
    symbol: str
    requested: str
    actual: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class KernelImage:
    """A built (or given) kernel ready to boot."""

    boot_image: Path  # what QEMU boots: bzImage on x86_64, Image on arm64
    vmlinux: Path | None  # with BTF; None for an image without one next to it
    config: Path | None
    version: str
    build_dir: Path | None = None
    source_dir: Path | None = None
    cached: bool = False
    arch: str  # the arch it was built for (harness/target/arches/ARCH.toml)
    toolchain: str  # and with (harness/target/toolchains/NAME.toml); "" if unknown
    compiler: str = ""  # its compiler's --version first line, as the build recorded it
    pahole: str = ""  # the pahole its BTF was made with (version, origin), as recorded
    # what its build spent where (build.BUILD_PHASES), seconds; empty: taken from the store
    build_parts: tuple[tuple[str, float], ...] = ()


# What differs between two reports of the same splat: CPU and PID numbers, addresses and
# offsets, a source path's directories and line, timestamps, counts.
_VARYING = (
    (re.compile(r"\bCPU[#:]? ?\d+"), "CPU"),
    (re.compile(r"\bPID: ?\d+"), "PID"),
    (re.compile(r"(?:[\w.-]+/)+([\w.-]+\.[chS])(?::\d+)?"), r"\1"),
    (re.compile(r"\+?0x[0-9a-f]+(?:/0x[0-9a-f]+)?"), ""),
    (re.compile(r"\b[0-9a-f]{8,}\b"), "ADDR"),
    (re.compile(r"\d+"), "N"),
)


def normalised_title(title: str) -> str:
    """A splat's first line without what varies between runs of the same bug:
    "WARNING: CPU: 1 PID: 230 at mm/memcontrol.c:4242 f+0x1/0x2" ->
    "WARNING: CPU PID at memcontrol.c f"."""
    for pattern, repl in _VARYING:
        title = pattern.sub(repl, title)
    return " ".join(title.split())


@dataclass(frozen=True, kw_only=True)
class Splat:
    # WARNING, BUG, KASAN, UBSAN, LOCKDEP, RCU_STALL, HUNG_TASK, SOFT_LOCKUP, PANIC, OOPS;
    # BOOT_HANG: not the kernel's words but the harness's finding, a boot silent too long
    # before the runner started (its text: the console's last lines)
    kind: str
    title: str
    text: str
    decoded: str = ""
    function: str = ""  # the faulting function (RIP, "at ... func+0x", first frame)
    where: str = ""  # the part of the log it was in, when not the result's own: "first boot"
    expected: str = ""  # declared noise: the reason it does not count (expectations.toml)
    message: str = ""  # what the code said as it went: WARN()'s text, a pr_err() before BUG()

    @property
    def fingerprint(self) -> str:
        """Kind and faulting function: what counts and groups splats (short, for notes)."""
        return f"{self.kind}:{self.function or '?'}"

    @property
    def identity(self) -> str:
        """What identifies this splat across runs and builds (`harness compare`): the
        fingerprint and the normalised title."""
        return f"{self.fingerprint}:{normalised_title(self.title)}"


@dataclass(frozen=True, kw_only=True)
class TestCase:
    """One KTAP result line, with its subtests."""

    name: str
    number: int
    status: Status
    directive: str = ""
    diagnostic: str = ""
    subtests: tuple[TestCase, ...] = ()


def leaves(cases: Sequence[TestCase], path: tuple[str, ...] = ()
           ) -> Iterator[tuple[tuple[str, ...], TestCase]]:
    """Each leaf of a KTAP tree (a result without subtests), in order, with its path: the
    names of the results above it, then its own."""
    for c in cases:
        here = (*path, c.name)
        if c.subtests:
            yield from leaves(c.subtests, here)
        else:
            yield here, c


@dataclass(frozen=True, kw_only=True)
class KtapResult:
    """A parsed KTAP/TAP stream: the top-level results and what was wrong with the stream."""

    version: str | None
    plan: int | None
    cases: tuple[TestCase, ...]
    errors: tuple[str, ...] = ()
    # Not failures: repeated result lines counted once, output cut at the cap, ...
    warnings: tuple[str, ...] = ()

    @property
    def status(self) -> Status:
        status = combined([c.status for c in self.cases], empty=Status.FAIL)
        return worst([status, Status.FAIL]) if self.errors else status


class Phase(enum.Enum):
    """Which part of a boot a result judges. Every kernel-log line belongs to one."""

    BOOT = "boot"  # from power-on until the guest runner starts
    TEST = "test"  # between a test's start and end markers
    SETUP = "setup"  # the runner's own work between tests (lazy swap/scratch set-up)
    SHUTDOWN = "shutdown"  # after the runner is done, until power-off (console only)


# Results that judge the kernel itself, not a test: named like their phase.
KERNEL_PHASES = (Phase.BOOT, Phase.SETUP, Phase.SHUTDOWN)


Number = int | float  # a JSON number as written (an int stays an int)


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One measurement a test reported: an object with a median in its metrics, at its
    path there ("methods/memstat_read@1"). Numbers as the test wrote them; None: absent
    (or not a number)."""

    path: str
    median: Number | None
    unit: str | None = None
    direction: str | None = None  # which way is better: "lower" or "higher"
    q1: Number | None = None
    q3: Number | None = None
    min: Number | None = None
    max: Number | None = None
    spread: Number | None = None
    n: Number | None = None

    @property
    def complete(self) -> bool:
        """A median with its unit and direction: what compare judges and the exports and
        the report show."""
        return self.unit is not None and self.direction is not None


@dataclass(frozen=True, kw_only=True)
class Metrics:
    """What a test wrote to $HARNESS_METRICS: its own JSON, kept as written (`data`), with
    its summary line and every measurement in it."""

    data: object = field(hash=False, compare=False)
    summary: str = ""
    measurements: tuple[Measurement, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CheckSelection:
    """Which checks (subtests) of a test ran when only some were asked for
    (`--test memcg_kfuncs:usage_*`, `--affected`): the rest were not run, which says
    nothing about the kernel (unlike SKIP)."""

    asked: tuple[str, ...]  # the names or globs asked for
    selected: tuple[str, ...]  # the checks they name
    needed: tuple[str, ...] = ()  # checks the selected need, which came along
    cleanup: tuple[str, ...] = ()  # clean-up checks, which run whenever any check runs
    not_run: tuple[str, ...] = ()  # the others: not run
    why: str = ""  # who chose them and why (--affected: the changed functions they reached)

    @property
    def ran(self) -> tuple[str, ...]:
        return (*self.needed, *self.selected, *self.cleanup)


@dataclass(frozen=True, kw_only=True)
class TestResult:
    """One selftest run in the guest, or one kernel phase (boot, set-up, shutdown)."""

    name: str
    status: Status
    duration_s: float
    exit_code: int | None
    ktap: KtapResult | None
    splats: tuple[Splat, ...] = ()
    log: Path | None = None
    reason: str = ""  # why the status: expected-failure reason, timeout, taint change, ...
    phase: Phase = Phase.TEST
    taint: str = ""  # bad taint letters newly set while it ran (W, D, B, L, M)
    expected_status: Status | None = None  # what the cell declares it must be (expect)
    notes: tuple[str, ...] = ()  # not verdicts: declared flaky, expected noise, output cut
    # why it did not pass, in a line: its first failing check and the last line that check
    # said ("created_from_sleepable: created 0 times from the sleepable program, expected 1")
    diagnosis: str = ""
    # a repeated test (--repeat, test.toml repeat): every attempt, in order; the fields
    # above are the worst attempt's, its status the judgement of all (attempts.fold)
    attempts: tuple[TestResult, ...] = ()
    guest_seen: GuestSeen | None = None  # the boot's: what the guest had
    # a test whose output is shown (a command): its last lines, and how many it printed
    output_tail: tuple[str, ...] | None = None
    output_lines: int = 0
    metrics: Metrics | None = None  # what it wrote to $HARNESS_METRICS
    metrics_error: str = ""  # why that was not read
    # only some of its checks were asked for: which ran, and that the rest did not
    selection: CheckSelection | None = None


@dataclass(frozen=True, kw_only=True)
class Isolation:
    """How a cell kept the tree's code in: its build in the sandbox, its guest on a root of
    its own; what the user turned off, and why."""

    sandbox: bool  # the tree's code ran in bubblewrap
    sandbox_off: str = ""  # why not (--no-sandbox)
    sandbox_tool: str = ""  # bubblewrap's version line
    guest_root: str = ""  # content hash of the guest's root; "" none booted or the host's
    host_root: str = ""  # the guest booted on the host's root: why (--host-root)
    guest_root_size: int = 0  # bytes
    guest_root_packages: int = 0

    def describe(self) -> str:
        """The cell line's words: "sandboxed build, guest root <hash>" or what was off."""
        parts = ["sandboxed build" if self.sandbox else
                 f"build NOT sandboxed ({self.sandbox_off or 'off'})"]
        if self.guest_root:
            parts.append(f"guest root {self.guest_root}")
        elif self.host_root:
            parts.append(f"guest on the host's root ({self.host_root})")
        return ", ".join(parts)


@dataclass(frozen=True, kw_only=True)
class RunIsolation:
    """What a run's options let the tree's code reach, in words (each cell's `Isolation`
    says it in full)."""

    sandbox: str  # "sandboxed build", or what turned it off
    guest: str  # "a root of its own", or "the host's root (--host-root)"


@dataclass(frozen=True, kw_only=True)
class StageTiming:
    stage: str
    status: Status
    duration_s: float
    detail: str = ""
    parts: tuple[tuple[str, float], ...] = ()  # where the stage's time went, seconds


class FeatureKind(enum.Enum):
    HOOK = "hook"  # a __weak noinline function BPF programs attach to with fentry
    KFUNC = "kfunc"  # registered with BTF_ID_FLAGS(func, NAME...)
    ITERATOR = "iterator"  # DEFINE_BPF_ITER_FUNC(NAME, ...): the bpf_iter_NAME target
    HELPER = "helper"  # BPF_CALL_n(NAME, ...): a helper, BPF_FUNC_<NAME without bpf_> in UAPI
    MAP_TYPE = "map type"  # BPF_MAP_TYPE(NAME, ops) in include/linux/bpf_types.h
    # `config NAME` in a Kconfig file; built in when the kernel's .config has CONFIG_NAME=y
    CONFIG = "config option"


class FeatureState(enum.Enum):
    IN_BASE = "in base"
    ADDED_BY_SERIES = "added by series"
    ABSENT = "absent"
    PRESENT = "present"  # a prebuilt image: in its BTF, origin unknown


@dataclass(frozen=True, kw_only=True)
class Feature:
    name: str
    kind: FeatureKind
    declared_by: tuple[str, ...] = ()  # series whose provides.toml lists it; () = kernel's
    # Mainline's UAPI number of a helper or map type: a backport must use the same one,
    # or a program built against a newer bpf.h calls another helper or map type.
    uapi_value: int | None = None

    @property
    def btf_name(self) -> str:
        """The FUNC (or, for a map type, the bpf_map_type enumerator) the kernel's BTF
        has when the feature is built in."""
        return f"bpf_iter_{self.name}" if self.kind is FeatureKind.ITERATOR else self.name

    @property
    def uapi_name(self) -> str | None:
        """The UAPI enumerator naming a helper or map type; None for other kinds."""
        if self.kind is FeatureKind.HELPER:
            return "BPF_FUNC_" + self.name.removeprefix("bpf_")
        return self.name if self.kind is FeatureKind.MAP_TYPE else None

    @property
    def label(self) -> str:
        return f"{self.name} ({self.kind.value})"


@dataclass(frozen=True, kw_only=True)
class FeatureReport:
    feature: Feature
    state: FeatureState
    where: str = ""  # file:line of the definition in the tree that has it
    btf: bool | None = None  # None: not checked (no vmlinux)
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class FileLine:
    """A line of the kernel tree (in the series' head), with its text."""

    file: str
    line: int
    source: str


@dataclass(frozen=True, kw_only=True)
class PatchCoverage:
    """One patch's added lines that gcov counts (executable), and which of them ran."""

    patch: str  # its file name, as PatchResult.name
    subject: str
    executable: tuple[FileLine, ...]
    ran: tuple[FileLine, ...]
    by_test: tuple[tuple[str, int], ...] = ()  # (test, lines of this patch it ran)

    @property
    def not_run(self) -> tuple[FileLine, ...]:
        ran = set(self.ran)
        return tuple(x for x in self.executable if x not in ran)


@dataclass(frozen=True, kw_only=True)
class AffectedTest:
    """--affected: what ran of one test, and why."""

    test: str
    ran: str  # "all", "some" (its `checks`) or "none"
    checks: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class Affected:
    """--affected: what the change touched and what of each test ran for it (the map of
    which checks reach which kernel functions decided, or `fallback` says why not)."""

    changed: tuple[str, ...]  # "file:function", or a file's lines outside any function
    tests: tuple[AffectedTest, ...]
    fallback: str = ""  # why every test ran whole ("": the map decided)
    map: str = ""  # the map that decided: where and when it was recorded


@dataclass(frozen=True, kw_only=True)
class CarriedFile:
    """An input a run carries in its results directory: a patch, a config fragment, a
    thread as given, a test directory (`harness reproduce` makes the cell again from it)."""

    name: str  # as the run used it: a patch's file name, a fragment's or a test's name
    sha256: str  # of its content as the run read it (a directory: of its files)
    path: str = ""  # its copy, relative to the results directory ("": not carried)
    origin: str = ""  # where the run read it (a path on the producer's machine, patches/...)


@dataclass(frozen=True, kw_only=True)
class CarriedPatches:
    """One --series or --patch of a cell: the patch files it applied, in order, carried in
    a directory with a `series` file that lists them."""

    given: str  # as asked: memcg-kfuncs, mbox:FILE, lore:MSGID, a directory, a --patch FILE
    series: bool  # a --series (its name is kept); False: a --patch file
    directory: str  # the carried directory, relative to the results directory
    variant: str = ""  # the series file read (series, series-6.1), b4 for a thread
    patches: tuple[CarriedFile, ...] = ()
    extra: tuple[CarriedFile, ...] = ()  # provides.toml, the mbox as given


@dataclass(frozen=True, kw_only=True)
class SourceIdentity:
    """What a cell's kernel source was, beyond its spec: enough to get it again, or to say
    that what the spec names now is another source."""

    spec: str  # as asked: debian:6.12
    describe: str = ""
    # the commit the patches applied on: a Debian package or a tarball imported anywhere
    # is the same commit (a fixed author and date), a git tree's is its own
    base_commit: str = ""
    package: str | None = None  # debian: linux-source-6.12
    package_version: str | None = None  # debian: 6.12.117-1~deb12u1
    sha256: str | None = None  # tarball: and image: the file's
    commit: str | None = None  # git: the commit its HEAD (or REV) was
    uncommitted: bool = False  # git: uncommitted changes were built too


@dataclass(frozen=True, kw_only=True)
class CellInputs:
    """What a cell was made from and asked, as its results directory carries it: the kernel
    source's identity, every patch and config fragment (copies, with their hashes), the
    tests and the options that judge them. Bounded: no kernel image is carried."""

    kernel: str  # the spec as asked
    source: SourceIdentity | None = None  # None: the cell stopped before its source
    patches: tuple[CarriedPatches, ...] = ()  # every --series, then every --patch
    configs: tuple[CarriedFile, ...] = ()  # each fragment by its name (tree:PATH: no copy)
    tests: tuple[str, ...] = ()  # as asked
    test_dirs: tuple[CarriedFile, ...] = ()  # tests asked by their directory: copies
    boot_only: bool = False
    command: tuple[str, ...] = ()  # -- CMD: run in the guest
    command_cwd: str = "/"
    command_timeout: int = 600
    expect_status: str | None = None  # a matrix cell's expectations
    expect: tuple[tuple[str, str], ...] = ()
    coverage: bool = False
    accel: str = "auto"  # what the run asked (CellResult.accel: what it got)
    strict: bool = False
    repeat: int | None = None
    retry_failed: int = 0
    # the content hash of the root the guest booted on ("": the host's own root)
    guest_root: str = ""
    not_carried: tuple[str, ...] = ()  # inputs over the size limit, named: not copied


@dataclass(frozen=True, kw_only=True)
class CellResult:
    cell: str
    kernel: str
    kernel_version: str
    status: Status
    patches: tuple[PatchResult, ...]
    config: ConfigResult | None
    stages: tuple[StageTiming, ...]
    tests: tuple[TestResult, ...]
    source: str = ""
    package_version: str | None = None
    error: str = ""
    accel: str = ""
    retries: tuple[str, ...] = ()
    features: tuple[FeatureReport, ...] = ()
    notes: tuple[str, ...] = ()  # what the verdict took into account (expected failures, ...)
    boot_only: bool = False
    image: str = ""  # the bzImage that was booted (in the kernel store, or the user's)
    kselftest_h: str = ""  # the kernel tree's kselftest.h our selftests were built with
    guest: GuestSpec | None = None  # the guest it booted in (None: no guest, no record)
    guest_seen: GuestSeen | None = None  # what that guest had, read in it
    # --coverage: per patch of the series, its executable lines and which ran; None: not asked
    coverage: tuple[PatchCoverage, ...] | None = None
    coverage_error: str = ""  # why coverage could not be read, when asked for
    # the kernel came from the kernel store (no build ran); None: no kernel was built
    kernel_from_store: bool | None = None
    arch: str  # what the kernel was built for and with (target.DEFAULT_*: the default)
    toolchain: str
    compiler: str = ""  # the compiler's version line, as the kernel's build recorded it
    pahole: str = ""  # the pahole its BTF was made with, as the kernel's build recorded it
    # the build's sandbox and the guest's root (None: a record from before they existed)
    isolation: Isolation | None = None
    affected: Affected | None = None  # --affected: what ran of each test, and why
    map_error: str = ""  # --map: why no map was recorded ("": one was, or none asked)
    inputs: CellInputs | None = None  # what it was made from (None: not recorded)


class RunState(enum.Enum):
    RUNNING = "running"  # written before the first cell and after each
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"  # a signal stopped it
    INCOMPLETE = "incomplete"  # a merge that lacks a run, a cell, or a run's end


@dataclass(frozen=True, kw_only=True)
class Host:
    kernel: str
    cpus: int | None
    os: str = ""  # /etc/os-release's PRETTY_NAME: the native guest boots on its userspace


@dataclass(frozen=True, kw_only=True)
class Interruption:
    """Where a signal stopped a run: the cell and stage, and the cells not run."""

    signal: str
    cell: str
    stage: str
    not_run: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class MergedRun:
    """A run a merge took cells from."""

    dir: str
    run_id: str | None
    started: str | None
    state: str | None
    harness_rev: str | None
    tools: tuple[tuple[str, str], ...]
    strict: bool
    cells: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class UnreadableRun:
    run: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class BuildRun:
    """A CI build job's --build-only run a merge read (`harness merge --builds`)."""

    dir: str
    run_id: str | None = None
    state: str | None = None
    cells: tuple[tuple[str, str], ...] = ()  # cell -> its status there
    unreadable: str = ""  # why it could not be read ("": it was)


@dataclass(frozen=True, kw_only=True)
class Merge:
    """What a merged run (`harness merge`) knows besides its cells."""

    merged_at: str
    merged_from: tuple[str, ...]
    runs: tuple[MergedRun, ...]
    plan: tuple[str, ...] | None  # the cells expected (None: no plan given)
    incomplete_runs: tuple[str, ...] = ()
    unreadable_runs: tuple[UnreadableRun, ...] = ()
    conflicts: tuple[str, ...] = ()  # cells two runs hold
    revision_conflict: str = ""
    missing: tuple[str, ...] = ()  # planned cells no run holds
    unexpected: tuple[str, ...] = ()  # cells the plan does not name
    builds: tuple[BuildRun, ...] = ()  # build jobs' runs read for cells no run holds


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """A run as its results.json has it: its cells, how it ended, and what it was asked
    and run with. None: the run's writer did not say (a `harness parse` or a mutant run
    says less than `harness run`)."""

    cells: tuple[CellResult, ...]
    state: RunState = RunState.COMPLETE
    exit_code: int = 0
    run_id: str | None = None
    started: str | None = None  # %Y-%m-%dT%H:%M:%S%z
    command: tuple[str, ...] | None = None
    host: Host | None = None
    strict: bool | None = None  # with repeat: the options that judge every cell
    repeat: int | None = None
    what: str | None = None  # what it tests, as the terminal's first lines said
    isolation: RunIsolation | None = None  # what its options let the tree's code reach
    harness_rev: str | None = None
    # the harness checkout had uncommitted changes (None: not said)
    harness_dirty: bool | None = None
    tools: tuple[tuple[str, str], ...] | None = None  # (program, version line)
    duration_s: float | None = None
    interrupted: Interruption | None = None
    source_log: str | None = None  # `harness parse`: the log it read
    mutated_cell: str | None = None  # a mutant run: the cell it ran
    merge: Merge | None = None  # a merged run
    # the SHA-256 of the document it was read from ("": not read from one)
    digest: str = field(default="", compare=False)

    @property
    def status(self) -> Status | None:
        """The worst of its cells' (None: no cell)."""
        return worst([c.status for c in self.cells]) if self.cells else None
