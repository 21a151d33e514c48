"""`harness report`: a static HTML page of a run (and of a comparison), for people.

Rendered with jinja2 from results.json alone (plus the test logs it names, read by the
CLI), with no network: inline CSS, inline SVG plots, no script. The grid has one cell per
(matrix cell, result) of results.json, coloured by status; each links to the details:
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
from harness.output import compare

Doc = Mapping[str, Any]
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


def plots(metrics: Any, title: str) -> list[Plot]:
    """One plot per group of measurements named <series>@<x> with at least two x values
    (a group: the path's first part, e.g. "methods", "reads")."""
    groups: dict[str, dict[str, list[tuple[float, float]]]] = {}
    units: dict[str, str] = {}
    for path, m in compare.measurements_in(metrics):
        match = _POINT.match(path)
        median = m.get("median")
        if match is None or not isinstance(median, int | float) or not median > 0:
            continue
        group, _, series = match["series"].partition("/")
        groups.setdefault(group, {}).setdefault(series or group, []).append(
            (float(match["x"]), float(median)))
        units[group] = str(m.get("unit", ""))
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
        out.append(Plot(title=f"{title}: {group}", unit=units[group], log_y=log_y,
                        lines=tuple(built), x_ticks=tuple(x_ticks), y_ticks=tuple(y_ticks)))
    return out


def leaves(cases: Sequence[Doc], prefix: str = "") -> list[tuple[str, str]]:
    """A KTAP tree's leaf checks, named by their path below the test ("selftests:
    cgroup: test_freezer/test_cgfreezer_ptrace" for a kselftest program's case)."""
    out: list[tuple[str, str]] = []
    for c in cases:
        name = f"{prefix}{c['name']}"
        out += leaves(c["subtests"], f"{name}/") if c.get("subtests") else [
            (name, str(c["status"]))]
    return out


def _splat(s: Doc) -> dict[str, str]:
    """A splat of results.json with every field the page shows (empty ones are left out
    of the JSON)."""
    return {k: str(s.get(k) or "") for k in ("kind", "function", "title", "message", "text",
                                             "decoded", "where", "expected")}


def anchor(cell: str, test: str) -> str:
    return "r-" + re.sub(r"[^A-Za-z0-9_-]", "-", f"{cell}--{test}")


def view(doc: Doc, logs: Mapping[tuple[str, str], str],
         recent: Mapping[tuple[str, str], str] | None = None,
         known: Mapping[tuple[str, str], str] | None = None) -> dict[str, Any]:
    """What the template shows: results.json arranged for the page. `logs`: (cell, test)
    -> the test's output, when the CLI could read it; `recent`: (cell, test) -> its
    outcomes in the last runs the history holds, oldest first (. passed, F failed);
    `known`: (cell, test) and (cell, "test: splat FINGERPRINT") -> "new" or "known since
    RUN ..." (history.labels)."""
    known = known or {}
    cells = list(doc.get("cells", []))
    names: list[str] = []
    for c in cells:
        names += [str(t["name"]) for t in c.get("tests", []) if t["name"] not in names]
    grid = [{"test": name, "results": [
        next(({"status": t["status"], "anchor": anchor(c["cell"], name), "cell": c["cell"],
               "declared": t.get("expected_status") == t["status"] != "PASS"}
              for t in c.get("tests", []) if t["name"] == name), None) for c in cells]}
        for name in names]
    details = []
    for c in cells:
        tests = []
        for t in c.get("tests", []):
            ktap = t.get("ktap") or {}
            metrics = (t.get("extra") or {}).get("metrics")
            checks = leaves(ktap.get("subtests", []))
            tests.append({
                "name": t["name"], "status": t["status"], "reason": t.get("reason", ""),
                "expected": t.get("expected_status"), "anchor": anchor(c["cell"], t["name"]),
                "duration": t.get("duration_s", 0), "notes": t.get("notes", []),
                "failing": [n for n, s in checks if s in ("FAIL", "CRASHED", "TIMEOUT")],
                "counts": ktap.get("counts", {}),
                "splats": [{**_splat(x), "known": known.get(
                    (c["cell"], f"{t['name']}: splat {compare.fingerprint(x)}"), "")}
                    for x in t.get("splats", [])],
                "known": known.get((c["cell"], t["name"]), ""),
                "attempts": [a["status"] for a in t.get("attempts", [])],
                "output": logs.get((c["cell"], t["name"]), ""),
                "recent": (recent or {}).get((c["cell"], t["name"]), ""),
                "plots": plots(metrics, t["name"]),
                "summary": metrics.get("summary", "") if isinstance(metrics, Mapping) else ""})
        details.append({"cell": c["cell"], "status": c["status"], "error": c.get("error", ""),
                        "kernel": c.get("kernel", ""), "version": c.get("kernel_version", ""),
                        "target": target.label(
                            str(c.get("arch") or target.DEFAULT_ARCH),
                            str(c.get("toolchain") or target.DEFAULT_TOOLCHAIN)),
                        "notes": c.get("notes", []), "patches": c.get("patches", []),
                        "features": c.get("features", []), "tests": tests,
                        "accel": c.get("accel", ""), "coverage": c.get("coverage")})
    return {"run": {k: doc.get(k, "") for k in ("run_id", "started", "status", "exit_code",
                                                "what", "harness_rev", "state")},
            "command": " ".join(map(str, doc.get("command", []))),
            "cells": [c["cell"] for c in cells], "grid": grid, "details": details}


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("harness.output", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def render(doc: Doc, logs: Mapping[tuple[str, str], str],
           recent: Mapping[tuple[str, str], str] | None = None,
           known: Mapping[tuple[str, str], str] | None = None) -> str:
    return _env().get_template("report.html.j2").render(**view(doc, logs, recent, known))


def render_comparison(c: compare.Comparison) -> str:
    return _env().get_template("compare.html.j2").render(
        c=c, verdict=compare.verdict(c), differences=compare.to_json(c)["differences"],
        counts=compare.to_json(c)["counts"])
