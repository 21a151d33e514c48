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
