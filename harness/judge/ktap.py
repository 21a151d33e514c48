"""A KTAP/TAP parser for kselftest and KUnit output.

Two phases, like the kernel's tools/testing/kunit/kunit_parser.py:

1. `extract_ktap_lines` cuts the KTAP lines out of noisy console or dmesg text. The
   console prefix (a printk timestamp, a caller id, anything) in front of the first
   version line is learnt and stripped from every later line of that stream; lines
   without it, or that do not look like KTAP once it is stripped, are dropped.
2. A small recursive-descent parser over a peek/pop line stream builds the
   `TestCase` tree. Subtests are found two ways: by indentation (KTAP v1 and KUnit:
   the lines of a subtest are indented further than its parent's result line) and by
   the kselftest runner's "# " prefix (run_kselftest.sh pipes each test's whole
   output through prefix.pl, so an inner "# TAP version 13" block belongs to the
   next unprefixed result line).

The parser never prints or raises on bad input: problems go to `KtapResult.errors`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from harness.base.model import KtapResult, Status, TestCase

__all__ = ["extract_ktap_lines", "parse", "summary_counts"]

_VERSION_RE = re.compile(r"^(?:KTAP|TAP) version (\d+)\s*$")
_VERSION_SEARCH = re.compile(r"(?:KTAP|TAP) version \d+\s*$")
_PLAN_RE = re.compile(r"^1\.\.(\d+)\s*(?:#\s*(.*))?$")
_RESULT_RE = re.compile(r"^(ok|not ok)(?=\s|$)(?:\s+(\d+)\b)?(?:\s+-(?=\s|$))?\s*(.*)$")
_NUMBERED = re.compile(r"^(?:ok|not ok) \d+\b")
_DIRECTIVE_SPLIT = re.compile(r"(?:^|\s)#")
_DIRECTIVE_WORD = re.compile(r"([A-Za-z]+)")
_SUBTEST_RE = re.compile(r"^#\s*Subtest:\s*(.*)$")
_BAIL_RE = re.compile(r"^Bail out!\s*(.*)$")
_KSELFTEST_NAME_RE = re.compile(r"^selftests: \S.*$")
# "#" must be followed by a blank: "#PF: error_code(0x0000)" is an oops line, not KTAP.
_KTAP_SHAPED = re.compile(
    r"^(?:#(?:[ \t]|$)|(?:not )?ok(?:[ \t]|$)|Bail out!|1\.\.\d|(?:KTAP|TAP) version \d)"
)
_STRUCTURE = re.compile(
    r"^[ \t]*(?:(?:not )?ok[ \t]+\d|1\.\.\d|(?:KTAP|TAP) version \d|#\s*Subtest:)"
)

_FAILING = frozenset({Status.FAIL, Status.TIMEOUT, Status.CRASHED})
_OK_LIKE = frozenset({Status.PASS, Status.XPASS, Status.SKIP})
_TEST_STATUSES = (
    Status.PASS,
    Status.XFAIL,
    Status.SKIP,
    Status.XPASS,
    Status.FAIL,
    Status.TIMEOUT,
    Status.CRASHED,
)


# --- phase 1: extraction -------------------------------------------------------------


def _prefix_regex(prefix: str) -> re.Pattern[str]:
    """A regex matching `prefix` and prefixes of the same shape on later lines.

    Digit runs match any digits ("[    0.060000]" vs "[  123.456789]"), an upper-case
    letter before digits matches any ("[    T1]" vs "[    C0]"), inner blank runs match
    any blank run, and the blanks at the very end must match exactly so that the
    indentation of nested lines is not eaten.
    """
    body = prefix.rstrip(" \t")
    tail = prefix[len(body) :]
    parts: list[str] = []
    for tok in re.finditer(r"[A-Z]\d+|\d+|[ \t]+|.", body, re.DOTALL):
        text = tok.group(0)
        if text[0].isdigit():
            parts.append(r"\d+")
        elif len(text) > 1 and text[0].isupper() and text[1:].isdigit():
            parts.append(r"[A-Z]\d+")
        elif text[0] in " \t":
            parts.append(r"[ \t]*")
        else:
            parts.append(re.escape(text))
    return re.compile("".join(parts) + re.escape(tail))


def _is_ktap_shaped(text: str) -> bool:
    return bool(_KTAP_SHAPED.match(text.lstrip(" \t")))


# Bounds: a test that loops printing must not exhaust the host. Beyond these, lines are
# counted, not kept (a failure among them still fails the test).
MAX_LINES = 20_000  # distinct KTAP lines kept from one output
MAX_KEPT_CHARS = 2 * 2**20  # ...and at most this much of their text
MAX_DIAG_LINES = 64  # diagnostic lines kept per result
_STRUCTURAL = re.compile(r"^[#\s]*(?:(?:not )?ok\b|1\.\.\d|(?:KTAP|TAP) version \d|Subtest:)")


@dataclass
class _Extracted:
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # A result line kept once for a run of identical ones -> how many more came.
    repeats: dict[str, int] = field(default_factory=dict)


def extract_ktap_lines(text: str | Iterable[str]) -> list[str]:
    """The KTAP lines of `text`, console prefixes stripped, unrelated lines dropped.

    Extraction starts at the first "KTAP version N" / "TAP version N" line; whatever
    precedes that header on its line is the console prefix of the stream and is
    stripped from the following lines. Lines without that prefix are dropped unless
    they hold a version line of their own, which starts a new stream with a new
    prefix. Lines that do not look like KTAP (version, plan, result, "#" diagnostic,
    "Bail out!") are dropped. Indentation after the prefix is kept.

    Without any version line, every KTAP-looking line is returned unchanged (plain TAP
    without a header); `parse` records the missing header as an error.
    """
    return _extract(text).lines


MAX_LINE_CHARS = 1024  # a longer line is cut (with a mark)


class _Collapser:
    """Keeps lines, a run of identical ones once, at most MAX_LINES; streaming, so memory
    follows the distinct lines kept, not the input."""

    def __init__(self) -> None:
        self.out = _Extracted()
        self.prev: str | None = None
        self.repeats = 0
        self.dropped = 0
        self.dropped_failures = 0
        self.chars = 0

    def add(self, line: str) -> None:
        if line == self.prev:
            self.repeats += 1
            return
        self._flush()
        self.prev, self.repeats = line, 1

    def _flush(self) -> None:
        line, repeats = self.prev, self.repeats
        if line is None:
            return
        if len(self.out.lines) >= MAX_LINES or self.chars >= MAX_KEPT_CHARS:
            self.dropped += repeats
            if line.lstrip("# \t").startswith("not ok"):
                self.dropped_failures += repeats
            return
        if repeats > 1 and _STRUCTURAL.match(line):
            key = _result_key(line)
            self.out.repeats[key] = self.out.repeats.get(key, 0) + repeats - 1
        elif repeats > 1:
            line = f"{line} [this line {repeats} times]"
        self.out.lines.append(line)
        self.chars += len(line)

    def done(self) -> _Extracted:
        self._flush()
        self.prev = None
        if self.dropped:
            what = (f"{self.dropped} more lines after the first {len(self.out.lines)} were not "
                    "kept")
            if self.dropped_failures:
                self.out.errors.append(f"{what}, {self.dropped_failures} of them failed "
                                       "results")
            else:
                self.out.warnings.append(what)
        return self.out


def _result_key(line: str) -> str:
    """A result line as the same result wherever it came: depth marks and blanks aside."""
    return line.strip().lstrip("#").strip()


def _lines(source: str | Iterable[str]) -> Iterator[str]:
    it = io.StringIO(source) if isinstance(source, str) else source
    for line in it:
        line = line.rstrip()
        yield line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " [line cut]"


def _extract(source: str | Iterable[str]) -> _Extracted:
    """`extract_ktap_lines`, streaming and bounded: a run of identical lines is kept once
    (a result line counted once with a warning, a diagnostic with its count), and at most
    MAX_LINES distinct lines are kept."""
    kept = _Collapser()
    headerless = _Collapser()  # plain TAP without a version line: every shaped line
    prefix_re: re.Pattern[str] | None = None
    for line in _lines(source):
        if prefix_re is not None:
            m = prefix_re.match(line)
            if m is not None:
                rest = line[m.end() :]
                if _is_ktap_shaped(rest):
                    kept.add(rest)
                continue
        elif _is_ktap_shaped(line):
            headerless.add(line)
        vm = _VERSION_SEARCH.search(line)
        if vm is None:
            continue
        prefix = line[: vm.start()]
        prefix_re = _prefix_regex(prefix)
        kept.add(line[len(prefix) :])
    return kept.done() if prefix_re is not None else headerless.done()


# --- phase 2: parsing ----------------------------------------------------------------


def _indent(line: str) -> int:
    stripped = line.lstrip(" \t")
    return len(line[: len(line) - len(stripped)].expandtabs(8))


def _dedent(line: str, width: int) -> str:
    col = 0
    i = 0
    while i < len(line) and line[i] in " \t" and col < width:
        col = (col // 8 + 1) * 8 if line[i] == "\t" else col + 1
        i += 1
    return line[i:]


def _strip_hash(text: str) -> str:
    """'# foo' -> 'foo', '#' -> '', '#foo' -> 'foo' (one '#' and one blank)."""
    rest = text[1:]
    return rest[1:] if rest[:1] in (" ", "\t") else rest


class _LineStream:
    """Lines with one-line look-ahead."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = list(lines)
        self._pos = 0

    def __bool__(self) -> bool:
        return self._pos < len(self._lines)

    def peek(self) -> str:
        return self._lines[self._pos]

    def peek_at(self, offset: int) -> str | None:
        pos = self._pos + offset
        return self._lines[pos] if pos < len(self._lines) else None

    def pop(self) -> str:
        line = self._lines[self._pos]
        self._pos += 1
        return line


@dataclass
class _Block:
    """One (sub)stream: what a parent needs to build its `TestCase`."""

    version: str | None = None
    plan: int | None = None
    name: str | None = None  # from "# Subtest: name"
    cases: list[TestCase] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Errors a skipped parent excuses: ksft_exit_skip() after a plan leaves it short.
    short_errors: list[str] = field(default_factory=list)
    trailing_diag: list[str] = field(default_factory=list)
    skip_all: str | None = None  # reason of "1..0 # SKIP reason"
    warnings: list[str] = field(default_factory=list)
    seen: dict[str, TestCase] = field(default_factory=dict)  # result line -> its case
    dups: dict[str, int] = field(default_factory=dict)  # result line -> times more it came

    @property
    def all_errors(self) -> list[str]:
        return self.errors + self.short_errors


def _status_of(result: str, directive: str) -> Status:
    m = _DIRECTIVE_WORD.match(directive)
    word = m.group(1).upper() if m else ""
    ok = result == "ok"
    if word.startswith("SKIP"):
        return Status.SKIP
    if word == "TODO":
        return Status.XPASS if ok else Status.XFAIL
    if word == "XFAIL":
        return Status.XFAIL
    if word == "XPASS":
        return Status.XPASS
    if word == "TIMEOUT" and not ok:
        return Status.TIMEOUT
    return Status.PASS if ok else Status.FAIL


def _split_description(rest: str) -> tuple[str, str]:
    """'name # SKIP why' -> ('name', 'SKIP why'); '# SKIP why' -> ('', 'SKIP why')."""
    m = _DIRECTIVE_SPLIT.search(rest)
    if m is None:
        return rest.strip(), ""
    return rest[: m.start()].strip(), rest[m.end() :].strip()


class _Parser:
    """Parses one block: lines at indentation 0 are this level, deeper ones subtests."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = _LineStream(lines)
        self.block = _Block()
        self.pending_diag: list[str] = []
        self.pending_children: list[_Block] = []
        self.expected = 1
        self.seg_plan: int | None = None
        self.seg_results = 0
        self.seg_started = False
        self.bailed = False
        self.plans: list[int | None] = []

    # The grammar, one level:
    #   block   := [version] [subtest-header] [plan] item* [plan]
    #   item    := diag | child | result | bail-out | version (a further stream)
    #   child   := indented-lines | "# " (version | plan | numbered result) ("#"-lines)*
    # (cgroup's test_core and others print results with no header and no plan.)
    def parse(self) -> _Block:
        while self.lines and not self.bailed:
            line = self.lines.peek()
            if _indent(line) > 0:
                self._indented_child()
                continue
            if _VERSION_RE.match(line):
                self._version(line)
            elif (m := _SUBTEST_RE.match(line)) is not None:
                self.lines.pop()
                if self.block.name is None:
                    self.block.name = m.group(1).strip()
            elif (m := _PLAN_RE.match(line)) is not None:
                self.lines.pop()
                self._plan(int(m.group(1)), (m.group(2) or "").strip())
            elif (m := _RESULT_RE.match(line)) is not None:
                self.lines.pop()
                self._result(m.group(1), m.group(2), m.group(3), _result_key(line))
            elif (m := _BAIL_RE.match(line)) is not None:
                self.lines.pop()
                reason = m.group(1).strip()
                self.block.errors.append(f"Bail out! {reason}".rstrip())
                self.bailed = True
            elif line.startswith("#"):
                inner = _strip_hash(line).lstrip(" \t")
                if _VERSION_RE.match(inner) or _PLAN_RE.match(inner) or _NUMBERED.match(inner):
                    self._prefixed_child()
                else:
                    self.lines.pop()
                    if inner:
                        self.pending_diag.append(self._diag_text(line))
            else:
                # An unknown line. Phase 1 drops them from the console, so this is a
                # test's own output inside a "# " block (stderr, shell echo): kept as
                # a diagnostic, as KTAP suggests.
                self.lines.pop()
                if line.strip():
                    self.pending_diag.append(line.rstrip())
        self._end_segment(final=True)
        return self.block

    def _version(self, line: str) -> None:
        self.lines.pop()
        if self.seg_started:
            # run_kselftest.sh prints one "TAP version 13" stream per collection:
            # a further header at this level starts a further stream.
            self._end_segment(final=False)
            self.expected = 1
        if self.block.version is None:
            self.block.version = line.strip()
        self.seg_started = True

    def _plan(self, count: int, directive: str) -> None:
        self.seg_started = True
        if self.seg_plan is not None:
            self.block.errors.append(f"unexpected second plan 1..{count}")
            return
        self.seg_plan = count
        if count == 0 and directive.upper().startswith("SKIP"):
            self.block.skip_all = directive[4:].strip()

    def _indented_child(self) -> None:
        run: list[str] = []
        while self.lines:
            line = self.lines.peek()
            if _indent(line) > 0 or (self._is_plain_diag(line) and self._diag_then_indented()):
                run.append(self.lines.pop())
            else:
                break
        if not any(_STRUCTURE.match(line) for line in run):
            # Indented text with no KTAP in it (a test's own output inside a "# "
            # block): diagnostics, not a subtest.
            self.pending_diag.extend(self._diag_text(line) for line in run if line.strip())
            return
        width = min(_indent(line) for line in run if _indent(line) > 0)
        self._add_child(_Parser([_dedent(line, width) for line in run]).parse())

    @staticmethod
    def _diag_text(line: str) -> str:
        text = line.lstrip(" \t")
        return (_strip_hash(text) if text.startswith("#") else text).rstrip()

    @staticmethod
    def _is_plain_diag(line: str) -> bool:
        return line == "" or line.startswith("#")

    def _diag_then_indented(self) -> bool:
        """Whether the diagnostic lines from here on are followed by an indented line.

        KUnit logs kunit_info() messages of a parameterised case at one indentation
        level while the case's parameter results are one level deeper; such messages
        belong to the deeper block rather than closing it.
        """
        k = 0
        while (line := self.lines.peek_at(k)) is not None and self._is_plain_diag(line):
            k += 1
        return line is not None and _indent(line) > 0

    def _prefixed_child(self) -> None:
        run: list[str] = []
        while self.lines and self.lines.peek().startswith("#"):
            run.append(_strip_hash(self.lines.pop()))
        self._add_child(_Parser(run).parse())

    def _add_child(self, child: _Block) -> None:
        self.seg_started = True
        self.pending_children.append(child)
        self.pending_diag.extend(child.trailing_diag)
        if child.skip_all is not None:
            self.pending_diag.append(f"all subtests skipped: {child.skip_all}".rstrip(": "))

    def _result(self, result: str, number: str | None, rest: str, key: str) -> None:
        self.seg_started = True
        # The same result line again at this depth under this parent is the same result
        # (QEMU console captures repeat lines): counted once, with a warning.
        first = self.block.seen.get(key)
        if first is not None:
            again = tuple(c for child in self.pending_children for c in child.cases)
            if again and again != first.subtests:
                # Not a repeated capture of the same lines: another run of that test.
                self.block.errors.append(f"result {key!r} came again with other subtests")
            self.block.dups[key] = self.block.dups.get(key, 0) + 1
            self.pending_children = []
            self.pending_diag = []
            return
        num = int(number) if number is not None else self.expected
        if num != self.expected:
            self.block.errors.append(f"expected test number {self.expected}, got {num}")
        name, directive = _split_description(rest)
        if not name and directive.upper().startswith("SKIP "):
            # kselftest.h's ksft_test_result_skip() prints "ok N # SKIP msg" with no
            # description; the cgroup tests pass their test's name as msg.
            name = directive[5:].strip()
        case = self._make_case(
            name=name,
            number=num,
            status=_status_of(result, directive),
            directive=directive,
        )
        self.block.cases.append(case)
        self.block.seen[key] = case
        self.seg_results += 1
        self.expected = num + 1

    def _make_case(
        self, *, name: str, number: int, status: Status, directive: str
    ) -> TestCase:
        children = self.pending_children
        diag = self.pending_diag
        self.pending_children = []
        self.pending_diag = []
        subtests = tuple(c for child in children for c in child.cases)
        label = name or (children[0].name if children and children[0].name else "")
        label = label or f"test {number}"
        child_errors: list[str] = []
        for child in children:
            child_errors.extend(child.errors)
            if status is not Status.SKIP:
                child_errors.extend(child.short_errors)
            self.block.warnings.extend(f"{label}: {w}" for w in child.warnings)
            for k, n in child.dups.items():
                self.block.dups[k] = self.block.dups.get(k, 0) + n
        self.block.errors.extend(f"{label}: {e}" for e in child_errors)
        if len(diag) > MAX_DIAG_LINES:
            cut = len(diag) - MAX_DIAG_LINES
            diag = [*diag[: MAX_DIAG_LINES // 2], f"[{cut} diagnostic lines not kept]",
                    *diag[-MAX_DIAG_LINES // 2 :]]
        if status in _OK_LIKE:
            failed = [c for c in subtests if c.status in _FAILING]
            if failed:
                bad = failed[0]
                self.block.errors.append(
                    f"{label}: result line says ok but subtest {bad.number}"
                    f" ({bad.name}) failed"
                )
                status = Status.FAIL
            elif child_errors:
                status = Status.FAIL
        return TestCase(
            name=name,
            number=number,
            status=status,
            directive=directive,
            diagnostic="\n".join(diag),
            subtests=subtests,
        )

    def _end_segment(self, *, final: bool) -> None:
        """Checks the plan of the stream that just ended; at the very end, also
        turns subtest output that never got its result line into a failed case."""
        unfinished: TestCase | None = None
        if self.pending_children and final:
            name = next((c.name for c in self.pending_children if c.name), None)
            if name is None:
                name = next(
                    (d for d in reversed(self.pending_diag) if _KSELFTEST_NAME_RE.match(d)), ""
                )
            self.pending_diag.append("no result line: output ended")
            unfinished = self._make_case(
                name=name, number=self.expected, status=Status.FAIL, directive=""
            )
            self.block.cases.append(unfinished)
        if not self.bailed and self.seg_plan is not None:
            if self.seg_results < self.seg_plan:
                self.block.short_errors.append(
                    f"output ended after {self.seg_results} of {self.seg_plan} tests (crash?)"
                )
            elif self.seg_results > self.seg_plan:
                self.block.errors.append(
                    f"planned {self.seg_plan} tests but got {self.seg_results} results"
                )
        elif unfinished is not None and not self.bailed:
            label = unfinished.name or f"test {unfinished.number}"
            self.block.errors.append(
                f"output ended inside test {unfinished.number} ({label}) (crash?)"
            )
        if final:
            self.block.trailing_diag = self.pending_diag[-MAX_DIAG_LINES:]
            self.pending_diag = []

        if self.seg_started or self.seg_plan is not None:
            self.plans.append(self.seg_plan)
        self.seg_plan = None
        self.seg_results = 0
        self.seg_started = False
        if final and self.plans:
            self.block.plan = None if None in self.plans else sum(p or 0 for p in self.plans)


def parse(text: str | Iterable[str]) -> KtapResult:
    """Parses kselftest/KUnit output (noise allowed around it) into a `KtapResult`.

    Statuses: "ok" PASS, "not ok" FAIL; directive "# SKIP" SKIP (ok or not ok),
    "# TODO" XPASS when ok / XFAIL when not ok, "# XFAIL" XFAIL, "# XPASS" XPASS,
    "not ok ... # TIMEOUT" TIMEOUT; other directives ("# exit=1", "# error ...")
    keep the ok/not ok status. A parent whose result line says ok but whose
    subtests failed, or whose subtest stream was broken, becomes FAIL with an error.

    Errors recorded: no version line; wrong test numbers; fewer results than planned
    ("output ended after K of N tests (crash?)"); more results than planned; a second
    plan; "Bail out!"; a test whose subtest output never got a result line (it is kept
    as a FAIL case). Errors from a subtest stream are prefixed with "parent name: ".
    A stream that is only "1..0 # SKIP reason" gets one synthetic SKIP case
    (number 0) so that its status is SKIP rather than "nothing ran".
    """
    extracted = _extract(text)
    block = _Parser(extracted.lines).parse()
    errors = list(block.all_errors) + extracted.errors
    if block.version is None:
        errors.insert(0, "no KTAP/TAP version line found")
    cases = list(block.cases)
    if not cases and block.skip_all is not None:
        cases.append(
            TestCase(
                name=block.name or "",
                number=0,
                status=Status.SKIP,
                directive=f"SKIP {block.skip_all}".rstrip(),
                diagnostic="\n".join(block.trailing_diag),
            )
        )
    return KtapResult(
        version=block.version,
        plan=block.plan,
        cases=tuple(cases),
        errors=tuple(errors),
        warnings=tuple(extracted.warnings + block.warnings
                       + _repeat_warnings(extracted.repeats, block.dups)),
    )


def _repeat_warnings(*extra: dict[str, int]) -> list[str]:
    total: dict[str, int] = {}
    for counts in extra:
        for key, n in counts.items():
            total[key] = total.get(key, 0) + n
    out = [f"result {key!r} came {n + 1} times: counted once"
           for key, n in list(total.items())[:10]]
    if len(total) > 10:
        out.append(f"{len(total) - 10} more result lines came more than once: each counted once")
    return out


# --- summaries -----------------------------------------------------------------------


def _count(case: TestCase, counts: dict[Status, int]) -> bool:
    """Counts the leaves under `case`; returns whether any of them is failing."""
    if not case.subtests:
        counts[case.status] = counts.get(case.status, 0) + 1
        return case.status in _FAILING
    any_failing = False
    for sub in case.subtests:
        any_failing = _count(sub, counts) or any_failing
    if case.status in _FAILING and not any_failing:
        # The parent failed on its own (crash, timeout, exit code, broken subtest
        # stream): count it, or the failure would vanish from the totals.
        counts[case.status] = counts.get(case.status, 0) + 1
        return True
    return any_failing


def summary_counts(result: KtapResult) -> dict[Status, int]:
    """How many leaf tests ended in each status.

    Every test-outcome status is a key (0 when absent). A parent is counted too when
    it failed but none of the tests under it did.
    """
    counts: dict[Status, int] = dict.fromkeys(_TEST_STATUSES, 0)
    for case in result.cases:
        _count(case, counts)
    return counts
