"""A CI test job's path: the kernel and the tests a --build-only run made, exported,
imported into another cache and booted with `harness run --prebuilt`, on a machine where
the kernel's source is gone and make and gcc fail if called (the fake kernel tree and the
fake vng, tests/fakes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import cli
from harness.drivers import pipeline, prebuilt
from harness.drivers.matrix import Cell, Tier
from tests.helpers.faketree import FAKES, committed_tree

KTAP_PASS = "echo 'TAP version 13'; echo '1..1'; echo 'ok 1 - first'\n"
KTAP_FAIL = "echo 'TAP version 13'; echo '1..1'; echo 'not ok 1 - first'\n"
PROG = "#include <stdio.h>\nint main(void) { puts(\"built\"); return 0; }\n"


def _own_test(root: Path, name: str, script: str) -> str:
    d = root / "tests" / name
    d.mkdir(parents=True)
    (d / "prog.c").write_text(PROG)
    (d / "run.sh").write_text(script)
    (d / "test.toml").write_text(f'name = "{name}"\n[build]\nuserspace = ["prog.c"]\n'
                                 f'[run]\ncommand = ["sh", "{d / "run.sh"}"]\ntimeout = 5\n')
    return str(d)


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two cells of one fake kernel, built (--build-only) in cache A and exported."""
    committed_tree(tmp_path / "linux")
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_VNG", raising=False)
    monkeypatch.setattr(pipeline, "BOOT_ALLOWANCE_S", 5)
    config = FAKES / "fake.config"
    cells = (("p-a", _own_test(tmp_path, "pass_one", KTAP_PASS)),
             ("p-b", _own_test(tmp_path, "fail_one", KTAP_FAIL)))
    (tmp_path / "matrix.toml").write_text("".join(
        f'[[cell]]\nname = "{n}"\ntier = "ci"\nkernel = "git:{tmp_path / "linux"}"\n'
        f'configs = ["{config}"]\ntests = ["{t}"]\n\n' for n, t in cells))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache-a"))
    assert cli.main(["run", "--matrix", str(tmp_path / "matrix.toml"), "--cell", "p-a",
                     "--cell", "p-b", "--build-only", "--out", str(tmp_path / "build")]) == 0
    assert cli.main(["cache", "export", "--run", str(tmp_path / "build"), "-o",
                     str(tmp_path / "kernel.tar")]) == 0
    return tmp_path


def _elsewhere(root: Path, monkeypatch: pytest.MonkeyPatch, cache: str) -> None:
    """Another machine: its own cache, no kernel source, make and gcc that fail."""
    if (root / "linux").exists():
        shutil.move(root / "linux", root / "linux-gone")
    trap = root / "trap"
    trap.mkdir(exist_ok=True)
    for tool in ("make", "gcc", "clang-19", "bpftool"):
        (trap / tool).write_text(f"#!/bin/sh\necho '{tool} called' >&2\nexit 97\n")
        (trap / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{trap}:{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("HARNESS_CACHE", str(root / cache))


def _cells(run: Path) -> dict[str, dict[str, object]]:
    doc = json.loads((run / "results.json").read_text())
    return {c["cell"]: c for c in doc["cells"]}


def test_a_build_only_run_records_each_cells_kernel_and_test_builds(built: Path) -> None:
    by = {c: json.loads((built / "build" / c / prebuilt.FILE).read_text())
          for c in ("p-a", "p-b")}
    assert by["p-a"]["kernel_entry"] == by["p-b"]["kernel_entry"]  # one kernel, two cells
    assert by["p-a"]["kernel_entry"].startswith("kernels/")
    [(name, where)] = by["p-a"]["tests"]
    assert name == "pass_one" and where.startswith("cache:selftests/pass_one-")
    assert by["p-a"]["version"] == "6.99.0-fake" and by["p-a"]["patches"] == []


def test_an_imported_build_boots_without_source_or_compiler(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _elsewhere(built, monkeypatch, "cache-b")
    assert cli.main(["cache", "import", str(built / "kernel.tar")]) == 0
    base = ["run", "--matrix", str(built / "matrix.toml"), "--accel", "tcg",
            "--prebuilt", str(built / "build")]
    assert cli.main([*base, "--cell", "p-a", "--out", str(built / "res-a")]) == 0
    assert cli.main([*base, "--cell", "p-b", "--out", str(built / "res-b")]) == 1
    a, b = _cells(built / "res-a")["p-a"], _cells(built / "res-b")["p-b"]
    assert [s["stage"] for s in a["stages"]] == ["plan", "prebuilt", "tests-plan", "accel",
                                                 "boot+tests"]
    assert a["status"] == "PASS" and b["status"] == "FAIL"
    assert a["kernel_from_store"] is True and a["kernel_version"] == "6.99.0-fake"
    assert str(a["image"]).startswith(str(built / "cache-b" / "kernels"))
    assert {t["name"]: t["status"] for t in a["tests"]}["pass_one"] == "PASS"
    assert (built / "res-a" / "p-a" / "config").read_text().startswith("CONFIG_")
    assert a["config"]["fragments"]  # what the build job's config stage said


def test_without_the_import_the_cell_says_what_to_import(
        built: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _elsewhere(built, monkeypatch, "cache-empty")
    capsys.readouterr()
    assert cli.main(["run", "--matrix", str(built / "matrix.toml"), "--cell", "p-a",
                     "--accel", "tcg", "--prebuilt", str(built / "build"), "--out",
                     str(built / "res")]) == 2
    cell = _cells(built / "res")["p-a"]
    assert cell["status"] == "SETUP_ERROR"
    assert "kernels/" in str(cell["error"]) and "is not in the cache" in str(cell["error"])
    assert "fix: harness cache import the archive" in capsys.readouterr().out


def test_a_record_of_another_definition_of_the_cell_is_refused(built: Path) -> None:
    cell = Cell(name="p-a", tier=Tier.CI, kernel="git:/elsewhere", configs=("base",))
    with pytest.raises(prebuilt.PrebuiltError, match="another definition of cell p-a"):
        prebuilt.read(built / "build", cell)
    with pytest.raises(prebuilt.PrebuiltError, match="no record of cell p-c"):
        prebuilt.read(built / "build", Cell(name="p-c", tier=Tier.CI, kernel="git:/x"))


def test_prebuilt_takes_matrix_cells_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--kernel", "debian:6.12", "--prebuilt", "build/x"]) == 2
    assert "--prebuilt boots what a --build-only run" in capsys.readouterr().err
    assert cli.main(["run", "--cell", "6.12", "--build-only", "--prebuilt", "build/x"]) == 2


def test_a_cell_whose_build_failed_reports_that_build_error_with_its_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel does not build: the build-only run's BUILD_ERROR is the test job's
    result too (with the build's log), and nothing is booted."""
    linux = committed_tree(tmp_path / "linux")
    fake = linux / "kernel" / "fake.c"
    original = fake.read_text()
    fake.write_text(original.replace("\treturn 42;", "\treturn 42 +;"))
    diff = subprocess.run(["git", "-C", str(linux), "diff"], capture_output=True, text=True,
                          check=True).stdout
    subprocess.run(["git", "-C", str(linux), "checkout", "kernel/fake.c"], check=True)
    patch = tmp_path / "broken.patch"
    patch.write_text("From 1 Mon Sep 17 00:00:00 2001\nFrom: T <t@t>\nSubject: [PATCH] "
                     f"broken\n\n---\n{diff}-- \n2.39\n")
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "matrix.toml").write_text(
        f'[[cell]]\nname = "p-x"\ntier = "ci"\nkernel = "git:{linux}"\n'
        f'configs = ["{FAKES / "fake.config"}"]\npatches = ["{patch}"]\n'
        f'tests = ["{_own_test(tmp_path, "never", KTAP_PASS)}"]\n')
    base = ["run", "--matrix", str(tmp_path / "matrix.toml"), "--cell", "p-x"]
    assert cli.main([*base, "--build-only", "--out", str(tmp_path / "build")]) == 2
    assert cli.main([*base, "--prebuilt", str(tmp_path / "build"), "--accel", "tcg",
                     "--out", str(tmp_path / "res")]) == 2
    cell = _cells(tmp_path / "res")["p-x"]
    assert cell["status"] == "BUILD_ERROR" and cell["tests"] == []
    assert "in the build-only run" in str(cell["error"]) and "fake.c" in str(cell["error"])
    assert "error" in (tmp_path / "res" / "p-x" / "build-job" / "build.log").read_text()


def test_the_archive_in_the_build_run_is_imported_by_the_run_itself(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI test job downloads the build job's directory with its kernel.tar in it: no
    `harness cache import` step, the run imports it when the cache lacks the kernel."""
    shutil.copyfile(built / "kernel.tar", built / "build" / prebuilt.ARCHIVE)
    _elsewhere(built, monkeypatch, "cache-c")
    assert cli.main(["run", "--matrix", str(built / "matrix.toml"), "--cell", "p-a",
                     "--accel", "tcg", "--prebuilt", str(built / "build"), "--out",
                     str(built / "res-c")]) == 0
    assert (built / "cache-c" / _cells(built / "res-c")["p-a"]["image"].split(
        "/cache-c/")[1]).is_file()


def test_a_test_job_needs_no_sandbox_and_says_how_its_kernel_was_built(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test job runs none of the tree's code: a runner where bubblewrap cannot run
    boots the build (no set-up error), and the cell says what the build job's run was
    (sandboxed here; a --no-sandbox build says so in the test job too)."""
    from harness.base import sandbox

    rec = json.loads((built / "build" / "p-a" / prebuilt.FILE).read_text())
    assert (rec["sandbox"], rec["sandbox_off"]) == (True, "")
    assert rec["sandbox_tool"].startswith("bubblewrap")
    _elsewhere(built, monkeypatch, "cache-c")
    monkeypatch.setattr(sandbox, "_which", lambda program: None)  # no bubblewrap here
    sandbox.forget()
    try:
        assert cli.main(["cache", "import", str(built / "kernel.tar")]) == 0
        assert cli.main(["run", "--matrix", str(built / "matrix.toml"), "--accel", "tcg",
                         "--prebuilt", str(built / "build"), "--cell", "p-a",
                         "--out", str(built / "res-c")]) == 0
        iso = _cells(built / "res-c")["p-a"]["isolation"]
        assert iso["sandbox"]["enabled"] is True and iso["guest_root"]["hash"]
        assert iso["sandbox"]["tool"] == rec["sandbox_tool"]  # the build job's
        rec["sandbox"], rec["sandbox_off"], rec["sandbox_tool"] = False, "--no-sandbox", ""
        (built / "build" / "p-a" / prebuilt.FILE).write_text(json.dumps(rec))
        assert cli.main(["run", "--matrix", str(built / "matrix.toml"), "--accel", "tcg",
                         "--prebuilt", str(built / "build"), "--cell", "p-a",
                         "--out", str(built / "res-d")]) == 0
        iso = _cells(built / "res-d")["p-a"]["isolation"]
        assert iso["sandbox"] == {"enabled": False, "off": "--no-sandbox", "tool": ""}
        assert "build NOT sandboxed (--no-sandbox)" in iso["summary"]
    finally:
        sandbox.forget()
