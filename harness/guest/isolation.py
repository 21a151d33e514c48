"""What a guest sees of the host, and what the host takes back from it.

The guest runs the series' and the tree's code as root. It boots on a root of its own
(rootfs.py), never the host's unless the user asks for it (`--host-root`, the host's
arch only), and sees beside it only:

- the directories it writes (the cell's guest results directory), read-write;
- read-only, the build outputs it runs: the test directories the plan names, mirrored
  into a view of the cache that holds them alone (hard links, at the cache's path: the
  plan's paths hold in the guest) and mounted over the cache's path; never the whole
  cache (other trees' sources, other runs' results);
- read-only, the harness's guest runner directory, and a `-- CMD`'s own directory, which
  the user named.

After the guest is gone, what it left in its writable directories is taken back only as
regular files and directories: a symlink (to a host file the harness would then read),
a FIFO (that would block the reader), a device node (QEMU creates what the guest asks,
as the user QEMU runs as) is removed, and set-user-ID bits are cleared (`sanitize`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import target
from harness.base import paths
from harness.guest import rootfs

log = logging.getLogger(__name__)

VIEW_DIR = "guest-view"  # under the cache: one directory per boot, removed after it
STALE_VIEW_S = 24 * 3600  # a view this old was left by a harness killed outright


@dataclass(frozen=True, kw_only=True)
class OwnRoot:
    """A guest on a root of its own: what vng is told (--root, --rwdir, --rodir)."""

    arch: str  # vng's --arch ("" for the host's arch: vng's default)
    root: Path  # exported as the guest's /
    rodirs: tuple[tuple[Path, Path], ...]  # (guest path, host path), read-only
    identity: rootfs.Identity

    def mount_points(self, rwdirs: Sequence[Path]) -> None:
        """The directories vng mounts the host's on, made in the root beforehand: the
        guest's root is read-only to it (empty directories: not in its content hash)."""
        for d in (*rwdirs, *(g for g, _ in self.rodirs)):
            (self.root / d.relative_to("/")).mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return f"guest root {self.identity.digest}"


def least(dirs: Sequence[Path]) -> list[Path]:
    """The fewest directories that hold all of these (one inside another goes with it)."""
    wanted = sorted({p.resolve() for p in dirs})
    return [p for p in wanted if not any(q != p and p.is_relative_to(q) for q in wanted)]


@contextlib.contextmanager
def own_root(arch_name: str, shared: Sequence[Path], *,
             log_dir: Path) -> Iterator[OwnRoot]:
    """The guest's root and what it reads, for the time of one boot: the outputs under
    the cache mirrored into a view of their own, the rest (the runner, a command's
    directory) each read-only at its path."""
    arch = target.arch(arch_name)
    made = rootfs.made(arch, log_dir=log_dir)
    cache = paths.cache_root().resolve()
    inside = [p for p in least(shared) if p.is_relative_to(cache)]
    outside = [p for p in least(shared) if not p.is_relative_to(cache)]
    view = stage(inside, cache) if inside else None
    try:
        rodirs = ([(cache, view)] if view is not None else []) + [(p, p) for p in outside]
        yield OwnRoot(arch=arch.name if target.foreign(arch.name) else "",
                      root=made.root, rodirs=tuple(rodirs), identity=made.identity)
    finally:
        if view is not None:
            shutil.rmtree(view, ignore_errors=True)


def stage(dirs: Sequence[Path], cache: Path) -> Path:
    """A directory laid out as the cache but holding only these directories (and what
    their symlinks into the cache point at): hard links, so nothing is copied; a copy
    where a link cannot be made."""
    views = paths.sub(VIEW_DIR)
    for old in views.glob("view-*"):
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > STALE_VIEW_S:
                shutil.rmtree(old, ignore_errors=True)
    view = Path(tempfile.mkdtemp(prefix="view-", dir=views))
    todo = list(dirs)
    done: set[Path] = set()
    while todo:
        src = todo.pop()
        if src in done or not src.is_relative_to(cache) or src.is_relative_to(view.parent):
            continue
        done.add(src)
        dest = view / src.relative_to(cache)
        todo += _mirror(src, dest, cache)
    return view


def _mirror(src: Path, dest: Path, cache: Path) -> list[Path]:
    """src (a directory or a file) at dest; the cache paths its symlinks point at."""
    follow: list[Path] = []
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        target_ = os.readlink(src)
        dest.symlink_to(target_)
        real = (src.parent / target_).resolve()
        if real.is_relative_to(cache):
            follow.append(real)
        return follow
    if src.is_file():
        _link_or_copy(src, dest)
        return follow
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        there = dest / here.relative_to(src)
        there.mkdir(parents=True, exist_ok=True)
        shutil.copystat(here, there)
        for name in [*filenames, *(d for d in dirnames if (here / d).is_symlink())]:
            p = here / name
            if p.is_symlink():
                t = os.readlink(p)
                (there / name).symlink_to(t)
                real = (p.parent / t).resolve()
                if real.is_relative_to(cache) and not real.is_relative_to(src):
                    follow.append(real)
            elif p.is_file():
                _link_or_copy(p, there / name)
    return follow


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


@dataclass(frozen=True, kw_only=True)
class Removed:
    path: str  # relative to the directory sanitized
    what: str  # "symlink to X", "fifo", "device", "socket", "set-user-ID bit"


def sanitize(directory: Path) -> tuple[Removed, ...]:
    """What a guest left in a directory it wrote, made safe for the harness (and whoever
    opens the results) to read: only regular files and directories stay; set-user-ID and
    set-group-ID bits are cleared. Runs after the guest is gone."""
    if not directory.is_dir() or directory.is_symlink():
        return ()
    out: list[Removed] = []
    for dirpath, dirnames, filenames in os.walk(directory):
        here = Path(dirpath)
        for name in [*filenames, *dirnames]:
            p = here / name
            st = p.lstat()
            rel = str(p.relative_to(directory))
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                out.append(Removed(path=rel, what=f"symlink to {os.readlink(p)[:120]}"))
                p.unlink()
            elif stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                if mode & (stat.S_ISUID | stat.S_ISGID):
                    os.chmod(p, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
                    out.append(Removed(path=rel, what="set-user/group-ID bit"))
            else:
                kind = ("fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode)
                        else "device node")
                out.append(Removed(path=rel, what=kind))
                p.unlink()
        dirnames[:] = [d for d in dirnames if (here / d).is_dir()
                       and not (here / d).is_symlink()]
    if out:
        log.warning("the guest left %d thing(s) in %s that are not regular files: removed "
                    "(%s)", len(out), directory,
                    "; ".join(f"{r.path}: {r.what}" for r in out[:5]))
    return tuple(out)
