"""The cache layout, decided here and nowhere else.

    $HARNESS_CACHE (default ~/.cache/harness)/
      src/<source>/          git repo per kernel source (Debian import or shared clone)
      work/<source>-<cfg>/   persistent worktree per (source, config), moved with checkout/am
        .harness-build/      its O= directory (see build_dir())
      kernels/<key>/         finished images by (tree id, .config hash, toolchain)
      selftests/<key>/       built selftests by (kernel's BTF types, test sources)
      test_progs/, perf/, vmlinux-h/, kselftests/, kselftest-build/: other test builds
      bpftool/<key>/         bpftool built from a tree's tools/ (testkinds/own.py)
      debian/<suite>/        the apt configuration of a Debian suite the host does not list
      rootfs/<arch>-<key>/   the guests' own roots, by their package versions (rootfs.py)
      guest-view/view-*/     what one boot's guest sees of the cache (isolation.py)
      sandbox/               the passwd and group the sandbox binds (base/sandbox.py)
      ccache/                CCACHE_DIR
      results/<run id>/      runs started inside a kernel tree without --out
      affected/<key>.json    which checks reach which kernel functions, per cell (--map)
      kvm-verdict.json       accel probe verdict per (host kernel, qemu version)
      locks/                 one lock file per build directory
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("HARNESS_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "harness"
    root.mkdir(parents=True, exist_ok=True)
    return root


def sub(name: str) -> Path:
    path = cache_root() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def touch(entry: Path) -> None:
    """A test build in the cache was just used: its modification time, which the cache's
    least-recently-used eviction reads (harness/kernel/cache.py)."""
    # gone or read-only: eviction then judges it by the time it was built
    with contextlib.suppress(OSError):
        os.utime(entry)


def is_kernel_tree(top: Path) -> bool:
    """A Linux source tree: Kconfig, kernel/, and a top Makefile that sets VERSION."""
    makefile = top / "Makefile"
    if not ((top / "Kconfig").is_file() and (top / "kernel").is_dir() and makefile.is_file()):
        return False
    with makefile.open(errors="replace") as f:
        return any(line.startswith("VERSION =") for line, _ in zip(f, range(20), strict=False))


def results_root(start: Path) -> Path:
    """Where runs go without --out: results/ in `start`, except inside a kernel source tree,
    which the harness never writes to: then the cache's results/."""
    here = start.resolve()
    if any(is_kernel_tree(d) for d in (here, *here.parents)):
        return cache_root() / "results"
    return here / "results"


def build_dir(worktree: Path) -> Path:
    """The O= directory of a worktree: directly inside it, so kbuild names every source
    relative to it (srctree is "..") and the compiler sees the same paths in every tree
    and config; ccache then hits across trees, worktrees and configs."""
    return worktree / ".harness-build"


def repo_root() -> Path:
    """The harness checkout (patches/, kconfigs/, selftests/ live here)."""
    return Path(__file__).resolve().parents[2]


def display(path: Path) -> str:
    """A path as the user would type it: relative to the harness checkout or the current
    directory when inside them, else absolute."""
    for base in (repo_root(), Path.cwd()):
        if path.is_absolute() and path.is_relative_to(base):
            return str(path.relative_to(base))
    return str(path)
