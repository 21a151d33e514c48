"""The cache's archives (`harness cache export`, `harness cache import`): one tar, with a
manifest `harness-cache.json` naming its entries, of stored kernels, test builds and
kselftest.h copies, which a CI test job imports to run a cell without building, or a new
machine to start warm. Which kernel a cell uses is known only once its tree is patched and
configured, so an export names runs (the kernels their cells booted, the test builds used
while they ran) or entries. An import puts each entry in place whole or not at all.
What the cache holds and its eviction: kernel/cache.py.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gzip
import io
import json
import lzma
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

from harness.base import paths
from harness.base.model import RunResult
from harness.kernel import build, cache
from harness.kernel.cache import (
    TEST_BUILDS,
    USE_FILE,
    CacheError,
    Kind,
    entries,
    in_use,
    note_use,
)

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


def _kselftest_headers(kernel: Path) -> list[Path]:
    """The kselftest.h copies of the kernel's major.minor: what a prebuilt image of it
    would print KTAP through (testkinds/own.py, stored_kselftest_h)."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        release = str(json.loads((kernel / "meta.json").read_text())["release"])
        mm = ".".join(release.split(".")[:2]).split("-")[0]
        return sorted(d for d in (paths.cache_root() / "kselftest-h").glob(f"{mm}-*")
                      if d.is_dir())
    return []


def _started(run: RunResult) -> float | None:
    with contextlib.suppress(TypeError, ValueError):
        return datetime.strptime(str(run.started), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    return None


def run_entries(runs: list[tuple[RunResult, Path]], cells: tuple[str, ...] = ()
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
    for run, file in runs:
        chosen = [c for c in run.cells if not cells or c.cell in cells]
        for c in chosen:
            seen.add(c.cell)
            image = Path(c.image)
            if not c.image:
                raise CacheError(f"cell {c.cell} of {file}: no kernel was stored "
                                 f"(status {c.status.value})",
                                 fix="export a run whose cells built their kernels")
            if image.parent.parent.name != "kernels":
                raise CacheError(f"cell {c.cell} of {file} booted {image}, a "
                                 "prebuilt image: not in the cache",
                                 fix="copy the image itself")
            stored = root / "kernels" / image.parent.name  # by key: wherever the cache was
            if not build.stored_image(stored).is_file():
                raise CacheError(f"cell {c.cell} of {file}: its kernel "
                                 f"{image.parent.name} is not in the cache {root}",
                                 fix="export where the run ran, with its HARNESS_CACHE; "
                                     "an evicted kernel is built again by running the cell")
            found[f"kernels/{stored.name}"] = cache.described(stored)
            for header in _kselftest_headers(stored):
                found[f"kselftest-h/{header.name}"] = cache.described(header)
        since = _started(run)
        if since is not None:
            until = file.stat().st_mtime + 1  # results.json is written last
            for e in entries():
                if e.kind is Kind.TESTS and since - 1 <= e.last_used <= until:
                    found.update({str(p.relative_to(root)): cache.described(p) for p in e.paths})
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
    return {str(p.relative_to(root)): cache.described(p) for e in chosen for p in e.paths}


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
