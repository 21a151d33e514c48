"""The fake kernel tree (tests/fakes/kernel-tree: its Makefile makes the config and the
artefacts the harness reads, in a second) as a user's git tree, and the environment in
which a harness process boots it with the fake vng (tests/fakes/bin/vng) instead of QEMU."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def committed_tree(dest: Path) -> Path:
    """A copy of the fake kernel tree at `dest`, a git repository with one commit."""
    shutil.copytree(FAKES / "kernel-tree", dest)
    for step in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base"]):
        subprocess.run(["git", "-C", str(dest), *step], check=True, capture_output=True)
    return dest


def fake_vng_env(cache: Path, **extra: str) -> dict[str, str]:
    """This process's environment with a private cache and the fake vng first on PATH."""
    env = {**os.environ, "HARNESS_CACHE": str(cache),
           "PATH": f"{FAKES / 'bin'}:{os.environ['PATH']}", **extra}
    env.pop("FAKE_VNG", None)
    return env
