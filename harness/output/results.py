"""results.json, reproduce.sh and the terminal summary: rendering only, no running.

The summary is where the user looks, so whatever a user needs to act on a result is in
it, once, at most 100 columns wide: the cause of a stopped cell with its details, fix
and log; for a crashed result the splat with its decoded location; for a failed test
its failing checks and their diagnostics; notes on known failures and declared noise.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import stat
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from harness import target
from harness.base import atomic, paths
from harness.base.errors import EnvironmentProblem
from harness.base.gitcmd import git_run
from harness.base.model import (
    KERNEL_PHASES,
    CellResult,
    ConfigResult,
    FeatureKind,
    FeatureReport,
    FeatureState,
    FileLine,
    Isolation,
    PatchCoverage,
    PatchResult,
    Phase,
    Splat,
    StageTiming,
    Status,
    TestCase,
    TestResult,
    worst,
)
from harness.judge import ktap, splat

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
WIDTH = 100


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


def splat_json(s: Splat) -> dict[str, Any]:
    out = {"kind": s.kind, "function": s.function, "fingerprint": s.fingerprint,
           "title": s.title, "text": s.text, "decoded": s.decoded}
    if s.message:
        out["message"] = s.message
    if s.where:
        out["where"] = s.where
    if s.expected:
        out["expected"] = s.expected
    return out


def _rel(path: Path, base: Path | None) -> str:
    return str(path.relative_to(base)) if base and path.is_relative_to(base) else str(path)


def test_json(t: TestResult, base: Path | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": t.name,
        "phase": t.phase.value,
        "status": t.status.value,
        "duration_s": round(t.duration_s, 2),
        "exit_code": t.exit_code,
        "reason": t.reason,
        "taint": t.taint,
        "splats": [splat_json(s) for s in t.splats],
    }
    if t.expected_status is not None:
        out["expected_status"] = t.expected_status.value
    if t.notes:
        out["notes"] = list(t.notes)
    if t.log is not None:
        out["log"] = _rel(t.log, base)
    if t.ktap is not None:
        out["ktap"] = {
            "version": t.ktap.version,
            "plan": t.ktap.plan,
            "errors": list(t.ktap.errors),
            "warnings": list(t.ktap.warnings),
            "subtests": [_case_json(c) for c in t.ktap.cases],
            "counts": {k.value: v for k, v in ktap.summary_counts(t.ktap).items()},
        }
    if t.extra:
        out["extra"] = t.extra
    if t.attempts:
        out["attempts"] = [test_json(a, base) for a in t.attempts]
    return out


def _patch_json(p: PatchResult) -> dict[str, Any]:
    return {"name": p.name, "subject": p.subject, "state": p.state.value,
            "files": list(p.files), "detail": p.detail, "message_id": p.message_id}


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
    out: dict[str, Any] = {"stage": s.stage, "status": s.status.value,
                           "duration_s": round(s.duration_s, 2), "detail": s.detail}
    if s.parts:  # where the time went (the build: build.BUILD_PHASES)
        out["parts"] = dict(s.parts)
    return out


def cell_json(c: CellResult, base: Path | None = None) -> dict[str, Any]:
    return {
        "cell": c.cell,
        "kernel": c.kernel,
        "kernel_version": c.kernel_version,
        "source": c.source,
        "package_version": c.package_version,
        "status": c.status.value,
        "error": c.error,
        "notes": list(c.notes),
        "boot_only": c.boot_only,
        "image": c.image,
        "kselftest_h": c.kselftest_h,
        "accel": c.accel,
        "patches": [_patch_json(p) for p in c.patches],
        "config": _config_json(c.config),
        "stages": [_stage_json(s) for s in c.stages],
        "tests": [test_json(t, base) for t in c.tests],
        "retries": list(c.retries),
        "features": [_feature_json(r) for r in c.features],
        "guest": c.guest,
        "kernel_from_store": c.kernel_from_store,
        "arch": c.arch,
        "toolchain": c.toolchain,
        "compiler": c.compiler,
        **({"isolation": isolation_json(c.isolation)} if c.isolation is not None else {}),
        **({"coverage": [_coverage_json(x) for x in c.coverage]}
           if c.coverage is not None else {}),
    }


def isolation_json(i: Isolation) -> dict[str, Any]:
    """What the tree's code could reach: the build's sandbox and the guest's root."""
    return {"sandbox": {"enabled": i.sandbox, "off": i.sandbox_off, "tool": i.sandbox_tool},
            "guest_root": {"hash": i.guest_root, "host_root": i.host_root,
                           "size_bytes": i.guest_root_size,
                           "packages": i.guest_root_packages},
            "summary": i.describe()}


def _line_json(x: FileLine) -> dict[str, Any]:
    return {"file": x.file, "line": x.line, "source": x.source}


def _coverage_json(x: PatchCoverage) -> dict[str, Any]:
    ran = set(x.ran)
    return {"patch": x.patch, "subject": x.subject, "executable": len(x.executable),
            "ran": len(x.ran), "not_run": [_line_json(n) for n in x.not_run],
            "by_test": dict(x.by_test),
            # every executable line, for the report's annotated listing
            "lines": [{**_line_json(n), "ran": n in ran} for n in x.executable]}


def coverage_lines(cov: tuple[PatchCoverage, ...], indent: str) -> list[str]:
    """Per patch: its added lines that gcov counts, how many ran, and each that did not."""
    lines = []
    for x in cov:
        if not x.executable:
            lines += _wrap(f"coverage: {x.patch}: no added line gcov counts", indent)
            continue
        lines += _wrap(f"coverage: {x.patch}: {len(x.ran)}/{len(x.executable)} added lines "
                       f"run ({100 * len(x.ran) // len(x.executable)}%)", indent)
        lines += [ln for n in x.not_run for ln in
                  _wrap(f"not run: {n.file}:{n.line}: {n.source.strip()}", indent + "  ")]
    return lines


def run_status(cells: list[CellResult]) -> Status:
    return worst([c.status for c in cells])


def exit_code(cells: list[CellResult]) -> int:
    """0 all passed, 1 a test failed/crashed/timed out or nothing was tested, 2 a stage
    error; the highest wins. (--strict is in each cell's status already.)"""
    return max((c.status.exit_code for c in cells), default=0)


BISECT_SKIP = 125  # git bisect run: this commit cannot be tested
BISECT_STOP = 128  # git bisect run: > 127 stops the bisection
_UNTESTABLE = frozenset({Status.PATCH_CONFLICT, Status.CONFIG_ERROR, Status.BUILD_ERROR})


def bisect_exit_code(cells: list[CellResult]) -> int:
    """The exit code for `git bisect run` (--bisect-exit): 0 good, 1 bad (a test failed,
    crashed or timed out, the kernel did not boot), 125 the commit cannot be tested (a
    patch, config or build error), 128 the environment failed (a set-up error, QEMU or KVM
    not starting, an interruption): that stops the bisection instead of blaming the
    commit. The most serious wins: 128, then 125, then 1."""
    codes = [0]
    for c in cells:
        failed = next((s.stage for s in reversed(c.stages) if s.status is c.status), "")
        if c.status in (Status.SETUP_ERROR, Status.INTERRUPTED) or (
                c.status is Status.BOOT_ERROR and failed == "accel"):
            codes.append(BISECT_STOP)
        elif c.status in _UNTESTABLE:
            codes.append(BISECT_SKIP)
        else:
            codes.append(min(c.status.exit_code, 1))
    return max(codes)


def write_json(path: Path, cells: list[CellResult], *, meta: dict[str, Any],
               state: str = "complete", code: int | None = None) -> None:
    """Atomically: a reader (or a killed run) never sees a half-written file. `code`: the
    exit status when it is not the cells' (128 + N for a run stopped by signal N)."""
    data = {
        "schema": SCHEMA_VERSION,
        **meta,
        "state": state,
        "status": run_status(cells).value if cells else None,
        "exit_code": exit_code(cells) if code is None else code,
        "cells": [cell_json(c, path.parent) for c in cells],
    }
    atomic.write_json(path, data)


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("harness.output", "templates"),
    autoescape=False,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["shquote"] = shlex.quote


def write_reproduce(path: Path, *, argv: list[str], repo: Path, harness_rev: str) -> None:
    text = _env.get_template("reproduce.sh.j2").render(argv=argv, repo=str(repo),
                                                      harness_rev=harness_rev)
    atomic.write_text(path, text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


# ---- the terminal ----


def _wrap(text: str, indent: str, width: int = WIDTH) -> list[str]:
    """Every line of text, indented and wrapped (continuations two columns deeper)."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        lead = line[: len(line) - len(line.lstrip(" "))]
        out += textwrap.wrap(line.strip(), width=width, initial_indent=indent + lead,
                             subsequent_indent=indent + lead + "  ",
                             break_long_words=False, break_on_hyphens=False) or [indent]
    return out


def _message(text: str, indent: str, base: Path | None) -> list[str]:
    """A stage error or verdict: the first line is the cause, `fix:`/`log:` lines as given."""
    lines = []
    for i, line in enumerate(text.rstrip().splitlines()):
        if line.startswith("log: ") and base is not None:
            line = "log: " + _show_path(Path(line[5:].strip()), base)
        head = "error: " if i == 0 and not line.startswith(("fix:", "log:")) else ""
        lines += _wrap(head + line, indent)
    return lines


def _show_path(path: Path, base: Path) -> str:
    """A path under the run directory relative to its parent (the run directory's name
    first, so it can be opened from where the run was started)."""
    if path.is_absolute() and path.is_relative_to(base.parent):
        return str(path.relative_to(base.parent))
    return str(path)


def summary(cells: list[CellResult], *, base: Path | None = None) -> str:
    """The terminal summary of a run: per cell its head line, then what a user needs."""
    lines: list[str] = []
    for c in cells:
        if lines:
            lines.append("")
        lines += _cell_lines(c, base)
    return "\n".join(lines)


def _cell_lines(c: CellResult, base: Path | None) -> list[str]:
    version = c.kernel_version or c.kernel
    applied = sum(1 for p in c.patches if p.state.value == "applied")
    in_base = sum(1 for p in c.patches if p.state.value == "already-in-base")
    parts = []
    if c.patches:
        parts.append(f"patches: {applied} applied, {in_base} in base")
    if c.accel:
        parts.append(c.accel.split(" (")[0])
    if c.isolation is not None:
        parts.append(c.isolation.describe())
    if built_for := target.label(c.arch, c.toolchain):
        version += f" {built_for}"
    head = f"== {c.cell} [{version}]  {c.status.value}"
    lines = _wrap(head + (f"  ({'; '.join(parts)})" if parts else ""), "")
    if c.error:
        lines += _message(c.error, "   ", base)
    if c.features:
        lines += _wrap("features: " + feature_line(c.features), "   ")
    if guest := guest_line(c.guest):
        lines += _wrap(guest, "   ")
    tests = [t for t in c.tests if t.phase is Phase.TEST]
    kernel = [t for t in c.tests if t.phase in KERNEL_PHASES]
    if kernel and all(t.status is Status.PASS and not t.splats and not t.notes for t in kernel):
        lines.append("   kernel log: boot, set-up between tests and shutdown clean "
                     "(no splat, no new taint)")
    name_width = min(max((len(t.name) for t in c.tests), default=0), 40)
    for t in [*(k for k in kernel if k.status is not Status.PASS or k.splats or k.notes),
              *tests]:
        # A reason the cell's error already gave is not given twice.
        lines += _result_lines(t, name_width, base,
                               said=bool(t.reason and c.error and t.reason in c.error))
    if c.coverage is not None:
        lines += coverage_lines(c.coverage, "   ")
    for retry in c.retries:
        lines += _wrap(f"retried: {retry}", "   ")
    if c.boot_only and not tests:
        lines.append("   (--boot-only: no tests asked for; judged by boot and shutdown)")
    for note in c.notes:
        lines += _wrap(f"note: {note}", "   ")
    return lines


def guest_line(guest: Mapping[str, object]) -> str:
    """What the guest had, when the user changed its size or command line: said on the
    terminal, with whether the appended arguments really reached /proc/cmdline."""
    asked = [f"--memory {guest['memory']}" if guest.get("memory", "2G") != "2G" else "",
             f"--cpus {guest['cpus']}" if guest.get("cpus", 2) != 2 else "",
             f"--append {guest['append']}" if guest.get("append") else ""]
    if not any(asked):
        return ""
    had = []
    cpus, memory_kb = guest.get("cpus_online"), guest.get("memory_kb")
    if isinstance(cpus, int):
        had.append(f"{cpus} CPU(s)")
    if isinstance(memory_kb, int):
        had.append(f"{memory_kb // 1024} MiB")
    cmdline, appended = str(guest.get("cmdline") or ""), str(guest.get("append") or "").strip()
    if appended and cmdline:
        had.append("/proc/cmdline has the appended arguments" if appended in cmdline else
                   f"/proc/cmdline LACKS the appended arguments: {cmdline}")
    return (f"guest ({' '.join(a for a in asked if a)}): "
            + (", ".join(had) if had else "not seen (the runner did not start)"))


def _result_lines(t: TestResult, name_width: int, base: Path | None, *,
                  said: bool = False) -> list[str]:
    counts = ""
    if t.ktap is not None:
        n = ktap.summary_counts(t.ktap)
        counts = " ".join(f"{k.value.lower()}:{v}" for k, v in n.items() if v)
    expected = ""
    if t.expected_status is not None and t.status is t.expected_status \
            and t.status is not Status.PASS:
        expected = " (as declared)"
    detail = "(see above)" if said else t.reason or counts
    head = f"   {t.name:<{name_width}}  {t.status.value + expected:<8} {t.duration_s:6.1f}s"
    lines = _wrap(f"{head}  {detail}".rstrip(), "")
    indent = "      "
    if t.reason and counts and t.status is not Status.PASS:
        lines += _wrap(counts, indent)
    for s in t.splats:
        lines += splat_lines(s, indent)
    if t.ktap is not None and t.status not in (Status.PASS, Status.SKIP, Status.XFAIL):
        for leaf in _bad_leaves(t.ktap.cases)[:10]:
            lines += _wrap(f"{leaf.status.value}: {leaf.name}", indent)
            diag = [d for d in leaf.diagnostic.splitlines() if d.strip()][-3:]
            lines += [ln for d in diag for ln in _wrap(d, indent + "  ")]
        for e in t.ktap.errors[:5]:
            lines += _wrap(f"output: {e}", indent)
    if t.ktap is not None:
        for w in t.ktap.warnings[:5]:
            lines += _wrap(f"warning: {w}", indent)
    for note in t.notes:
        lines += _wrap(f"note: {note}", indent)
    tail = t.extra.get("output_tail")
    if isinstance(tail, list) and tail:
        total = t.extra.get("output_lines", len(tail))
        lines.append(f"{indent}output:" if total == len(tail) else
                     f"{indent}output (its last {len(tail)} of {total} lines; all of it in the "
                     "log):")
        lines += [f"{indent}| {line}"[:WIDTH + 40] for line in tail]
    metrics = t.extra.get("metrics")
    if isinstance(metrics, dict) and metrics.get("summary"):
        lines += _wrap(f"metrics: {metrics['summary']}", indent)
    if t.log is not None and not said and (t.status not in (Status.PASS, Status.SKIP)
                                           or t.splats or t.extra.get("output_tail")):
        lines += _wrap("log: " + (_show_path(t.log, base) if base else str(t.log)), indent)
    return lines


def splat_lines(s: Splat, indent: str) -> list[str]:
    label = "expected noise" if s.expected else "splat"
    where = f" ({s.where})" if s.where else ""
    func = f" in {s.function}()" if s.function else ""
    lines = _wrap(f"{label}{where}: {s.kind}{func}: {s.title}", indent)
    said = s.message.splitlines()
    lines += [ln for n, m in enumerate(said) for ln in
              _wrap(f"{'message: ' if n == 0 else '         '}{m}", indent + "  ")]
    frames = splat.first_frames(s, 3)
    lines += [ln for f in frames for ln in _wrap(f, indent + "  ")]
    if s.expected:
        lines += _wrap(f"declared: {s.expected}", indent + "  ")
    return lines


def feature_line(reports: tuple[FeatureReport, ...]) -> str:
    """`in base: bpf_rstat_flush, ...; added by series: ...`, and whether BTF confirmed it."""
    groups: dict[FeatureState, list[str]] = {}
    for r in reports:
        name = f"{r.feature.name} iterator" if r.feature.kind is FeatureKind.ITERATOR \
            else r.feature.name
        groups.setdefault(r.state, []).append(name)
    line = "; ".join(f"{state.value}: {', '.join(names)}" for state, names in groups.items())
    # config options are not in BTF: the kernel's .config decided them
    in_btf = [r for r in reports if r.feature.kind is not FeatureKind.CONFIG]
    if any(r.btf is None for r in in_btf):
        return line + " (sources only, BTF not checked)"
    notes = [f"{r.feature.name}: {r.note}" for r in in_btf if r.note]
    return line + (f" (notes: {'; '.join(notes)})" if notes else " (BTF agrees)")


def _bad_leaves(cases: tuple[TestCase, ...]) -> list[TestCase]:
    out: list[TestCase] = []
    for c in cases:
        if c.subtests:
            out.extend(_bad_leaves(c.subtests))
        elif c.status not in (Status.PASS, Status.SKIP, Status.XFAIL):
            out.append(c)
    return out



def new_run_id() -> str:
    """A results directory's default name: when it started, and by which process."""
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def harness_rev() -> str:
    """The harness commit a run was made with (results.json, reproduce.sh)."""
    res = git_run(paths.repo_root(), "rev-parse", "HEAD", timeout=30)
    return res.output.strip() if res.ok else "unknown"


def prepare_out(out: Path, *, marker: str = "results.json") -> None:
    """A results directory that holds this run's files only.

    New or empty: used. An earlier run's (it has `marker`): emptied first, so old files
    never mix with new ones. Anything else is left alone: exit 2.
    """
    if out.exists() and not out.is_dir():
        raise EnvironmentProblem(f"--out {out} is a file, not a directory",
                                 fix="give a new or empty directory, or an earlier run's")
    if out.is_dir() and any(out.iterdir()):
        if not (out / marker).is_file():
            raise EnvironmentProblem(
                f"--out {out} is not empty and is not a results directory (no {marker})",
                fix="give a new or empty directory; an earlier run's directory is reused "
                    "after emptying it")
        log.info("%s holds an earlier run: emptying it first", out)
        for entry in out.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)


def out_dir(out: Path | None, kind: str = "", *, marker: str = "results.json") -> Path:
    """--out, else results/[KIND-]<run id> (paths.results_root: never inside a kernel
    tree); prepared (prepare_out): new, empty, or an earlier run's of this kind, emptied."""
    path = (out or paths.results_root(Path.cwd()) /
            f"{kind + '-' if kind else ''}{new_run_id()}").resolve()
    prepare_out(path, marker=marker)
    log.info("results: %s", path)
    return path


def write_or_print(text: str, output: Path | None, what: str) -> None:
    """-o FILE (written whole or not at all, and said), or standard output."""
    if output is None:
        sys.stdout.write(text)
    else:
        atomic.write_text(output, text)
        print(f"{what}: {output}")


def load_run(spec: str) -> tuple[dict[str, Any], str | None, Path]:
    """RUN, RUN/results.json or RUN:CELL -> (results.json, the cell or None, its file)."""
    path, cell = Path(spec), None
    if not path.exists() and ":" in spec:
        head, cell = spec.rsplit(":", 1)
        path = Path(head)
    file = path / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise EnvironmentProblem(f"{spec}: no results.json there",
                                 fix="give a run's directory (harness run --out DIR), its "
                                     "results.json, or DIR:CELL for one cell")
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise EnvironmentProblem(f"{file}: not a readable results.json: {exc}",
                                 fix="give the results.json a run wrote") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise EnvironmentProblem(f"{file}: not a results.json of a run (no cells)",
                                 fix="give the results.json a run wrote")
    return data, cell, file


LOG_TAIL = 64 * 1024  # bytes of each test's output a report shows (its end: where it failed)


def log_tails(doc: Mapping[str, Any], run_dir: Path,
              cap: int = LOG_TAIL) -> dict[tuple[str, str], str]:
    """(cell, test) -> the end of the test's output file, for every test that has one."""
    tails: dict[tuple[str, str], str] = {}
    for c in doc["cells"]:
        for t in c.get("tests", []):
            path = run_dir / str(t.get("log") or "")
            if t.get("log") and path.is_file():
                with path.open("rb") as f:
                    f.seek(max(0, path.stat().st_size - cap))
                    tails[(c["cell"], t["name"])] = f.read().decode(errors="replace")
    return tails
