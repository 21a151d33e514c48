"""Kernel specs -> a git repository in the cache with one base commit.

`debian:X` imports Debian's linux-source-X tarball once; `git:PATH[@REV]` makes a
shared clone of the user's tree and never writes to it; `image:PATH` needs no source.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import atomic, paths, proc
from .errors import HarnessError
from .gitcmd import git, git_run
from .model import KernelSpec, PreparedSource, SourceKind, Status

log = logging.getLogger(__name__)

# A fixed identity and date make an import of the same tarball produce the same commit.
_IMPORT_ENV = {
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


def parse_spec(text: str) -> KernelSpec:
    kind_text, sep, rest = text.partition(":")
    if not sep or not rest:
        raise SourceError(
            f"kernel spec {text!r} is not KIND:VALUE; use debian:6.12, git:PATH[@REV] or image:PATH"
        )
    try:
        kind = SourceKind(kind_text)
    except ValueError:
        raise SourceError(
            f"unknown kernel spec kind {kind_text!r} in {text!r}; use debian:, git: or image:"
        ) from None
    if kind is SourceKind.GIT and "@" in rest:
        path, _, rev = rest.rpartition("@")
        return KernelSpec(kind=kind, value=str(Path(path).expanduser()), rev=rev or None)
    if kind in (SourceKind.GIT, SourceKind.IMAGE):
        rest = str(Path(rest).expanduser())
    return KernelSpec(kind=kind, value=rest)


def is_kernel_tree(top: Path) -> bool:
    """A Linux source tree: Kconfig, kernel/, and a top Makefile that sets VERSION."""
    makefile = top / "Makefile"
    if not ((top / "Kconfig").is_file() and (top / "kernel").is_dir() and makefile.is_file()):
        return False
    with makefile.open(errors="replace") as f:
        return any(line.startswith("VERSION =") for line, _ in zip(f, range(20), strict=False))


def enclosing_kernel_tree(start: Path) -> Path | None:
    """The top of the kernel git tree `start` is in (the user's own tree), or None."""
    res = git_run(start, "rev-parse", "--show-toplevel", timeout=30)
    if not res.ok:
        return None
    top = Path(res.output.strip())
    return top if is_kernel_tree(top) else None


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


def prepare(spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
    if spec.kind is SourceKind.DEBIAN:
        return _prepare_debian(spec, log_dir=log_dir)
    if spec.kind is SourceKind.GIT:
        return _prepare_git(spec, log_dir=log_dir)
    raise SourceError(f"{spec.text} is a prebuilt image and has no source tree")


def debian_package_version(package: str) -> str | None:
    res = proc.run(
        ["dpkg-query", "-W", "-f", "${Status}|${Version}", package], timeout=30
    )
    if res.returncode != 0:
        return None
    status, _, version = res.output.strip().partition("|")
    return version if status.endswith(" installed") else None


def _ensure_debian_package(package: str, log_dir: Path) -> str:
    version = debian_package_version(package)
    if version:
        return version
    if os.geteuid() != 0:
        raise SourceError(f"{package} is not installed; fix: sudo apt-get install -y {package}")
    log.info("installing %s with apt", package)
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    res = proc.run(
        ["apt-get", "install", "-y", "--no-install-recommends", package],
        env=env, timeout=1200, log_path=log_dir / "apt.log",
    )
    if not res.ok:
        # Fresh machines start with empty package lists.
        proc.run(["apt-get", "update"], env=env, timeout=600, log_path=log_dir / "apt.log")
        res = proc.run(
            ["apt-get", "install", "-y", "--no-install-recommends", package],
            env=env, timeout=1200, log_path=log_dir / "apt.log",
        )
    version = debian_package_version(package)
    if not res.ok or not version:
        raise SourceError(
            f"could not install {package} (see {log_dir / 'apt.log'}); "
            f"fix: apt-get update && apt-get install -y {package}"
        )
    return version


def _prepare_debian(spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
    package = f"linux-source-{spec.value}"
    version = _ensure_debian_package(package, log_dir)
    tarball = Path(f"/usr/src/{package}.tar.xz")
    if not tarball.exists():
        raise SourceError(f"{tarball} is missing although {package} is installed; "
                          f"fix: apt-get install --reinstall {package}")
    # Path-safe: '~' and '+' in Debian versions confuse some kbuild scripts.
    safe_version = re.sub(r"[^A-Za-z0-9._-]", "_", version)
    dest = paths.sub("src") / f"debian-{spec.value}-{safe_version}"
    with locked(f"src-{dest.name}", wait_message=f"importing {package}"):
        if not (dest / ".git" / "harness-imported").exists():
            _import_tarball(tarball, dest, message=f"Debian {package} {version}", log_dir=log_dir)
    base = git(dest, "rev-parse", "HEAD", what="git rev-parse").strip()
    return PreparedSource(
        spec=spec, repo=dest, base_commit=base,
        describe=f"Debian {package} {version}", package_version=version,
    )


def _import_tarball(tarball: Path, dest: Path, *, message: str, log_dir: Path) -> None:
    """Unpack and commit in a scratch directory, then rename: a failure leaves nothing."""
    log.info("importing %s into %s (once per package version)", tarball, dest)
    with atomic.directory(dest, prefix=".import-") as scratch:
        proc.check(
            ["tar", "-xf", str(tarball), "-C", str(scratch), "--strip-components=1"],
            what=f"unpacking {tarball}", timeout=1800, log_path=log_dir / "import.log",
        )
        git(scratch, "init", "-q", "-b", "base", what="git init")
        git(scratch, "config", "core.bigFileThreshold", "1m", what="git config")
        # never: the series cache (series.apply) keeps commits no ref points to
        git(scratch, "config", "gc.auto", "0", what="git config")
        git(scratch, "add", "-A", "-f", what="git add", timeout=1800)
        git(scratch, "commit", "-q", "--no-verify", "-m", message,
            what="git commit", env=_IMPORT_ENV, timeout=1800)
        (scratch / ".git" / "harness-imported").write_text(message + "\n")


def _prepare_git(spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
    user = Path(spec.value).resolve()
    # The top of a work tree: a subdirectory (or a tree that merely sits inside some other
    # repository) is not the kernel the user meant.
    top = git_run(user, "rev-parse", "--show-prefix", timeout=60) if user.is_dir() else None
    if top is None or not top.ok or top.output.strip():
        raise SourceError(f"{user} is not the top of a git work tree",
                          fix="pass git:PATH of a kernel checkout (the directory that holds "
                              ".git)")
    key = hashlib.sha256(str(user).encode()).hexdigest()[:12]
    clone = paths.sub("src") / f"git-{user.name}-{key}"
    with locked(f"src-{clone.name}", wait_message=f"cloning {user}"):
        if not (clone / ".git").exists():
            scratch = Path(tempfile.mkdtemp(prefix=".clone-", dir=clone.parent))
            try:
                # --shared borrows the user's objects through alternates: nothing is written
                # on their side.
                git(scratch, "clone", "-q", "--shared", "--no-checkout", str(user),
                    str(scratch / "repo"), what=f"cloning {user}", timeout=1800,
                    log_path=log_dir / "import.log")
                (scratch / "repo").rename(clone)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    if spec.rev:
        # Resolve in the user's repo (read-only); the object is reachable through alternates.
        found = git_run(user, "rev-parse", "--verify", "--quiet", f"{spec.rev}^{{commit}}",
                        timeout=60)
        if not found.ok:
            raise SourceError(f"{spec.rev!r} is not a commit in {user}",
                              fix=f"name a commit, branch or tag of {user} after @")
        commit = found.output.strip()
        describe = f"{user} at {spec.rev} ({commit[:12]})"
        return PreparedSource(spec=spec, repo=clone, base_commit=commit, describe=describe)
    head = git(user, "rev-parse", "HEAD", what="git rev-parse").strip()
    snapshot = _snapshot_uncommitted(user, clone)
    if snapshot is None:
        return PreparedSource(spec=spec, repo=clone, base_commit=head,
                              describe=f"{user} HEAD {head[:12]} (clean)")
    return PreparedSource(
        spec=spec, repo=clone, base_commit=snapshot, includes_uncommitted=True,
        describe=f"{user} HEAD {head[:12]} + uncommitted changes to tracked files "
                 f"(snapshot {snapshot[:12]})",
    )


def _snapshot_uncommitted(user: Path, clone: Path) -> str | None:
    """Capture HEAD plus the user's uncommitted changes to tracked files as a commit in the clone.

    `git stash create` would write objects into the user's .git; here it runs with a copy of
    their index and the clone's object directory (theirs only as an alternate), so every new
    object lands in the cache.  Untracked files are not included.
    """
    user_git = Path(git(user, "rev-parse", "--absolute-git-dir", what="git rev-parse",
                        timeout=60).strip())
    with tempfile.TemporaryDirectory(prefix="harness-index-") as tmp:
        index_copy = Path(tmp) / "index"
        if (user_git / "index").exists():
            shutil.copyfile(user_git / "index", index_copy)
        env = {
            "GIT_INDEX_FILE": str(index_copy),
            "GIT_OBJECT_DIRECTORY": str(clone / ".git" / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(user_git / "objects"),
            "GIT_OPTIONAL_LOCKS": "0",
        }
        stash = git(user, "stash", "create", what="git stash create", timeout=600,
                    env=env).strip()
    if not stash:
        return None
    tree = git(clone, "rev-parse", f"{stash}^{{tree}}", what="git rev-parse").strip()
    head = git(clone, "rev-parse", f"{stash}^1", what="git rev-parse").strip()
    return git(clone, "commit-tree", tree, "-p", head, "-m", "harness: uncommitted changes",
               what="git commit-tree", env=_IMPORT_ENV).strip()


def worktree(source: PreparedSource, config_name: str, *, log_dir: Path) -> Path:
    """The persistent worktree for (source, config), created on first use."""
    name = f"{source.repo.name}-{config_name}"
    path = paths.sub("work") / name
    if not (path / ".git").exists():
        if path.exists():
            shutil.rmtree(path)
        log.info("creating worktree %s (once)", path)
        git(source.repo, "worktree", "prune", what="git worktree prune")
        git(source.repo, "worktree", "add", "-q", "--detach", str(path), source.base_commit,
            what="git worktree add", timeout=1800, log_path=log_dir / "import.log")
    return path
