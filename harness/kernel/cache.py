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

Export and import (`harness cache export`, `harness cache import`): one archive (tar, with
a manifest `harness-cache.json` naming its entries) of stored kernels, test builds and
kselftest.h copies, which a CI test job imports to run a cell without building, or a new
machine to start warm. Which kernel a cell uses is known only once its tree is patched and
configured, so an export names runs (the kernels their cells booted, the test builds used
while they ran) or entries. An import puts each entry in place whole or not at all.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import fnmatch
import gzip
import io
import json
import logging
import lzma
import os
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from harness.base import atomic, paths
from harness.base.errors import HarnessError
from harness.base.gitcmd import git_run
from harness.kernel import build

log = logging.getLogger(__name__)

USE_FILE = ".harness-use.json"
SIZES_FILE = "sizes.json"  # path -> [last write seen, when measured, bytes]
SIZE_TTL_S = 3600.0  # a remembered size older than this is measured again
DEFAULT_MAX = "40G"
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
               "bpftool": "bpftool built from a tree"}


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
    and its products; a repository's object store): what changes an entry's size. A use
    alone (a kernel booted, a series checked out again, the use file written into the
    entry) does not; an entry none of these exist in (a stored kernel, a test build) is
    written once."""
    newest = 0.0
    for p in (entry / ".harness-build", entry / ".harness-build" / "vmlinux",
              entry / ".harness-build" / ".config", entry / ".harness-build" / "tools",
              entry / "objects", entry / "objects" / "pack", entry / ".git" / "objects",
              entry / ".git" / "objects" / "pack"):
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

    def save(self) -> None:
        # best effort: a size not remembered is measured again next time
        with contextlib.suppress(OSError):
            atomic.write_text(self.file, json.dumps(self.seen) + "\n")


def entries() -> list[Entry]:
    root = paths.cache_root()
    sizes = _Sizes(root)
    found = _entries(root, sizes)
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


def prune(limit: int, *, dry_run: bool = False) -> Pruned:
    """Evict down to `limit`, least recently used first; nothing while another harness
    command uses the cache (the caller must not hold in_use() itself)."""
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


# ---- export and import: one archive of entries, for a CI job or to seed a machine ----

MANIFEST = "harness-cache.json"  # the archive's first member: what it holds
ARCHIVE_SCHEMA = 1
# What travels: the kernel store, the test builds and the kselftest.h copies. Sources and
# worktrees stay: they are large, and made again from the sources where they are needed.
PORTABLE = ("kernels", *TEST_BUILDS, "kselftest-build", "kselftest-h")
# A file's modification time to the nanosecond (tar keeps a float): vmlinux.h is cached
# by its vmlinux's path and st_mtime_ns (testkinds/own.py), which must survive the trip.
_MTIME_NS = "HARNESS.mtime_ns"
_COMPRESSION = {".tar": "", ".tar.gz": "gz", ".tgz": "gz", ".tar.xz": "xz"}
_FIX_ARCHIVE = "make the archive with `harness cache export`"


@dataclass(frozen=True, kw_only=True)
class Exported:
    archive: Path
    entries: dict[str, str]  # name under the cache root (kernels/<key>) -> what it is
    size: int  # bytes on disk of what went in (before any compression)


@dataclass(frozen=True, kw_only=True)
class Imported:
    added: dict[str, str]  # name -> what it is
    present: dict[str, str]  # already in the cache: left as it was


def _what(entry: Path) -> str:
    """What an entry is, for the archive's manifest and what import says."""
    top = entry.parent.name
    if top == "kernels":
        return _use(entry)[1] or _kernel_for(entry) or "stored kernel"
    if top == "kselftest-h":
        with contextlib.suppress(OSError):
            return (entry / "origin").read_text().strip()
        return "kselftest.h"
    return TEST_BUILDS.get(top, "kselftest build directory")


def _kselftest_headers(kernel: Path) -> list[Path]:
    """The kselftest.h copies of the kernel's major.minor: what a prebuilt image of it
    would print KTAP through (testkinds/own.py, stored_kselftest_h)."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        release = str(json.loads((kernel / "meta.json").read_text())["release"])
        mm = ".".join(release.split(".")[:2]).split("-")[0]
        return sorted(d for d in (paths.cache_root() / "kselftest-h").glob(f"{mm}-*")
                      if d.is_dir())
    return []


def _started(doc: dict[str, Any]) -> float | None:
    with contextlib.suppress(TypeError, ValueError):
        return datetime.strptime(str(doc.get("started")), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    return None


def run_entries(runs: list[tuple[dict[str, Any], Path]], cells: tuple[str, ...] = ()
                ) -> dict[str, str]:
    """The entries runs used (each run: its results.json and that file), as this cache
    holds them: the stored kernel each of their cells (or of `cells`) booted, the
    kselftest.h copies of those kernels' versions, and the test builds used while a run
    ran, whichever cells they were for (a test build's last use is its modification time,
    so on a machine where other runs used the cache at the same time, theirs come too).
    -> name -> what it is."""
    root = paths.cache_root()
    found: dict[str, str] = {}
    seen: set[str] = set()
    for doc, file in runs:
        chosen = [c for c in doc.get("cells") or []
                  if isinstance(c, dict) and (not cells or c.get("cell") in cells)]
        for c in chosen:
            seen.add(str(c.get("cell")))
            image = Path(str(c.get("image") or ""))
            if not c.get("image"):
                raise CacheError(f"cell {c.get('cell')} of {file}: no kernel was stored "
                                 f"(status {c.get('status')})",
                                 fix="export a run whose cells built their kernels")
            if image.parent.parent.name != "kernels":
                raise CacheError(f"cell {c.get('cell')} of {file} booted {image}, a "
                                 "prebuilt image: not in the cache",
                                 fix="copy the image itself")
            stored = root / "kernels" / image.parent.name  # by key: wherever the cache was
            if not build.stored_image(stored).is_file():
                raise CacheError(f"cell {c.get('cell')} of {file}: its kernel "
                                 f"{image.parent.name} is not in the cache {root}",
                                 fix="export where the run ran, with its HARNESS_CACHE; "
                                     "an evicted kernel is built again by running the cell")
            found[f"kernels/{stored.name}"] = _what(stored)
            for header in _kselftest_headers(stored):
                found[f"kselftest-h/{header.name}"] = _what(header)
        since = _started(doc)
        if since is not None:
            until = file.stat().st_mtime + 1  # results.json is written last
            for e in entries():
                if e.kind is Kind.TESTS and since - 1 <= e.last_used <= until:
                    found.update({str(p.relative_to(root)): _what(p) for p in e.paths})
    if missing := [c for c in cells if c not in seen]:
        raise CacheError(f"no cell {', '.join(missing)} in the run(s) given",
                         fix="name cells the runs hold (their results.json), or no --cell")
    return found


def named_entries(patterns: tuple[str, ...]) -> dict[str, str]:
    """Entries by their names as `harness cache` lists them (globs): kernels and test
    builds only. -> name under the cache root -> what it is."""
    found = entries()
    if unmatched := [p for p in patterns if not any(fnmatch.fnmatchcase(e.name, p)
                                                    for e in found)]:
        raise CacheError(f"no cache entry is named {', '.join(unmatched)}",
                         fix="harness cache lists the entries")
    chosen = [e for e in found if any(fnmatch.fnmatchcase(e.name, p) for p in patterns)]
    if fixed := [e.name for e in chosen if e.kind not in (Kind.KERNEL, Kind.TESTS)]:
        raise CacheError(f"{', '.join(fixed)}: worktrees and sources are not exported",
                         fix="they are made again from the sources: export the kernels "
                             "and test builds")
    root = paths.cache_root()
    return {str(p.relative_to(root)): _what(p) for e in chosen for p in e.paths}


def _compression(path: Path) -> str:
    for suffix, compression in _COMPRESSION.items():
        if path.name.endswith(suffix):
            return compression
    raise CacheError(f"{path}: an archive is named .tar, .tar.gz or .tar.xz",
                     fix=f"{path.name}.tar")


def _writing(path: Path, compression: str) -> gzip.GzipFile | lzma.LZMAFile | io.BufferedWriter:
    """The archive's file, compressed as its name says."""
    if compression == "gz":
        return gzip.open(path, "wb")
    if compression == "xz":
        return lzma.open(path, "wb")
    return path.open("wb")


def export(names: dict[str, str], out: Path) -> Exported:
    """Write these entries (name under the cache root -> what it is) into one archive,
    whole or not at all; while it is written, nothing is evicted."""
    if not names:
        raise CacheError("nothing to export", fix="give --run RUN or --entry NAME")
    compression = _compression(out)
    root = paths.cache_root()
    manifest = json.dumps({"schema": ARCHIVE_SCHEMA, "exported": time.strftime(
        "%Y-%m-%dT%H:%M:%S%z"), "entries": [{"name": n, "what": w} for n, w in
                                            sorted(names.items())]}, indent=1).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    size = 0
    with in_use():
        try:
            with _writing(tmp, compression) as raw, tarfile.open(
                    fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mtime = len(manifest), int(time.time())
                tar.addfile(info, io.BytesIO(manifest))
                for name in sorted(names):
                    for path in sorted([root / name, *(root / name).rglob("*")]):
                        if path.name == USE_FILE:  # its use here says nothing there
                            continue
                        member = tar.gettarinfo(str(path), str(path.relative_to(root)))
                        if member.islnk():  # a file seen before: stored whole again,
                            # so an entry never depends on another
                            member.type, member.linkname = tarfile.REGTYPE, ""
                            member.size = path.stat().st_size
                        if _link_escapes(member, name):
                            raise CacheError(f"{path} links to {member.linkname}, outside "
                                             f"its entry {name}: an import would refuse it",
                                             fix=f"leave {name} out, or build it again")
                        if member.isfile():
                            member.pax_headers = {**member.pax_headers,
                                                  _MTIME_NS: str(path.stat().st_mtime_ns)}
                            size += member.size
                            with path.open("rb") as fh:
                                tar.addfile(member, fh)
                        else:
                            tar.addfile(member)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return Exported(archive=out, entries=dict(sorted(names.items())), size=size)


def _read_manifest(tar: tarfile.TarFile, archive: Path) -> dict[str, str]:
    try:
        fh = tar.extractfile(MANIFEST)
        data = json.loads(fh.read()) if fh is not None else None
    except (KeyError, ValueError, tarfile.TarError):
        data = None
    if not isinstance(data, dict) or data.get("schema") != ARCHIVE_SCHEMA or \
            not isinstance(data.get("entries"), list):
        raise CacheError(f"{archive}: no {MANIFEST} of schema {ARCHIVE_SCHEMA} in it: not "
                         "an archive of the harness cache", fix=_FIX_ARCHIVE)
    out: dict[str, str] = {}
    for e in data["entries"]:
        name = e.get("name") if isinstance(e, dict) else None
        parts = PurePosixPath(str(name)).parts
        if not isinstance(name, str) or len(parts) != 2 or parts[0] not in PORTABLE or \
                parts[1] in ("..", ".") or str(PurePosixPath(*parts)) != name:
            raise CacheError(f"{archive}: entry {name!r}: not DIR/NAME with DIR one of "
                             f"{', '.join(PORTABLE)}", fix=_FIX_ARCHIVE)
        out[name] = str(e.get("what") or "")
    return out


def _entry_of(name: str, entries: dict[str, str]) -> str | None:
    return next((e for e in entries if name == e or name.startswith(e + "/")), None)


def _link_escapes(member: tarfile.TarInfo, entry: str) -> bool:
    """A symbolic link (relative to its directory) or a hard link (an archive path) that
    points out of its entry, or anywhere absolute."""
    if not (member.issym() or member.islnk()):
        return False
    base = PurePosixPath(member.name).parent if member.issym() else PurePosixPath()
    target = os.path.normpath(str(base / member.linkname))
    return member.linkname.startswith("/") or _entry_of(target, {entry: ""}) is None


def _check_members(members: list[tarfile.TarInfo], entries: dict[str, str],
                   archive: Path) -> None:
    """Every member inside one of the manifest's entries, as a plain relative path; links
    only within their entry; no devices."""
    held: set[str] = set()
    for m in members:
        if m.name == MANIFEST:
            continue
        parts = PurePosixPath(m.name).parts
        if m.name.startswith("/") or ".." in parts or not parts:
            raise CacheError(f"{archive}: member {m.name!r} is an absolute path or goes up "
                             "(..): refused, nothing imported", fix=_FIX_ARCHIVE)
        entry = _entry_of(str(PurePosixPath(*parts)), entries)
        if entry is None:
            raise CacheError(f"{archive}: member {m.name} is in no entry its {MANIFEST} "
                             "lists: refused, nothing imported", fix=_FIX_ARCHIVE)
        held.add(entry)
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            raise CacheError(f"{archive}: member {m.name} is a device or a FIFO: refused, "
                             "nothing imported", fix=_FIX_ARCHIVE)
        if _link_escapes(m, entry):
            raise CacheError(f"{archive}: member {m.name} links to {m.linkname}, outside "
                             f"its entry {entry}: refused, nothing imported", fix=_FIX_ARCHIVE)
    if empty := sorted(set(entries) - held):
        raise CacheError(f"{archive}: entr(ies) {', '.join(empty)} listed but not in it",
                         fix=_FIX_ARCHIVE)


def import_archive(archive: Path) -> Imported:
    """Restore an archive's entries into the cache. Each entry is extracted whole into a
    scratch directory of the cache and renamed into place, so none is ever seen half
    imported; an entry the cache already holds is left as it is (entries are named by what
    they hold). Nothing is imported from an archive with an absolute path, a `..`, a link
    out of its entry, or a member its manifest does not list."""
    root = paths.cache_root()
    with contextlib.ExitStack() as stack:
        try:
            tar = stack.enter_context(tarfile.open(archive, "r:*"))
        except (OSError, tarfile.TarError) as exc:
            raise CacheError(f"{archive}: not a readable archive: {exc}",
                             fix=_FIX_ARCHIVE) from None
        stack.enter_context(in_use())
        names = _read_manifest(tar, archive)
        try:
            members = tar.getmembers()
        except (OSError, tarfile.TarError) as exc:
            raise CacheError(f"{archive}: not a whole archive: {exc}; nothing imported",
                             fix=_FIX_ARCHIVE) from None
        _check_members(members, names, archive)
        added: dict[str, str] = {}
        present: dict[str, str] = {}
        scratch = Path(tempfile.mkdtemp(prefix=".import-", dir=root))
        try:
            body = [m for m in members if m.name != MANIFEST]
            tar.extractall(scratch, members=body, filter="data")
            for m in body:
                if m.isfile() and _MTIME_NS in m.pax_headers:
                    ns = int(m.pax_headers[_MTIME_NS])
                    os.utime(scratch / m.name, ns=(ns, ns))
            for name in names:
                if name.startswith("kernels/") and not (
                        (scratch / name / "meta.json").is_file()
                        and build.stored_image(scratch / name).is_file()):
                    raise CacheError(f"{archive}: kernel {name} lacks its image or "
                                     "meta.json: refused, nothing imported", fix=_FIX_ARCHIVE)
            for name, what in names.items():
                dest = root / name
                if dest.exists():
                    present[name] = what
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.rename(scratch / name, dest)  # the same file system: whole or absent
                added[name] = what
                if name.startswith("kernels/"):
                    note_use(dest, what or f"imported from {archive.name}")
                else:
                    paths.touch(dest)  # imported now counts as used now
        except (OSError, ValueError, tarfile.TarError) as exc:
            raise CacheError(f"{archive}: import stopped: {exc}; entries already renamed "
                             "into place are whole, the rest was not imported",
                             fix="free space in HARNESS_CACHE, or export the archive again"
                             ) from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return Imported(added=added, present=present)
