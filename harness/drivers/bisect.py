"""`harness bisect`: the first patch of a series at which a test goes from good to bad.

Prefix k of a series is the kernel with its first k patches (0: the base; the cell's other
series before it stay applied in full). Each prefix tested is one real cell run of the one
test (kernels from the store when built before, e.g. by `harness check` or the matrix),
judged like any run: its status is good (default PASS), bad (default FAIL, CRASHED,
TIMEOUT, FLAKY) or "cannot tell" (SKIP, a stage error, anything else), stepped over like
`git bisect skip`. The whole series is tried first and must be bad.

The search (`next_prefix`, `conclude`) is pure: prefixes and verdicts in, a prefix out.
"""

from __future__ import annotations

import enum
import logging
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.base import atomic
from harness.base.errors import HarnessError
from harness.base.model import Accel, CellResult, Phase, Status, TestCase
from harness.drivers import matrix, pipeline
from harness.drivers.matrix import Cell
from harness.kernel import series, sources

log = logging.getLogger("harness")

DEFAULT_GOOD = frozenset({Status.PASS})
DEFAULT_BAD = frozenset({Status.FAIL, Status.CRASHED, Status.TIMEOUT, Status.FLAKY})


class BisectError(HarnessError):
    status = Status.SETUP_ERROR


class Verdict(enum.Enum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "cannot tell"


@dataclass(frozen=True, kw_only=True)
class Request:
    series: str
    test: str
    cell: str | None = None
    good: frozenset[Status] = DEFAULT_GOOD
    bad: frozenset[Status] = DEFAULT_BAD
    accel: Accel = Accel.AUTO

    def __post_init__(self) -> None:
        if self.good & self.bad:
            raise BisectError("--good and --bad share " + ", ".join(
                sorted(s.value for s in self.good & self.bad)),
                fix="a status is either good or bad")


@dataclass(frozen=True, kw_only=True)
class Step:
    prefix: int
    patch: str  # the last patch applied, "(base)" for prefix 0
    status: Status
    verdict: Verdict
    reason: str = ""
    failing: tuple[str, ...] = ()  # the checks that failed
    splats: tuple[str, ...] = ()
    log: str = ""


@dataclass(frozen=True, kw_only=True)
class Outcome:
    request: Request
    cell: str
    patches: tuple[str, ...]  # the series' patches, in order
    subjects: tuple[str, ...]
    steps: tuple[Step, ...]
    first_bad: int | None  # patch number (1-based), when it could be told
    candidates: tuple[int, ...] = ()  # when it could not: the patches it may be
    message: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if self.first_bad is not None else 1


def verdict_of(status: Status, good: frozenset[Status], bad: frozenset[Status]) -> Verdict:
    if status in bad:
        return Verdict.BAD
    if status in good:
        return Verdict.GOOD
    return Verdict.SKIP


def _bounds(known: Mapping[int, Verdict]) -> tuple[int, int]:
    """(the last good prefix below the first bad one, or -1; the first bad prefix)."""
    hi = min(k for k, v in known.items() if v is Verdict.BAD)
    goods = [k for k, v in known.items() if v is Verdict.GOOD and k < hi]
    return (max(goods) if goods else -1), hi


def next_prefix(known: Mapping[int, Verdict]) -> int | None:
    """The next prefix to test (the middle of the untested ones between the last good and
    the first bad), or None when nothing between them is left to test."""
    lo, hi = _bounds(known)
    untested = [k for k in range(lo + 1, hi) if k not in known]
    return untested[len(untested) // 2] if untested else None


def conclude(known: Mapping[int, Verdict]) -> tuple[int | None, tuple[int, ...]]:
    """(the first bad patch, ()) when told; (None, the patches it may be) when prefixes in
    between could not be told, or no good prefix was found."""
    lo, hi = _bounds(known)
    if lo == hi - 1:
        return hi, ()
    return None, tuple(range(max(lo + 1, 1), hi + 1))


def choose_cell(request: Request, cells: list[Cell]) -> Cell:
    """--cell, else the first matrix cell applying the series; one test, no expectations."""
    if request.cell is not None:
        chosen = next((c for c in cells if c.name == request.cell), None)
        if chosen is None:
            raise BisectError(f"no matrix cell {request.cell!r}",
                              fix="harness matrix lists the cells")
        if request.series not in chosen.series:
            raise BisectError(f"cell {chosen.name} does not apply series {request.series}",
                              fix="pick a cell whose series include it (harness matrix)")
    else:
        chosen = next((c for c in cells if request.series in c.series), None)
        if chosen is None:
            raise BisectError(f"no matrix cell applies series {request.series}",
                              fix="pass --cell, or add a cell for the series to matrix.toml")
    return replace(chosen, tests=(request.test,), expect_status=None, expect=(), patches=())


def _failing(cases: tuple[TestCase, ...], prefix: str = "") -> list[str]:
    out: list[str] = []
    for c in cases:
        if c.subtests:
            out += _failing(c.subtests, f"{prefix}{c.name}/")
        elif c.status in (Status.FAIL, Status.CRASHED, Status.TIMEOUT):
            out.append(f"{prefix}{c.name}")
    return out


def _step(k: int, patch: str, res: CellResult, request: Request) -> Step:
    tests = [t for t in res.tests if t.phase is Phase.TEST]
    verdict = Verdict.SKIP if res.status.is_stage_error else verdict_of(
        res.status, request.good, request.bad)
    # the results' own words first (why the test skipped), the cell's when they say nothing
    reason = "; ".join(f"{t.name}: {t.reason}" for t in res.tests
                       if t.reason and t.status is not Status.PASS) or res.error.split("\n")[0]
    return Step(prefix=k, patch=patch, status=res.status, verdict=verdict, reason=reason,
                failing=tuple(f for t in tests if t.ktap for f in _failing(t.ktap.cases)),
                splats=tuple(f"{t.name}: {s.title}" for t in res.tests for s in t.splats),
                log=str(next((t.log for t in tests if t.log), "")))


def run(request: Request, out: Path) -> Outcome:
    cell = choose_cell(request, matrix.load())
    base = series.base_name(sources.parse_spec(cell.kernel))
    index = cell.series.index(request.series)
    before = [p for name in cell.series[:index] for p in series.load(name, base).patches]
    mine = series.load(request.series, base).patches
    n = len(mine)
    log.info("bisecting %s (%d patches) with %s in cell %s", request.series, n, request.test,
             cell.name)
    known: dict[int, Verdict] = {}
    steps: list[Step] = []

    def test(k: int) -> Step:
        prefix = replace(cell, name=f"prefix-{k}", series=(),
                         patches=tuple(str(p.path) for p in (*before, *mine[:k])))
        log.info("[bisect] prefix %d/%d: %s", k, n, mine[k - 1].name if k else "(base)")
        res = pipeline.run_cell(prefix, out / f"prefix-{k}", accel=request.accel)
        step = _step(k, mine[k - 1].name if k else "(base)", res, request)
        log.info("[bisect] prefix %d/%d: %s, %s", k, n, step.status.value, step.verdict.value)
        known[k] = step.verdict
        steps.append(step)
        return step

    def outcome(first: int | None, candidates: tuple[int, ...], message: str) -> Outcome:
        return Outcome(request=request, cell=cell.name, patches=tuple(p.name for p in mine),
                       subjects=tuple(series.subject_of(p.path) for p in mine),
                       steps=tuple(steps), first_bad=first, candidates=candidates,
                       message=message)

    last = test(n)
    if last.verdict is not Verdict.BAD:
        return outcome(None, (), f"{request.test} is {last.status.value} with the whole series, "
                                 "not bad: nothing to bisect")
    while (k := next_prefix(known)) is not None:
        test(k)
    first, candidates = conclude(known)
    if first == 0:
        return outcome(None, (), f"{request.test} is already bad on the base, without the "
                                 "series")
    if first is not None:
        return outcome(first, (), f"first bad patch: {first}/{n} {mine[first - 1].name}")
    return outcome(None, candidates, "cannot tell which: the prefixes between could not be "
                                     "told (SKIP or a stage error), or none was good; it is "
                                     "one of patches " + ", ".join(map(str, candidates)))


def summary(o: Outcome) -> str:
    good = ", ".join(sorted(s.value for s in o.request.good))
    bad = ", ".join(sorted(s.value for s in o.request.bad))
    n = len(o.patches)
    lines = [f"bisect {o.request.series} with {o.request.test} in cell {o.cell} "
             f"(good: {good}; bad: {bad})"]
    for s in sorted(o.steps, key=lambda s: s.prefix):
        lines.append(f"   prefix {s.prefix}/{n}  {s.patch[:52]:<52} {s.status.value:<8} "
                     f"{s.verdict.value}")
        if s.verdict is Verdict.SKIP and s.reason:
            lines += textwrap.wrap(s.reason, 100, initial_indent=" " * 6,
                                   subsequent_indent=" " * 6, max_lines=2)
    lines.append(o.message)
    if o.first_bad is not None:
        lines.append(f"   subject: {o.subjects[o.first_bad - 1]}")
        bad_step = next(s for s in o.steps if s.prefix == o.first_bad)
        if bad_step.failing:
            lines.append(f"   failing checks: {', '.join(bad_step.failing)}")
        lines += [f"   splat: {s}" for s in bad_step.splats[:3]]
        good_step = next((s for s in o.steps if s.prefix == o.first_bad - 1), None)
        if good_step is not None:
            lines.append(f"   the prefix before it: {good_step.status.value}")
        if bad_step.log:
            lines.append(f"   log: {bad_step.log}")
    return "\n".join(lines)


def to_json(o: Outcome) -> dict[str, Any]:
    return {"series": o.request.series, "test": o.request.test, "cell": o.cell,
            "good": sorted(s.value for s in o.request.good),
            "bad": sorted(s.value for s in o.request.bad),
            "patches": [{"number": i, "name": p, "subject": s}
                        for i, (p, s) in enumerate(zip(o.patches, o.subjects, strict=True), 1)],
            "first_bad": o.first_bad, "candidates": list(o.candidates), "message": o.message,
            "steps": [{"prefix": s.prefix, "patch": s.patch, "status": s.status.value,
                       "verdict": s.verdict.value, "reason": s.reason,
                       "failing": list(s.failing), "splats": list(s.splats), "log": s.log}
                      for s in o.steps]}


def command(request: Request, out: Path) -> int:
    """`harness bisect`: the bisection, bisect.json, and the verdict on the terminal."""
    outcome = run(request, out)
    atomic.write_json(out / "bisect.json", to_json(outcome))
    print(summary(outcome))
    print(f"\nbisect: {out / 'bisect.json'}  (exit {outcome.exit_code})")
    return outcome.exit_code
