"""What changed between two runs: pure functions over two runs as results.json has them.

`compare` pairs the cells (by name, or the one cell of each the user named), then within
each pair the tests (kernel phases included: boot, set-up and shutdown are results too),
their KTAP checks, their splats (by identity: kind, faulting function, normalised title),
their measurements, the features and the patches. Each difference gets a `Change`; a
comparison has regressed when any difference is REGRESSED:

- a status worse than before: from PASS (or the status the cell declares) to FAIL,
  TIMEOUT, CRASHED, MISSING (a merged run without the cell) or a stage error, or from one
  of those to a more severe one;
- a splat whose identity the earlier run did not have;
- a measurement worse beyond its measured spread in its declared direction: the new
  median outside the old spread and the old median outside the new one (the spread: the
  interquartile range, or min..max for a measurement that reports no quartiles).

A test the cell declares flaky (a FLAKY note) never regresses; its change is FLAKY.
Rendering (terminal, markdown, JSON) is here too; reading the files is the CLI's.
"""

from __future__ import annotations

import enum
import math
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from harness.base.model import (
    CellResult,
    Measurement,
    Number,
    PatchCoverage,
    Phase,
    RunResult,
    Status,
    TestCase,
    TestResult,
    leaves,
)

_BAD = [s.value for s in Status if s in (Status.FLAKY, Status.FAIL, Status.TIMEOUT,
                                         Status.CRASHED, Status.MISSING)
        or s.is_stage_error]  # by severity
_GOOD = {Status.PASS.value, Status.XFAIL.value}
_SKIPPED = {Status.SKIP.value, Status.NO_TESTS.value}


class Change(enum.Enum):
    REGRESSED = "regressed"
    FIXED = "fixed"
    STILL_FAILING = "still failing"
    NEWLY_SKIPPED = "newly skipped"
    NOW_RUNS = "now runs"  # skipped before (e.g. the kfuncs were missing), runs now
    XPASS = "xpass"  # passes, but the cell declares it must not
    IMPROVED = "improved"  # a measurement better beyond its spread
    CHANGED = "changed"  # a difference that is neither better nor worse
    FLAKY = "flaky"  # declared flaky: its changes are not judged
    GONE = "gone"  # in the first run only
    NEW = "new"  # in the second run only


@dataclass(frozen=True, kw_only=True)
class Difference:
    cell: str
    kind: str  # cell, test, check, splat, metric, feature, patch, kernel
    name: str  # the test, "test: check", "test: fingerprint", "test: metric path", ...
    before: str
    after: str
    change: Change
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class Comparison:
    before: str  # labels of the two runs
    after: str
    cells: tuple[tuple[str, str], ...]  # the pairs compared
    differences: tuple[Difference, ...]
    unpaired: tuple[str, ...] = ()  # "cell X: only in the first run", ...

    @property
    def regressed(self) -> bool:
        return any(d.change is Change.REGRESSED for d in self.differences)

    def count(self, change: Change) -> int:
        return sum(1 for d in self.differences if d.change is change)


def _shown(t: TestResult | None) -> str:
    """A test's status as the terminal shows it: FAIL (as declared) when expected."""
    if t is None:
        return "-"
    status = t.status.value
    return f"{status} (as declared)" if t.expected_status is t.status and \
        t.status is not Status.PASS else status


def _judged(t: TestResult) -> str:
    """The status compared: one the cell declares counts as a pass."""
    return Status.PASS.value if t.expected_status is t.status else t.status.value


def status_change(before: str, after: str) -> Change | None:
    """How a status moved (None: it did not)."""
    if before == after:
        return Change.STILL_FAILING if after in _BAD else None
    if after in _BAD:
        if before in _BAD and _BAD.index(after) <= _BAD.index(before):
            return Change.STILL_FAILING
        return Change.REGRESSED
    if after == Status.XPASS.value:
        return Change.XPASS
    if after in _SKIPPED:
        return Change.NEWLY_SKIPPED
    if before in _BAD:
        return Change.FIXED
    if before in _SKIPPED:
        return Change.NOW_RUNS
    return Change.CHANGED


def declared_flaky(t: TestResult | None) -> bool:
    """Declared flaky in the expectations file (a note, or the reason of its XFAIL)."""
    return t is not None and any("declared flaky" in n for n in (t.reason, *t.notes))


def _checks(cases: tuple[TestCase, ...], prefix: str = "") -> Iterator[tuple[str, str]]:
    for c in cases:
        name = f"{prefix}{c.name}"
        yield name, c.status.value
        yield from _checks(c.subtests, f"{name}/")


def measurements(t: TestResult) -> tuple[Measurement, ...]:
    """A test's measurements with a median, unit and direction: the ones judged and shown
    (compare, the exports, the report)."""
    return tuple(m for m in t.metrics.measurements if m.complete) if t.metrics else ()


def _number(value: Number | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _spread(m: Measurement, median: float) -> tuple[float, float]:
    """The measurement's spread: its interquartile range when it reports one (many samples:
    min and max would be outliers), else min..max (a median alone: no spread)."""
    lo, hi = _number(m.q1), _number(m.q3)
    if lo is None or hi is None:
        lo, hi = _number(m.min), _number(m.max)
    return (median if lo is None else lo), (median if hi is None else hi)


def metric_change(before: Measurement, after: Measurement
                  ) -> tuple[Change | None, str, str, str]:
    """A measurement's move judged against both spreads: (change, before, after, detail)."""
    a, b = _number(before.median), _number(after.median)
    if a is None or b is None:
        return None, "", "", ""
    (a_lo, a_hi), (b_lo, b_hi) = _spread(before, a), _spread(after, b)
    unit = after.unit or ""
    direction = "lower" if after.direction is None else after.direction
    ratio = f" ({(b - a) / a:+.0%})" if a else ""
    detail = (f"median {a:.4g} -> {b:.4g} {unit}; spread {a_lo:.4g}..{a_hi:.4g} -> "
              f"{b_lo:.4g}..{b_hi:.4g}, {direction} is better")
    higher = b > a_hi and a < b_lo
    lower = b < a_lo and a > b_hi
    if not (higher or lower):
        return None, "", "", ""
    worse = higher if direction == "lower" else lower
    return (Change.REGRESSED if worse else Change.IMPROVED), f"{a:.4g}", \
        f"{b:.4g} {unit}{ratio}", detail


def _compare_test(cell: str, name: str, a: TestResult | None, b: TestResult | None
                  ) -> Iterator[Difference]:
    if a is None or b is None:
        present = a or b
        assert present is not None
        yield Difference(cell=cell, kind="test", name=name, before=_shown(a), after=_shown(b),
                         change=Change.NEW if a is None else Change.GONE,
                         detail=present.reason)
        return
    flaky = declared_flaky(a) or declared_flaky(b)
    change = status_change(_judged(a), _judged(b))
    if change is None and a.status is not b.status:
        change = Change.CHANGED  # e.g. PASS -> FAIL (as declared): both as their cells say
    if change is not None:
        if flaky and change in (Change.REGRESSED, Change.FIXED, Change.CHANGED):
            change = Change.FLAKY
        yield Difference(cell=cell, kind="test", name=name, before=_shown(a), after=_shown(b),
                         change=change, detail=b.reason)
    # a check newly failing is a regression, unless the test is declared to fail (a
    # broken variant's failing checks are its point) or declared flaky
    declared = b.expected_status is b.status and b.status is not Status.PASS
    judged = not (declared or flaky)
    before_checks = dict(_checks(a.ktap.cases if a.ktap else ()))
    for check, status in _checks(b.ktap.cases if b.ktap else ()):
        moved = status_change(before_checks.get(check, status), status)
        if moved is not None and moved is not Change.STILL_FAILING:
            if moved is Change.REGRESSED and not judged:
                moved = Change.CHANGED  # the test's own status tells the story
            yield Difference(cell=cell, kind="check", name=f"{name}: {check}",
                             before=before_checks.get(check, "-"), after=status, change=moved)
    old = {s.identity for s in a.splats if not s.expected}
    new = {s.identity: s for s in b.splats if not s.expected}
    for fp, s in new.items():
        if fp not in old:
            yield Difference(cell=cell, kind="splat", name=f"{name}: {fp}", before="-",
                             after=s.title,
                             change=Change.REGRESSED if judged else Change.CHANGED,
                             detail=s.decoded or s.where)
    for fp in sorted(old - new.keys()):
        yield Difference(cell=cell, kind="splat", name=f"{name}: {fp}", before="splat",
                         after="-", change=Change.FIXED)
    before_m = {m.path: m for m in measurements(a)}
    for m in measurements(b):
        if m.path in before_m:
            moved, x, y, detail = metric_change(before_m[m.path], m)
            if moved is not None:
                yield Difference(cell=cell, kind="metric", name=f"{name}: {m.path}",
                                 before=x, after=y, change=moved, detail=detail)


def _pair_label(a: str, b: str) -> str:
    return b if a == b else f"{a} -> {b}"


def _states(c: CellResult) -> dict[str, dict[str, str]]:
    """patches and features: each one's state, by name."""
    return {"patches": {p.name: p.state.value for p in c.patches},
            "features": {r.feature.name: r.state.value for r in c.features}}


def compare_cells(a: CellResult, b: CellResult) -> list[Difference]:
    """Every difference between two cells' results (the name shown is the second's)."""
    cell = _pair_label(a.cell, b.cell)
    out: list[Difference] = []
    if a.status is not b.status:
        change = status_change(a.status.value, b.status.value) or Change.CHANGED
        out.append(Difference(cell=cell, kind="cell", name="status", before=a.status.value,
                              after=b.status.value, change=change,
                              detail=b.error.split("\n")[0]))
    if a.kernel_version != b.kernel_version:
        out.append(Difference(cell=cell, kind="kernel", name="version",
                              before=a.kernel_version, after=b.kernel_version,
                              change=Change.CHANGED))
    states_a, states_b = _states(a), _states(b)
    for kind in ("patches", "features"):
        before, after = states_a[kind], states_b[kind]
        for name in dict.fromkeys([*before, *after]):
            x, y = before.get(name, "-"), after.get(name, "-")
            if x != y:
                out.append(Difference(cell=cell, kind=kind[:-2] if kind == "patches"
                                      else kind[:-1], name=name, before=x, after=y,
                                      change=Change.CHANGED))
    tests_a, tests_b = {t.name: t for t in a.tests}, {t.name: t for t in b.tests}
    for name in dict.fromkeys([*tests_a, *tests_b]):
        out.extend(_compare_test(cell, name, tests_a.get(name), tests_b.get(name)))
    out.extend(_compare_coverage(cell, a.coverage, b.coverage))
    return out


def _compare_coverage(cell: str, a: tuple[PatchCoverage, ...] | None,
                      b: tuple[PatchCoverage, ...] | None) -> Iterator[Difference]:
    """Per patch (by position: a new revision renames its files), the added lines run of
    those gcov counts. A patch whose lines no test runs any more, or a revision that adds
    lines no test runs, is a regression of coverage."""
    if a is None or b is None:
        return
    for i, y in enumerate(b):
        x = a[i] if i < len(a) else None
        before = f"{len(x.ran)}/{len(x.executable)}" if x else "-"
        after = f"{len(y.ran)}/{len(y.executable)}"
        missed_a = len(x.not_run) if x else 0
        missed_b = len(y.not_run)
        if before == after and missed_a == missed_b:
            continue
        change = (Change.REGRESSED if missed_b > missed_a else
                  Change.IMPROVED if missed_b < missed_a else Change.CHANGED)
        detail = "; ".join(f"{n.file}:{n.line}" for n in y.not_run[:5])
        yield Difference(cell=cell, kind="coverage", name=y.patch, before=before,
                         after=after, change=change,
                         detail=f"not run: {detail}" if detail else "")


def _select(run: RunResult, cell: str | None, label: str) -> list[CellResult]:
    cells = list(run.cells)
    if cell is None:
        return cells
    chosen = [c for c in cells if c.cell == cell]
    if not chosen:
        names = ", ".join(c.cell for c in cells) or "none"
        raise KeyError(f"{label} has no cell {cell!r} (its cells: {names})")
    return chosen


def compare(a: RunResult, b: RunResult, *, labels: tuple[str, str] = ("A", "B"),
            cells: tuple[str | None, str | None] = (None, None)) -> Comparison:
    """Compare two runs, or one cell of each (`cells`)."""
    first, second = _select(a, cells[0], labels[0]), _select(b, cells[1], labels[1])
    pairs: list[tuple[CellResult, CellResult]] = []
    unpaired: list[str] = []
    if cells[0] is not None and cells[1] is not None:
        pairs = [(first[0], second[0])]
    else:
        by_b = {c.cell: c for c in second}
        for c in first:
            if c.cell in by_b:
                pairs.append((c, by_b.pop(c.cell)))
            else:
                unpaired.append(f"cell {c.cell}: only in {labels[0]}")
        unpaired += [f"cell {name}: only in {labels[1]}" for name in by_b]
    differences = [d for x, y in pairs for d in compare_cells(x, y)]
    return Comparison(before=labels[0], after=labels[1],
                      cells=tuple((x.cell, y.cell) for x, y in pairs),
                      differences=tuple(differences), unpaired=tuple(unpaired))


# --- rendering -------------------------------------------------------------------------

_ORDER = list(Change)


def _sorted(c: Comparison) -> list[Difference]:
    return sorted(c.differences, key=lambda d: (d.cell, _ORDER.index(d.change)))


def _totals(c: Comparison) -> str:
    parts = [f"{c.count(ch)} {ch.value}" for ch in Change if c.count(ch)]
    return ", ".join(parts) or "no differences"


def verdict(c: Comparison) -> str:
    return "REGRESSED" if c.regressed else "no regression"


def render_terminal(c: Comparison, width: int = 100) -> str:
    indent = " " * 18
    lines = textwrap.wrap(f"compare {c.before} -> {c.after}: {verdict(c)} ({_totals(c)})",
                          width, subsequent_indent="   ")
    lines += [f"   {u}" for u in c.unpaired]
    current = None
    for d in _sorted(c):
        if d.cell != current:
            current = d.cell
            lines.append(f"== {d.cell}")
        row = f"   {d.change.value.upper():<14} {d.kind:<8} {d.name}"
        move = f"{d.before} -> {d.after}"
        if len(row) + 2 + len(move) <= width:
            lines.append(f"{row}: {move}")
        else:
            lines += [row, *textwrap.wrap(move, width, initial_indent=indent,
                                          subsequent_indent=indent)]
        if d.detail and (d.kind == "metric" or d.change in (Change.REGRESSED, Change.FIXED,
                                                              Change.NEW, Change.FLAKY)):
            lines += textwrap.wrap(d.detail, width, initial_indent=indent,
                                   subsequent_indent=indent, max_lines=4)
    quiet = [label for label in (_pair_label(x, y) for x, y in c.cells)
             if not any(d.cell == label for d in c.differences)]
    if quiet:
        lines.append(f"unchanged: {', '.join(quiet)}")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(c: Comparison) -> str:
    lines = [f"### {c.before} -> {c.after}: **{verdict(c)}**", "", _totals(c), ""]
    lines += [f"- {u}" for u in c.unpaired]
    if c.differences:
        lines += ["| cell | change | what | name | before | after | detail |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {_md(d.cell)} | {d.change.value} | {d.kind} | {_md(d.name)} | "
                  f"{_md(d.before)} | {_md(d.after)} | {_md(d.detail)} |" for d in _sorted(c)]
    return "\n".join(lines) + "\n"


def to_json(c: Comparison) -> dict[str, Any]:
    return {"before": c.before, "after": c.after, "regressed": c.regressed,
            "cells": [list(p) for p in c.cells], "unpaired": list(c.unpaired),
            "counts": {ch.value: c.count(ch) for ch in Change if c.count(ch)},
            "differences": [{"cell": d.cell, "kind": d.kind, "name": d.name,
                             "before": d.before, "after": d.after,
                             "change": d.change.value, "detail": d.detail}
                            for d in _sorted(c)]}


# --- each check's verdict across runs: `harness verdicts` -----------------------------


@dataclass(frozen=True, kw_only=True)
class VerdictRow:
    check: str  # TEST:CHECK (a KTAP leaf's path), or TEST for a test without checks
    verdicts: tuple[str, ...]  # its status in each column ("-": not there)
    said: tuple[str, ...]  # for each column, why it did not pass ("" when it did)


@dataclass(frozen=True, kw_only=True)
class VerdictTable:
    columns: tuple[str, ...]
    rows: tuple[VerdictRow, ...]


def _cell_checks(cell: CellResult) -> dict[str, tuple[str, str]]:
    """A cell's tests' checks -> (status, what it said when it did not pass)."""
    out: dict[str, tuple[str, str]] = {}
    for t in cell.tests:
        if t.phase is not Phase.TEST:
            continue
        found = list(leaves(t.ktap.cases)) if t.ktap is not None else []
        if not found:
            out[t.name] = (t.status.value, t.reason if t.status is not Status.PASS else "")
        for path, case in found:
            said = case.diagnostic.strip().splitlines()[-1:] if case.status not in (
                Status.PASS, Status.XFAIL) else []
            out[f"{t.name}:{'/'.join(path)}"] = (case.status.value,
                                                 (case.directive or " ".join(said)).strip())
    return out


def verdict_table(columns: Sequence[tuple[str, CellResult]]) -> VerdictTable:
    """Every check of every test in these cells, in the order first met, with its verdict
    in each: docs/selftests.md's reference table (mainline against our series)."""
    per = [_cell_checks(c) for _, c in columns]
    names = list(dict.fromkeys(n for checks in per for n in checks))
    rows = tuple(VerdictRow(check=n, verdicts=tuple(c.get(n, ("-", ""))[0] for c in per),
                            said=tuple(c.get(n, ("-", ""))[1] for c in per)) for n in names)
    return VerdictTable(columns=tuple(label for label, _ in columns), rows=rows)


def render_table_markdown(table: VerdictTable) -> str:
    head = "| check | " + " | ".join(table.columns) + " |\n"
    head += "|---|" + "---|" * len(table.columns) + "\n"
    body = "".join(f"| `{r.check}` | " + " | ".join(r.verdicts) + " |\n" for r in table.rows)
    notes = "".join(f"- `{r.check}` on {col}: {_md(said)}\n" for r in table.rows
                    for col, said, v in zip(table.columns, r.said, r.verdicts, strict=True)
                    if said and v not in (Status.PASS.value, "-"))
    return head + body + (f"\nWhat did not pass said:\n\n{notes}" if notes else "")


def render_table_terminal(table: VerdictTable) -> str:
    width = max([len(r.check) for r in table.rows] + [5])
    cols = [max(len(c), 7) for c in table.columns]
    lines = ["  ".join([f"{'check':<{width}}", *(f"{c:<{w}}" for c, w in
                                                  zip(table.columns, cols, strict=True))])]
    lines += ["  ".join([f"{r.check:<{width}}", *(f"{v:<{w}}" for v, w in
                                                   zip(r.verdicts, cols, strict=True))])
              for r in table.rows]
    differ = sum(len(set(r.verdicts) - {"-"}) > 1 for r in table.rows)
    lines.append(f"\n{len(table.rows)} checks; {differ} with verdicts that differ between "
                 "the columns")
    return "\n".join(lines)
