"""`harness report`: a static HTML page of a run (and of a comparison), for people.

Rendered with jinja2 from the run as results.json has it (plus the test logs it names,
read by the CLI), with no network: inline CSS, inline SVG plots, no script. The grid has
one cell per (matrix cell, result), coloured by status; each links to the details:
the reason, the failing checks, the decoded splats, the output. Every benchmark whose
measurements are named "<series>@<x>" (methods/iter_self@100, reads/few/rstat_root@10)
gets a plot of its medians against x, one line per series, on a log scale when the
values span more than a factor of 20.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2

from harness import target
from harness.base.model import (
    CellResult,
    PatchCoverage,
    RunResult,
    Splat,
    Status,
    TestCase,
    TestResult,
    leaves,
)
from harness.judge import ktap
from harness.output import compare

WIDTH, HEIGHT, MARGIN = 560, 300, 56
_POINT = re.compile(r"^(?P<series>.+)@(?P<x>\d+(?:\.\d+)?)$")
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf")


@dataclass(frozen=True, kw_only=True)
class Point:
    series: str
    x: float
    y: float  # the median
    px: float  # in the SVG
    py: float


@dataclass(frozen=True, kw_only=True)
class Line:
    series: str
    colour: str
    points: tuple[Point, ...]

    @property
    def path(self) -> str:
        return " ".join(f"{p.px:.1f},{p.py:.1f}" for p in self.points)


@dataclass(frozen=True, kw_only=True)
class Plot:
    title: str
    unit: str
    log_y: bool
    lines: tuple[Line, ...]
    x_ticks: tuple[tuple[float, str], ...]  # (pixel, label)
    y_ticks: tuple[tuple[float, str], ...]


def _axis(values: Sequence[float], lo_px: float, hi_px: float, log: bool
          ) -> tuple[Callable[[float], float], list[tuple[float, str]]]:
    """The pixel of a value (lo_px for the smallest), and a few labelled ticks."""
    def f(v: float) -> float:
        return math.log10(v) if log else v

    lo, hi = min(f(v) for v in values), max(f(v) for v in values)
    if hi == lo:
        hi = lo + 1

    def px(v: float) -> float:
        return lo_px + (f(v) - lo) / (hi - lo) * (hi_px - lo_px)

    ticks = sorted(set(values)) if len(set(values)) <= 6 else [
        (10 ** (lo + (hi - lo) * i / 4) if log else lo + (hi - lo) * i / 4) for i in range(5)]
    return px, [(px(t), f"{t:.3g}") for t in ticks]


def plots(t: TestResult) -> list[Plot]:
    """One plot per group of a test's measurements named <series>@<x> with at least two x
    values (a group: the path's first part, e.g. "methods", "reads")."""
    groups: dict[str, dict[str, list[tuple[float, float]]]] = {}
    units: dict[str, str] = {}
    for m in compare.measurements(t):
        match = _POINT.match(m.path)
        if match is None or m.median is None or not m.median > 0:
            continue
        group, _, series = match["series"].partition("/")
        groups.setdefault(group, {}).setdefault(series or group, []).append(
            (float(match["x"]), float(m.median)))
        units[group] = m.unit or ""
    out = []
    for group, lines in groups.items():
        xs = sorted({x for pts in lines.values() for x, _ in pts})
        if len(xs) < 2:
            continue
        ys = [y for pts in lines.values() for _, y in pts]
        log_y = max(ys) / min(ys) > 20
        x_px, x_ticks = _axis(xs, MARGIN, WIDTH - 16, log=max(xs) / min(xs) > 20)
        y_px, y_ticks = _axis(ys, HEIGHT - 32, 16, log=log_y)
        built = []
        for i, (series, pts) in enumerate(sorted(lines.items())):
            points = tuple(Point(series=series, x=x, y=y, px=x_px(x), py=y_px(y))
                           for x, y in pts)
            built.append(Line(series=series, colour=PALETTE[i % len(PALETTE)],
                              points=tuple(sorted(points, key=lambda p: p.x))))
        out.append(Plot(title=f"{t.name}: {group}", unit=units[group], log_y=log_y,
                        lines=tuple(built), x_ticks=tuple(x_ticks), y_ticks=tuple(y_ticks)))
    return out


def checks(cases: Sequence[TestCase]) -> list[tuple[str, Status]]:
    """A KTAP tree's leaf checks, named by their path below the test ("selftests:
    cgroup: test_freezer/test_cgfreezer_ptrace" for a kselftest program's case)."""
    return [("/".join(path), leaf.status) for path, leaf in leaves(cases)]


def _splat(s: Splat) -> dict[str, str]:
    """A splat with every field the page shows."""
    return {"kind": s.kind, "function": s.function, "title": s.title, "message": s.message,
            "text": s.text, "decoded": s.decoded, "where": s.where, "expected": s.expected}


def anchor(cell: str, test: str) -> str:
    return "r-" + re.sub(r"[^A-Za-z0-9_-]", "-", f"{cell}--{test}")


def _coverage(x: PatchCoverage) -> dict[str, Any]:
    ran = set(x.ran)
    return {"patch": x.patch, "subject": x.subject, "executable": len(x.executable),
            "ran": len(x.ran), "not_run": list(x.not_run), "by_test": dict(x.by_test),
            "lines": [{"file": n.file, "line": n.line, "source": n.source, "ran": n in ran}
                      for n in x.executable]}


def _test(c: CellResult, t: TestResult, logs: Mapping[tuple[str, str], str],
          recent: Mapping[tuple[str, str], str], known: Mapping[tuple[str, str], str]
          ) -> dict[str, Any]:
    return {
        "name": t.name, "status": t.status.value, "reason": t.reason,
        "expected": t.expected_status.value if t.expected_status else None,
        "anchor": anchor(c.cell, t.name), "duration": t.duration_s, "notes": list(t.notes),
        "failing": [n for n, status in checks(t.ktap.cases if t.ktap else ())
                    if status in (Status.FAIL, Status.CRASHED, Status.TIMEOUT)],
        "counts": {k.value: v for k, v in ktap.summary_counts(t.ktap).items()}
        if t.ktap else {},
        "splats": [{**_splat(x), "known": known.get(
            (c.cell, f"{t.name}: splat {x.fingerprint}"), "")} for x in t.splats],
        "known": known.get((c.cell, t.name), ""),
        "attempts": [a.status.value for a in t.attempts],
        "output": logs.get((c.cell, t.name), ""),
        "recent": recent.get((c.cell, t.name), ""),
        "plots": plots(t), "summary": t.metrics.summary if t.metrics else ""}


def view(run: RunResult, logs: Mapping[tuple[str, str], str],
         recent: Mapping[tuple[str, str], str] | None = None,
         known: Mapping[tuple[str, str], str] | None = None) -> dict[str, Any]:
    """What the template shows: the run arranged for the page. `logs`: (cell, test)
    -> the test's output, when the CLI could read it; `recent`: (cell, test) -> its
    outcomes in the last runs the history holds, oldest first (. passed, F failed);
    `known`: (cell, test) and (cell, "test: splat FINGERPRINT") -> "new" or "known since
    RUN ..." (history.labels)."""
    known, recent = known or {}, recent or {}
    names: list[str] = []
    for c in run.cells:
        names += [t.name for t in c.tests if t.name not in names]
    grid = [{"test": name, "results": [
        next(({"status": t.status.value, "anchor": anchor(c.cell, name), "cell": c.cell,
               "declared": t.expected_status is t.status and t.status is not Status.PASS}
              for t in c.tests if t.name == name), None) for c in run.cells]}
        for name in names]
    details = [{
        "cell": c.cell, "status": c.status.value, "error": c.error, "kernel": c.kernel,
        "version": c.kernel_version, "target": target.label(c.arch, c.toolchain),
        "notes": list(c.notes),
        "patches": [{"name": p.name, "subject": p.subject, "state": p.state.value,
                     "detail": p.detail} for p in c.patches],
        "features": [{"name": r.feature.name, "kind": r.feature.kind.value,
                      "state": r.state.value, "where": r.where, "btf": r.btf}
                     for r in c.features],
        "tests": [_test(c, t, logs, recent, known) for t in c.tests], "accel": c.accel,
        "coverage": None if c.coverage is None else [_coverage(x) for x in c.coverage]}
        for c in run.cells]
    return {"run": {"run_id": run.run_id or "", "started": run.started or "",
                    "status": run.status.value if run.status else "",
                    "exit_code": run.exit_code, "what": run.what or "",
                    "harness_rev": run.harness_rev or "", "state": run.state.value},
            "command": " ".join(run.command or ()),
            "cells": [c.cell for c in run.cells], "grid": grid, "details": details}


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("harness.output", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def render(run: RunResult, logs: Mapping[tuple[str, str], str],
           recent: Mapping[tuple[str, str], str] | None = None,
           known: Mapping[tuple[str, str], str] | None = None) -> str:
    return _env().get_template("report.html.j2").render(**view(run, logs, recent, known))


def render_comparison(c: compare.Comparison) -> str:
    return _env().get_template("compare.html.j2").render(
        c=c, verdict=compare.verdict(c), differences=compare.to_json(c)["differences"],
        counts=compare.to_json(c)["counts"])
