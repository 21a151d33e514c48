"""Files that are either whole or absent: a unique temporary next to the target, renamed.

Two runs may write the same cache entry at once, and a full disk or a signal may stop a
write half-way: a reader must never see a half-written file, and no temporary is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()  # what open() would have given the file (mkstemp gives 0600)


def write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), _MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: Path, data: object) -> None:
    """The one way results (results.json, check.json, mutants.json) are written."""
    write_text(path, json.dumps(data, indent=2) + "\n")


def copy_file(src: Path, dest: Path) -> None:
    write_bytes(dest, src.read_bytes())


@contextlib.contextmanager
def directory(out: Path, *, prefix: str) -> Iterator[Path]:
    """A scratch directory next to `out` to fill; renamed to `out` (replacing an older one)
    when the block ends, removed when it fails: `out` is whole or absent."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    try:
        yield scratch
        if out.exists():
            shutil.rmtree(out)
        scratch.rename(out)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
