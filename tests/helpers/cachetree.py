"""A cache's entries as the harness leaves them: a directory of some size, last used at a
given time (its use noted as note_use() writes it, or its modification time)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from harness.kernel import cache


def entry(root: Path, rel: str, size: int, used: float, used_for: str = "") -> Path:
    d = root / rel
    d.mkdir(parents=True)
    (d / "blob").write_bytes(b"x" * size)
    if used_for:  # as note_use() writes it, at the time given
        (d / cache.USE_FILE).write_text(json.dumps({"last_used": used, "for": used_for}))
    else:
        os.utime(d, (used, used))
    return d


def world(root: Path) -> None:
    now = time.time()
    entry(root, "kernels/old", 4096 * 30, now - 9000, "debian:6.12 + series a")
    entry(root, "kernels/new", 4096 * 30, now - 10, "debian:6.12 + series b")
    entry(root, "src/git-linux-1", 4096 * 50, now - 99999)
    entry(root, "work/git-linux-1-base", 4096 * 40, now - 8000, "git:/home/u/linux")
    entry(root, "build/git-linux-1-base", 4096 * 40, now - 8000)
