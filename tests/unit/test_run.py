"""The developer's loop on the command line (issue 13): `-- CMD`, --memory/--cpus/--append,
what the first line says, and that reproduce.sh's command line gives back the same cell.
Pure: argparse and the cell model, no build, no boot (the orchestrator tests boot the fake
guest; tests/e2e/test_daily.py the real one)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness import cli
from harness.base.model import Accel, GuestSeen, GuestSpec
from harness.drivers import matrix, pipeline
from harness.drivers.matrix import Cell, Tier
from harness.output import terminal
from harness.testkinds import SelftestError, command


def cells(*argv: str) -> tuple[list[Cell], str]:
    return cli.planned(cli.parse_args(["run", *argv]))


def test_what_follows_the_separator_is_the_guests_command() -> None:
    args = cli.parse_args(["run", "--kernel", "debian:6.1", "--", "sh", "-c", "exit 3", "--x"])
    assert args.guest_command == ["sh", "-c", "exit 3", "--x"] and args.kernel == ["debian:6.1"]
    assert cli.parse_args(["run"]).guest_command == []


@pytest.mark.parametrize("argv, says", [
    (["run", "--"], "followed by no command"),
    (["compare", "a", "b", "--", "ls"], "takes no -- CMD"),
])
def test_a_separator_without_use_is_refused(argv: list[str], says: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_a_command_alone_runs_without_the_default_tests(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    [cell], first = cells("--", "uname", "-r")
    assert cell.tests == () and cell.command == ("uname", "-r")
    assert cell.command_cwd == str(tmp_path) and cell.command_timeout == 600
    assert first.startswith("testing debian:6.12 (cell adhoc): the command alone")
    assert first.endswith("then the command: uname -r")


def test_a_command_runs_after_the_tests_asked_for_and_after_a_cells_tests() -> None:
    [cell], _ = cells("--test", "memcg_kfuncs", "--timeout", "30", "--", "true")
    assert cell.tests == ("memcg_kfuncs",) and cell.command_timeout == 30
    [six], first = cells("--cell", "6.12", "--cpus", "1", "--", "nproc")
    assert six.tests == matrix.select(matrix.load(), Tier.FULL, ("6.12",))[0].tests
    assert six.command == ("nproc",) and six.guest.cpus == 1
    assert "then the command: nproc" in first


def test_the_command_is_planned_last_with_its_time_limit_and_directory() -> None:
    ref = command.ref(["sh", "-c", "echo 'a b'"], cwd="/srv", timeout_s=42)
    assert ref.name == "cmd-sh" and ref.target == "sh -c 'echo '\"'\"'a b'\"'\"''"
    [planned] = command.KIND.plan(ref, command.KIND.build([ref], None)[ref.name])  # type: ignore[arg-type]
    assert (planned.cwd, planned.timeout_s, planned.fmt) == (Path("/srv"), 42, "exit")
    assert command.test_name(["/usr/bin/stress-ng"]) == "cmd-stress-ng"
    assert command.test_name(["./a b"]) == "cmd-a_b"


@pytest.mark.parametrize("argv, says", [
    (["--memory", "2"], "a size in MiB or GiB"),
    (["--memory", "128M"], "between 256M and 64G"),
    (["--cpus", "0"], "between 1 and 64"),
    (["--timeout", "5"], "--cwd and --timeout are about a command"),
    (["--cwd", "/"], "--cwd and --timeout are about a command"),
    (["--boot-only", "--", "true"], "--boot-only runs no test"),
])
def test_bad_knobs_are_refused_before_any_work(argv: list[str], says: str) -> None:
    with pytest.raises(matrix.MatrixError, match=says.replace("-", r"\-")):
        cells(*argv)


def test_a_command_with_a_newline_is_refused() -> None:
    with pytest.raises(SelftestError, match="put it in a script"):
        cells("--", "sh", "-c", "a\nb")


def test_reproduce_sh_gives_back_the_same_cell() -> None:
    cell = Cell(name="adhoc", tier=Tier.DEFAULT, kernel="debian:6.1", series=("memcg-kfuncs",),
                tests=("memcg_kfuncs",),
                guest=GuestSpec(append="quiet foo=1", memory="1536M", cpus=1),
                command=("sh", "-c", "exit 0"), command_cwd="/tmp", command_timeout=30)
    argv = pipeline.cell_argv(cell, Accel.TCG)
    [again], _ = cli.planned(cli.parse_args(argv))
    assert again == replace(cell)
    plain = replace(cell, guest=GuestSpec(), command=())
    assert "--memory" not in pipeline.cell_argv(plain, Accel.TCG)


def test_the_guest_line_says_what_the_guest_had_and_whether_append_arrived() -> None:
    asked = GuestSpec(memory="1G", cpus=1, append="foo=1")
    seen = GuestSeen(cmdline="console=ttyS0 foo=1 printk.devkmsg=on", cpus=1,
                     memory_kb=985000)
    assert terminal.guest_line(asked, seen) == (
        "guest (--memory 1G --cpus 1 --append foo=1): 1 CPU(s), 961 MiB, /proc/cmdline has "
        "the appended arguments")
    lacking = terminal.guest_line(asked, replace(seen, cmdline="console=ttyS0"))
    assert "LACKS the appended arguments: console=ttyS0" in lacking
    assert terminal.guest_line(GuestSpec(), seen) == ""
    assert "not seen" in terminal.guest_line(asked, None)


def test_matrix_cells_take_memory_and_cpus(tmp_path: Path) -> None:
    m = tmp_path / "m.toml"
    m.write_text('[[cell]]\nname = "a"\nkernel = "debian:6.12"\nmemory = "4G"\ncpus = 1\n')
    [a] = matrix.load(m)
    assert a.guest == GuestSpec(memory="4G", cpus=1)
    m.write_text('[[cell]]\nname = "a"\nkernel = "debian:6.12"\nmemory = "lots"\n')
    with pytest.raises(matrix.MatrixError, match="cell #1: memory 'lots'"):
        matrix.load(m)


def _tree(tmp_path: Path) -> Path:
    import shutil
    import subprocess

    tree = tmp_path / "linux"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fakes" / "kernel-tree", tree)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    (tree / "kernel" / "sub").mkdir()
    return tree


def test_inside_a_kernel_tree_run_tests_that_tree(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path)
    monkeypatch.chdir(tree / "kernel" / "sub")
    [cell], first = cells()
    assert cell.kernel == f"git:{tree}" and cell.series == ()
    assert cell.tests == matrix.default_tests(cell.kernel, matrix.load())[0] != ()
    assert first.startswith(f"testing your tree {tree} (HEAD + uncommitted changes) (cell "
                            "adhoc): the tests of the default cell")
    [named], _ = cells("--kernel", "debian:6.1")
    assert named.kernel == "debian:6.1"
    assert [c.name for c in cells("--cell", "6.1")[0]] == ["6.1"]
    [with_cmd], _ = cells("--", "true")
    assert with_cmd.kernel == f"git:{tree}" and with_cmd.tests == ()


def test_outside_one_run_tests_the_default_matrix_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    got, first = cells()
    assert [c.name for c in got] == [c.name for c in matrix.select(matrix.load(), Tier.DEFAULT)]
    assert first.startswith("testing the default tier of the matrix: ")
    assert first.endswith("(not inside a kernel tree)")
    # a git repository that is not a kernel tree is not one
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    (tmp_path / "repo" / "Makefile").write_text("VERSION = 1\n")
    monkeypatch.chdir(tmp_path / "repo")
    assert cells()[1].endswith("(not inside a kernel tree)")


def test_one_vocabulary_in_run_and_check() -> None:
    run = cli.parse_args(["run", "--patch", "a.patch", "--patch", "b.patch"])
    check = cli.parse_args(["check", "--patch", "a.patch", "--patch", "b.patch"])
    assert run.patch == check.patch == ["a.patch", "b.patch"]
    with pytest.raises(SystemExit):  # one file per --patch, as in run
        cli.parse_args(["check", "--patch", "a.patch", "b.patch"])
    assert cli.parse_args(["matrix"]).tier == "default"  # what `harness run` runs


@pytest.mark.parametrize("command", ["run", "check", "shell"])
def test_kernel_means_the_same_in_run_and_check(command: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse_args([command, "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert ("--kernel SPEC debian:6.12, debian:6.1, git:PATH[@REV], tarball:PATH (a kernel "
            "release tarball) (default: the kernel git tree you are in, else debian:6.12)"
            ) in flat
    assert "--arch {x86_64,arm64}" in flat or "--arch {arm64,x86_64}" in flat
    assert "--toolchain {gcc,llvm}" in flat
    assert ("--series NAME patch series under patches/, mbox:FILE or lore:MSGID (a thread "
            "from the list, through b4); repeatable") in flat
    assert ("--patch FILE extra patch, or a thread saved as an mbox, applied after the "
            "series (repeatable)") in flat


def test_matrix_lists_the_tier_run_runs_and_says_how_to_see_all(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["matrix"]) == 0
    out = capsys.readouterr().out.splitlines()
    default = matrix.select(matrix.load(), Tier.DEFAULT)
    assert [line.split()[0] for line in out[:-1]] == [c.name for c in default]
    assert out[-1] == (f"({len(default)} of {len(matrix.load())} cells: the default tier; "
                       "--tier full lists them all)")


def test_every_daily_use_command_of_the_readme_is_run_by_an_e2e_test() -> None:
    """tests/e2e/test_daily.py reads its commands from the README's `daily` block with
    daily(PREFIX) or _daily_line(PREFIX): every command there must be some test's."""
    import re

    repo = Path(__file__).resolve().parents[2]
    block = (repo / "README.md").read_text().split("```daily\n", 1)[1].split("```", 1)[0]
    commands = [x for x in block.splitlines() if x.startswith(("harness ", "git "))]
    e2e = (repo / "tests" / "e2e" / "test_daily.py").read_text()
    prefixes = re.findall(r'(?:daily|_daily_line)\(\s*"([^"]+)"', e2e)
    taken = [next(c for c in commands if c == p) if p in commands else
             next(c for c in commands if c.startswith(p)) for p in prefixes]
    assert len(commands) >= 9 and sorted(taken) == sorted(commands)
