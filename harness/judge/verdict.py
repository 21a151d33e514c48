"""Every final status is decided here: of each result, then of the cell.

Inputs are what the outcome parser observed (a status from the exit code, KTAP and
timeouts; the splats and new taint of each part of the kernel log), the expectations
file (known failures, flaky tests and expected kernel noise, each by kernel version
range, with its reason) and what the cell declares (`expect_status`/`expect` of a
broken-variant cell, `--boot-only`, `--strict`). In that order:

1. A splat, or a bad taint bit newly set, makes a result CRASHED, unless the splat is
   declared noise for this kernel (matched by kind and faulting function, never by a
   kind alone) and explains the taint.
2. Known failures become XFAIL (XPASS when they pass); declared-flaky tests that pass
   stay PASS with a note, and XFAIL when they fail.
3. The cell: a cell that declares expectations passes when every result, the boot and
   shutdown included, has exactly its declared status (boot, set-up and shutdown must
   PASS unless `expect` names them). Otherwise the worst result wins, skipped tests do
   not count, and a cell in which no test ran is never PASS: NO_TESTS (none planned) or
   SKIP (every one skipped), unless it was asked to boot only.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.base.errors import HarnessError
from harness.base.model import (
    KERNEL_PHASES,
    Phase,
    Splat,
    Status,
    TestCase,
    TestResult,
    combined,
    worst,
)
from harness.base.model import leaves as walk_leaves

# Taint letters a kind of splat sets by itself: declared noise explains these.
# (A "BUG:" may be an oops (D), a sleeping function in atomic context (W) or KFENCE (B).)
_TAINT_OF_KIND = {"WARNING": "W", "BUG": "DWB", "OOPS": "D", "PANIC": "D",
                  "SOFT_LOCKUP": "L", "KASAN": "B", "LOCKDEP": "W"}


class ExpectationsError(HarnessError):
    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class KnownFailure:
    test: str
    subtest: str | None
    kernel: str  # a version range: ">=6.12,<6.13"
    reason: str
    evidence: str = ""
    flaky: bool = False  # fails sometimes: a pass is PASS (with a note), not XPASS
    # a flaky test run several times (--repeat) passes with at least this share passed
    min_pass_rate: float | None = None


@dataclass(frozen=True, kw_only=True)
class KnownSplat:
    """Kernel noise that is not a bug of what is tested (e.g. an RCU stall of a busy TCG
    host in one known function)."""

    kind: str
    function: str
    kernel: str
    reason: str
    evidence: str = ""
    result: str | None = None  # only in this result ("boot", a test name); None: any


@dataclass(frozen=True, kw_only=True)
class Expectations:
    failures: tuple[KnownFailure, ...] = ()
    splats: tuple[KnownSplat, ...] = ()


def load_expectations(path: Path) -> Expectations:
    if not path.exists():
        return Expectations()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ExpectationsError(f"cannot read {path}: {exc}",
                                fix="correct the TOML syntax at the line named") from None
    failures: list[KnownFailure] = []
    splats: list[KnownSplat] = []
    try:
        for key, flaky in (("expected_failure", False), ("flaky", True)):
            for e in data.get(key, []):
                _check_range(str(e["kernel"]))
                rate = e.get("min_pass_rate")
                if rate is not None and (not flaky or not 0 < float(rate) <= 1
                                         or e.get("subtest")):
                    raise ValueError(f"min_pass_rate {rate!r}: a share of attempts "
                                     "(0 < rate <= 1), for a whole [[flaky]] test only")
                failures.append(KnownFailure(
                    test=str(e["test"]), subtest=e.get("subtest"), kernel=str(e["kernel"]),
                    reason=" ".join(str(e["reason"]).split()),
                    evidence=str(e.get("evidence", "")), flaky=flaky,
                    min_pass_rate=None if rate is None else float(rate)))
        for e in data.get("expected_splat", []):
            function = str(e["function"]).strip()
            if not re.fullmatch(r"[A-Za-z_]\w*", function):
                raise ValueError(f"function {function!r}: one function name (declared noise "
                                 "is matched by kind and function, never by a kind alone)")
            _check_range(str(e["kernel"]))
            splats.append(KnownSplat(kind=str(e["kind"]), function=function,
                                     kernel=str(e["kernel"]),
                                     reason=" ".join(str(e["reason"]).split()),
                                     evidence=str(e.get("evidence", "")),
                                     result=e.get("result")))
    except (KeyError, ValueError, TypeError) as exc:
        raise ExpectationsError(f"{path}: an entry has a missing or invalid field: {exc}",
                                fix="each entry needs test (or kind and function), kernel "
                                    "and reason; see the comment at the top of the file"
                                ) from None
    return Expectations(failures=tuple(failures), splats=tuple(splats))


def _vtuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


_CLAUSE = re.compile(r"(>=|<=|==|<|>)\s*(\d+(?:\.\d+){0,2})")


def _check_range(spec: str) -> None:
    for clause in spec.split(","):
        if not _CLAUSE.fullmatch(clause.strip()):
            raise ValueError(f"kernel range {spec!r}: each clause is OP VERSION, e.g. >=6.12")


def version_matches(version: str, spec: str) -> bool:
    """Whether `version` is in a range like ">=6.12,<6.13". A version is compared as far as
    the clause goes: ==6.12 is every 6.12.x, <=6.12 too, >6.12 only 6.13 and later."""
    full = _vtuple(version)
    for clause in spec.split(","):
        m = _CLAUSE.fullmatch(clause.strip())
        if not m:
            return False
        op, want = m.group(1), _vtuple(m.group(2))
        have = full[: len(want)]
        cmp = (have > want) - (have < want)
        ok = {">=": cmp >= 0, "<=": cmp <= 0, "==": cmp == 0, "<": cmp < 0, ">": cmp > 0}[op]
        if not ok:
            return False
    return True


@dataclass(frozen=True, kw_only=True)
class CellRules:
    """What a cell declares about its own results."""

    expect_status: Status | None = None  # every test's, in a broken-variant cell
    expect: Mapping[str, Status] = field(default_factory=dict)  # per result name
    boot_only: bool = False  # no test asked for: judged by boot and shutdown alone
    strict: bool = False  # an unexpected pass (XPASS) fails the cell
    build_only: bool = False  # --build-only: built, nothing booted; judged by its stages

    @property
    def declared(self) -> bool:
        return self.expect_status is not None or bool(self.expect)

    def expected(self, result: TestResult) -> Status:
        if result.name in self.expect:
            return self.expect[result.name]
        if result.phase is Phase.TEST and self.expect_status is not None:
            return self.expect_status
        return Status.PASS

    @property
    def checks(self) -> dict[str, Status]:
        """The checks (TEST:CHECK, a KTAP subtest) declared with a status of their own."""
        return {k: v for k, v in self.expect.items() if ":" in k}


@dataclass(frozen=True, kw_only=True)
class CellVerdict:
    results: tuple[TestResult, ...]
    status: Status
    error: str = ""
    notes: tuple[str, ...] = ()


# ---- 1. the kernel's word: splats and taint ----


def _known(s: Splat, result: str, known: tuple[KnownSplat, ...]) -> KnownSplat | None:
    for k in known:
        if (k.kind == s.kind and s.function and k.function == s.function
                and (k.result is None or k.result == result)):
            return k
    return None


def judge_kernel(res: TestResult, known: tuple[KnownSplat, ...]) -> TestResult:
    """CRASHED for a splat or new bad taint, unless it is declared noise that explains both."""
    splats = []
    explained = ""
    for s in res.splats:
        k = _known(s, res.name, known)
        if k is not None:
            s = replace(s, expected=k.reason)
            explained += _TAINT_OF_KIND.get(s.kind, "")
        splats.append(s)
    counted = [s for s in splats if not s.expected]
    taint = "".join(t for t in res.taint if t not in explained)
    notes = list(res.notes)
    notes += [f"expected kernel noise ({s.fingerprint}): {s.expected}" for s in splats
              if s.expected]
    res = replace(res, splats=tuple(splats), notes=tuple(notes))
    if not counted and not taint:
        return res
    where = {Phase.BOOT: " during boot", Phase.SETUP: " in the runner's set-up between tests",
             Phase.SHUTDOWN: " during shutdown"}.get(res.phase, " while it ran")
    if counted:
        first = counted[0]
        more = f" (and {len(counted) - 1} more splats)" if len(counted) > 1 else ""
        at = f" in {first.function}()" if first.function else ""
        reason = f"kernel {first.kind}{at}{where}{more}"
    else:
        reason = f"kernel taint newly set{where}: {taint}"
    status = worst([res.status, Status.CRASHED])
    if status is not Status.CRASHED:  # BOOT_ERROR: the reason it has says more
        return res
    if res.status not in (Status.PASS, Status.SKIP, Status.CRASHED) and res.reason:
        reason += f"; before that: {res.status.value}: {res.reason}"
    return replace(res, status=status, reason=reason)


# ---- 2. known failures and flaky tests ----


def judge_known_failures(res: TestResult, known: tuple[KnownFailure, ...]) -> TestResult:
    mine = [e for e in known if e.test == res.name]
    whole = next((e for e in mine if e.subtest is None), None)
    if whole is not None and whole.flaky and res.attempts and res.status in _RATED:
        return _judge_pass_rate(res, whole)
    if not mine or res.status not in (Status.FAIL, Status.PASS):
        return res
    if whole is not None:
        if res.status is Status.FAIL:
            what = "declared flaky" if whole.flaky else "expected failure"
            return replace(res, status=Status.XFAIL, reason=f"{what}: {whole.reason}")
        if whole.flaky:
            return replace(res, notes=(*res.notes, f"declared flaky, passed this time: "
                                                   f"{whole.reason}"))
        return replace(res, status=Status.XPASS,
                       reason=f"on the expected-failure list but passed ({whole.reason})")
    by_sub: dict[str | None, KnownFailure] = {e.subtest: e for e in mine if e.subtest}
    if res.ktap is None:
        return res
    if res.status is Status.FAIL and res.ktap.status is not Status.FAIL:
        # Failed for a reason outside the result tree (it exited non-zero, it crashed at
        # exit): no known subtest failure explains that.
        return res
    cases = tuple(_mark(c, by_sub) for c in res.ktap.cases)
    leaves = _leaves(cases)
    status = combined([c.status for c in cases], empty=res.status)
    if res.ktap.errors:
        status = worst([status, Status.FAIL])
    notes = list(res.notes)
    failed = [c.name for c in leaves if c.name in by_sub and c.status is Status.XFAIL]
    passed_flaky = [c.name for c in leaves if c.name in by_sub and by_sub[c.name].flaky
                    and c.status is Status.PASS]
    reason = res.reason
    if failed and status is not Status.FAIL:
        reason = "; ".join(
            f"{n}: {'declared flaky' if by_sub[n].flaky else 'expected failure'}: "
            f"{by_sub[n].reason}" for n in failed)
    if passed_flaky:
        notes.append("declared flaky, passed this time: " + ", ".join(passed_flaky))
    return replace(res, ktap=replace(res.ktap, cases=cases), status=status, reason=reason,
                   notes=tuple(notes))


_FAILING = frozenset({Status.FAIL, Status.TIMEOUT, Status.CRASHED})
_RATED = frozenset({Status.PASS, Status.FLAKY, Status.FAIL, Status.TIMEOUT})


def _judge_pass_rate(res: TestResult, declared: KnownFailure) -> TestResult:
    """A declared-flaky test run several times: PASS (with a note) when its attempts passed
    at least as often as declared (at least once without a declared rate), else FAIL."""
    n = len(res.attempts)
    passed = sum(1 for a in res.attempts if a.status is Status.PASS)
    rate = declared.min_pass_rate
    need = f" (declared minimum {rate:.0%})" if rate is not None else ""
    if passed and (rate is None or passed >= rate * n):
        return replace(res, status=Status.PASS, notes=(
            *res.notes, f"declared flaky, passed {passed} of {n} attempts{need}: "
                        f"{declared.reason}"))
    return replace(res, status=Status.FAIL,
                   reason=f"declared flaky, but passed {passed} of {n} attempts{need}; "
                          f"{res.reason}")


def _mark(case: TestCase, by_sub: dict[str | None, KnownFailure]) -> TestCase:
    if case.subtests:
        subs = tuple(_mark(s, by_sub) for s in case.subtests)
        signal = re.search(r"\bexit=(\d+)", case.directive)
        if case.status in _FAILING and (
                not any(s.status in _FAILING for s in case.subtests)
                or (signal is not None and int(signal.group(1)) >= 128)):
            # "not ok" with every subtest ok, or killed by a signal (the runner's exit=139):
            # it failed on its own, and stays failed whatever its subtests became.
            return replace(case, subtests=subs)
        return replace(case, subtests=subs,
                       status=combined([s.status for s in subs], empty=case.status))
    known = by_sub.get(case.name)
    if known is None:
        return case
    if case.status is Status.FAIL:
        return replace(case, status=Status.XFAIL)
    if case.status is Status.PASS and not known.flaky:
        return replace(case, status=Status.XPASS)
    return case


def _leaves(cases: tuple[TestCase, ...]) -> list[TestCase]:
    return [leaf for _, leaf in walk_leaves(cases)]


# ---- 3. the cell ----


def judge(results: tuple[TestResult, ...] | list[TestResult], *, kernel_version: str,
          expectations: Expectations, rules: CellRules,
          stage_error: Status | None = None, error: str = "") -> CellVerdict:
    """Final statuses of every result and of the cell (the only place that sets them)."""
    noise = tuple(k for k in expectations.splats if version_matches(kernel_version, k.kernel))
    known = tuple(e for e in expectations.failures if version_matches(kernel_version, e.kernel))
    judged = []
    for res in results:
        res = judge_kernel(res, noise)
        if res.phase is Phase.TEST:
            res = judge_known_failures(res, known)
        judged.append(replace(res, expected_status=rules.expected(res) if rules.declared
                              else None, diagnosis=diagnosis(res)))
    notes = _notes(judged, rules)
    if stage_error is not None:
        return CellVerdict(results=tuple(judged), status=stage_error, error=error,
                           notes=notes)
    if rules.build_only:
        return CellVerdict(results=tuple(judged), status=Status.PASS, error=error,
                           notes=(*notes, "built only (--build-only): the kernel and the "
                                  "tests, nothing booted or tested"))
    if rules.declared:
        return _judge_declared(tuple(judged), rules, notes)
    tests = [r for r in judged if r.phase is Phase.TEST]
    kernel = [r.status for r in judged if r.phase in KERNEL_PHASES]
    counted = [_as_counted(r.status, rules.strict) for r in tests]
    if not tests:
        if rules.boot_only:
            status, why = combined(kernel, empty=Status.PASS), ""
        else:
            status, why = Status.NO_TESTS, "no test was planned: nothing was tested"
    else:
        status = combined(counted, empty=Status.NO_TESTS)
        why = ("every test was skipped: nothing was tested" if status is Status.SKIP else "")
    status = worst([status, *(s for s in kernel if s is not Status.SKIP)])
    # Each result says its own why; the cell's error is for what no result says.
    if why and status in (Status.NO_TESTS, Status.SKIP):
        error = error or why
    return CellVerdict(results=tuple(judged), status=status, error=error, notes=notes)


def diagnosis(res: TestResult) -> str:
    """Why a result did not pass, in a line: its first failing check (as judged: a known
    failure's check is XFAIL) and the last line that check said, which a check that fails
    says last ("" for a result that passed, or that has no failing check)."""
    if res.ktap is None or res.status in (Status.PASS, Status.SKIP, Status.XFAIL):
        return ""
    for _, leaf in walk_leaves(res.ktap.cases):
        if leaf.status not in (Status.PASS, Status.SKIP, Status.XFAIL):
            said = [line.strip() for line in leaf.diagnostic.splitlines() if line.strip()]
            return f"{leaf.name}: {said[-1]}" if said else leaf.name
    return ""


def _as_counted(status: Status, strict: bool) -> Status:
    if status is Status.XFAIL:
        return Status.PASS
    if status is Status.XPASS:
        return Status.FAIL if strict else Status.PASS
    return status


def _judge_declared(results: tuple[TestResult, ...], rules: CellRules,
                    notes: tuple[str, ...]) -> CellVerdict:
    """A broken-variant cell: every result exactly as declared, boot and shutdown PASS."""
    names = {r.name for r in results}
    wrong = [f"{r.name}: {r.status.value}, expected {r.expected_status.value}"
             for r in results if r.expected_status is not None and r.status is not
             r.expected_status]
    wrong += [f"{name}: declared {want.value} in expect, but no result has that name"
              for name, want in rules.expect.items() if name not in names and ":" not in name]
    wrong += _wrong_checks(results, rules.checks)
    if not any(r.phase is Phase.TEST for r in results):
        wrong.append("no test ran")
    if wrong:
        return CellVerdict(results=results, status=Status.FAIL, notes=notes,
                           error="not as the cell declares:\n" + "\n".join(
                               f"  {w}" for w in wrong))
    got = ", ".join(sorted({r.status.value for r in results if r.phase is Phase.TEST}))
    return CellVerdict(results=results, status=Status.PASS,
                       notes=(*notes, f"every result as declared (tests: {got}; boot and "
                                      "shutdown as expected)"))


def _wrong_checks(results: tuple[TestResult, ...], checks: Mapping[str, Status]) -> list[str]:
    """TEST:CHECK declarations not met: the check (a KTAP subtest, nested ones by
    their leaf name) must have the declared status."""
    by_name = {r.name: r for r in results}
    out = []
    for key, want in sorted(checks.items()):
        test, _, check = key.partition(":")
        res = by_name.get(test)
        found = [c for c in _leaves(res.ktap.cases)] if res and res.ktap else []
        got = next((c.status for c in found if c.name == check), None)
        if got is None:
            out.append(f"{key}: declared {want.value} in expect, but "
                       f"{'no result has that name' if res is None else 'no such check ran'}")
        elif got is not want:
            out.append(f"{key}: {got.value}, expected {want.value}")
    return out


def _notes(results: list[TestResult], rules: CellRules) -> tuple[str, ...]:
    out = []
    xfail = [r.name for r in results if r.status is Status.XFAIL]
    xpass = [r.name for r in results if r.status is Status.XPASS]
    if xfail:
        out.append("known failures (XFAIL, reasons in expectations.toml): " + ", ".join(xfail))
    if xpass:
        out.append("unexpected passes (XPASS): " + ", ".join(xpass)
                   + ("; --strict fails them" if not rules.strict else ""))
    return tuple(out)
