"""A run's results directory as one archive a reviewer receives (`harness export --bundle`),
and the run directory inside one (`harness reproduce ARCHIVE`).

The archive is a gzip'd tar of the directory under its own name: results.json, the logs,
each cell's carried inputs (`<cell>/inputs/`) and reproduce.sh. A results directory holds
no kernel image (the kernels stay in the kernel store), so it stays small; a file over
MAX_FILE_BYTES is left out and named. Unpacking refuses absolute paths, `..` and links
that leave the archive (tarfile's "data" filter) and writes only into a new temporary
directory.
"""

from __future__ import annotations

import logging
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.base.errors import EnvironmentProblem

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 64 << 20  # a console log of a flooding test is capped far below this
SUFFIX = ".tar.gz"


class BundleError(EnvironmentProblem):
    """An archive that is not a run's bundle, or cannot be read or written."""


@dataclass(frozen=True, kw_only=True)
class Written:
    path: Path
    files: int
    size: int  # bytes of the archive
    left_out: tuple[str, ...]  # files over the limit


def default_name(run_dir: Path) -> Path:
    return Path.cwd() / f"{run_dir.name}{SUFFIX}"


def write(run_dir: Path, output: Path) -> Written:
    """The run directory as `output` (.tar.gz), whole or not at all."""
    if not (run_dir / "results.json").is_file():
        raise BundleError(f"{run_dir}: no results.json: not a run's directory",
                          fix="give the directory a run wrote (harness run --out DIR)")
    output = output.resolve()
    if output.is_relative_to(run_dir.resolve()):
        raise BundleError(f"{output} is inside the run it would hold",
                          fix="write the bundle elsewhere: -o FILE outside the run directory")
    left_out: list[str] = []
    count = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.partial")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal count
        if info.issym() or info.islnk():
            return None  # a link means nothing on the reviewer's machine
        if info.isfile() and info.size > MAX_FILE_BYTES:
            left_out.append(f"{info.name} ({info.size} bytes)")
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        count += info.isfile()
        return info

    try:
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(run_dir, arcname=run_dir.name, filter=keep)
        os.replace(partial, output)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise BundleError(f"cannot write {output}: {exc.strerror or exc}",
                          fix="check the path, its permissions and the free space") from None
    for name in left_out:
        log.warning("left out of the bundle (over %d bytes): %s", MAX_FILE_BYTES, name)
    return Written(path=output, files=count, size=output.stat().st_size,
                   left_out=tuple(left_out))


def _run_dir_in(root: Path) -> Path:
    """The one directory of an unpacked bundle that holds results.json."""
    found = sorted(p.parent for p in root.glob("*/results.json")) or \
        ([root] if (root / "results.json").is_file() else [])
    if len(found) != 1:
        raise BundleError("the archive holds " + ("no run directory (no results.json)"
                                                 if not found else
                                                 f"{len(found)} run directories"),
                          fix="give an archive made by harness export --bundle RUN")
    return found[0]


@contextmanager
def opened(source: Path) -> Iterator[Path]:
    """The run directory SOURCE is (a directory) or holds (a bundle, unpacked into a
    temporary directory removed afterwards)."""
    if source.is_dir():
        yield source
        return
    if not source.is_file():
        raise BundleError(f"{source}: no such run directory or bundle",
                          fix="give a run's directory, or the archive harness export "
                              "--bundle RUN wrote")
    try:
        is_tar = tarfile.is_tarfile(source)
    except OSError as exc:
        raise BundleError(f"cannot read {source}: {exc}", fix="check the path") from None
    if not is_tar:
        raise BundleError(f"{source}: neither a run directory nor a bundle (a tar archive)",
                          fix="give a run's directory, or the archive harness export "
                              "--bundle RUN wrote")
    scratch = Path(tempfile.mkdtemp(prefix="harness-bundle-"))
    try:
        try:
            with tarfile.open(source) as tar:
                tar.extractall(scratch, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise BundleError(f"{source}: cannot unpack: {exc}",
                              fix="the archive is damaged or not a bundle: ask for it "
                                  "again") from None
        yield _run_dir_in(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
