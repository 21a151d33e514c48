"""What every test kind shares: the reference a `--test` resolves to, the build context,
the error, and the protocol a kind implements.

A kind resolves its `--test` strings, checks them against the kernel tree before anything
is built, builds its tests against the built kernel, and plans their guest commands. The
guest prints each test's results in the kind's `fmt`; `outcome` parses them by format
(pure text in, data out), so a new kind with a known format needs no new parser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.base.errors import HarnessError
from harness.base.model import KernelImage, Status
from harness.guest.protocol import GuestTest
from harness.target import Target


class SelftestError(HarnessError):
    """A selftest cannot be built (BUILD_ERROR) or found (raised with SETUP_ERROR)."""

    status = Status.BUILD_ERROR


def setup_error(message: str, fix: str = "") -> SelftestError:
    return SelftestError(message, fix=fix, status=Status.SETUP_ERROR)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """An own test's `test.toml`, validated."""

    name: str
    directory: Path
    description: str
    bpf: tuple[str, ...]
    userspace: tuple[str, ...]
    command: tuple[str, ...]
    timeout_s: int
    fmt: str
    cflags: tuple[str, ...] = ()
    bpf_cflags: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    # other test directories whose sources this one includes (-I, and part of the cache key)
    include: tuple[Path, ...] = ()
    # kernel features (features.py names) without which the test cannot run: the harness
    # skips it before the boot, with the feature probe's reason
    requires: tuple[str, ...] = ()
    # attempts in one boot, each a fresh process (`repeat` in test.toml; --repeat overrides)
    repeat: int = 1
    # files of the test directory copied as they are next to what is built (scripts)
    files: tuple[str, ...] = ()
    # programs built from the kernel tree under test that the test runs ("perf": the
    # tree's tools/perf, as $PERF; see testkinds/perf.py)
    tools: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TestRef:
    """What --test named, resolved by its kind."""

    kind: str  # the backend's name: "own" | "kselftest" | "test_progs" | "command"
    name: str  # unique in a cell; the result's name
    manifest: Manifest | None = None  # own tests
    target: str = ""  # kselftest target, test_progs test
    only: tuple[str, ...] = ()  # kselftest: the tests of the target to run
    timeout_s: int | None = None  # command: its time limit in the guest
    cwd: str = ""  # command: the directory it runs from
    # only these of its checks (names or globs; own: of its CHECK table, test_progs: its
    # subtests, kselftest: the tests of a program that takes a name); (): all of them
    checks: tuple[str, ...] = ()
    checks_why: str = ""  # who chose them, when not the user (--affected: why)

    @property
    def requires(self) -> tuple[str, ...]:
        return self.manifest.requires if self.manifest is not None else ()


@dataclass(frozen=True, kw_only=True)
class KselftestHeader:
    """The kernel tree's own `kselftest.h`, which our tests print KTAP through."""

    directory: Path  # holds kselftest.h: the -I of our userspace builds
    origin: str  # what the results say: which tree it came from


@dataclass(frozen=True, kw_only=True)
class BuildContext:
    kernel: KernelImage
    log_dir: Path
    tree: Path | None = None  # the kernel source tree, at the state the kernel was built from
    build_dir: Path | None = None  # its O= directory
    # the tree's kselftest.h (own tests print KTAP through it); None: none known
    kselftest: KselftestHeader | None = None
    # bpftool built from the tree (vmlinux.h is its BTF dump); None: the host's
    bpftool: Path | None = None
    # what the kernel was built for and with, its pahole among them (a tree's tests that
    # build in its O= directory must be made with the same); None: not built here
    target: Target | None = None


class TestKind(Protocol):
    name: str
    # Built from the kernel tree itself: under the tree lock, before another run moves it.
    from_tree: bool
    # Built for the host's arch only: a guest of another arch (its root is bash, coreutils
    # and busybox) cannot run it.
    host_only: bool

    def resolve(self, text: str) -> TestRef | None:
        """The reference when `text` is of this kind, None when it is not; SelftestError
        when it is but is malformed."""

    def check_in_tree(self, ref: TestRef, tree: Path) -> None:
        """The name against the kernel tree, before any build."""

    def build(self, refs: Sequence[TestRef], ctx: BuildContext) -> Mapping[str, Path]:
        """Build these tests (all of this kind in the cell, at once); ref name -> the
        directory the guest runs them from."""

    def plan(self, ref: TestRef, built: Path) -> list[GuestTest]:
        """The guest's commands for one reference (a kselftest target makes several)."""
