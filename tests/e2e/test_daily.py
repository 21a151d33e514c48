"""The developer's loop on a real kernel (issue 13): `harness shell` driven through a
terminal with pexpect, `run -- CMD` with the guest's size and command line, and the user's
own tree by default. Every kernel here is the `6.12` cell's (Debian 6.12 + memcg-kfuncs,
base config), built once by the ci run and then taken from the store."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from harness.base import paths
from harness.drivers import matrix
from harness.drivers.matrix import Tier

from .conftest import REPO, Run, harness

KERNEL = ("--kernel", "debian:6.12", "--series", "memcg-kfuncs")
PROMPT = "harness-e2e-prompt# "


def daily(start: str, *, out: Path | None = None) -> list[str]:
    """The README's "Daily use" command that starts with `start`, as harness's argv (with
    --out DIR put before any `-- CMD`): the README shows what is tested."""
    argv = shlex.split(_daily_line(start))[1:]
    if out is not None:
        at = argv.index("--") if "--" in argv else len(argv)
        argv[at:at] = ["--out", str(out)]
    return argv


def _daily_line(start: str) -> str:
    """The line of the README's "Daily use" block that is `start` or starts with it."""
    text = (REPO / "README.md").read_text()
    block = text.split("```daily\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines()
    [line] = [x for x in lines if x == start] or [x for x in lines if x.startswith(start)]
    return line


def _qemu_of(out: Path) -> list[str]:
    """QEMU processes of this shell: its results directory is on their command line."""
    ps = subprocess.run(["pgrep", "-af", "qemu-system"], capture_output=True, text=True)
    return [line for line in ps.stdout.splitlines() if str(out) in line]


def test_shell_answers_takes_ctrl_c_in_the_guest_and_leaves_no_qemu(
        ci_run: Run, tmp_path: Path) -> None:
    out = tmp_path / "shell"
    child = pexpect.spawn(sys.executable, ["-m", "harness", *daily("harness shell", out=out)],
                          cwd=str(REPO), env={**os.environ, "PYTHONUNBUFFERED": "1"},
                          encoding="utf-8", codec_errors="replace", timeout=240,
                          dimensions=(40, 200))
    transcript = tmp_path / "transcript.log"
    child.logfile_read = transcript.open("w")
    try:
        child.expect("sh tests.sh NAME")
        child.expect(r"[#$] ", timeout=240)  # vng's prompt, after the boot
        child.sendline(f"PS1='{PROMPT}'")
        child.expect_exact(PROMPT)
        child.sendline("uname -r; cat /proc/sys/kernel/tainted")
        child.expect(r"(6\.12\.[0-9A-Za-z.+-]+)\r+\n(\d+)\r+\n")
        assert child.match.group(1) == ci_run.cell("6.12")["kernel_version"]
        assert child.match.group(2) == "0"
        child.expect_exact(PROMPT)
        # the selftests are there, built for this kernel, and run from the shell
        child.sendline("sh tests.sh rstat_propagation | tail -3; echo rc=$?")
        child.expect(r"# Totals: pass:(\d+) fail:0")
        child.expect_exact(PROMPT, timeout=120)
        # Ctrl-C stops the guest's program, not the VM
        child.sendline("sleep 300")
        time.sleep(3)
        started = time.monotonic()
        child.sendintr()
        child.expect_exact(PROMPT, timeout=30)
        assert time.monotonic() - started < 30
        child.sendline("echo al''ive")
        child.expect(r"alive\r+\n")
        child.expect_exact(PROMPT)
        child.sendline("exit")
        child.expect(pexpect.EOF, timeout=120)
    finally:
        child.close(force=True)
        child.logfile_read.close()
    text = transcript.read_text(errors="replace")
    assert child.exitstatus == 0, text[-3000:]
    assert "shell closed; kernel log: no splat on the console" in text
    assert _qemu_of(out) == []
    session = json.loads((out / "shell.json").read_text())
    assert session["splats"] == [] and session["kernel_version"].startswith("6.12")
    assert "rstat_propagation" in (out / "tests.sh").read_text()


def test_shell_without_a_terminal_says_what_to_do_instead(tmp_path: Path) -> None:
    proc = harness("shell", *KERNEL, "--out", str(tmp_path / "s"), timeout=60)
    assert proc.returncode == 2
    assert "harness shell needs a terminal" in proc.stderr
    assert "harness run [OPTIONS] -- CMD" in proc.stderr


def test_run_a_command_with_the_guest_size_and_command_line_asked_for(
        ci_run: Run, tmp_path: Path) -> None:
    out = tmp_path / "cmd"
    proc = harness(*daily("harness run --kernel debian:6.12 --series memcg-kfuncs --memory",
                          out=out), timeout=600, cwd=tmp_path)
    assert proc.stdout.startswith("testing debian:6.12 + series memcg-kfuncs (cell adhoc): "
                                  "the tests asked for: rstat_propagation; then the command: "
                                  "sh -c")
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    by = {t["name"]: t for t in cell["tests"]}
    assert by["rstat_propagation"]["status"] == "PASS"
    cmd = by["cmd-sh"]
    assert (cmd["status"], cmd["exit_code"], cmd["reason"]) == ("FAIL", 7, "exit 7")
    lines = (out / "adhoc" / "guest" / "cmd-sh.out").read_text().splitlines()
    assert lines[0] == "1" and "harness.e2e=1" in lines[1] and lines[2] == f"in {tmp_path}"
    guest = cell["guest"]
    assert (guest["cpus_online"], guest["memory"]) == (1, "1G")
    assert 900 * 1024 < guest["memory_kb"] <= 1024 * 1024
    assert "harness.e2e=1" in guest["cmdline"]
    # the screen says it: the guest line, the command's verdict and its output
    flat = " ".join(proc.stdout.split())
    assert ("guest (--memory 1G --cpus 1 --append harness.e2e=1): 1 CPU(s), "
            f"{guest['memory_kb'] // 1024} MiB, /proc/cmdline has the appended arguments") in flat
    assert "cmd-sh FAIL" in flat and "output: | 1 |" in flat and "exit 7" in flat
    assert proc.returncode == 1
    # reproduce.sh gives the same command line back
    repro = (out / "adhoc" / "reproduce.sh").read_text()
    assert "--memory 1G --cpus 1 --accel" in repro and f"--cwd {tmp_path} --timeout 60" in repro


def test_inside_a_kernel_tree_run_tests_that_tree(ci_run: Run, tmp_path: Path) -> None:
    """The user's tree by default: a clone of the Debian 6.12 tree the ci run imported, as
    a user would have it; `harness run -- CMD` from a subdirectory of it tests that tree,
    and the first line says so. Its sources and config equal the stored plain 6.12 kernel's,
    so the kernel comes from the store (nothing is built)."""
    [imported] = sorted((paths.cache_root() / "src").glob("debian-6.12-*"))
    tree = tmp_path / f"e2etree{os.getpid()}"  # its cache entries are named after it
    subprocess.run(["git", "clone", "-q", str(imported), str(tree)], check=True, timeout=600)
    out = tmp_path / "run"
    proc = harness(*daily("harness run -- uname -r", out=out), timeout=900,
                   cwd=tree / "kernel" / "cgroup")
    first = proc.stdout.splitlines()[0]
    assert first == (f"testing your tree {tree} (HEAD + uncommitted changes) (cell adhoc): "
                     "the command alone (no --test given); then the command: uname -r")
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["kernel"] == f"git:{tree}" and cell["status"] == "PASS", proc.stderr[-2000:]
    assert "already built" in proc.stderr
    by = {t["name"]: t for t in cell["tests"]}
    assert by["cmd-uname"]["extra"]["output_tail"] == [cell["kernel_version"]]
    # the user's tree is as it was
    status = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert status == ""
    # what the cache holds for that tree (a clone, a worktree) says what it was for, and
    # goes with `harness cache drop`
    listing = harness("cache", timeout=300).stdout
    mine = [line for line in listing.splitlines() if f" git-{tree.name}-" in line]
    assert sorted(line.split()[0] for line in mine) == ["source", "worktree"]
    assert all(f"git:{tree} + config base" in line for line in mine)
    dropped = harness("cache", "drop", f"git-{tree.name}-*", timeout=300)
    assert dropped.returncode == 0 and "2 entries evicted" in dropped.stdout
    assert f" git-{tree.name}-" not in harness("cache", timeout=300).stdout


def test_cache_lists_what_it_holds_and_prunes_least_recently_used_first(ci_run: Run) -> None:
    listing = harness(*daily("harness cache"), timeout=300)
    assert listing.returncode == 0
    # the kernel the ci run used is there, with what it was used for
    six = Path(ci_run.cell("6.12")["image"]).parent.name
    [line] = [x for x in listing.stdout.splitlines() if f" {six} " in x]
    assert line.startswith("kernel") and "debian:6.12 + series memcg-kfuncs" in line
    dry = harness(*daily("harness cache prune"), timeout=300)
    would = [line.split()[3] for line in dry.stdout.splitlines()
             if line.startswith("would evict")]
    assert dry.returncode == 0 and would and would[0] != six
    # nothing went: it was a dry run
    assert harness("cache", timeout=300).stdout.count("\n") == listing.stdout.count("\n")


def test_a_kselftest_glob_runs_each_matching_test(ci_run: Run, tmp_path: Path) -> None:
    out = tmp_path / "glob"
    proc = harness(*daily("harness run --kernel debian:6.12 --series memcg-kfuncs --test 'k",
                          out=out), timeout=1200)
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    names = [t["name"] for t in cell["tests"] if t["phase"] == "test"]
    # the glob test_[cf][or]* of the target's list: test_core and test_freezer, not
    # test_cpu, test_cpuset or the others
    assert names == ["kselftest-cgroup-test_core", "kselftest-cgroup-test_freezer"], names
    assert cell["status"] == "PASS" and proc.returncode == 0, proc.stdout[-3000:]


def test_matrix_lists_the_tier_run_runs() -> None:
    proc = harness(*daily("harness matrix"), timeout=120)
    names = [line.split()[0] for line in proc.stdout.splitlines()[:-1]]
    assert names == [c.name for c in matrix.select(matrix.load(), Tier.DEFAULT)] != []
    assert proc.stdout.splitlines()[-1].endswith("--tier full lists them all)")


def test_a_thread_from_the_list_is_applied_at_its_newest_revision_with_trailers(
        ci_run: Run, tmp_path: Path) -> None:
    """A thread made from our own series (v1, v2, a Reviewed-by on v2 2/4), offline: v2 is
    applied, the trailer is in its commit, one row per patch with its Message-Id; its
    sources equal the 6.12 cell's, so that kernel comes from the store."""
    from tests.helpers.mailthread import REVIEWER, build_thread

    ours = sorted((REPO / "patches" / "memcg-kfuncs").glob("000*.patch"))
    build_thread(ours, tmp_path / "memcg-kfuncs-thread.mbox")
    out = tmp_path / "thread"
    proc = harness(*daily("harness run --kernel debian:6.12 --series mbox:", out=out),
                   timeout=900, cwd=tmp_path)
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["status"] == "PASS" and proc.returncode == 0, proc.stdout[-3000:]
    assert [(p["state"], p["message_id"]) for p in cell["patches"]] == [
        ("applied", f"<harness-test-v2-{n}@example.org>") for n in range(1, 5)]
    assert cell["image"] == ci_run.cell("6.12")["image"] and "already built" in proc.stderr
    tree = Path(cell["image"]).parent  # the store entry says what it was last used for
    assert "mbox:" in (tree / ".harness-use.json").read_text()
    [work] = (paths.cache_root() / "work").glob("debian-6.12-*-base")
    log = subprocess.run(["git", "-C", str(work), "log", "-3", "--format=%B%x00"],
                         capture_output=True, text=True, check=True).stdout.split("\0")
    assert REVIEWER in log[2] and REVIEWER not in log[0] + log[1]


@pytest.mark.full  # the full tier's: tox -e e2e runs it, .ci/run does not
def test_git_bisect_run_skips_the_unbuildable_commit_and_names_the_bad_one(
        ci_run: Run, tmp_path: Path) -> None:
    """`git bisect run` with the README's command over a real history on Debian 6.12:
    good = our series' first three patches; then its fourth (the 6.12 cell's tree), a
    commit that does not build, its revert (the 6.12 cell's tree again), and the
    deliberately broken patch (the 6.12-memcg-broken cell's tree: memcg_kfuncs fails).
    Git tests the unbuildable commit first (the middle of four): it is skipped (125), and
    the broken patch is named. Only that commit is built (in a new worktree, from ccache
    filled by other trees); the others' kernels come from the store."""
    [imported] = sorted((paths.cache_root() / "src").glob("debian-6.12-*"))
    tree = tmp_path / f"bisecttree{os.getpid()}"
    env = {**os.environ, "GIT_AUTHOR_NAME": "E2E", "GIT_AUTHOR_EMAIL": "e2e@example.org",
           "GIT_COMMITTER_NAME": "E2E", "GIT_COMMITTER_EMAIL": "e2e@example.org"}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True,
                              check=True, env=env, timeout=600).stdout.strip()

    subprocess.run(["git", "clone", "-q", str(imported), str(tree)], check=True, timeout=600)
    ours = REPO / "patches" / "memcg-kfuncs"
    patches = [str(ours / p) for p in (ours / "series").read_text().split()]
    git("am", "-q", *patches[:-1])
    good = git("rev-parse", "HEAD")
    git("am", "-q", patches[-1])
    memcg = tree / "mm" / "bpf_memcontrol.c"
    memcg.write_text(memcg.read_text() + "\n#error this commit does not build\n")
    git("commit", "-qam", "mm: a commit that does not build")
    unbuildable = git("rev-parse", "HEAD")
    git("revert", "--no-edit", "HEAD")
    git("am", "-q", str(next((REPO / "patches" / "memcg-kfuncs-broken").glob("0005-*"))))
    broken = git("rev-parse", "HEAD")
    bindir = tmp_path / "bin"  # `harness` on PATH, as for a user with the venv active
    bindir.mkdir()
    (bindir / "harness").write_text(f"#!/bin/sh\nexec {sys.executable} -m harness \"$@\"\n")
    (bindir / "harness").chmod(0o755)
    start = _daily_line("git bisect start ").replace("BAD", broken).replace("GOOD", good)
    subprocess.run(shlex.split(start), cwd=tree, check=True, env=env, capture_output=True)
    bisect = subprocess.run(shlex.split(_daily_line("git bisect run ")), cwd=tree,
                            capture_output=True, text=True, timeout=3600,
                            env={**env, "PATH": f"{bindir}:{os.environ['PATH']}",
                                 "PYTHONPATH": str(REPO)})
    log = git("bisect", "log")
    git("bisect", "reset")
    assert bisect.returncode == 0, bisect.stdout[-4000:] + bisect.stderr[-2000:]
    assert f"{broken} is the first bad commit" in bisect.stdout, bisect.stdout[-4000:]
    assert f"# skip: [{unbuildable}]" in log, log
    assert "# bad: [" in log and "# good: [" in log.split("# skip:", 1)[1], log
