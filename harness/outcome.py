"""Guest output -> TestResults: pure functions over the files the guest runner wrote.

Inputs are the runner's status table, each test's output file, dmesg (or the console
log when the guest died before writing dmesg), and whether the VM was killed. A splat
between a test's start and end markers, or a taint bit newly set while it ran, makes
that test CRASHED; a test cut off by the runner's timeout, or still running when the
VM was killed, is TIMEOUT.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from . import ktap, splat, test_progs
from .model import KtapResult, Splat, Status, TestCase, TestResult, worst
from .selftests import GuestTest

TIMEOUT_EXIT_CODES = (124, 137)  # coreutils timeout: TERM, then KILL after the grace
KSFT_SKIP = 4
# Taint bits that mean the kernel complained (W warning, D died/oops, B bad page,
# L soft lockup); others (O out-of-tree module, E unsigned) are not a failure.
_BAD_TAINTS = frozenset("WDBLM")


@dataclass(frozen=True, kw_only=True)
class RunnerRecord:
    name: str
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    taint_before: int | None = None
    taint_after: int | None = None


def parse_status(text: str) -> dict[str, RunnerRecord]:
    records: dict[str, RunnerRecord] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[1] == "started":
            records[parts[0]] = RunnerRecord(name=parts[0], started=float(parts[2]))
        elif len(parts) >= 7 and parts[1] == "ended":
            records[parts[0]] = RunnerRecord(
                name=parts[0], started=float(parts[6]), ended=float(parts[2]),
                exit_code=int(parts[3]), taint_before=int(parts[4]), taint_after=int(parts[5]))
    return records


def splats_for(test: str, kernel_log: str) -> tuple[Splat, ...]:
    section = splat.section_between(kernel_log, f"harness: test-start {test}",
                                    f"harness: test-end {test} ")
    return tuple(splat.find_splats(section))


def evaluate(plan: list[GuestTest], *, status_text: str, outputs: dict[str, str],
             kernel_log: str, vm_timed_out: bool, vm_error: str = "",
             durations_from_host: float = 0.0,
             artifacts: dict[str, str] | None = None) -> list[TestResult]:
    records = parse_status(status_text)
    results = []
    for test in plan:
        rec = records.get(test.name)
        text = outputs.get(test.name, "")
        parsed = None
        if test.fmt == "ktap" and text:
            parsed = ktap.parse(text)
        elif test.fmt == "test_progs" and text:
            parsed = test_progs.parse(text, (artifacts or {}).get(test.name))
        splats = splats_for(test.name, kernel_log) if rec and rec.started is not None else ()
        if rec is None or rec.started is None:
            status = Status.BOOT_ERROR if not records else Status.CRASHED
            reason = vm_error or "never started: the guest stopped before reaching this test"
            if vm_timed_out:
                status, reason = Status.TIMEOUT, "never started: the VM hit its wall-clock timeout"
            results.append(TestResult(name=test.name, status=status, duration_s=0.0,
                                      exit_code=None, ktap=None, splats=(), reason=reason))
            continue
        duration = (rec.ended - rec.started) if rec.ended is not None else 0.0
        if rec.ended is None:
            crashed = splats or _panicked(kernel_log)
            status = Status.CRASHED if crashed else Status.TIMEOUT
            reason = ("the kernel crashed while this test ran" if crashed else
                      "still running when the VM was killed at its wall-clock timeout"
                      if vm_timed_out else "the guest stopped while this test ran")
            results.append(TestResult(name=test.name, status=status, duration_s=duration,
                                      exit_code=None, ktap=parsed, splats=splats,
                                      reason=reason))
            continue
        status, reason = _status_from_exit(rec, parsed, test)
        new_taints = [t for t in splat.taint_flags_changed(rec.taint_before or 0,
                                                           rec.taint_after or 0)
                      if t in _BAD_TAINTS]
        if splats:
            status = Status.CRASHED
            reason = f"kernel splat while it ran: {splats[0].title}"
        elif new_taints:
            status = Status.CRASHED
            reason = f"kernel taint newly set while it ran: {''.join(new_taints)}"
        results.append(TestResult(name=test.name, status=status, duration_s=duration,
                                  exit_code=rec.exit_code, ktap=parsed, splats=splats,
                                  reason=reason))
    return results


def _panicked(kernel_log: str) -> bool:
    return "Kernel panic - not syncing" in kernel_log


def _status_from_exit(rec: RunnerRecord, parsed: KtapResult | None,
                      test: GuestTest) -> tuple[Status, str]:
    rc = rec.exit_code
    if rc in TIMEOUT_EXIT_CODES:
        return Status.TIMEOUT, f"killed by the per-test timeout ({test.timeout_s}s)"
    if parsed is None:
        if test.fmt in ("ktap", "test_progs"):
            return Status.FAIL, f"no {test.fmt} output (exit {rc})"
        return (Status.PASS, "") if rc == 0 else (Status.FAIL, f"exit {rc}")
    kstatus = parsed.status
    if parsed.errors:
        return worst([kstatus, Status.FAIL]), "; ".join(parsed.errors)
    if rc == KSFT_SKIP and kstatus in (Status.PASS, Status.SKIP):
        return Status.SKIP, "the test skipped itself"
    if rc != 0 and kstatus in (Status.PASS, Status.SKIP, Status.XFAIL, Status.XPASS):
        return Status.FAIL, f"KTAP reports success but the test exited {rc}"
    return kstatus, ""


# ---- expectations: known failures outside our patches, keyed by kernel version range ----


@dataclass(frozen=True, kw_only=True)
class Expectation:
    test: str
    subtest: str | None
    kernel: str  # e.g. ">=6.12,<6.13"
    reason: str
    evidence: str


def load_expectations(path: Path) -> list[Expectation]:
    if not path.exists():
        return []
    data = tomllib.loads(path.read_text())
    return [
        Expectation(test=str(e["test"]), subtest=e.get("subtest"), kernel=str(e["kernel"]),
                    reason=str(e["reason"]), evidence=str(e.get("evidence", "")))
        for e in data.get("expected_failure", [])
    ]


def _vtuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def version_matches(version: str, spec: str) -> bool:
    have = _vtuple(version)
    for clause in spec.split(","):
        clause = clause.strip()
        m = re.match(r"(>=|<=|==|<|>)\s*(\S+)", clause)
        if not m:
            continue
        op, want = m.group(1), _vtuple(m.group(2))
        cmp = (have > want) - (have < want)
        ok = {">=": cmp >= 0, "<=": cmp <= 0, "==": cmp == 0, "<": cmp < 0, ">": cmp > 0}[op]
        if not ok:
            return False
    return True


def apply_expectations(results: list[TestResult], expectations: list[Expectation],
                       kernel_version: str) -> list[TestResult]:
    """Expected failures become XFAIL (with the reason); expected ones that pass become XPASS."""
    active = [e for e in expectations if version_matches(kernel_version, e.kernel)]
    out = []
    for res in results:
        mine = [e for e in active if e.test == res.name]
        if not mine:
            out.append(res)
            continue
        whole = next((e for e in mine if e.subtest is None), None)
        if whole is not None:
            if res.status is Status.FAIL:
                out.append(replace(res, status=Status.XFAIL, reason=f"expected: {whole.reason}"))
            elif res.status is Status.PASS:
                out.append(replace(res, status=Status.XPASS,
                                   reason=f"on the expected-failure list but passed "
                                          f"({whole.reason})"))
            else:
                out.append(res)
            continue
        by_sub: dict[str | None, Expectation] = {e.subtest: e for e in mine if e.subtest}
        if res.ktap is None or res.status not in (Status.FAIL, Status.PASS):
            out.append(res)
            continue
        cases = tuple(_mark(c, by_sub) for c in res.ktap.cases)
        ktap_res = replace(res.ktap, cases=cases)
        leaves = [c.status for c in _leaves(cases)]
        status = worst(leaves) if leaves else res.status
        notes = [f"{c.name}: {by_sub[c.name].reason}" for c in _leaves(cases)
                 if c.name in by_sub]
        reason = "expected failures: " + "; ".join(notes) if notes else res.reason
        if status is Status.FAIL:
            reason = res.reason
        out.append(replace(res, ktap=ktap_res, status=status, reason=reason))
    return out


def _mark(case: TestCase, by_sub: dict[str | None, Expectation]) -> TestCase:
    if case.subtests:
        subs = tuple(_mark(s, by_sub) for s in case.subtests)
        return replace(case, subtests=subs, status=worst([s.status for s in subs]))
    if case.name in by_sub:
        if case.status is Status.FAIL:
            return replace(case, status=Status.XFAIL)
        if case.status is Status.PASS:
            return replace(case, status=Status.XPASS)
    return case


def _leaves(cases: tuple[TestCase, ...]) -> list[TestCase]:
    out: list[TestCase] = []
    for c in cases:
        out.extend(_leaves(c.subtests) if c.subtests else [c])
    return out
