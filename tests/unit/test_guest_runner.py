"""harness/guest/runner.sh, read as text: what the guest's shell cannot do right."""

from __future__ import annotations

import re

from harness.guest import protocol


def test_no_sysctl_is_read_with_the_read_builtin() -> None:
    """The shell's read builtin reads a byte at a time, and a sysctl's number read at an
    offset past 0 reads as nothing: /proc/sys/kernel/tainted's 512 came back as "5", and a
    boot's taint was lost (a WARN at boot no longer failed the run)."""
    script = protocol.RUNNER.read_text()
    code = [ln.split("#", 1)[0] for ln in script.splitlines()]
    assert [ln for ln in code if re.search(r"\bread\b[^|;&]*<\s*/proc/sys/", ln)] == []
    assert "$(cat /proc/sys/kernel/tainted)" in script  # where the taint is read now
