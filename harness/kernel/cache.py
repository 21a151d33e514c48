"""What the cache holds, when each entry was last used and for what, and its eviction.

Entries, the units that are evicted whole:
- `kernel`: kernels/<key>, one stored kernel (rebuilt when asked for again);
- `worktree`: work/<name> with its build directory work/<name>/.harness-build (build/<name>
  in caches made before), the tree a (source, config) is checked out and built in (checked
  out again, and rebuilt from ccache, when needed);
- `source`: src/<name>, a Debian import or a clone of a user's tree, evicted only once no
  worktree of it is left;
- `tests`: a test build made for a kernel or tree (selftests/, test_progs/, perf/,
  vmlinux-h/, kselftests/ with its kselftest-build/ twin), built again when needed. These
  are not small (a test_progs build is ~0.5G, one per kernel and tree) and were once left
  out, which let a cache grow past its limit by their sum.
Each use of an entry touches its `.harness-use.json` (the time, and what it was for); an
entry never noted (made before this existed, or a test build: `paths.touch()` sets its
modification time on each use) counts as used when it was last modified.

Sizes are measured by walking an entry's files (a worktree holds ~100,000), which for a
whole cache takes seconds; every command that uses the cache prunes it when it ends, so
each entry's size is remembered (sizes.json) and measured again only once a build or a
fetch wrote into it since (the newest of its build directory, vmlinux, .config, built
tools and a repository's object store; a worktree's checkout apart from its build
directory), or the size is an hour old. A use alone changes no size.

Eviction goes least recently used first until the cache fits its limit
($HARNESS_CACHE_MAX, default 40G), and only while no other harness command that uses the
cache runs: every such command holds `in_use()` (a shared lock) from start to end, and
eviction needs it exclusively, so nothing a running harness holds is ever removed.

A disk is shared: what is free under the cache can fall far below what its limit leaves
(a CI machine's disk once filled mid-run). Before a command that may build takes the cache,
`make_room()` evicts least recently used entries too while less than ROOM is free there,
so a run that must build has room to, and a warm one loses nothing while the disk has
room. It keeps what was used in the last minutes (a parent command's), and evicts nothing
when even that would not make the room.

Export and import (`harness cache export`, `harness cache import`): kernel/archive.py.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import fnmatch
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.base import atomic, paths
from harness.base.errors import HarnessError
from harness.base.gitcmd import git_run

log = logging.getLogger(__name__)

USE_FILE = ".harness-use.json"
SIZES_FILE = "sizes.json"  # path -> [last write seen, when measured, bytes]
SIZE_TTL_S = 3600.0  # a remembered size older than this is measured again
TOTAL_KEY = "!total"  # in SIZES_FILE: [file system bytes used, when counted, cache bytes]
DEFAULT_MAX = "40G"
# Free space a command that may build wants under the cache before it starts. A first
# 6.12 run wrote 5.2 GB (2026-11-29: the source import 2.2 GB, the worktree with its build
# directory 2.7 GB, ccache 0.3 GB); a second worktree (another config) or a test_progs
# build beside it doubles that.
ROOM = 10 * 2**30
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGT]?)i?B?", re.IGNORECASE)


class CacheError(HarnessError):
    pass


class Kind(enum.Enum):
    KERNEL = "kernel"
    WORKTREE = "worktree"
    SOURCE = "source"
    TESTS = "tests"


# Test builds: the directory under the cache root -> what an entry in it is (for the
# listing); kselftests/<name> goes with kselftest-build/<name>, its O= directory.
TEST_BUILDS = {"selftests": "own selftest build", "test_progs": "test_progs build",
               "perf": "perf build", "vmlinux-h": "vmlinux.h of a kernel",
               "kselftests": "kselftest install", "rootfs": "guest root",
               "bpftool": "bpftool built from a tree",
               "perf-build": "perf's build directory of a worktree"}


@dataclass(frozen=True, kw_only=True)
class Entry:
    kind: Kind
    name: str
    paths: tuple[Path, ...]  # removed together
    size: int  # bytes
    last_used: float  # epoch seconds
    used_for: str


def parse_size(text: str) -> int:
    """"40G", "512M", "1.5T", "0" -> bytes (powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise CacheError(f"{text!r} is not a size", fix="give a size such as 40G or 512M")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def max_size() -> int:
    return parse_size(os.environ.get("HARNESS_CACHE_MAX", DEFAULT_MAX))


def note_use(entry: Path, used_for: str) -> None:
    """This entry (a stored kernel, a worktree, a source) was just used, for this."""
    if entry.is_dir():
        with contextlib.suppress(OSError):
            atomic.write_text(entry / USE_FILE, json.dumps(
                {"last_used": time.time(), "for": used_for}) + "\n")


@contextlib.contextmanager
def in_use() -> Iterator[None]:
    """Held (shared) by every command that reads or fills the cache, for its whole run."""
    with (paths.sub("locks") / "cache-in-use.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def _alone() -> Iterator[bool]:
    """True (the lock held exclusively) when no other harness command uses the cache."""
    with (paths.sub("locks") / "cache-in-use.lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _size(path: Path, *, without: str = "") -> int:
    """Bytes on disk under path, leaving out its top-level directory `without`."""
    total = 0
    for root, dirs, files in os.walk(path):
        if without and root == str(path) and without in dirs:
            dirs.remove(without)
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def _use(entry: Path) -> tuple[float, str]:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        data = json.loads((entry / USE_FILE).read_text())
        return float(data["last_used"]), str(data["for"])
    with contextlib.suppress(OSError):
        return entry.stat().st_mtime, ""
    return 0.0, ""


def _kernel_for(entry: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        meta = json.loads((entry / "meta.json").read_text())
        return f"kernel {meta.get('release', '?')}"
    return ""


def _last_built(entry: Path) -> float:
    """When a build or a fetch last wrote into this entry (a worktree's build directory
    and its products; a repository's packs): what changes an entry's size. A use alone (a
    kernel booted, a series checked out again, the use file written into the entry) does
    not, nor do the few loose objects each `git am` of a series writes (a new fan-out
    directory of objects/ would otherwise walk a 2 GB repository after a one-line patch:
    a second of every developer's run), left to SIZE_TTL_S; an entry none of these exist
    in (a stored kernel, a test build) is written once."""
    newest = 0.0
    for p in (entry / ".harness-build", entry / ".harness-build" / "vmlinux",
              entry / ".harness-build" / ".config", entry / ".harness-build" / "tools",
              entry / "objects" / "pack", entry / ".git" / "objects" / "pack"):
        with contextlib.suppress(OSError):
            newest = max(newest, p.stat().st_mtime)
    return newest


class _Sizes:
    """Entry sizes, remembered across commands: a size is measured again when a build or
    a fetch wrote into its entry since (_last_built) or the size is older than SIZE_TTL_S.
    Walking a worktree's 80,000 files after every run cost about a second each."""

    def __init__(self, root: Path) -> None:
        self.file = root / SIZES_FILE
        self.now = time.time()
        self.known: dict[str, list[float]] = {}
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            self.known = {str(k): [float(x) for x in v]
                          for k, v in json.loads(self.file.read_text()).items()}
        self.seen: dict[str, list[float]] = {}

    def of(self, path: Path) -> int:
        """A worktree's checkout (measured again only when old: a series checked out
        changes it little) apart from its build directory (measured again after a build),
        any other entry whole."""
        build = paths.build_dir(path)
        if not build.is_dir():
            return self._of(path, _last_built(path))
        return (self._of(path, 0.0, without=build.name) +
                self._of(build, _last_built(path)))

    def _of(self, path: Path, mark: float, *, without: str = "") -> int:
        key = f"{path}!{without}" if without else str(path)
        memo = self.known.get(key)
        if memo and len(memo) == 3 and memo[0] == mark and self.now - memo[1] < SIZE_TTL_S:
            self.seen[key] = memo
            return int(memo[2])
        size = _size(path, without=without)
        self.seen[key] = [mark, self.now, float(size)]
        return size

    def bound(self) -> int | None:
        """An upper bound on the cache's size now: its total when last counted (within
        SIZE_TTL_S) plus what its file system gained since; None when there is none. It
        misses only what the cache gained while the rest of the file system lost as much."""
        memo = self.known.get(TOTAL_KEY)
        if not memo or len(memo) != 3 or self.now - memo[1] >= SIZE_TTL_S:
            return None
        return int(memo[2] + max(0.0, _fs_used(self.file.parent) - memo[0]))

    def counted(self, total: int) -> None:
        self.seen[TOTAL_KEY] = [float(_fs_used(self.file.parent)), self.now, float(total)]

    def save(self) -> None:
        # best effort: a size not remembered is measured again next time
        with contextlib.suppress(OSError):
            atomic.write_text(self.file, json.dumps(self.seen) + "\n")


def _fs_used(path: Path) -> int:
    """Bytes in use on path's file system (0 when it cannot be read)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def entries() -> list[Entry]:
    root = paths.cache_root()
    sizes = _Sizes(root)
    found = _entries(root, sizes)
    sizes.counted(sum(e.size for e in found))
    sizes.save()
    return found


def _entries(root: Path, sizes: _Sizes) -> list[Entry]:
    found: list[Entry] = []
    for d in sorted((root / "kernels").glob("[!.]*")):
        when, used_for = _use(d)
        found.append(Entry(kind=Kind.KERNEL, name=d.name, paths=(d,), size=sizes.of(d),
                           last_used=when, used_for=used_for or _kernel_for(d)))
    for d in sorted((root / "work").glob("[!.]*")):
        build = root / "build" / d.name
        when, used_for = _use(d)
        both = (d, build) if build.exists() else (d,)
        found.append(Entry(kind=Kind.WORKTREE, name=d.name, paths=both,
                           size=sum(sizes.of(p) for p in both), last_used=when,
                           used_for=used_for))
    for d in sorted((root / "src").glob("[!.]*")):
        when, used_for = _use(d)
        found.append(Entry(kind=Kind.SOURCE, name=d.name, paths=(d,), size=sizes.of(d),
                           last_used=when, used_for=used_for))
    for sub, what in TEST_BUILDS.items():
        # an O= directory whose install failed is an entry too
        tops = (root / sub, root / "kselftest-build") if sub == "kselftests" else (root / sub,)
        for name in sorted({d.name for top in tops for d in top.glob("[!.]*") if d.is_dir()}):
            parts = tuple(top / name for top in tops if (top / name).is_dir())
            used = max(_use(p)[0] for p in parts)
            found.append(Entry(kind=Kind.TESTS, name=f"{sub}/{name}", paths=parts,
                               size=sum(sizes.of(p) for p in parts),
                               last_used=used, used_for=what))
    return found


def _evictable(e: Entry, kept: list[Entry]) -> bool:
    # A source goes only with its last worktree (worktrees are named <source>-<configs>).
    return e.kind is not Kind.SOURCE or not any(
        k.kind is Kind.WORKTREE and k.name.startswith(f"{e.name}-") for k in kept)


def plan_eviction(found: list[Entry], limit: int) -> list[Entry]:
    """Least recently used first, until what is left fits in `limit` bytes. Pure."""
    kept = sorted(found, key=lambda e: e.last_used)
    total = sum(e.size for e in kept)
    evicted: list[Entry] = []
    progress = True
    while total > limit and progress:
        progress = False
        for e in kept:
            if _evictable(e, kept):
                kept.remove(e)
                evicted.append(e)
                total -= e.size
                progress = True
                break
    return evicted


def _remove(e: Entry) -> None:
    for p in e.paths:
        shutil.rmtree(p, ignore_errors=True)
    if e.kind is Kind.WORKTREE:
        # the source repository forgets the worktree, so it can be added again
        for src in (paths.cache_root() / "src").glob("[!.]*"):
            if e.name.startswith(f"{src.name}-"):
                git_run(src, "worktree", "prune", timeout=120)


@dataclass(frozen=True, kw_only=True)
class Pruned:
    evicted: tuple[Entry, ...]
    skipped_reason: str = ""  # why nothing was evicted although over the limit
    total_before: int = 0
    limit: int = 0


def prune(limit: int, *, dry_run: bool = False, after_command: bool = False) -> Pruned:
    """Evict down to `limit`, least recently used first; nothing while another harness
    command uses the cache (the caller must not hold in_use() itself). After a command,
    nothing is walked while _Sizes.bound() keeps the cache under `limit`: counting the
    build directory a one-line change relinked was 0.1 s of a developer's run."""
    if after_command:
        bound = _Sizes(paths.cache_root()).bound()
        if bound is not None and bound <= limit:
            return Pruned(evicted=(), total_before=bound, limit=limit)
    found = entries()
    total = sum(e.size for e in found)
    chosen = plan_eviction(found, limit)
    if not chosen or dry_run:
        return Pruned(evicted=tuple(chosen), total_before=total, limit=limit)
    with _alone() as alone:
        if not alone:
            return Pruned(evicted=(), total_before=total, limit=limit,
                          skipped_reason="another harness command is using the cache")
        for e in chosen:
            log.info("cache: evicting %s %s (%s, last used %s)", e.kind.value, e.name,
                     human(e.size), time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)))
            _remove(e)
    return Pruned(evicted=tuple(chosen), total_before=total, limit=limit)


RECENT_S = 600.0  # an entry used this recently is kept when making room


def plan_room(found: list[Entry], free: int, room: int, now: float) -> list[Entry]:
    """What to evict, least recently used first, for `room` bytes to be free where `free`
    are: nothing when there is room, and nothing when evicting every entry not used in the
    last RECENT_S seconds would not make it (a warm cache emptied for a build that has no
    room anyway helps nobody). Pure."""
    if free >= room:
        return []
    old = [e for e in found if now - e.last_used >= RECENT_S]
    total = sum(e.size for e in old)
    if free + total < room:
        return []
    return plan_eviction(old, total - (room - free))


@dataclass(frozen=True, kw_only=True)
class Room:
    free: int  # bytes free under the cache before
    room: int  # what was wanted
    done: Pruned | None  # None: there was room


def free_under(root: Path) -> int:
    """Bytes free to us on the file system that holds root."""
    return shutil.disk_usage(root).free


def make_room(room: int | None = None) -> Room:
    """Evict least recently used entries while less than `room` (default ROOM) is free
    under the cache (the caller must not hold in_use() itself)."""
    room = ROOM if room is None else room
    free = free_under(paths.cache_root())
    if free >= room:
        return Room(free=free, room=room, done=None)
    found = entries()
    total = sum(e.size for e in found)
    chosen = plan_room(found, free, room, time.time())
    if not chosen:
        return Room(free=free, room=room, done=Pruned(evicted=(), total_before=total))
    with _alone() as alone:
        if not alone:
            return Room(free=free, room=room, done=Pruned(
                evicted=(), total_before=total,
                skipped_reason="another harness command is using the cache"))
        for e in chosen:
            log.info("cache: evicting %s %s (%s, last used %s) to make room", e.kind.value,
                     e.name, human(e.size),
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)))
            _remove(e)
    return Room(free=free, room=room, done=Pruned(evicted=tuple(chosen), total_before=total))


def drop(patterns: tuple[str, ...], *, dry_run: bool = False) -> Pruned:
    """Remove the entries whose names match these globs (what the user asked for), with
    the same guard as prune."""
    found = entries()
    chosen = [e for e in found if any(fnmatch.fnmatchcase(e.name, p) for p in patterns)]
    if unmatched := [p for p in patterns if not any(fnmatch.fnmatchcase(e.name, p)
                                                    for e in found)]:
        raise CacheError(f"no cache entry is named {', '.join(unmatched)}",
                         fix="harness cache lists the entries")
    total = sum(e.size for e in found)
    if dry_run:
        return Pruned(evicted=tuple(chosen), total_before=total)
    with _alone() as alone:
        if not alone:
            return Pruned(evicted=(), total_before=total,
                          skipped_reason="another harness command is using the cache")
        for e in chosen:
            _remove(e)
    return Pruned(evicted=tuple(chosen), total_before=total)


def human(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024:
            return f"{n:.0f}{unit}" if unit in ("B", "K") else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"


def render(found: list[Entry], limit: int, now: float | None = None) -> str:
    now = time.time() if now is None else now
    lines = [f"{'kind':<9} {'size':>7}  {'last used':<16} {'name':<44} for"]
    for e in sorted(found, key=lambda x: -x.last_used):
        age = _age(now - e.last_used)
        lines.append(f"{e.kind.value:<9} {human(e.size):>7}  {age:<16} {e.name:<44} "
                     f"{e.used_for or '-'}")
    total = sum(e.size for e in found)
    root = paths.cache_root()
    rest = [d for d in sorted(root.iterdir()) if d.is_dir() and d.name not in (
        "kernels", "work", "build", "src", "locks", "kselftest-build", *TEST_BUILDS)]
    lines.append("\nnot evicted: " + ", ".join(
        f"{d.name} {human(_size(d))}" for d in rest)
        + " (ccache keeps itself under CCACHE_MAXSIZE, 20G by default)")
    lines.append(f"{len(found)} entries, {human(total)} of the {human(limit)} limit "
                 f"($HARNESS_CACHE_MAX) in {paths.cache_root()}"
                 + ("; `harness cache prune` evicts the least recently used"
                    if total > limit else ""))
    return "\n".join(lines)


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def described(entry: Path) -> str:
    """What an entry is (an archive's manifest says it, and import): what it was last used
    for, or the kind of build it is."""
    top = entry.parent.name
    if top == "kernels":
        return _use(entry)[1] or _kernel_for(entry) or "stored kernel"
    if top == "kselftest-h":
        with contextlib.suppress(OSError):
            return (entry / "origin").read_text().strip()
        return "kselftest.h"
    return TEST_BUILDS.get(top, "kselftest build directory")
