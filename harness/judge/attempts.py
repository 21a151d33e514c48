"""Repetition: a test run N times in one boot, each attempt a fresh process, judged as one.

The guest runs attempt k of test T under the name `T~k` (its own output, metrics and
kernel-log section); `fold` turns the attempts back into one result named T that keeps
every attempt. Pure: results in, results out.

A test whose attempts all agree has their status. One that both passed and failed (or
timed out) is FLAKY, its reason saying how often ("flaky: 19 of 20 attempts passed;
attempt 7 FAIL"): a reliability claim ("passes every time") fails on one bad attempt, and
the counts show how bad; the expectations file may declare a minimum pass rate for a
known-flaky test (verdict.judge_known_failures). Attempts that disagree otherwise (a
skip and a pass) are judged by the worst.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from harness.base.model import Status, TestResult, worst
from harness.guest.protocol import GuestTest

SEPARATOR = "~"
_ATTEMPT = re.compile(rf"^(?P<name>.+){SEPARATOR}(?P<k>[1-9][0-9]*)$")


def base_name(name: str) -> str:
    """NAME~k -> NAME; any other name as it is."""
    m = _ATTEMPT.match(name)
    return m["name"] if m else name


def expand(tests: Sequence[GuestTest], repeat: int) -> list[GuestTest]:
    """Each test `repeat` times in a row, attempt k named NAME~k (1: the test as it is)."""
    if repeat <= 1:
        return list(tests)
    return [replace(t, name=f"{t.name}{SEPARATOR}{k}") for t in tests
            for k in range(1, repeat + 1)]


def fold(results: Sequence[TestResult]) -> list[TestResult]:
    """One result per repeated test, in the order of its first attempt; the others as they
    are."""
    out: list[TestResult] = []
    groups: dict[str, list[TestResult]] = {}
    for r in results:
        m = _ATTEMPT.match(r.name)
        if m is None:
            out.append(r)
            continue
        name = m["name"]
        if name not in groups:
            groups[name] = []
            out.append(replace(r, name=name))  # a placeholder, in order
        groups[name].append(replace(r, name=f"{name} attempt {m['k']}"))
    return [_judged(r.name, groups[r.name]) if r.name in groups else r for r in out]


def _judged(name: str, attempts: list[TestResult]) -> TestResult:
    statuses = [a.status for a in attempts]
    status = worst(statuses)
    shown = next(a for a in attempts if a.status is status)
    if Status.PASS in statuses and status in (Status.FAIL, Status.TIMEOUT):
        status = Status.FLAKY
    counts = Counter(s.value for s in statuses)
    n = len(attempts)
    if len(counts) == 1:
        reason = f"all {n} attempts {status.value}"
    else:
        bad = [f"attempt {k} {a.status.value}" for k, a in enumerate(attempts, 1)
               if a.status is not Status.PASS]
        passed = counts.get(Status.PASS.value, 0)
        reason = (f"flaky: {passed} of {n} attempts passed; " + ", ".join(bad[:10])
                  + (f" and {len(bad) - 10} more" if len(bad) > 10 else ""))
    # the result shown is the worst attempt's (its checks, log and splats), with all of them
    splats = tuple(s for a in attempts for s in a.splats)
    notes = tuple(dict.fromkeys(n for a in attempts for n in a.notes))
    first_reason = f"; {shown.name}: {shown.reason}" if shown.reason else ""
    return replace(shown, name=name, status=status, reason=reason + first_reason,
                   duration_s=sum(a.duration_s for a in attempts), splats=splats,
                   notes=notes, attempts=tuple(attempts),
                   taint="".join(sorted({c for a in attempts for c in a.taint})))
