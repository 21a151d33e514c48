"""The KVM probe against fake QEMUs at the process boundary: both verdicts, and the cache."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.base.model import Accel
from harness.guest import vm


def _fake_qemu(tmp_path: Path, body: str) -> str:
    script = tmp_path / "qemu-fake"
    version = 'if [ "$1" = --version ]; then echo "QEMU emulator version 0.fake"; exit 0; fi\n'
    script.write_text("#!/bin/sh\n" + version + body)
    script.chmod(0o755)
    return str(script)


@pytest.fixture(autouse=True)
def _has_dev_kvm(monkeypatch: pytest.MonkeyPatch) -> None:
    real_exists = Path.exists

    def exists(self: Path) -> bool:
        return True if str(self) == "/dev/kvm" else real_exists(self)

    monkeypatch.setattr(Path, "exists", exists)


def test_kvm_failure_on_stderr_is_caught_at_once(tmp_path: Path) -> None:
    # What this machine's nested KVM does: complain on stderr, then hang forever.
    qemu = _fake_qemu(tmp_path, "echo 'KVM internal error. Suberror: 1' >&2\n"
                                "echo 'emulation failure' >&2\nsleep 600\n")
    start = time.monotonic()
    verdict = vm.probe_kvm(tmp_path / "bzImage", qemu=qemu, timeout=30,
                           cache_file=tmp_path / "verdict.json")
    assert not verdict.kvm_works
    assert "KVM internal error" in verdict.reason
    assert time.monotonic() - start < 15, "waited for the timeout instead of the message"


def test_silent_hang_is_a_no(tmp_path: Path) -> None:
    qemu = _fake_qemu(tmp_path, "sleep 600\n")
    verdict = vm.probe_kvm(tmp_path / "bzImage", qemu=qemu, timeout=2,
                           cache_file=tmp_path / "verdict.json")
    assert not verdict.kvm_works
    assert "within 2s" in verdict.reason


def test_kernel_banner_is_a_yes_and_is_remembered(tmp_path: Path) -> None:
    qemu = _fake_qemu(tmp_path, "echo '[    0.000000] Linux version 6.12.117 (gcc)'\nsleep 600\n")
    cache = tmp_path / "verdict.json"
    verdict = vm.probe_kvm(tmp_path / "bzImage", qemu=qemu, timeout=30, cache_file=cache)
    assert verdict.kvm_works and not verdict.cached
    # Second time: no QEMU run at all (a QEMU that would say "no" is not consulted).
    (tmp_path / "qemu-fake").write_text((tmp_path / "qemu-fake").read_text()
                                        .replace("Linux version", "emulation failure"))
    again = vm.probe_kvm(tmp_path / "bzImage", qemu=qemu, timeout=30, cache_file=cache)
    assert again.kvm_works and again.cached


def test_qemu_exit_without_banner_is_a_no(tmp_path: Path) -> None:
    qemu = _fake_qemu(tmp_path, "echo 'qemu: could not load kernel' >&2\nexit 1\n")
    verdict = vm.probe_kvm(tmp_path / "bzImage", qemu=qemu, timeout=30,
                           cache_file=tmp_path / "verdict.json")
    assert not verdict.kvm_works
    assert "exited 1" in verdict.reason


def test_forced_kvm_on_a_host_without_it_is_a_boot_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vm, "probe_kvm", lambda *a, **k: vm.AccelVerdict(
        kvm_works=False, reason="emulation failure"))
    with pytest.raises(vm.BootError, match="--accel tcg"):
        vm.choose_accel(Accel.KVM, tmp_path / "bzImage")
    accel, why = vm.choose_accel(Accel.AUTO, tmp_path / "bzImage")
    assert accel is Accel.TCG and "emulation failure" in why
