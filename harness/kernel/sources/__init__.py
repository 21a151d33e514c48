"""Kernel specs -> a git repository in the cache with one base commit.

One module per kind of source, each behind the `Kind` protocol (base.py), as testkinds/
holds one module per kind of test:
- `debian:X` imports Debian's linux-source-X tarball once (debian.py);
- `git:PATH[@REV]` makes a shared clone of the user's tree and never writes to it (gittree.py);
- `tarball:PATH` imports a kernel release tarball once per content (tarball.py);
- `image:PATH` is a built image and needs no source (image.py).
Adding a kind: a module with a `KIND`, its name in `KINDS`, its value in model.SourceKind.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from harness.base import paths
from harness.base.gitcmd import git, git_run
from harness.base.model import KernelSpec, PreparedSource, SourceKind
from harness.base.paths import is_kernel_tree
from harness.kernel.sources import debian, gittree, image, tarball
from harness.kernel.sources.base import Kind, SourceError, locked
from harness.kernel.sources.debian import debian_package_version

__all__ = ["KINDS", "Kind", "SourceError", "base_name", "check", "debian_package_version",
           "enclosing_kernel_tree", "is_kernel_tree", "kind_of", "locked", "parse_spec",
           "prepare", "version_of", "worktree"]

log = logging.getLogger(__name__)

KINDS: dict[SourceKind, Kind] = {k.kind: k for k in (debian.KIND, gittree.KIND, tarball.KIND,
                                                     image.KIND)}


def _usage() -> str:
    return ", ".join(k.usage for k in KINDS.values())


def kind_of(spec: KernelSpec) -> Kind:
    return KINDS[spec.kind]


def parse_spec(text: str) -> KernelSpec:
    kind_text, sep, rest = text.partition(":")
    if not sep or not rest:
        raise SourceError(f"kernel spec {text!r} is not KIND:VALUE", fix=f"use {_usage()}")
    try:
        kind = SourceKind(kind_text)
    except ValueError:
        raise SourceError(f"unknown kernel spec kind {kind_text!r} in {text!r}",
                          fix=f"use {_usage()}") from None
    return KINDS[kind].parse(rest)


def check(spec: KernelSpec) -> None:
    """What plan time can tell of the source (a pinned version no longer served)."""
    kind_of(spec).check(spec)


def prepare(spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
    return kind_of(spec).prepare(spec, log_dir=log_dir)


def base_name(spec: KernelSpec) -> str | None:
    """The base a per-base series variant is named after: debian:6.1 -> "6.1"."""
    return kind_of(spec).base_name(spec)


def version_of(spec: KernelSpec) -> str:
    """What the source is before any tree exists: a package version, a tree id, a digest."""
    return kind_of(spec).version(spec)


DEFAULT_KERNEL = "debian:6.12"  # outside a kernel tree, when no kernel is named


def kernel_or_yours(kernel: str | None, here: Path) -> tuple[str, str]:
    """The kernel named, else the kernel git tree `here` is in, else the default; and how
    to say it."""
    if kernel:
        return kernel, kernel
    tree = enclosing_kernel_tree(here)
    if tree is None:
        return DEFAULT_KERNEL, DEFAULT_KERNEL
    return f"git:{tree}", f"your tree {tree} (HEAD + uncommitted changes)"


def enclosing_kernel_tree(start: Path) -> Path | None:
    """The top of the kernel git tree `start` is in (the user's own tree), or None."""
    res = git_run(start, "rev-parse", "--show-toplevel", timeout=30)
    if not res.ok:
        return None
    top = Path(res.output.strip())
    return top if is_kernel_tree(top) else None


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
