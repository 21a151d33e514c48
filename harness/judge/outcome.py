"""Guest output -> raw TestResults: pure functions over the files one boot left.

Inputs are the runner's status table and guest-info, each test's output file, the
kernel log (dmesg, and the console for what dmesg cannot have), and whether the VM was
killed. Every kernel-log line belongs to one result: `boot` (before the runner
started), a test (between its markers), `setup` (the runner's work between tests) or
`shutdown` (after the runner finished; console only). Each result gets the splats of
its part and the bad taint bits newly set during it; whether that makes it CRASHED, and
every other final verdict, is `verdict.judge`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.base.model import (
    CheckSelection,
    KtapResult,
    Phase,
    Splat,
    Status,
    TestResult,
    worst,
)
from harness.guest import protocol
from harness.guest.protocol import GuestTest, RunnerRecord
from harness.judge import checks, ktap, splat, test_progs

TIMEOUT_EXIT_CODES = (124, 137)  # coreutils timeout: TERM, then KILL after the grace
KSFT_SKIP = 4
# Taint bits that mean the kernel complained (W warning, D died/oops, B bad page,
# L soft lockup, M machine check); others (O out-of-tree module, E unsigned) are not.
_BAD_TAINTS = frozenset("WDBLM")


@dataclass(frozen=True, kw_only=True)
class BootRecord:
    """What one boot left in its guest directory, read by the pipeline."""

    status_text: str = ""
    info_text: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)  # test_progs -J files
    dmesg: str = ""
    console: str = ""
    runner_done: bool = False
    vm_timed_out: bool = False
    vm_exit: int | None = None
    # the VM was ended before the runner started because it made no progress: why
    # ("no output for 30s", "a stall reported: ...")
    vm_stopped_by: str | None = None


def bad_taint(before: int | None, after: int | None) -> str:
    if before is None or after is None:
        return ""
    return "".join(t for t in splat.taint_flags_changed(before, after) if t in _BAD_TAINTS)


def evaluate(plan: list[GuestTest], boot: BootRecord) -> list[TestResult]:
    """[boot, each planned test, setup, shutdown], with raw statuses. Each result's `log`
    is the guest file (relative to the guest directory) that shows it: a test's own output,
    the kernel log its part came from."""
    log = protocol.split_kernel_log(boot.dmesg, boot.console)
    info = protocol.parse_info(boot.info_text)
    records = protocol.parse_status(boot.status_text)
    kernel_log = Path(log.source)
    results = [replace(_boot_result(log, info, boot), log=kernel_log)]
    results += [replace(_test_result(t, records.get(t.name), log, boot, info),
                        log=Path(f"{t.name}.out"), selection=_selection(t, boot))
                for t in plan]
    results.append(replace(_setup_result(log, info, records, plan), log=kernel_log))
    results.append(replace(_shutdown_result(log, boot, info), log=Path("console.log")))
    if (gap := _CONSOLE_GAP.search(boot.console)) is not None:
        # Splats in the part of the console that was not read were not judged: say so
        # wherever the console was the source.
        note = (f"console.log was too big: {gap.group(1)} bytes in its middle were not read, "
                "and splats there were not judged")
        results = [replace(r, notes=(*r.notes, note)) if log.source == "console.log" or
                   r.phase is Phase.SHUTDOWN else r for r in results]
    return results


def _selection(test: GuestTest, boot: BootRecord) -> CheckSelection | None:
    """Which checks ran, when only some were asked for: as our tests say it (check.c's
    `# harness-checks:` line), or the results a program printed (test_progs' subtests, a
    kselftest harness program's tests)."""
    text = boot.outputs.get(test.name, "")
    if test.fmt == "ktap" and (said := checks.selection_from_output(
            text, why=test.checks_why)) is not None:
        return said
    if not test.checks:
        return None
    if test.fmt == "test_progs":
        parsed = test_progs.parse(text, boot.artifacts.get(test.name))
        ran = tuple(s.name for c in parsed.cases for s in c.subtests)
    else:
        ran = tuple(c.name for c in ktap.parse(text).cases)
    return CheckSelection(asked=test.checks, selected=ran, why=test.checks_why)


_CONSOLE_GAP = re.compile(r"^\[harness: (\d+) bytes of console\.log not read\]$", re.MULTILINE)


MAX_SPLATS = 20  # kept (and decoded) per result, past the first of each fingerprint
MAX_SAME_SPLATS = 3  # ...of one fingerprint
MAX_FINGERPRINTS = 100


def _splats(text: str) -> tuple[tuple[Splat, ...], tuple[str, ...]]:
    """The splats of a part of the log, bounded: a WARN in a loop must not make results.json
    (and decoding) grow without end. What is not kept is counted by fingerprint."""
    found = splat.find_splats(text) if text else []
    kept: list[Splat] = []
    dropped: dict[str, int] = {}
    per: dict[str, int] = {}
    for s in found:
        per[s.fingerprint] = per.get(s.fingerprint, 0) + 1
        # The first of each kind is always kept, so that every one is judged (a new splat
        # after many of declared noise is not lost).
        first = per[s.fingerprint] == 1 and len(per) <= MAX_FINGERPRINTS
        if first or (len(kept) < MAX_SPLATS and per[s.fingerprint] <= MAX_SAME_SPLATS):
            kept.append(s)
        else:
            dropped[s.fingerprint] = dropped.get(s.fingerprint, 0) + 1
    notes = (("more splats than kept: " + ", ".join(f"{fp} x{n}" for fp, n in
                                                     dropped.items()),) if dropped else ())
    return tuple(kept), notes


def _boot_result(log: protocol.KernelLog, info: protocol.GuestInfo,
                 boot: BootRecord) -> TestResult:
    splats, notes = _splats(log.boot)
    ready = info.values.get("ready", "").split()
    duration = float(ready[0]) if ready and ready[0].replace(".", "", 1).isdigit() else 0.0
    if not info.reached_runner:
        panic = next((s for s in splats if s.kind == "PANIC"), None)
        tail: tuple[str, ...] | None = None
        if panic is not None:
            reason = f"the kernel panicked during boot: {panic.title}"
        elif boot.vm_stopped_by:
            reason = f"boot hang: {boot.vm_stopped_by} before the test runner started"
            tail = last_console_lines(boot.console)
            if not splats:
                # the kernel said nothing: the hang is the harness's finding, with the
                # kernel's last words
                splats = (Splat(kind="BOOT_HANG", title=reason, text="\n".join(tail)),)
        else:
            how = ("the VM was killed at its wall-clock timeout" if boot.vm_timed_out else
                   f"vng exited {boot.vm_exit}")
            reason = f"the guest never started the test runner ({how})"
        return TestResult(name="boot", phase=Phase.BOOT, status=Status.BOOT_ERROR,
                          duration_s=duration, exit_code=None, ktap=None, splats=splats,
                          reason=reason, notes=notes, output_tail=tail,
                          output_lines=len(tail or ()))
    taint = bad_taint(0, info.taint("tainted_at_boot"))
    return TestResult(name="boot", phase=Phase.BOOT, status=Status.PASS, duration_s=duration,
                      exit_code=None, ktap=None, splats=splats, taint=taint, notes=notes,
                      guest_seen=info.machine)


CONSOLE_TAIL = 20  # lines of a hung boot's console kept with its result
_HARNESS_LINE = re.compile(r"^\[harness: ")


def last_console_lines(console: str, n: int = CONSOLE_TAIL) -> tuple[str, ...]:
    """The console's last lines that the guest printed (not the harness's own notes)."""
    lines = [ln.rstrip() for ln in console.splitlines()
             if ln.strip() and not _HARNESS_LINE.match(ln)]
    return tuple(lines[-n:])


def _setup_result(log: protocol.KernelLog, info: protocol.GuestInfo,
                  records: dict[str, RunnerRecord], plan: list[GuestTest]) -> TestResult:
    """The runner's own work between tests: its part of the log, and taint set in the gaps."""
    taint = ""
    before = info.taint("tainted_at_boot")
    for t in plan:
        rec = records.get(t.name)
        if rec is None or rec.taint_before is None:
            break
        taint += bad_taint(before, rec.taint_before)
        before = rec.taint_after
    else:
        taint += bad_taint(before, info.taint("tainted_at_end"))
    status = Status.PASS if info.reached_runner else Status.SKIP
    splats, notes = _splats(log.setup)
    return TestResult(name="setup", phase=Phase.SETUP, status=status, duration_s=0.0,
                      exit_code=None, ktap=None, splats=splats, notes=notes,
                      taint="".join(dict.fromkeys(taint)),
                      reason="" if info.reached_runner else "not reached: the guest never "
                                                            "started the runner")


def _shutdown_result(log: protocol.KernelLog, boot: BootRecord,
                     info: protocol.GuestInfo) -> TestResult:
    splats, notes = _splats(log.shutdown)
    if not boot.runner_done:
        where = ("the guest never started the runner" if not info.reached_runner
                 else "the guest stopped before the runner finished")
        status, reason = Status.SKIP, f"not reached: {where}"
    elif boot.vm_timed_out:
        status = Status.TIMEOUT
        reason = "the runner finished but the guest did not power off before the VM timeout"
    elif not log.runner_done:
        # What the kernel printed after the runner cannot be told apart: not judged is not
        # clean.
        status = Status.FAIL
        reason = ("not judged: the console has no runner-done marker, so the shutdown's "
                  "lines cannot be found (was the console's log level lowered?)")
    else:
        status, reason = Status.PASS, ""
    return TestResult(name="shutdown", phase=Phase.SHUTDOWN, status=status, duration_s=0.0,
                      exit_code=None, ktap=None, splats=splats, reason=reason, notes=notes)


def _parse_output(test: GuestTest, text: str, artifact: str | None) -> KtapResult | None:
    if not text:
        return None
    if test.fmt == "ktap":
        return ktap.parse(text)
    if test.fmt == "test_progs":
        return test_progs.parse(text, artifact)
    return None


def _test_result(test: GuestTest, rec: RunnerRecord | None, log: protocol.KernelLog,
                 boot: BootRecord, info: protocol.GuestInfo) -> TestResult:
    text = protocol.without_cut_line(boot.outputs.get(test.name, ""))
    parsed = _parse_output(test, text, boot.artifacts.get(test.name))
    notes: tuple[str, ...] = ()
    cut = protocol.output_cut(text)
    if cut is not None:
        notes = (f"output cut in the guest at {cut.cap} bytes; {cut.discarded} more bytes "
                 f"were discarded ({cut.failed_lines} failed result lines among them)",)
    if rec is None or rec.started is None:
        if "stopped" in info.values:
            return TestResult(name=test.name, status=Status.SKIP, duration_s=0.0,
                              exit_code=None, ktap=None,
                              reason=f"not run: the kernel died in {info.values['stopped']} "
                                     "(fail-fast)")
        if not info.reached_runner:
            status, reason = Status.BOOT_ERROR, "never started: the guest did not boot"
        elif boot.vm_timed_out:
            status, reason = Status.TIMEOUT, "never started: the VM hit its wall-clock timeout"
        else:
            status = Status.CRASHED
            reason = "never started: the guest stopped before reaching this test"
        return TestResult(name=test.name, status=status, duration_s=0.0, exit_code=None,
                          ktap=None, reason=reason)
    splats, more = _splats(log.tests.get(test.name, ""))
    notes += more
    if rec.ended is None:
        if boot.vm_timed_out and not splats:
            status = Status.TIMEOUT
            reason = "still running when the VM was killed at its wall-clock timeout"
        else:
            status, reason = Status.CRASHED, "the guest stopped while this test ran"
        return TestResult(name=test.name, status=status, duration_s=0.0, exit_code=None,
                          ktap=parsed, splats=splats, reason=reason, notes=notes)
    status, reason = _status_from_exit(rec, parsed, test)
    if cut is not None and cut.failed_lines:
        status = worst([status, Status.FAIL])
        reason = (f"{cut.failed_lines} failed result lines were in the output cut in the "
                  "guest" + (f"; {reason}" if reason else ""))
    return TestResult(name=test.name, status=status, duration_s=rec.ended - rec.started,
                      exit_code=rec.exit_code, ktap=parsed, splats=splats, reason=reason,
                      taint=bad_taint(rec.taint_before, rec.taint_after), notes=notes)


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
