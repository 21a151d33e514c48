"""results.json written and read back (the one reader), reproduce.sh, a run's exit codes
and its results directory. The terminal summary: output/terminal.py.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import shlex
import shutil
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import jinja2

from harness import target
from harness.base import atomic, paths
from harness.base.errors import EnvironmentProblem
from harness.base.gitcmd import git_run
from harness.base.model import (
    Affected,
    AffectedTest,
    BuildRun,
    CarriedFile,
    CarriedPatches,
    CellInputs,
    CellResult,
    CheckSelection,
    ConfigResult,
    DroppedSymbol,
    Feature,
    FeatureKind,
    FeatureReport,
    FeatureState,
    FileLine,
    GuestSeen,
    GuestSpec,
    Host,
    Interruption,
    Isolation,
    KtapResult,
    Measurement,
    Merge,
    MergedRun,
    Metrics,
    Number,
    PatchCoverage,
    PatchResult,
    PatchState,
    Phase,
    RunIsolation,
    RunResult,
    RunState,
    SourceIdentity,
    Splat,
    StageTiming,
    Status,
    TestCase,
    TestResult,
    UnreadableRun,
    worst,
)
from harness.judge import ktap

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2


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
    if t.diagnosis:
        out["diagnosis"] = t.diagnosis
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
    if extra := _extra_json(t):
        out["extra"] = extra
    if t.selection is not None:
        out["selection"] = _selection_json(t.selection)
    if t.attempts:
        out["attempts"] = [test_json(a, base) for a in t.attempts]
    return out


def _selection_json(x: CheckSelection) -> dict[str, Any]:
    return {"asked": list(x.asked), "selected": list(x.selected), "needed": list(x.needed),
            "cleanup": list(x.cleanup), "not_run": list(x.not_run), "why": x.why}


def _extra_json(t: TestResult) -> dict[str, Any]:
    """What a result has besides its verdict: the guest it saw (boot), the output it shows,
    its metrics (as the test wrote them)."""
    out: dict[str, Any] = {}
    if t.guest_seen is not None:
        seen = t.guest_seen
        out["guest"] = {k: v for k, v in (("cmdline", seen.cmdline), ("cpus", seen.cpus),
                                           ("memory_kb", seen.memory_kb)) if v is not None}
    if t.output_tail is not None:
        out.update(output_tail=list(t.output_tail), output_lines=t.output_lines)
    if t.metrics_error:
        out["metrics_error"] = t.metrics_error
    if t.metrics is not None:
        out["metrics"] = t.metrics.data
    return out


def _guest_json(c: CellResult) -> dict[str, Any]:
    """The guest asked for (memory, cpus, append) and what it had (read in it)."""
    out: dict[str, Any] = {}
    if c.guest is not None:
        out.update(memory=c.guest.memory, cpus=c.guest.cpus, append=c.guest.append)
    if c.guest_seen is not None:
        out.update(cmdline=c.guest_seen.cmdline, cpus_online=c.guest_seen.cpus,
                   memory_kb=c.guest_seen.memory_kb)
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
        "guest": _guest_json(c),
        "kernel_from_store": c.kernel_from_store,
        "arch": c.arch,
        "toolchain": c.toolchain,
        "compiler": c.compiler,
        # the pahole the kernel's BTF was made with, as its build recorded it (kept only
        # when known: a kernel stored before builds recorded it has none)
        **({"pahole": c.pahole} if c.pahole else {}),
        **({"isolation": isolation_json(c.isolation)} if c.isolation is not None else {}),
        **({"coverage": [_coverage_json(x) for x in c.coverage]}
           if c.coverage is not None else {}),
        **({"affected": _affected_json(c.affected)} if c.affected is not None else {}),
        **({"map_error": c.map_error} if c.map_error else {}),
        **({"inputs": inputs_json(c.inputs)} if c.inputs is not None else {}),
    }


def _carried_json(f: CarriedFile) -> dict[str, Any]:
    return {"name": f.name, "sha256": f.sha256, "path": f.path, "origin": f.origin}


def _source_json(s: SourceIdentity) -> dict[str, Any]:
    return {"spec": s.spec, "describe": s.describe, "base_commit": s.base_commit,
            "package": s.package, "package_version": s.package_version,
            "sha256": s.sha256, "commit": s.commit, "uncommitted": s.uncommitted}


def inputs_json(i: CellInputs) -> dict[str, Any]:
    """What a cell was made from (its copies' paths relative to the results directory)."""
    return {
        "kernel": i.kernel,
        "source": None if i.source is None else _source_json(i.source),
        "patches": [{"given": g.given, "series": g.series, "directory": g.directory,
                     "variant": g.variant, "patches": [_carried_json(f) for f in g.patches],
                     "extra": [_carried_json(f) for f in g.extra]} for g in i.patches],
        "configs": [_carried_json(f) for f in i.configs],
        "tests": list(i.tests),
        "test_dirs": [_carried_json(f) for f in i.test_dirs],
        "boot_only": i.boot_only,
        "command": list(i.command), "command_cwd": i.command_cwd,
        "command_timeout": i.command_timeout,
        "expect_status": i.expect_status, "expect": dict(i.expect),
        "coverage": i.coverage, "accel": i.accel, "strict": i.strict, "repeat": i.repeat,
        "retry_failed": i.retry_failed, "guest_root": i.guest_root,
        "not_carried": list(i.not_carried),
    }


def isolation_json(i: Isolation) -> dict[str, Any]:
    """What the tree's code could reach: the build's sandbox and the guest's root."""
    return {"sandbox": {"enabled": i.sandbox, "off": i.sandbox_off, "tool": i.sandbox_tool},
            "guest_root": {"hash": i.guest_root, "host_root": i.host_root,
                           "size_bytes": i.guest_root_size,
                           "packages": i.guest_root_packages},
            "summary": i.describe()}
def _affected_json(a: Affected) -> dict[str, Any]:
    return {"changed": list(a.changed), "fallback": a.fallback, "map": a.map,
            "tests": [{"test": t.test, "ran": t.ran, "checks": list(t.checks), "why": t.why}
                      for t in a.tests]}


def _line_json(x: FileLine) -> dict[str, Any]:
    return {"file": x.file, "line": x.line, "source": x.source}


def _coverage_json(x: PatchCoverage) -> dict[str, Any]:
    ran = set(x.ran)
    return {"patch": x.patch, "subject": x.subject, "executable": len(x.executable),
            "ran": len(x.ran), "not_run": [_line_json(n) for n in x.not_run],
            "by_test": dict(x.by_test),
            # every executable line, for the report's annotated listing
            "lines": [{**_line_json(n), "ran": n in ran} for n in x.executable]}


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


def run_json(run: RunResult, base: Path | None = None) -> dict[str, Any]:
    """results.json's document of a run; log paths relative to `base` (its directory). A
    run says what its writer knew (None: left out), in the order `harness run` learns it;
    a merged run (`harness merge`) in the merge's own order."""
    if run.merge is not None:
        return _merged_json(run, run.merge, base)
    out: dict[str, Any] = {"schema": SCHEMA_VERSION}
    said: tuple[tuple[str, object], ...] = (
        ("run_id", run.run_id), ("started", run.started),
        ("command", None if run.command is None else list(run.command)),
        ("host", None if run.host is None else
         {"kernel": run.host.kernel, "cpus": run.host.cpus,
          **({"os": run.host.os} if run.host.os else {})}),
        ("strict", run.strict))
    out.update((k, v) for k, v in said if v is not None)
    if run.strict is not None:  # written with strict: the options that judge every cell
        out["repeat"] = run.repeat
    said = (("what", run.what),
            ("isolation", None if run.isolation is None else {
                "sandbox": run.isolation.sandbox, "guest": run.isolation.guest}),
            ("harness_rev", run.harness_rev),
            ("harness_dirty", run.harness_dirty),
            ("tools", None if run.tools is None else dict(run.tools)),
            ("duration_s", run.duration_s),
            ("interrupted", None if run.interrupted is None else {
                "signal": run.interrupted.signal, "cell": run.interrupted.cell,
                "stage": run.interrupted.stage, "not_run": list(run.interrupted.not_run)}),
            ("source_log", run.source_log), ("cell", run.mutated_cell))
    out.update((k, v) for k, v in said if v is not None)
    return {**out, **_outcome_json(run, base)}


def _outcome_json(run: RunResult, base: Path | None) -> dict[str, Any]:
    return {"state": run.state.value, **_verdict_json(run, base)}


def _verdict_json(run: RunResult, base: Path | None) -> dict[str, Any]:
    return {"status": run.status.value if run.status is not None else None,
            "exit_code": run.exit_code,
            "cells": [cell_json(c, base) for c in run.cells]}


def _merged_json(run: RunResult, m: Merge, base: Path | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": SCHEMA_VERSION, "run_id": run.run_id, "started": run.started,
        "merged_at": m.merged_at, "merged_from": list(m.merged_from),
        "runs": [{"dir": r.dir, "run_id": r.run_id, "started": r.started, "state": r.state,
                  "harness_rev": r.harness_rev, "tools": dict(r.tools), "strict": r.strict,
                  "cells": list(r.cells)} for r in m.runs],
        "harness_rev": run.harness_rev, "tools": dict(run.tools or ()),
        **({"harness_dirty": run.harness_dirty} if run.harness_dirty is not None else {}),
        "strict": bool(run.strict), "plan": None if m.plan is None else list(m.plan),
        "state": run.state.value, "incomplete_runs": list(m.incomplete_runs),
        "unreadable_runs": [{"run": u.run, "reason": u.reason} for u in m.unreadable_runs],
        "conflicts": list(m.conflicts), "revision_conflict": m.revision_conflict,
        "missing": list(m.missing), "unexpected": list(m.unexpected),
        **({"builds": [({"dir": b.dir, "unreadable": b.unreadable} if b.unreadable else
                        {"dir": b.dir, "run_id": b.run_id, "state": b.state,
                         "cells": dict(b.cells)}) for b in m.builds]} if m.builds else {}),
        **_verdict_json(run, base)}
    if run.command is not None:  # the merge's command line, added once it is written
        out["command"] = list(run.command)
    return out


def write_json(path: Path, run: RunResult) -> None:
    """Atomically: a reader (or a killed run) never sees a half-written file."""
    atomic.write_json(path, run_json(run, path.parent))


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("harness.output", "templates"),
    autoescape=False,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["shquote"] = shlex.quote


def write_reproduce(path: Path, *, argv: list[str], harness_rev: str,
                    cell: str | None = None) -> None:
    """A run's (or one cell's) reproduce.sh: `harness reproduce` of the directory it is in,
    wherever that is moved to; the run's command line in a comment."""
    text = _env.get_template("reproduce.sh.j2").render(argv=argv, cell=cell,
                                                      harness_rev=harness_rev)
    atomic.write_text(path, text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def new_run_id() -> str:
    """A results directory's default name: when it started, and by which process."""
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def harness_rev() -> str:
    """The harness commit a run was made with (results.json, reproduce.sh)."""
    res = git_run(paths.repo_root(), "rev-parse", "HEAD", timeout=30)
    return res.output.strip() if res.ok else "unknown"


def harness_dirty() -> bool | None:
    """Whether the harness checkout differs from its commit (a change to a tracked file,
    or a file git does not ignore): our selftests, series and code then are not exactly
    the revision's. None: not a git checkout."""
    res = git_run(paths.repo_root(), "status", "--porcelain", timeout=60)
    return bool(res.output.strip()) if res.ok else None


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


# ---- results.json read back: the one reader ----
# Every command that reads a run (compare, history, explain, report, the exports, merge,
# mutate, the cache export, CI) reads it here, into the types it was written from.


class ResultsError(EnvironmentProblem):
    """A results.json that cannot be read: not a run's, damaged, or newer than this harness."""


class _Damaged(Exception):
    """A value of the document that is not what results.json holds there."""


class _Object:
    """A JSON object of results.json at its place in the document (`where`: e.g.
    cells[0].tests[2]); each key read as the type it must have, or _Damaged saying where
    and what it found instead. An absent key is its default: older harnesses wrote less."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise _Damaged(f"{where or 'the document'}: {_shown(data)} is not an object")
        self.data: dict[str, object] = data
        self.where = where

    def _bad(self, key: str, what: str) -> _Damaged:
        at = f"{self.where}.{key}" if self.where else key
        return _Damaged(f"{at}: {_shown(self.data[key])} is not {what}")

    def has(self, key: str) -> bool:
        return key in self.data

    def _of(self, key: str, kind: type[_T], default: _T, what: str) -> _T:
        """The key's value of this JSON type (a bool is no number here)."""
        value = self.data.get(key, default)
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
        raise self._bad(key, what)

    def maybe(self, key: str, read: Callable[[str], _T]) -> _T | None:
        """The key read as `read` reads it, or None when it is absent or null."""
        return None if self.data.get(key) is None else read(key)

    def text(self, key: str, default: str = "") -> str:
        return self._of(key, str, default, "a string")

    def integer(self, key: str, default: int = 0) -> int:
        return self._of(key, int, default, "a whole number")

    def number(self, key: str, default: float = 0.0) -> float:
        """A JSON number (an int or a float), as a float."""
        value = self.data.get(key, default)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise self._bad(key, "a number")

    def flag(self, key: str, default: bool = False) -> bool:
        return self._of(key, bool, default, "true or false")

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise self._bad(key, "a list of strings")
        return tuple(value)

    def objects(self, key: str) -> list[_Object]:
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self._bad(key, "a list")
        at = f"{self.where}.{key}" if self.where else key
        return [_Object(x, f"{at}[{i}]") for i, x in enumerate(value)]

    def object_or_none(self, key: str) -> _Object | None:
        if self.data.get(key) is None:
            return None
        return _Object(self.data[key], f"{self.where}.{key}" if self.where else key)

    def choice(self, key: str, kind: type[_E], default: _E | None = None) -> _E:
        """An enum's value (a status, a phase, a state)."""
        if key not in self.data and default is not None:
            return default
        try:
            return kind(self.data.get(key))
        except ValueError:
            raise self._bad(key, f"a {kind.__name__}: "
                                 f"{', '.join(str(k.value) for k in kind)}") from None

    def seconds(self, key: str) -> tuple[tuple[str, float], ...]:
        """An object of numbers (a stage's parts), in its order."""
        part = self.object_or_none(key)
        return () if part is None else tuple((k, part.number(k)) for k in part.data)

    def strings(self, key: str) -> tuple[tuple[str, str], ...]:
        """An object of strings (the tools' versions), in its order."""
        part = self.object_or_none(key)
        return () if part is None else tuple((k, part.text(k)) for k in part.data)


_E = TypeVar("_E", bound=enum.Enum)
_T = TypeVar("_T")


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def from_json(data: object) -> RunResult:
    """A results.json document as the types it was written from. ResultsError: what is
    wrong with it and where (cells[1].tests[0].status: "BOGUS" is not a Status: ...), or
    that a newer harness wrote it."""
    try:
        doc = _Object(data, "")
        schema = doc.data.get("schema")
        if schema is None:
            raise _Damaged("no schema version")
        number = doc.integer("schema")
        if number > SCHEMA_VERSION:
            raise ResultsError(
                f"results.json schema {number}: written by a newer harness (this one reads "
                f"up to schema {SCHEMA_VERSION})",
                fix="read it with the harness that wrote it (its harness_rev), or update "
                    "this one")
        if number < 1:
            raise _Damaged(f"schema {number}: no such version")
        if not isinstance(doc.data.get("cells"), list):
            raise _Damaged("no list of cells")
        run = _run(doc)
    except _Damaged as exc:
        raise ResultsError(f"not a results.json of a run: {exc}",
                           fix="give the results.json a run wrote") from None
    return replace(run, digest=hashlib.sha256(json.dumps(
        data, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest())


def _run(doc: _Object) -> RunResult:
    host = doc.object_or_none("host")
    stop = doc.object_or_none("interrupted")
    boxed = doc.object_or_none("isolation")
    return RunResult(
        cells=tuple(_cell(c) for c in doc.objects("cells")),
        state=doc.choice("state", RunState, RunState.COMPLETE),
        exit_code=doc.integer("exit_code"), run_id=doc.maybe("run_id", doc.text),
        started=doc.maybe("started", doc.text),
        command=doc.texts("command") if doc.has("command") else None,
        host=None if host is None else Host(kernel=host.text("kernel"),
                                            cpus=host.maybe("cpus", host.integer),
                                            os=host.text("os")),
        strict=doc.maybe("strict", doc.flag), repeat=doc.maybe("repeat", doc.integer),
        what=doc.maybe("what", doc.text), isolation=None if boxed is None else RunIsolation(
            sandbox=boxed.text("sandbox"), guest=boxed.text("guest")),
        harness_rev=doc.maybe("harness_rev", doc.text),
        harness_dirty=doc.maybe("harness_dirty", doc.flag),
        tools=doc.strings("tools") if doc.data.get("tools") is not None else None,
        duration_s=doc.maybe("duration_s", doc.number),
        interrupted=None if stop is None else Interruption(
            signal=stop.text("signal"), cell=stop.text("cell"), stage=stop.text("stage"),
            not_run=stop.texts("not_run")),
        source_log=doc.maybe("source_log", doc.text), mutated_cell=doc.maybe("cell", doc.text),
        merge=_merge(doc) if doc.has("merged_from") else None)


def _merge(doc: _Object) -> Merge:
    return Merge(
        merged_at=doc.text("merged_at"), merged_from=doc.texts("merged_from"),
        runs=tuple(MergedRun(dir=r.text("dir"), run_id=r.maybe("run_id", r.text),
                             started=r.maybe("started", r.text), state=r.maybe("state", r.text),
                             harness_rev=r.maybe("harness_rev", r.text),
                             tools=r.strings("tools"), strict=r.flag("strict"),
                             cells=r.texts("cells"))
                   for r in doc.objects("runs")),
        plan=doc.texts("plan") if doc.data.get("plan") is not None else None,
        incomplete_runs=doc.texts("incomplete_runs"),
        unreadable_runs=tuple(UnreadableRun(run=u.text("run"), reason=u.text("reason"))
                              for u in doc.objects("unreadable_runs")),
        conflicts=doc.texts("conflicts"), revision_conflict=doc.text("revision_conflict"),
        missing=doc.texts("missing"), unexpected=doc.texts("unexpected"),
        builds=tuple(BuildRun(dir=b.text("dir"), run_id=b.maybe("run_id", b.text),
                              state=b.maybe("state", b.text), cells=b.strings("cells"),
                              unreadable=b.text("unreadable"))
                     for b in doc.objects("builds")) if doc.has("builds") else ())


def _cell(c: _Object) -> CellResult:
    if not c.has("cell"):
        raise _Damaged(f"{c.where}: a cell without a name")
    config, coverage = c.object_or_none("config"), c.data.get("coverage")
    guest = c.object_or_none("guest")
    return CellResult(
        cell=c.text("cell"), kernel=c.text("kernel"), kernel_version=c.text("kernel_version"),
        status=c.choice("status", Status), source=c.text("source"),
        package_version=c.maybe("package_version", c.text), error=c.text("error"),
        notes=c.texts("notes"), boot_only=c.flag("boot_only"), image=c.text("image"),
        kselftest_h=c.text("kselftest_h"), accel=c.text("accel"),
        patches=tuple(PatchResult(name=p.text("name"), subject=p.text("subject"),
                                  state=p.choice("state", PatchState), files=p.texts("files"),
                                  detail=p.text("detail"), message_id=p.text("message_id"))
                      for p in c.objects("patches")),
        config=None if config is None else ConfigResult(
            fragments=config.texts("fragments"), requested=config.texts("requested"),
            dropped=tuple(DroppedSymbol(symbol=d.text("symbol"), requested=d.text("requested"),
                                        actual=d.text("actual"), reason=d.text("reason"))
                          for d in config.objects("dropped")),
            changed=config.flag("config_changed")),
        stages=tuple(StageTiming(stage=x.text("stage"), status=x.choice("status", Status),
                                 duration_s=x.number("duration_s"), detail=x.text("detail"),
                                 parts=x.seconds("parts"))
                     for x in c.objects("stages")),
        tests=tuple(_test(t) for t in c.objects("tests")),
        retries=c.texts("retries"),
        features=tuple(_feature(f) for f in c.objects("features")),
        guest=_guest(guest), guest_seen=_seen(guest, "cpus_online"),
        coverage=None if coverage is None else tuple(
            _coverage(x) for x in c.objects("coverage")),
        kernel_from_store=c.maybe("kernel_from_store", c.flag),
        arch=c.text("arch", target.DEFAULT_ARCH),
        toolchain=c.text("toolchain", target.DEFAULT_TOOLCHAIN),
        compiler=c.text("compiler"), pahole=c.text("pahole"),
        isolation=_isolation(c.object_or_none("isolation")),
        affected=_affected(c.object_or_none("affected")),
        map_error=c.text("map_error"), inputs=_inputs(c))


def _isolation(i: _Object | None) -> Isolation | None:
    """What the tree's code could reach (None: a record from before it was written)."""
    if i is None:
        return None
    box, root = i.object_or_none("sandbox"), i.object_or_none("guest_root")
    return Isolation(
        sandbox=box is not None and box.flag("enabled"),
        sandbox_off=box.text("off") if box is not None else "",
        sandbox_tool=box.text("tool") if box is not None else "",
        guest_root=root.text("hash") if root is not None else "",
        host_root=root.text("host_root") if root is not None else "",
        guest_root_size=root.integer("size_bytes") if root is not None else 0,
        guest_root_packages=root.integer("packages") if root is not None else 0)


def _affected(a: _Object | None) -> Affected | None:
    if a is None:
        return None
    return Affected(changed=a.texts("changed"), fallback=a.text("fallback"), map=a.text("map"),
                    tests=tuple(AffectedTest(test=t.text("test"), ran=t.text("ran"),
                                             checks=t.texts("checks"), why=t.text("why"))
                                for t in a.objects("tests")))


def _carried(f: _Object) -> CarriedFile:
    return CarriedFile(name=f.text("name"), sha256=f.text("sha256"), path=f.text("path"),
                       origin=f.text("origin"))


def _inputs(c: _Object) -> CellInputs | None:
    i = c.object_or_none("inputs")
    if i is None:
        return None
    src = i.object_or_none("source")
    return CellInputs(
        kernel=i.text("kernel"),
        source=None if src is None else SourceIdentity(
            spec=src.text("spec"), describe=src.text("describe"),
            base_commit=src.text("base_commit"), package=src.maybe("package", src.text),
            package_version=src.maybe("package_version", src.text),
            sha256=src.maybe("sha256", src.text), commit=src.maybe("commit", src.text),
            uncommitted=src.flag("uncommitted")),
        patches=tuple(CarriedPatches(
            given=g.text("given"), series=g.flag("series"), directory=g.text("directory"),
            variant=g.text("variant"), patches=tuple(_carried(f) for f in g.objects("patches")),
            extra=tuple(_carried(f) for f in g.objects("extra")))
            for g in i.objects("patches")),
        configs=tuple(_carried(f) for f in i.objects("configs")),
        tests=i.texts("tests"), test_dirs=tuple(_carried(f) for f in i.objects("test_dirs")),
        boot_only=i.flag("boot_only"), command=i.texts("command"),
        command_cwd=i.text("command_cwd", "/"),
        command_timeout=i.integer("command_timeout", 600),
        expect_status=i.maybe("expect_status", i.text),
        expect=i.strings("expect"),
        coverage=i.flag("coverage"), accel=i.text("accel", "auto"), strict=i.flag("strict"),
        repeat=i.maybe("repeat", i.integer), retry_failed=i.integer("retry_failed"),
        guest_root=i.text("guest_root"),
        not_carried=i.texts("not_carried"))


def _guest(guest: _Object | None) -> GuestSpec | None:
    if guest is None or not any(guest.has(k) for k in ("memory", "cpus", "append")):
        return None
    return GuestSpec(memory=guest.text("memory", GuestSpec.memory),
                     cpus=guest.integer("cpus", GuestSpec.cpus), append=guest.text("append"))


def _seen(guest: _Object | None, cpus: str) -> GuestSeen | None:
    """What the guest had: a cell's (`cpus_online`) or its boot result's (`cpus`)."""
    if guest is None or not any(guest.has(k) for k in ("cmdline", cpus, "memory_kb")):
        return None
    return GuestSeen(cmdline=guest.maybe("cmdline", guest.text),
                     cpus=guest.maybe(cpus, guest.integer),
                     memory_kb=guest.maybe("memory_kb", guest.integer))


def _feature(f: _Object) -> FeatureReport:
    return FeatureReport(
        feature=Feature(name=f.text("name"), kind=f.choice("kind", FeatureKind),
                        declared_by=f.texts("declared_by")),
        state=f.choice("state", FeatureState), where=f.text("where"),
        btf=f.maybe("btf", f.flag), note=f.text("note"))


def _coverage(x: _Object) -> PatchCoverage:
    lines = [(FileLine(file=n.text("file"), line=n.integer("line"), source=n.text("source")),
              n.flag("ran")) for n in x.objects("lines")]
    by_test = x.object_or_none("by_test")
    return PatchCoverage(
        patch=x.text("patch"), subject=x.text("subject"),
        executable=tuple(n for n, _ in lines), ran=tuple(n for n, ran in lines if ran),
        by_test=() if by_test is None else tuple((k, by_test.integer(k)) for k in by_test.data))


def _test(t: _Object) -> TestResult:
    if not t.has("name"):
        raise _Damaged(f"{t.where}: a result without a name")
    ktap, extra = t.object_or_none("ktap"), t.object_or_none("extra")
    tail = extra.texts("output_tail") if extra and extra.has("output_tail") else None
    metrics = extra.data.get("metrics") if extra else None
    log = t.maybe("log", t.text)
    return TestResult(
        name=t.text("name"), phase=t.choice("phase", Phase, Phase.TEST),
        status=t.choice("status", Status), duration_s=t.number("duration_s"),
        exit_code=t.maybe("exit_code", t.integer), reason=t.text("reason"),
        taint=t.text("taint"), splats=tuple(_splat(s) for s in t.objects("splats")),
        expected_status=t.maybe("expected_status", lambda k: t.choice(k, Status)),
        notes=t.texts("notes"),
        diagnosis=t.text("diagnosis"),
        log=None if log is None else Path(log),
        ktap=None if ktap is None else KtapResult(
            version=ktap.maybe("version", ktap.text), plan=ktap.maybe("plan", ktap.integer),
            cases=tuple(_case(c) for c in ktap.objects("subtests")),
            errors=ktap.texts("errors"), warnings=ktap.texts("warnings")),
        attempts=tuple(_test(a) for a in t.objects("attempts")),
        guest_seen=_seen(extra.object_or_none("guest") if extra else None, "cpus"),
        output_tail=tail,
        output_lines=extra.integer("output_lines", len(tail)) if extra and tail is not None
        else 0,
        metrics=None if metrics is None else metrics_of(metrics),
        metrics_error=extra.text("metrics_error") if extra else "",
        selection=_selection(t.object_or_none("selection")))


def _selection(x: _Object | None) -> CheckSelection | None:
    if x is None:
        return None
    return CheckSelection(asked=x.texts("asked"), selected=x.texts("selected"),
                          needed=x.texts("needed"), cleanup=x.texts("cleanup"),
                          not_run=x.texts("not_run"), why=x.text("why"))


def _case(c: _Object) -> TestCase:
    return TestCase(name=c.text("name"), number=c.integer("number"),
                    status=c.choice("status", Status), directive=c.text("directive"),
                    diagnostic=c.text("diagnostic"),
                    subtests=tuple(_case(x) for x in c.objects("subtests")))


def _splat(s: _Object) -> Splat:
    return Splat(kind=s.text("kind"), title=s.text("title"), text=s.text("text"),
                 decoded=s.text("decoded"), function=s.text("function"), where=s.text("where"),
                 expected=s.text("expected"), message=s.text("message"))


def metrics_of(data: object) -> Metrics:
    """What a test wrote to $HARNESS_METRICS (its own JSON, kept as it is): its summary
    line and every measurement in it, an object with a median, by its path of keys."""
    found: list[Measurement] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict) and "median" in node:
            found.append(_measurement(node, path))
        elif isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}/{key}" if path else str(key))

    walk(data, "")
    summary = data.get("summary") if isinstance(data, dict) else None
    return Metrics(data=data, summary=str(summary) if summary else "",
                   measurements=tuple(found))


def _measurement(node: dict[str, object], path: str) -> Measurement:
    def number(key: str) -> Number | None:
        value = node.get(key)
        return value if isinstance(value, int | float) and not isinstance(value, bool) \
            else None

    def text(key: str) -> str | None:
        return None if key not in node else "" if node[key] is None else str(node[key])

    return Measurement(path=path, median=number("median"), unit=text("unit"),
                       direction=text("direction"), q1=number("q1"), q3=number("q3"),
                       min=number("min"), max=number("max"), spread=number("spread"),
                       n=number("n"))


def load_run(spec: str) -> tuple[RunResult, str | None, Path]:
    """RUN, RUN/results.json or RUN:CELL -> (the run, the cell named or None, its file)."""
    file, cell = _results_file(spec)
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{file}: not a readable results.json: {exc}",
                           fix="give the results.json a run wrote") from None
    try:
        return from_json(data), cell, file
    except ResultsError as exc:
        raise ResultsError(f"{file}: {exc.message}", fix=exc.fix) from None


def _results_file(spec: str) -> tuple[Path, str | None]:
    path, cell = Path(spec), None
    if not path.exists() and ":" in spec:
        head, cell = spec.rsplit(":", 1)
        path = Path(head)
    file = path / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise EnvironmentProblem(f"{spec}: no results.json there",
                                 fix="give a run's directory (harness run --out DIR), its "
                                     "results.json, or DIR:CELL for one cell")
    return file, cell


LOG_TAIL = 64 * 1024  # bytes of each test's output a report shows (its end: where it failed)


def log_tails(run: RunResult, run_dir: Path,
              cap: int = LOG_TAIL) -> dict[tuple[str, str], str]:
    """(cell, test) -> the end of the test's output file, for every test that has one."""
    tails: dict[tuple[str, str], str] = {}
    for c in run.cells:
        for t in c.tests:
            path = run_dir / t.log if t.log is not None else None
            if path is not None and path.is_file():
                with path.open("rb") as f:
                    f.seek(max(0, path.stat().st_size - cap))
                    tails[(c.cell, t.name)] = f.read().decode(errors="replace")
    return tails
