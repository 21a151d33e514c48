"""What the harness needs on the host, as data (harness/base/host.toml) and the BPF
toolchain (harness/target/bpf.toml): every install hint the harness gives is made from
their package keys, and no module names the BPF toolchain or an install command itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import target
from harness.base import host, proc
from harness.drivers import doctor

HARNESS = Path(__file__).resolve().parents[2] / "harness"


def test_the_hints_are_made_from_the_package_keys() -> None:
    assert host.fix_for("pahole") == "apt-get install -y dwarves"
    assert host.fix_for("clang-19") == "apt-get install -y clang-19 llvm-19"
    assert host.fix_for("qemu-system-x86_64") == \
        "apt-get install -y --no-install-recommends qemu-system-x86"
    assert host.fix_for("lz4") == "apt-get install -y lz4 (the test kernel's image is " \
                                  "lz4-compressed)"
    assert host.fix_for("vng") == "./bootstrap.sh (installs virtme-ng into .venv)"
    assert host.fix_for("nosuch") == "install nosuch"
    assert host.apt_install(["linux-source-6.12"], update=True) == \
        "apt-get update && apt-get install -y linux-source-6.12"
    assert host.foreign_setup("arm64", ["busybox-static"], note="why") == \
        "dpkg --add-architecture arm64 && apt-get update && apt-get install -y " \
        "busybox-static (why)"
    for need in host.read().needs:
        assert need.packages or need.how, need.name


def test_a_missing_program_is_told_with_its_hint(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(proc.ToolMissingError) as err:
        proc.require("pahole")
    assert err.value.fix == "apt-get install -y dwarves"


def test_doctors_list_is_the_datas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc, "version_line", lambda program: "")
    monkeypatch.setattr(proc, "which", lambda program: None)
    found = doctor.checks(probe_kvm=False)
    required = [n.name for n in host.checked("required") if not n.path]
    assert [c.name for c in found[:len(required)]] == required
    assert required[:5] == ["git", "make", "gcc", "ccache", "clang-19"]
    test_progs = [c for c in found if c.name.endswith("(test_progs)")]
    assert [c.name for c in test_progs] == [
        "llvm-strip-19 (test_progs)", "ld.lld-19 (test_progs)", "rsync (test_progs)",
        "openssl (test_progs)"]
    assert {c.fix for c in test_progs} == {"apt-get install -y llvm-19 lld-19 rsync openssl"}
    assert [c.fix for c in found if c.name == "pahole"] == ["apt-get install -y dwarves"]
    assert list(host.read().recorded_versions) == [
        "gcc", "clang-19", "pahole", "qemu-system-x86_64", "vng", "bpftool", "git", "make",
        "ccache"]


def test_the_bpf_toolchain_is_data() -> None:
    bpf = target.bpf()
    assert (bpf.clang, bpf.strip, bpf.ld) == ("clang-19", "llvm-strip-19", "ld.lld-19")
    # and what installs each of its programs is the host's data
    assert all(host.need(p) is not None for p in (bpf.clang, bpf.strip, bpf.ld))


def test_no_module_names_the_bpf_toolchain_or_an_install_command() -> None:
    """The data files say them; code reads them (host.apt_install writes the command)."""
    literal = re.compile(r"clang-19|llvm-strip-19|ld\.lld-19|lld-19|llvm-19|apt-get install")
    found = [f"{p.relative_to(HARNESS)}:{n}" for p in sorted(HARNESS.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if literal.search(line) and p.name != "host.py"]
    assert found == []
