from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private harness cache, so unit tests never touch ~/.cache/harness."""
    root = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE", str(root))
    yield root


@pytest.fixture(autouse=True, scope="session")
def _private_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Runs made by the tests (and the harness processes they start) are recorded in a
    history of the test session's own, never in the user's."""
    import os

    before = os.environ.get("HARNESS_HISTORY")
    os.environ["HARNESS_HISTORY"] = str(tmp_path_factory.mktemp("history") / "h.sqlite")
    yield
    if before is None:
        os.environ.pop("HARNESS_HISTORY", None)
    else:
        os.environ["HARNESS_HISTORY"] = before


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A file system that is full after 64 KiB: a real ENOSPC."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs: run it as root (CI and this machine are)")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
