"""Finding kernel splats (WARNINGs, BUGs, oopses, sanitizer reports, ...) in dmesg text.

Pure functions over text: no I/O, no logging. The formats are the kernel's own
(6.12): kernel/panic.c (`WARNING: CPU: %d PID: %d at %pS`, `---[ end trace %016llx ]---`,
`Kernel panic - not syncing: %s`), arch/x86/kernel/dumpstack.c (`Oops: %s: %04lx [#%d]`),
arch/x86/mm/fault.c, lib/bug.c, mm/kasan/report.c, lib/ubsan.c, kernel/locking/lockdep.c,
kernel/rcu/tree_stall.h, kernel/hung_task.c and kernel/watchdog.c.
"""

from __future__ import annotations

import re
from dataclasses import replace

from harness.base.model import Splat

__all__ = ["STALLS", "TAINT_LETTERS", "faulting_function", "find_splats", "first_frames",
           "relative_to_tree", "taint_flags_changed"]

# Console prefixes: "[    1.234567] ", "[    1.234567][    T1] ", "<4>[    1.234567] ",
# and /dev/kmsg records "4,123,1234567,-;".
_PREFIX = re.compile(
    r"^(?:\d+,\d+,\d+,[^;]*;|(?:<\d+>)?(?:\[\s*\d+\.\d+\](?:\[\s*[A-Z]\d+\])? ?)?)"
)

_LOCKDEP_TITLES = (
    r"possible circular locking dependency detected",
    r"possible recursive locking detected",
    r"inconsistent lock state",
    r"possible irq lock inversion dependency detected",
    r"\S+-safe -> \S+-unsafe lock order detected",
    r"bad unlock balance detected!",
    r"suspicious RCU usage",
    r"held lock freed!",
    r".+ still has locks held!",
    r"lock held when returning to user space!",
    r"Nested lock was not taken",
    r"chain_key collision",
    r"bad contention detected!",
)

# Order matters: the first match wins ("BUG: KASAN:" before "BUG:").
_STARTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("KASAN", re.compile(r"^BUG: KASAN: ")),
    ("SOFT_LOCKUP", re.compile(r"^(?:watchdog: )?BUG: soft lockup - CPU#\d+ stuck for ")),
    # Not a soft lockup, but the same watchdog; reported under the same kind.
    ("SOFT_LOCKUP", re.compile(r"^(?:watchdog: )?Watchdog detected hard LOCKUP on cpu \d+")),
    ("LOCKDEP", re.compile(r"^WARNING: (?:" + "|".join(_LOCKDEP_TITLES) + r")\s*$")),
    ("LOCKDEP", re.compile(r"^\[ BUG: Invalid wait context \]")),
    ("WARNING", re.compile(r"^WARNING: CPU: \d+ PID: \d+ at ")),
    ("BUG", re.compile(r"^BUG: \S")),
    ("BUG", re.compile(r"^[Kk]ernel BUG at \S")),
    ("BUG", re.compile(r"^Unable to handle kernel (?:NULL pointer dereference|paging request)")),
    ("UBSAN", re.compile(r"^UBSAN: \S")),
    ("RCU_STALL", re.compile(r"^(?:rcu: )?INFO: rcu_\w+ (?:self-)?detected (?:expedited )?stall")),
    ("HUNG_TASK", re.compile(r"^INFO: task .+:\d+ blocked for more than \d+ seconds\.")),
    ("PANIC", re.compile(r"^Kernel panic - not syncing: ")),
    ("OOPS", re.compile(r"^(?:Oops|Internal error): .*\[#\d+\]")),
    (
        "OOPS",
        re.compile(
            r"^(?:general protection fault|invalid opcode|stack segment|double fault"
            r"|divide error)\b.*: [0-9a-f]{4} \[#\d+\]"
        ),
    ),
)

# The kernel saying it makes no progress (searched in console lines, prefix and all): a
# boot that prints one before it is ready is ended, not waited for.
STALLS = tuple(re.compile(pattern.pattern.removeprefix("^")) for kind, pattern in _STARTS
               if kind in ("SOFT_LOCKUP", "RCU_STALL", "HUNG_TASK"))

_END_TRACE = re.compile(r"^---\[ end trace(?: [0-9a-f]+)? \]---")
# lib/bug.c and kernel/panic.c print it before a WARN's message and before "kernel BUG at"
_CUT_HERE = re.compile(r"^-+\[ cut here \]-+$")
_TIMESTAMP = re.compile(r"^(?:<\d+>)?\[\s*(\d+\.\d+)\]")
_MESSAGE_LINES = 8  # a message longer than this is cut
_SAME_MOMENT_S = 0.01  # a line this close before the cut is the code speaking before BUG()
_END_PANIC = re.compile(r"^---\[ end Kernel panic - not syncing: .*\]---")
_KASAN_RULE = re.compile(r"^={20,}\s*$")
_CALL_TRACE = re.compile(r"^(?:Call [Tt]race:|Backtrace:)\s*$")
# Lines that continue a stack trace: indented frames (" func+0x1/0x2", " <TASK>",
# " ? func") and, on x86, the register dump printed inline for an interrupt frame.
_TRACE_LINE = re.compile(
    r"^(?:[ \t]|(?:RIP|EIP|Code|RSP|ESP|RAX|RBX|RCX|RDX|RSI|RDI|RBP|EAX|EBX|ECX|EDX|ESI|EDI"
    r"|EBP|R\d+|FS|GS|CS|DS|ES|CR\d|DR\d|PKRU):)"
)

_MARKER_KINDS = frozenset({"WARNING", "BUG", "OOPS", "UBSAN", "KASAN", "PANIC"})
_SEARCH_LIMIT = {"LOCKDEP": 200, "RCU_STALL": 150}  # lines to look for a call trace
_DEFAULT_SEARCH_LIMIT = 80
_HARD_LIMIT = 300  # no splat text is longer than this
_AFTER_TRACE = 12  # lines after the call trace in which the end marker may still come


def _strip_prefix(line: str) -> str:
    m = _PREFIX.match(line)
    text = line[m.end() :] if m else line
    return text.rstrip()


def _classify(text: str) -> str | None:
    for kind, pattern in _STARTS:
        if pattern.match(text):
            return kind
    return None


def _is_end_marker(kind: str, text: str) -> bool:
    if kind == "KASAN":
        return bool(_KASAN_RULE.match(text))
    if kind == "PANIC":
        return bool(_END_PANIC.match(text))
    return bool(_END_TRACE.match(text))


def _block_end(texts: list[str], start: int, kind: str) -> int:
    """Index of the last line of the splat starting at `start` (inclusive)."""
    search_limit = _SEARCH_LIMIT.get(kind, _DEFAULT_SEARCH_LIMIT)
    in_trace = False
    trace_entries = False
    trace_end: int | None = None
    absorbed_oops = False
    j = start + 1
    while j < len(texts):
        text = texts[j]
        if j - start >= _HARD_LIMIT:
            return j - 1 if trace_end is None else trace_end
        if kind in _MARKER_KINDS and _is_end_marker(kind, text):
            return j
        other = _classify(text)
        if other is not None:
            # "BUG: kernel NULL pointer dereference" / "kernel BUG at" are followed by
            # the "Oops: ... [#1]" header of the same oops: one splat, not two.
            if other == "OOPS" and kind == "BUG" and not absorbed_oops:
                absorbed_oops = True
            else:
                # after its call trace, the lines before the next splat are not this one's
                # (a might_sleep() BUG has no end marker to wait for)
                return j - 1 if trace_end is None else trace_end
        if trace_end is None:
            if _CALL_TRACE.match(text):
                in_trace = True
            elif in_trace and _TRACE_LINE.match(text):
                trace_entries = True
            elif in_trace and trace_entries:
                trace_end = j - 1
        if trace_end is not None and kind != "KASAN":
            # (A KASAN report goes on after its call trace with the allocation and
            # free stacks and the shadow memory dump, up to its closing "=====".)
            if kind not in _MARKER_KINDS or j - trace_end > _AFTER_TRACE:
                return trace_end
        elif not in_trace and j - start >= search_limit:
            return j - 1
        j += 1
    # The text ran out: after a call trace, the end marker never came.
    return len(texts) - 1 if trace_end is None else trace_end


def _timestamp(line: str) -> float | None:
    m = _TIMESTAMP.match(line)
    return float(m.group(1)) if m else None


def _message(lines: list[str], texts: list[str], start: int, kind: str, floor: int) -> str:
    """What the code printed for the splat starting at `start`, no earlier than `floor`:
    the lines between the "cut here" line and the title (WARN(cond, fmt, ...)'s message);
    for a BUG with nothing there, the line just before the cut if printed at the same
    moment (a pr_err() before BUG())."""
    cut = next((j for j in range(start - 1, max(floor, start - _MESSAGE_LINES - 1) - 1, -1)
                if _CUT_HERE.match(texts[j])), None)
    if cut is None:
        return ""
    said = [t for t in texts[cut + 1:start] if t.strip()]
    if not said and kind == "BUG" and cut - 1 >= floor and texts[cut - 1].strip() \
            and _classify(texts[cut - 1]) is None:
        before, at = _timestamp(lines[cut - 1]), _timestamp(lines[cut])
        if before is not None and at is not None and 0 <= at - before <= _SAME_MOMENT_S:
            said = [texts[cut - 1]]
    return "\n".join(said[:_MESSAGE_LINES])


def find_splats(dmesg: str) -> list[Splat]:
    """The kernel splats in `dmesg` (console or `dmesg` output), in order.

    A splat runs from its first line (the title, which is kept without the console
    timestamp) to the end marker of its kind ("---[ end trace ... ]---", the closing
    "=====" rule of a KASAN report, "---[ end Kernel panic ... ]---"), or else to the
    end of its first call trace, or at most ~80 lines (200 for lockdep reports). The
    text has console prefixes stripped. An oops announced by a "BUG:" line (NULL
    pointer dereference, page fault) or "kernel BUG at" is one BUG splat including
    its "Oops:" header; a panic that follows an oops is a separate PANIC splat.
    What the code printed for it (`message`) is kept apart: see `_message`.
    """
    lines = dmesg.split("\n")
    texts = [_strip_prefix(line) for line in lines]
    splats: list[Splat] = []
    i = 0
    floor = 0  # the end of the last splat: a message is never taken from before it
    while i < len(texts):
        kind = _classify(texts[i])
        if kind is None:
            i += 1
            continue
        end = _block_end(texts, i, kind)
        block = texts[i : end + 1]
        while block and not block[-1].strip():
            block.pop()
        splats.append(Splat(kind=kind, title=texts[i], text="\n".join(block),
                            function=faulting_function(block),
                            message=_message(lines, texts, i, kind, floor)))
        i = floor = end + 1
    return splats


# "at mm/foo.c:12 func+0x1/0x2" (WARN), "in func+0x1/0x2" (KASAN), "RIP: 0010:func+0x1/0x2"
_TITLE_FUNC = re.compile(r"(?:\bat \S+:\d+|\bin) ([A-Za-z_][\w.]*)\+0x[0-9a-f]+/0x[0-9a-f]+")
# where the CPU was: x86's "RIP: 0010:func+0x1/0x2", arm64's "pc : func+0x1/0x2"
_RIP_FUNC = re.compile(r"^(?:RIP: [0-9a-f]{4}:|pc : )([A-Za-z_][\w.]*)\+0x[0-9a-f]+/0x[0-9a-f]+")
_FRAME = re.compile(r"^\s+([A-Za-z_][\w.]*)\+0x[0-9a-f]+/0x[0-9a-f]+")
# Frames of the machinery that reports or waits, never the culprit.
_REPORTING = re.compile(
    r"^(?:dump_stack\w*|show_stack|show_regs|__show_regs|__warn|warn_slowpath\w*|panic|"
    r"vpanic|nmi_panic|check_panic_on_warn|report_bug|handle_bug|exc_\w+|asm_\w+|die|"
    r"oops_end|__die\w*|do_trap|do_error_trap|__ubsan_handle_\w+|ubsan_\w+|kasan_\w+|"
    r"__kasan_\w+|print_\w+|__schedule|schedule\w*|io_schedule\w*|__mutex_lock\w*|"
    r"mutex_lock\w*|rwsem_down_\w+|down_\w+|__wait_\w+|wait_for_\w+|lockdep_\w+|"
    r"__lock_acquire\w*|lock_acquire\w*|rcu_dump_\w+|sysvec_\w+|__sysvec_\w+|"
    r"irq_exit\w*|hrtimer_\w+|__hrtimer_\w+|tick_\w+|update_process_times|"
    r"watchdog_timer_fn|rcu_sched_clock_irq|rcu_pending|__cond_resched|preempt_\w+)$")


def faulting_function(block: list[str]) -> str:
    """The function a splat is about, for matching the same splat across runs.

    The title names it for a WARNING ("at FILE:LINE func+...") and KASAN ("in func+...");
    otherwise the interrupted RIP, else the first call-trace frame that is not the
    reporting or waiting machinery (dump_stack, __warn, panic, schedule, mutex_lock, ...).
    Empty when none can be told.
    """
    if block and (m := _TITLE_FUNC.search(block[0])) is not None:
        return _plain(m.group(1))
    for line in block:
        if (m := _RIP_FUNC.match(line)) is not None:
            return _plain(m.group(1))
    for line in block:
        if (m := _FRAME.match(line)) is not None and not _REPORTING.match(_plain(m.group(1))):
            return _plain(m.group(1))
    return ""


def _plain(symbol: str) -> str:
    """The function's own name: gcc's clone suffixes (.constprop.0, .isra.0, .part.0,
    .cold) differ between builds of the same code."""
    return re.sub(r"(?:\.(?:constprop|isra|part|cold|llvm)(?:\.\d+)?)+$", "", symbol)


# kernel/panic.c taint_flags[], bit 0 upwards.
TAINT_LETTERS = "PFSRMBUDAWCIOELKXTN"


def taint_flags_changed(before: int, after: int) -> list[str]:
    """Letters of the taint bits set in `after` but not in `before` (/proc/sys/kernel/tainted),
    lowest bit first; a bit the kernel does not name yet shows as "bit<N>"."""
    if before < 0 or after < 0:
        raise ValueError("taint masks are non-negative")
    new = after & ~before
    letters: list[str] = []
    bit = 0
    while new >> bit:
        if (new >> bit) & 1:
            letters.append(TAINT_LETTERS[bit] if bit < len(TAINT_LETTERS) else f"bit{bit}")
        bit += 1
    return letters


# decode_stacktrace.sh output: "func (file:line)" (inlined: several file:line), a RIP line
# "RIP: 0010:func (file:line)"; raw frames "func+0x1/0x2" are left as they were.
_DECODED_RIP = re.compile(r"^RIP: [0-9a-f]{4}:([A-Za-z_][\w.]*)(?:\+0x[0-9a-f]+/0x[0-9a-f]+)? "
                          r"\(([^()\s]+:\d+)")
_DECODED_FRAME = re.compile(r"^\s*([A-Za-z_][\w.]*)(?:\+0x[0-9a-f]+/0x[0-9a-f]+)? "
                            r"\(([^()\s]+:\d+)")


def first_frames(s: Splat, count: int) -> list[str]:
    """Where a decoded splat happened: "at func (file:line)", then the callers that are not
    the reporting machinery, "from func (file:line)"; at most `count` lines."""
    out: list[str] = []
    seen: set[str] = set()
    for line in s.decoded.splitlines():
        m = _DECODED_RIP.match(line)
        if m is None and not line.lstrip().startswith("?"):
            m = _DECODED_FRAME.match(line)
        if m is None or _REPORTING.match(_plain(m.group(1))) or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        out.append(f"{'from' if out else 'at'} {_plain(m.group(1))} ({m.group(2)})")
        if len(out) == count:
            break
    return out


def relative_to_tree(s: Splat, tree_name: str) -> Splat:
    """Paths in the title and decoded text relative to the kernel tree: our builds record
    sources as .harness-build/../path (the build directory inside the tree, its path
    mapped away: see build.make_argv), older ones as BUILD/../../work/TREE/path."""
    rx = re.compile(rf"(?:/[^\s()]*)?(?:\.\./)+work/{re.escape(tree_name)}/"
                    r"|(?<![\w.-])(?:/[^\s()]*/)?\.harness-build/\.\./")
    return replace(s, title=rx.sub("", s.title), decoded=rx.sub("", s.decoded))
