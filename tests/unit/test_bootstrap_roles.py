"""bootstrap.sh's roles: what each CI job installs (`--print` lists it, installs nothing),
the arch's and toolchain's packages read from their data files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _print(*args: str) -> dict[str, list[str]]:
    out = subprocess.run(["sh", str(REPO / "bootstrap.sh"), *args, "--print"],
                         capture_output=True, text=True, check=True).stdout
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    role = next(k for k in lines if k.startswith("role "))
    return {"debian": lines[role].split(": ", 1)[1].split(), "pip": lines["pip"].split(),
            "foreign": lines.get("dpkg architecture", "").split()}


def test_each_role_installs_only_its_part() -> None:
    build, test, merge = _print("--role", "build"), _print("--role", "test"), \
        _print("--role", "merge")
    assert {"gcc", "clang-19", "make", "bpftool", "dwarves"} <= set(build["debian"])
    assert not any(p.startswith("qemu-system") for p in build["debian"])
    assert "qemu-system-x86" in test["debian"] and "busybox-static" in test["debian"]
    assert not {"gcc", "clang-19", "make", "bpftool", "linux-source-6.12"} & set(test["debian"])
    assert merge["debian"] == ["git", "ca-certificates", "python3-venv"]
    assert build["pip"] == test["pip"] == merge["pip"] == ["-e", "."]  # no test extras, no tox
    everything = _print()
    assert everything["pip"] == ["-e", ".[test]", "tox"]
    assert set(build["debian"]) | set(test["debian"]) <= set(everything["debian"])


def test_an_arch_and_a_toolchain_bring_their_own_packages_from_their_files() -> None:
    build = _print("--role", "build", "--arch", "arm64", "--toolchain", "llvm")
    assert "gcc-aarch64-linux-gnu" in build["debian"] and "libbpf-dev:arm64" in build["debian"]
    assert {"clang-19", "lld-19", "llvm-19"} <= set(build["debian"])
    assert build["foreign"] == ["arm64"]
    test = _print("--role", "test", "--arch", "arm64")
    assert "qemu-system-arm" in test["debian"] and "qemu-system-x86" not in test["debian"]
    assert test["foreign"] == ["arm64"]  # its guest root comes from arm64 packages
    # a developer's machine (role all) builds and boots it: both parts (once, only the
    # QEMU part came: harness run --cell 6.12-arm64 then stopped at its cross compiler)
    both = _print("--arch", "arm64")
    assert {"gcc-aarch64-linux-gnu", "libbpf-dev:arm64", "qemu-system-arm"} <= set(
        both["debian"])
    assert both["foreign"] == ["arm64"]


def test_an_unknown_role_or_arch_says_what_is_known() -> None:
    for args, said in ((("--role", "deploy"), "one of build, test, merge, lint, all"),
                       (("--role", "build", "--arch", "mips"), "no harness/target/arches")):
        res = subprocess.run(["sh", str(REPO / "bootstrap.sh"), *args, "--print"],
                             capture_output=True, text=True)
        assert res.returncode == 2 and said in res.stderr, res.stderr


def test_help_says_the_options_and_an_unknown_one_points_to_it() -> None:
    done = subprocess.run(["sh", str(REPO / "bootstrap.sh"), "--help"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("Installs what the harness needs")
    assert "--role ROLE" in done.stdout and "--print lists" in done.stdout
    wrong = subprocess.run(["sh", str(REPO / "bootstrap.sh"), "--bogus"], capture_output=True,
                           text=True, check=False)
    assert wrong.returncode == 2
    assert wrong.stderr == "bootstrap: unknown option --bogus (./bootstrap.sh --help lists " \
                           "them)\n"


@pytest.mark.parametrize("script", ["bootstrap.sh", ".ci/run"])
def test_the_shell_scripts_pass_shellcheck(script: str) -> None:
    res = subprocess.run(["shellcheck", str(REPO / script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout
