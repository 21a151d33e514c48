"""results.json, reproduce.sh and the terminal summary: rendering only, no running."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path
from typing import Any

import jinja2

from . import ktap
from .model import (
    CellResult,
    ConfigResult,
    FeatureKind,
    FeatureReport,
    FeatureState,
    PatchResult,
    Splat,
    StageTiming,
    Status,
    TestCase,
    TestResult,
    worst,
)

SCHEMA_VERSION = 1


def _case_json(case: TestCase) -> dict[str, Any]:
    out: dict[str, Any] = {"name": case.name, "number": case.number,
                           "status": case.status.value}
    if case.directive:
        out["directive"] = case.directive
    if case.diagnostic:
        out["diagnostic"] = case.diagnostic
    if case.subtests:
        out["subtests"] = [_case_json(c) for c in case.subtests]
    return out


def _splat_json(s: Splat) -> dict[str, Any]:
    return {"kind": s.kind, "title": s.title, "text": s.text, "decoded": s.decoded}


def test_json(t: TestResult, base: Path | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": t.name,
        "status": t.status.value,
        "duration_s": round(t.duration_s, 2),
        "exit_code": t.exit_code,
        "reason": t.reason,
        "splats": [_splat_json(s) for s in t.splats],
    }
    if t.log is not None:
        out["log"] = str(t.log.relative_to(base)) if base and t.log.is_relative_to(base) \
            else str(t.log)
    if t.ktap is not None:
        out["ktap"] = {
            "version": t.ktap.version,
            "plan": t.ktap.plan,
            "errors": list(t.ktap.errors),
            "subtests": [_case_json(c) for c in t.ktap.cases],
            "counts": {k.value: v for k, v in ktap.summary_counts(t.ktap).items()},
        }
    if t.extra:
        out["extra"] = t.extra
    return out


def _patch_json(p: PatchResult) -> dict[str, Any]:
    return {"name": p.name, "subject": p.subject, "state": p.state.value,
            "files": list(p.files), "detail": p.detail}


def _config_json(c: ConfigResult | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"fragments": list(c.fragments), "requested": list(c.requested),
            "dropped": [{"symbol": d.symbol, "requested": d.requested, "actual": d.actual,
                         "reason": d.reason} for d in c.dropped],
            "config_changed": c.changed}


def _feature_json(r: FeatureReport) -> dict[str, Any]:
    return {"name": r.feature.name, "kind": r.feature.kind.value, "state": r.state.value,
            "where": r.where, "btf": r.btf, "declared_by": list(r.feature.declared_by),
            "note": r.note}


def _stage_json(s: StageTiming) -> dict[str, Any]:
    return {"stage": s.stage, "status": s.status.value, "duration_s": round(s.duration_s, 2),
            "detail": s.detail}


def cell_json(c: CellResult, base: Path | None = None) -> dict[str, Any]:
    return {
        "cell": c.cell,
        "kernel": c.kernel,
        "kernel_version": c.kernel_version,
        "source": c.source,
        "package_version": c.package_version,
        "status": c.status.value,
        "error": c.error,
        "accel": c.accel,
        "patches": [_patch_json(p) for p in c.patches],
        "config": _config_json(c.config),
        "stages": [_stage_json(s) for s in c.stages],
        "tests": [test_json(t, base) for t in c.tests],
        "retries": list(c.retries),
        "features": [_feature_json(r) for r in c.features],
    }


def run_status(cells: list[CellResult]) -> Status:
    return worst([c.status for c in cells])


def exit_code(cells: list[CellResult], *, strict: bool = False) -> int:
    """0 all passed, 1 a test failed/crashed/timed out, 2 a stage error; the highest wins."""
    code = max((c.status.exit_code for c in cells), default=0)
    if strict and any(t.status is Status.XPASS for c in cells for t in c.tests):
        code = max(code, 1)
    return code


def write_json(path: Path, cells: list[CellResult], *, meta: dict[str, Any]) -> None:
    data = {
        "schema": SCHEMA_VERSION,
        **meta,
        "status": run_status(cells).value,
        "exit_code": exit_code(cells, strict=bool(meta.get("strict"))),
        "cells": [cell_json(c, path.parent) for c in cells],
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.rename(path)


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("harness", "templates"),
    autoescape=False,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["shquote"] = shlex.quote


def write_reproduce(path: Path, *, argv: list[str], repo: Path, harness_rev: str) -> None:
    text = _env.get_template("reproduce.sh.j2").render(argv=argv, repo=str(repo),
                                                      harness_rev=harness_rev)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def summary_table(cells: list[CellResult]) -> str:
    """The table the terminal ends with: one row per test (and per failing subtest)."""
    rows: list[tuple[str, str, str, str]] = []
    for c in cells:
        applied = sum(1 for p in c.patches if p.state.value == "applied")
        in_base = sum(1 for p in c.patches if p.state.value == "already-in-base")
        version = c.kernel_version or c.kernel
        head = f"{c.cell} [{version}]" if version else c.cell
        pinfo = f"patches {applied} applied, {in_base} in base" if c.patches else "no patches"
        rows.append((head, c.status.value, "", f"{pinfo}; {c.accel}".strip("; ")))
        if c.error:
            rows.append(("  " + c.error.splitlines()[0][:70], "", "", ""))
        if c.features:
            rows.append(("  features", "", "", feature_line(c.features)))
        for t in c.tests:
            counts = ""
            if t.ktap is not None:
                n = ktap.summary_counts(t.ktap)
                counts = " ".join(f"{k.value.lower()}:{v}" for k, v in n.items() if v)
            rows.append((f"  {t.name}", t.status.value, f"{t.duration_s:.1f}s",
                         (t.reason or counts)[:90]))
            metrics = t.extra.get("metrics")
            if isinstance(metrics, dict) and metrics.get("summary"):
                rows.append((f"    {t.name} metrics", "", "", str(metrics["summary"])[:120]))
            if t.ktap is not None and t.status is not Status.PASS:
                for leaf in _bad_leaves(t.ktap.cases):
                    rows.append((f"    {leaf.name[:60]}", leaf.status.value, "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)] if rows else [0, 0, 0]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip()
             for r in rows]
    return "\n".join(lines)


def feature_line(reports: tuple[FeatureReport, ...]) -> str:
    """`in base: bpf_rstat_flush, ...; added by series: ...`, and whether BTF confirmed it."""
    groups: dict[FeatureState, list[str]] = {}
    for r in reports:
        name = f"{r.feature.name} iterator" if r.feature.kind is FeatureKind.ITERATOR \
            else r.feature.name
        groups.setdefault(r.state, []).append(name)
    line = "; ".join(f"{state.value}: {', '.join(names)}" for state, names in groups.items())
    if any(r.btf is None for r in reports):
        return line + " (sources only, BTF not checked)"
    notes = [f"{r.feature.name}: {r.note}" for r in reports if r.note]
    return line + (f" (notes: {'; '.join(notes)})" if notes else " (BTF agrees)")


def _bad_leaves(cases: tuple[TestCase, ...]) -> list[TestCase]:
    out: list[TestCase] = []
    for c in cases:
        if c.subtests:
            out.extend(_bad_leaves(c.subtests))
        elif c.status not in (Status.PASS, Status.SKIP):
            out.append(c)
    return out


def relpath(p: Path, base: Path) -> str:
    return os.path.relpath(p, base)
