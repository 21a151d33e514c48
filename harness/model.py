"""The domain shared by every stage: statuses, specs and results as frozen dataclasses.

Stages pass these objects forward; nothing travels between stages as a dict of strings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path


class Status(enum.Enum):
    """Outcome of a test, a stage or a whole cell.

    Ordered by severity: aggregation keeps the worst (see `worst`). Stage errors
    (the set-up could not even produce something to test) outrank test outcomes.
    """

    PASS = "PASS"
    SKIP = "SKIP"
    XFAIL = "XFAIL"  # failed, and the expectations file says it is expected to
    XPASS = "XPASS"  # on the expectations list but passed
    FAIL = "FAIL"
    TIMEOUT = "TIMEOUT"
    CRASHED = "CRASHED"  # kernel splat or panic while it ran
    SETUP_ERROR = "SETUP_ERROR"
    PATCH_CONFLICT = "PATCH_CONFLICT"
    CONFIG_ERROR = "CONFIG_ERROR"
    BUILD_ERROR = "BUILD_ERROR"
    BOOT_ERROR = "BOOT_ERROR"

    @property
    def is_stage_error(self) -> bool:
        return self in _STAGE_ERRORS

    @property
    def exit_code(self) -> int:
        """0 all passed; 1 a test failed, crashed or timed out; 2 a stage error."""
        if self.is_stage_error:
            return 2
        if self in (Status.FAIL, Status.TIMEOUT, Status.CRASHED):
            return 1
        return 0


_STAGE_ERRORS = frozenset(
    {
        Status.SETUP_ERROR,
        Status.PATCH_CONFLICT,
        Status.CONFIG_ERROR,
        Status.BUILD_ERROR,
        Status.BOOT_ERROR,
    }
)
_SEVERITY = list(Status)


def worst(statuses: list[Status] | tuple[Status, ...], *, empty: Status = Status.PASS) -> Status:
    """The most severe status of several (the order of the `Status` enum)."""
    if not statuses:
        return empty
    return max(statuses, key=_SEVERITY.index)


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
    IMAGE = "image"


@dataclass(frozen=True, kw_only=True)
class KernelSpec:
    """What the user asked for: `debian:6.12`, `git:PATH[@REV]` or `image:PATH`."""

    kind: SourceKind
    value: str  # the Debian version, the path, or the image path
    rev: str | None = None

    @property
    def text(self) -> str:
        if self.rev:
            return f"{self.kind.value}:{self.value}@{self.rev}"
        return f"{self.kind.value}:{self.value}"

    @property
    def slug(self) -> str:
        """A name usable in a path."""
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in self.value.strip("/"))
        return f"{self.kind.value}-{safe}"[:80]


@dataclass(frozen=True, kw_only=True)
class PreparedSource:
    """A git repository in the cache holding one base commit to build on."""

    spec: KernelSpec
    repo: Path
    base_commit: str
    describe: str  # e.g. "Debian linux-source-6.12 6.12.57-1" or the user's HEAD + dirty note
    package_version: str | None = None
    includes_uncommitted: bool = False


@dataclass(frozen=True, kw_only=True)
class PatchResult:
    name: str
    subject: str
    state: PatchState
    files: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class ConfigResult:
    config_path: Path
    requested: tuple[str, ...]
    dropped: tuple[DroppedSymbol, ...]
    fragments: tuple[str, ...]
    changed: bool


@dataclass(frozen=True, kw_only=True)
class DroppedSymbol:
    symbol: str
    requested: str
    actual: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class KernelImage:
    """A built (or given) kernel ready to boot."""

    bzimage: Path
    vmlinux: Path | None  # with BTF; None for an image without one next to it
    config: Path | None
    version: str
    build_dir: Path | None = None
    source_dir: Path | None = None
    cached: bool = False


@dataclass(frozen=True, kw_only=True)
class Splat:
    kind: str  # WARNING, BUG, KASAN, UBSAN, LOCKDEP, RCU_STALL, HUNG_TASK, SOFT_LOCKUP, PANIC, OOPS
    title: str
    text: str
    decoded: str = ""


@dataclass(frozen=True, kw_only=True)
class TestCase:
    """One KTAP result line, with its subtests."""

    name: str
    number: int
    status: Status
    directive: str = ""
    diagnostic: str = ""
    subtests: tuple[TestCase, ...] = ()


@dataclass(frozen=True, kw_only=True)
class KtapResult:
    """A parsed KTAP/TAP stream: the top-level results and what was wrong with the stream."""

    version: str | None
    plan: int | None
    cases: tuple[TestCase, ...]
    errors: tuple[str, ...] = ()

    @property
    def status(self) -> Status:
        statuses = [c.status for c in self.cases]
        if self.errors:
            statuses.append(Status.FAIL)
        return worst(statuses, empty=Status.FAIL if not self.cases else Status.PASS)


@dataclass(frozen=True, kw_only=True)
class TestResult:
    """One selftest run in the guest."""

    name: str
    status: Status
    duration_s: float
    exit_code: int | None
    ktap: KtapResult | None
    splats: tuple[Splat, ...] = ()
    log: Path | None = None
    reason: str = ""  # why the status: expected-failure reason, timeout, taint change, ...
    extra: dict[str, object] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class StageTiming:
    stage: str
    status: Status
    duration_s: float
    detail: str = ""


class FeatureKind(enum.Enum):
    HOOK = "hook"  # a __weak noinline function BPF programs attach to with fentry
    KFUNC = "kfunc"  # registered with BTF_ID_FLAGS(func, NAME...)
    ITERATOR = "iterator"  # DEFINE_BPF_ITER_FUNC(NAME, ...): the bpf_iter_NAME target


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

    @property
    def btf_name(self) -> str:
        """The FUNC the kernel's BTF has when the feature is built in."""
        return f"bpf_iter_{self.name}" if self.kind is FeatureKind.ITERATOR else self.name

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
