"""The one subprocess wrapper: timeouts, early stop, and no survivors in the process group."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from harness.base import proc
from harness.base.model import Status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_output_is_logged_as_it_arrives(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    res = proc.run(["sh", "-c", "echo one; echo two >&2; exit 3"], timeout=10, log_path=log)
    assert res.returncode == 3
    assert not res.ok
    assert "one" in res.output and "two" in res.output
    text = log.read_text()
    assert text.startswith("$ sh -c ")
    assert "one\ntwo\n" in text


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    # The grandchild ignores SIGTERM: only the SIGKILL step of the kill path stops it.
    res = proc.run(["sh", "-c", f"sh -c 'trap \"\" TERM; echo $$ > {pidfile}; sleep 300' & "
                                "sleep 300"], timeout=1.5)
    assert res.timed_out
    assert res.returncode is None
    assert time.monotonic() - start < 1.5 + 2 * proc.KILL_GRACE_S + 2
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "grandchild survived the kill path"


def test_stop_pattern_kills_early() -> None:
    start = time.monotonic()
    res = proc.run(["sh", "-c", "echo booting; echo 'KVM internal error'; sleep 60"], timeout=30,
                   stop_patterns=[re.compile("KVM internal error")])
    assert res.stopped_by == "KVM internal error"
    assert time.monotonic() - start < 10


def test_missing_program_names_the_fix() -> None:
    with pytest.raises(proc.ToolMissingError) as err:
        proc.run(["bpftool-does-not-exist"], timeout=5)
    assert "bpftool-does-not-exist" in str(err.value)


def test_check_raises_with_tail(tmp_path: Path) -> None:
    with pytest.raises(proc.CommandError) as err:
        proc.check(["sh", "-c", "echo the reason; exit 2"], what="the step", timeout=5)
    assert "the step failed: exit 2" in str(err.value)
    assert "the reason" in str(err.value)


QUIET = proc.Quiet(seconds=1.5, until=re.compile(r"ready"), stop=(re.compile(r"stall"),),
                   grace_s=0.5)


@pytest.fixture
def low_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache whose file system has less than DISK_LOW free, as after a write found none."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    monkeypatch.setattr(proc, "DISK_LOW", proc.free_space(None)[str(tmp_path)] + 2**30)
    return tmp_path


def test_a_write_that_found_the_disk_full_is_a_set_up_error_saying_so(low_disk: Path) -> None:
    # /dev/full answers every write with ENOSPC: a real full disk, as a program sees it
    (low_disk / "data").write_text("some bytes\n")
    with pytest.raises(proc.CommandError) as caught:
        proc.check(["cp", str(low_disk / "data"), "/dev/full"], what="copy", timeout=10)
    first, *rest = str(caught.value).splitlines()
    assert first.startswith("a disk is full (cp: error writing '/dev/full': No space left "
                            "on device); now ")
    assert re.search(rf"\d+\.\dG free under {re.escape(str(low_disk))}", first)
    assert rest[0] == "copy failed: exit 1"
    assert caught.value.status is Status.SETUP_ERROR
    assert "harness cache prune" in caught.value.fix


def test_words_of_a_full_disk_on_a_disk_with_room_are_no_full_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what the tree's code prints is its own to choose: the disk must agree
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    monkeypatch.setattr(proc, "DISK_LOW", 0)
    (tmp_path / "data").write_text("some bytes\n")
    with pytest.raises(proc.CommandError) as caught:
        proc.check(["cp", str(tmp_path / "data"), "/dev/full"], what="copy", timeout=10)
    assert caught.value.status is None and caught.value.fix == ""


def test_a_failure_that_says_nothing_of_space_keeps_the_stage_s_status(low_disk: Path) -> None:
    with pytest.raises(proc.CommandError) as caught:
        proc.check(["sh", "-c", "echo 'error: patch failed'; exit 1"], what="apply",
                   timeout=10)
    assert caught.value.status is None and caught.value.fix == ""
    said = {  # what programs print when a write found no space
        "fatal: sha1 file 'x/index.lock' write error. Out of diskspace": True,
        "/usr/bin/ld: final link failed: No space left on device": True,
        "cc1: fatal error: error writing to /tmp/ccX.s: No space left on device": True,
        "OSError: [Errno 28] No space left on device: 'out'": True,
        "cp: error writing 'x': Disk quota exceeded": True,
        # a compiler quoting errno-base.h, a test's own words: not a failed write
        "   32 | #define ENOSPC  28 /* No space left on device */": False,
        "tests: 12 passed, quota: 3 of 10 used": False,
    }
    assert {line: bool(proc.disk_full(line)) for line in said} == said


def test_a_child_silent_before_it_is_ready_is_stopped_after_the_silence(
        tmp_path: Path) -> None:
    log = tmp_path / "log"
    res = proc.run(["sh", "-c", "echo booting; sleep 30"], timeout=60, quiet=QUIET,
                   log_path=log)
    assert res.stopped_by == "no output for 2s" and not res.ok
    assert 1.4 < res.duration_s < 6
    assert "[harness: killed: no output for 2s]" in log.read_text()


def test_a_stall_before_ready_stops_it_after_the_grace_and_keeps_what_followed() -> None:
    res = proc.run(["sh", "-c", "echo 'rcu: stall on CPU 0'; echo trace; sleep 0.2; echo more; "
                    "while true; do echo spinning; sleep 0.1; done"], timeout=60, quiet=QUIET)
    assert res.stopped_by == "a stall reported: rcu: stall on CPU 0"
    assert "more" in res.output and res.duration_s < 5


def test_silence_after_ready_is_the_child_s_own_business() -> None:
    res = proc.run(["sh", "-c", "echo ready; sleep 3; echo stall; sleep 1; echo done"],
                   timeout=60, quiet=QUIET)
    assert res.ok and res.stopped_by is None and "done" in res.output


def test_a_programs_version_is_asked_once_per_binary(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    asked = tmp_path / "asked"
    tool = tmp_path / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\necho x >> {asked}\necho 'tool 1.0'\necho second\n")
    tool.chmod(0o755)
    assert proc.version_output(str(tool)) == "tool 1.0\nsecond"
    assert proc.version_output(str(tool)) == "tool 1.0\nsecond"
    assert asked.read_text() == "x\n"  # the second answer was remembered
    # another binary at the same path (a new size or time) is asked again
    tool.write_text(f"#!/bin/sh\necho x >> {asked}\necho 'tool 2.0'\n")
    assert proc.version_output(str(tool)) == "tool 2.0"
    assert asked.read_text() == "x\nx\n"
    # a program that fails says nothing, and is not remembered as having said it
    bad = tmp_path / "bin" / "bad"
    bad.write_text(f"#!/bin/sh\necho x >> {asked}\nexit 3\n")
    bad.chmod(0o755)
    assert proc.version_output(str(bad)) is None and proc.version_output(str(bad)) is None
    assert asked.read_text() == "x\n" * 4
    assert proc.version_output(str(tmp_path / "none")) is None
    # a name that resolves to a wrapper (ccache's gcc) is asked each time: what it runs
    # is not the wrapper's identity
    wrapper = tmp_path / "bin" / "ccache"
    wrapper.write_text(f"#!/bin/sh\necho x >> {asked}\necho 'gcc 12'\n")
    wrapper.chmod(0o755)
    (tmp_path / "bin" / "gcc").symlink_to(wrapper)
    assert proc.version_output(str(tmp_path / "bin" / "gcc")) == "gcc 12"
    assert proc.version_output(str(tmp_path / "bin" / "gcc")) == "gcc 12"
    assert asked.read_text() == "x\n" * 6
