"""Unit tests' own fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.guest import rootfs


@pytest.fixture(scope="session")
def fake_guest_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("guest-root")
    (root / "bin").mkdir()
    (root / "bin" / "sh").write_text("#!/fake\n")
    return root


@pytest.fixture(autouse=True)
def _guest_root(fake_guest_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Guests boot on a root of their own, which the harness makes from Debian's packages
    with apt-get download: the unit tests' fake guests (tests/fakes/bin/vng) get a tiny one
    instead, through the variable users name a root of their own with, so that the harness
    processes a test starts take it too. The e2e tests boot the real one."""
    monkeypatch.setenv(rootfs.OWN_ROOT_ENV, str(fake_guest_root))
    return fake_guest_root


@pytest.fixture(autouse=True)
def _room(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command makes room under the cache while its disk has less than cache.ROOM free:
    the unit tests' caches are tiny, and what the machine's disk has free must not decide
    what they hold (tests/unit/test_cache.py sets the free space it tests)."""
    from harness.kernel import cache

    monkeypatch.setattr(cache, "ROOM", 0)
