"""Bad input and host problems, through the real command line: exit 2, the status, the cause
and the fix on the terminal, no traceback, no stray files, nothing imported or built.

Each run has a private, empty HARNESS_CACHE: a check that came after the source import or
the build would import Debian's tree into it, which these tests assert never happens.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Ran:
    code: int
    out: str  # stdout and stderr
    seconds: float
    max_rss_kb: int

    @property
    def flat(self) -> str:
        return " ".join(self.out.split())


def harness(*args: str, cache: Path, cwd: Path = REPO, timeout: float = 120) -> Ran:
    start = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=cwd, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env={**os.environ, "HARNESS_CACHE": str(cache),
                                  "PYTHONUNBUFFERED": "1"})
    assert child.stdout is not None
    out = child.stdout.read()
    # wait4: this child's own peak memory, not the largest of every child so far
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return Ran(code=child.returncode, out=out, seconds=time.monotonic() - start,
               max_rss_kb=usage.ru_maxrss)


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "cache"
    yield root
    # Nothing was imported, checked out or built for input that was bad from the start.
    assert not (root / "src").exists() and not (root / "work").exists()


def no_traceback(ran: Ran) -> None:
    assert "Traceback" not in ran.out, ran.out


def results_of(out: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((out / "results.json").read_text())
    return data


def cell_of(out: Path) -> dict[str, object]:
    cells = results_of(out)["cells"]
    assert isinstance(cells, list)
    cell: dict[str, object] = cells[0]
    return cell


def test_a_misspelt_test_is_a_setup_error_before_anything_is_built(
        tmp_path: Path, cache: Path) -> None:
    ran = harness("run", "--test", "cgroup_iter_rstatt", "--out", str(tmp_path / "o"),
                  cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    assert "SETUP_ERROR" in ran.out
    assert "did you mean cgroup_iter_rstat?" in ran.flat
    cell = cell_of(tmp_path / "o")
    assert cell["status"] == "SETUP_ERROR"
    assert [s["stage"] for s in cell["stages"]] == ["plan"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("content", "said"), [
    ("CONFIG_BPF=maybe\n", "CONFIG_BPF=maybe: invalid value"),
    ("CONFIG_BPF_SYSCALL=y\nthis is not a config line\n",
     "2: 'this is not a config line' is neither CONFIG_X=VALUE"),
    ("# the tests need this\n# CONFIG_KPROBES is not set \n", None),  # comments: fine
    # kconfig would take these as comments and the request would silently vanish
    ("# CONFIG_BPF  is not set\n", "write it exactly '# CONFIG_X is not set'"),
    ("#CONFIG_BPF is not set\n", "write it exactly '# CONFIG_X is not set'"),
])
def test_config_fragment_lines_are_checked_first(tmp_path: Path, cache: Path, content: str,
                                                 said: str | None) -> None:
    frag = tmp_path / "frag.config"
    frag.write_text(content)
    # a misspelt test as well: were the fragment fine, the run stops there, before a build
    ran = harness("run", "--config", "base", "--config", str(frag), "--test", "nope",
                  "--out", str(tmp_path / "o"), cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    if said is None:
        assert "SETUP_ERROR" in ran.out and "CONFIG_ERROR" not in ran.out
    else:
        assert "CONFIG_ERROR" in ran.out
        assert said in ran.flat
        assert f"{frag}:" in ran.out  # file:line
        assert "fix:" in ran.out


@pytest.mark.parametrize(("content", "said"), [
    (b"", "is empty"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "is a binary file, not a patch"),
    (b"please apply my change to mm/memcontrol.c\n", "is not a patch: it has no diff"),
    (b"--- a/mm/x.c\n+++ b/mm/x.c\n@@ -1 +1 @@\n-a\n+b\n", "is a plain diff, not a mail"),
])
def test_a_file_that_is_not_a_patch_is_named_before_any_tree_is_touched(
        tmp_path: Path, cache: Path, content: bytes, said: str) -> None:
    patch = tmp_path / "0001-x.patch"
    patch.write_bytes(content)
    ran = harness("run", "--patch", str(patch), "--test", "cgroup_iter_rstat",
                  "--out", str(tmp_path / "o"), cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    assert "SETUP_ERROR" in ran.out and "PATCH_CONFLICT" not in ran.out
    assert said in ran.flat and "git format-patch" in ran.flat
    assert "rebase" not in ran.out


def test_an_unknown_kernel_spec_is_a_setup_error(tmp_path: Path, cache: Path) -> None:
    ran = harness("run", "--kernel", "ubuntu:24.04", "--out", str(tmp_path / "o"),
                  cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    assert "unknown kernel spec kind 'ubuntu'" in ran.out


def test_boot_only_with_tests_is_refused(tmp_path: Path, cache: Path) -> None:
    ran = harness("run", "--boot-only", "--test", "memcg_kfuncs", cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    assert "--boot-only runs no test" in ran.out


def test_out_that_is_a_file(tmp_path: Path, cache: Path) -> None:
    target = tmp_path / "results.txt"
    target.write_text("mine\n")
    ran = harness("run", "--test", "cgroup_iter_rstat", "--out", str(target), cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    assert "is a file, not a directory" in ran.out and "fix:" in ran.out
    assert target.read_text() == "mine\n"


def test_out_that_holds_other_files_is_left_alone(tmp_path: Path, cache: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep\n")
    ran = harness("run", "--test", "cgroup_iter_rstat", "--out", str(mine), cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    assert "not a results directory" in ran.out
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_reused_out_holds_only_the_new_runs_files(tmp_path: Path, cache: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "results.json").write_text("{}")
    (out / "old-cell").mkdir()
    (out / "old-cell" / "build.log").write_text("stale\n")
    ran = harness("run", "--test", "no_such", "--out", str(out), cache=cache)
    assert ran.code == 2
    assert not (out / "old-cell").exists()
    assert results_of(out)["state"] == "complete"


def test_parse_of_a_directory(tmp_path: Path, cache: Path) -> None:
    ran = harness("parse", str(tmp_path), cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    assert "is a directory, not a log file" in ran.out and "fix:" in ran.out


def test_parse_of_a_missing_file(tmp_path: Path, cache: Path) -> None:
    ran = harness("parse", str(tmp_path / "nope.log"), cache=cache)
    assert ran.code == 2
    no_traceback(ran)
    assert "No such file or directory" in ran.out


def test_a_full_disk_is_told_as_cause_and_fix_and_leaves_no_partial_file(
        tmp_path: Path, cache: Path, tiny_disk: Path) -> None:
    log = tmp_path / "many.tap"
    log.write_text("TAP version 13\n" + "".join(f"not ok {i} case_{i} # with a diagnostic\n"
                                                 for i in range(1, 3001)))
    out = tiny_disk / "out"
    ran = harness("parse", str(log), "--out", str(out), cache=cache)
    assert ran.code == 2, ran.out
    no_traceback(ran)
    assert "No space left on device" in ran.out
    assert "fix: free space" in ran.out
    # the write was atomic: no half results.json, no temporary left behind
    assert sorted(p.name for p in out.iterdir()) == []


FLOOD_MB = 50


def test_an_output_flood_is_parsed_in_bounded_time_and_memory(tmp_path: Path,
                                                              cache: Path) -> None:
    """50 MB of one repeated result line, as a test stuck in a loop prints it. (How long
    the parse takes is bench/parse_flood.py's question, not a unit test's.)"""
    flood = tmp_path / "flood.tap"
    line = "ok 1 a result line printed again and again by a test in a loop\n"
    with flood.open("w") as f:
        f.write("TAP version 13\n1..1\n")
        for _ in range(FLOOD_MB * 2**20 // len(line) // 1000):
            f.write(line * 1000)
    assert flood.stat().st_size >= FLOOD_MB * 2**20 * 0.99
    ran = harness("parse", str(flood), "--out", str(tmp_path / "o"), cache=cache)
    assert ran.code == 0, ran.out
    assert ran.max_rss_kb <= 300 * 1024, ran.max_rss_kb
    size = (tmp_path / "o" / "results.json").stat().st_size
    assert size <= 5 * 2**20, size
    test = cell_of(tmp_path / "o")["tests"][0]  # type: ignore[index]
    assert test["ktap"]["counts"]["PASS"] == 1
    assert any("counted once" in w for w in test["ktap"]["warnings"])
    assert "counted once" in ran.out  # the warning reaches the terminal


def test_a_flood_of_distinct_results_is_cut_with_a_warning(tmp_path: Path,
                                                           cache: Path) -> None:
    flood = tmp_path / "flood.tap"
    with flood.open("w") as f:
        f.write("TAP version 13\n")
        for i in range(1, 400_001):
            f.write(f"ok {i} distinct result {i}\n")
        f.write("not ok 400001 the last one failed\n")
    ran = harness("parse", str(flood), "--out", str(tmp_path / "o"), cache=cache)
    # the failure came after the cut: still a failure
    assert ran.code == 1, ran.out
    assert "were not kept" in ran.flat and "1 of them failed" in ran.flat
    assert ran.max_rss_kb <= 300 * 1024
    assert (tmp_path / "o" / "results.json").stat().st_size <= 5 * 2**20


@pytest.mark.parametrize("extra", [["--boot-only"], ["--coverage"], ["--", "true"]])
def test_build_only_refuses_what_needs_a_boot(extra: list[str]) -> None:
    from harness import cli
    from harness.drivers import matrix

    args = cli.parse_args(["run", "--build-only", *extra])
    with pytest.raises(matrix.MatrixError, match="--build-only boots nothing"):
        cli.planned(args)


def test_version_and_the_help_a_user_meets_first(capsys: pytest.CaptureFixture[str]) -> None:
    from harness import cli

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("harness 0.1.0")
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Only main()" not in out and "exit codes:" in out  # for users, not the code
    listed = [ln.split()[0] for ln in out.split("harness COMMAND --help says more", 1)[1]
              .splitlines()[2:] if ln.startswith("    ") and not ln.startswith("     ")]
    assert listed[:3] == ["run", "shell", "check"]  # in the order a user meets them


def test_every_command_ends_its_help_with_examples_that_parse(
        capsys: pytest.CaptureFixture[str]) -> None:
    from harness import cli

    for command in cli.COMMANDS:
        assert command.examples, command.name
        assert cli.main([command.name, "--help"]) == 0
        shown = capsys.readouterr().out
        assert shown.split("examples:\n", 1)[1].splitlines() == [
            f"  {e}" for e in command.examples], command.name
        for example in command.examples:
            assert shlex.split(example)[1] == command.name
            cli.parse_args(shlex.split(example)[1:])  # exits (a test error) if refused


def test_the_table_is_the_commands_the_parser_takes(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    from harness import cli

    names = [c.name for c in cli.COMMANDS]
    assert len(names) == len(set(names)) == len(cli.BY_NAME)
    assert cli.main(["--help"]) == 0
    listed = capsys.readouterr().out.split("harness COMMAND --help says more)", 1)[1]
    assert [ln.split()[0] for ln in listed.splitlines()
            if ln.startswith("    ") and not ln.startswith("     ")] == names
    assert {c.name for c in cli.COMMANDS if c.uses_cache} == {
        "run", "check", "mutate", "bisect", "shell", "reproduce"}
    assert [c.name for c in cli.COMMANDS if c.takes_command] == ["run"]


def test_one_validator_counts_every_whole_number_option() -> None:
    from harness import cli

    assert cli.count("a number of runs", 1)("7") == 7
    for parse, bad, told in ((cli.ATTEMPTS, "1001", "'1001': a number of attempts, 1 to 1000"),
                             (cli.BOOTS, "x", "'x': a number of fresh boots, 1 to 100"),
                             (cli.RUNS, "0", "'0': a number of runs, at least 1")):
        with pytest.raises(argparse.ArgumentTypeError, match=told):
            parse(bad)


def test_a_run_inside_a_kernel_tree_writes_nothing_into_it(tmp_path: Path) -> None:
    """Your tree by default, and its results in the cache, not in the tree (the fake kernel
    tree and the fake vng: tests/fakes)."""
    from tests.helpers.faketree import FAKES, committed_tree, fake_vng_env

    tree = committed_tree(tmp_path / "linux")
    test = tmp_path / "t"
    test.mkdir()
    (test / "test.toml").write_text('name = "t"\n[run]\ncommand = ["sh", "-c", "echo \'TAP '
                                    'version 13\'; echo 1..1; echo ok 1 - a"]\ntimeout = 5\n')
    cache = tmp_path / "cache"
    ran = subprocess.run([sys.executable, "-m", "harness", "run", "--config",
                          str(FAKES / "fake.config"), "--test", str(test)],
                         cwd=tree / "kernel", text=True, capture_output=True, timeout=300,
                         env=fake_vng_env(cache, HARNESS_HISTORY=str(tmp_path / "h.sqlite")))
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert f"testing your tree {tree}" in ran.stdout
    [run_dir] = (cache / "results").iterdir()
    assert f"results: {run_dir / 'results.json'}" in ran.stdout
    status = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--ignored"],
                            text=True, capture_output=True, check=True).stdout
    assert status == "", status


def test_no_function_of_the_cli_is_longer_than_60_lines() -> None:
    """Each command is a row of cli.COMMANDS and its arguments a function of their own: no
    function grows back into one parser for everything."""
    import ast

    from harness import cli

    tree = ast.parse(Path(cli.__file__).read_text())
    long = {f.name: (f.end_lineno or f.lineno) - f.lineno + 1 for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef) and (f.end_lineno or f.lineno) - f.lineno >= 60}
    assert long == {}
