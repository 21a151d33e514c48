"""What every kernel source kind shares: the error, the cache lock, the tarball import,
and the protocol a kind implements (one module per kind in this package)."""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from harness.base import atomic, paths, proc
from harness.base.errors import HarnessError
from harness.base.gitcmd import git
from harness.base.model import KernelSpec, PreparedSource, SourceKind, Status

log = logging.getLogger(__name__)

# A fixed identity and date make an import of the same tarball produce the same commit.
IMPORT_ENV = {
    "GIT_AUTHOR_NAME": "harness import",
    "GIT_AUTHOR_EMAIL": "harness@localhost",
    "GIT_COMMITTER_NAME": "harness import",
    "GIT_COMMITTER_EMAIL": "harness@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


class SourceError(HarnessError):
    """A kernel spec cannot be turned into a source tree."""

    status = Status.SETUP_ERROR


class Kind(Protocol):
    """One kind of kernel source, `KIND:VALUE` on the command line."""

    kind: SourceKind
    has_tree: bool  # False: a built image, nothing to patch or build
    usage: str  # how the spec is written, for help and errors

    def parse(self, value: str) -> KernelSpec:
        """VALUE -> the spec (paths made absolute), or SourceError."""
        ...

    def check(self, spec: KernelSpec) -> None:
        """At plan time, before any work: SourceError when the spec names something that
        cannot be had (a package version Debian no longer serves)."""
        ...

    def prepare(self, spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
        """The source as a git repository in the cache with the base commit to build on."""
        ...

    def base_name(self, spec: KernelSpec) -> str | None:
        """The base a per-base series variant is named after ("6.1"), if the spec says."""
        ...

    def version(self, spec: KernelSpec) -> str:
        """What the source is, read before any tree exists (a CI cache key's input)."""
        ...


@contextmanager
def locked(name: str, *, wait_message: str) -> Iterator[None]:
    """An exclusive lock on a cache resource; waits (saying so) if another run holds it."""
    lock_path = paths.sub("locks") / f"{name}.lock"
    with lock_path.open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("%s: another harness run holds %s; waiting", wait_message, lock_path)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def import_tarball(tarball: Path, dest: Path, *, message: str, log_dir: Path,
                   check: Callable[[Path], None] | None = None) -> None:
    """Unpack and commit in a scratch directory, then rename: a failure leaves nothing.
    `check` looks at the unpacked tree first (and raises if it is not what was meant)."""
    log.info("importing %s into %s (once)", tarball, dest)
    with atomic.directory(dest, prefix=".import-") as scratch:
        proc.check(
            ["tar", "-xf", str(tarball), "-C", str(scratch), "--strip-components=1"],
            what=f"unpacking {tarball}", timeout=1800, log_path=log_dir / "import.log",
        )
        if check is not None:
            check(scratch)
        git(scratch, "init", "-q", "-b", "base", what="git init")
        git(scratch, "config", "core.bigFileThreshold", "1m", what="git config")
        # never: the series cache (series.apply) keeps commits no ref points to
        git(scratch, "config", "gc.auto", "0", what="git config")
        git(scratch, "add", "-A", "-f", what="git add", timeout=1800)
        git(scratch, "commit", "-q", "--no-verify", "-m", message,
            what="git commit", env=IMPORT_ENV, timeout=1800)
        (scratch / ".git" / "harness-imported").write_text(message + "\n")


