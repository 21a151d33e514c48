"""The one subprocess wrapper: timeouts, early stop, and no survivors in the process group."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from harness.base import proc


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
