"""`harness check`: per-patch checks of a series, before anything boots.

For patch k of the series (1-based), with the same source, worktree, kconfig and build as
`run` (so builds are incremental and kernels already built come from the store):

- checkpatch: the tree's own `scripts/checkpatch.pl --strict` on the patch file, run in the
  tree with patches 1..k-1 applied (the tree the patch applies to). Any ERROR, WARNING or
  CHECK fails the patch.
- builds: the kernel with patches 1..k applied builds (the series is bisectable).
- W=1: every .c file the patch touches is compiled alone with W=1 before (patches 1..k-1)
  and after (1..k); the warnings are normalised (no line or column, paths relative to the
  tree, hex offsets masked) so code that only moved is not counted, and compared as
  multisets. A warning the patch adds fails it.

Prefixes are visited from the whole series down to the base: a conflict shows up first,
before any build. The tree lock is held from the first checkout to the last compile, as in
`run`. What checkpatch printed and the W=1 warnings are read by pure parsers:
judge/checkpatch.py and judge/w1_warnings.py.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import target
from harness.base import atomic, host, proc, sandbox
from harness.base.errors import HarnessError
from harness.base.model import PatchResult, PatchState, StageTiming, Status
from harness.drivers.stages import StageLog
from harness.judge.checkpatch import CheckpatchReport, parse_checkpatch, python_failure
from harness.judge.w1_warnings import (
    CompileState,
    ObjectCompile,
    WarningDelta,
    c_sources,
    compare,
    extract_warnings,
    first_errors,
    normalise_warning,
    object_output,
)
from harness.kernel import build, kconfig, series, sources
from harness.kernel.tree import KernelTree
from harness.output import results

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CHECKPATCH_ARGS = ("--strict", "--show-types", "--color=never")
CHECKPATCH_TIMEOUT_S = 600
W1_TIMEOUT_S = 1800


class CheckSetupError(HarnessError):
    """The check cannot run (no patches, a prebuilt image, a broken checkpatch); says the fix."""

    status = Status.SETUP_ERROR


# --- checkpatch -------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class CheckpatchRun:
    report: CheckpatchReport
    output: str
    exit_code: int | None
    log: Path
    duration_s: float


def _system_python_first() -> dict[str, str]:
    # checkpatch runs `python3` from PATH; a pyenv or venv python3 lacks ply and git.
    return {"PATH": "/usr/bin:" + os.environ.get("PATH", "")}


def run_checkpatch(tree: Path, patch: Path, *, log_path: Path) -> CheckpatchRun:
    script = tree / "scripts" / "checkpatch.pl"
    if not script.is_file():
        raise CheckSetupError(f"{tree} has no scripts/checkpatch.pl; fix: check a kernel "
                              "tree that has one (debian: or git: of a full kernel checkout)")
    # the tree's checkpatch.pl (and the spdxcheck.py it runs): its code, sandboxed
    res = proc.run([str(script), *CHECKPATCH_ARGS, str(patch)], cwd=tree,
                   env=_system_python_first(), timeout=CHECKPATCH_TIMEOUT_S, log_path=log_path,
                   sandbox=sandbox.for_tree(tree, tree_writable=False, read=(patch,)))
    if res.timed_out:
        raise CheckSetupError(f"checkpatch.pl timed out after {res.duration_s:.0f}s on {patch} "
                              f"(log: {log_path})")
    broken = python_failure(res.output)
    if broken:
        raise CheckSetupError(
            f"checkpatch's SPDX check (scripts/spdxcheck.py, run with python3 from PATH, "
            f"/usr/bin first) failed on {patch.name}:\n{broken}\n"
            f"fix: {host.fix_for('spdxcheck')} (log: {log_path})")
    try:
        report = parse_checkpatch(res.output)
    except ValueError:
        raise CheckSetupError(f"checkpatch.pl did not finish on {patch} (exit {res.returncode};"
                              f" log: {log_path}):\n{res.tail(15)}") from None
    return CheckpatchRun(report=report, output=res.output, exit_code=res.returncode,
                         log=log_path, duration_s=res.duration_s)


# --- W=1 warnings -----------------------------------------------------------------------

def compile_w1(tree: KernelTree, source: str, *, prefix: int, tools: build.Tools,
               log_path: Path) -> ObjectCompile:
    """`make -C TREE O=BUILD W=1 path/file.o`, the object deleted first so it recompiles."""
    if not (tree.path / source).is_file():
        return ObjectCompile(source=source, prefix=prefix, state=CompileState.ABSENT)
    obj = source.removesuffix(".c") + ".o"
    res = tree.compile_object(source, tools=tools, log_path=log_path, extra=("W=1",),
                              timeout=W1_TIMEOUT_S)
    lines = res.output.splitlines()
    mine = object_output(lines, obj)
    if mine is None:
        if res.ok:
            return ObjectCompile(source=source, prefix=prefix, state=CompileState.NOT_BUILT,
                                 detail=f"make compiled nothing for {obj}", log=log_path,
                                 duration_s=res.duration_s)
        mine = lines
    warnings = extract_warnings(mine)
    normalised = tuple(normalise_warning(w, tree.path, tree.build_dir) for w in warnings)
    if not res.ok:
        why = f"timed out after {res.duration_s:.0f}s" if res.timed_out \
            else f"make exit {res.returncode}"
        return ObjectCompile(source=source, prefix=prefix, state=CompileState.FAILED,
                             warnings=warnings, normalised=normalised, detail=why,
                             error_lines=first_errors("\n".join(mine), 6), log=log_path,
                             duration_s=res.duration_s)
    return ObjectCompile(source=source, prefix=prefix, state=CompileState.COMPILED,
                         warnings=warnings, normalised=normalised, log=log_path,
                         duration_s=res.duration_s)


# --- the check --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CheckRequest:
    kernel: str = "debian:6.12"
    series: tuple[str, ...] = ()
    patches: tuple[Path, ...] = ()  # loose patches, applied after the series
    configs: tuple[str, ...] = ("base",)
    arch: str = target.DEFAULT_ARCH  # what every prefix is built for and with
    toolchain: str = target.DEFAULT_TOOLCHAIN


@dataclass(frozen=True, kw_only=True)
class PrefixBuild:
    prefix: int  # patches 1..prefix applied
    tree_id: str
    built: bool
    cached: bool = False  # taken from the kernel store, make did not run
    kernel_version: str = ""
    duration_s: float = 0.0
    error_lines: tuple[str, ...] = ()
    log: Path | None = None


@dataclass(frozen=True, kw_only=True)
class PatchCheck:
    index: int  # 1-based position in what was checked
    name: str
    series: str  # the series it came from, or "--patch"
    subject: str
    path: Path
    state: PatchState
    c_files: tuple[str, ...]
    checkpatch: CheckpatchRun | None
    build: PrefixBuild | None
    warnings: tuple[WarningDelta, ...]

    @property
    def new_warnings(self) -> tuple[str, ...]:
        return tuple(w for d in self.warnings for w in d.new)

    @property
    def failures(self) -> tuple[str, ...]:
        out = []
        if self.checkpatch is None:
            out.append("checkpatch not run")
        elif not self.checkpatch.report.clean:
            r = self.checkpatch.report
            out.append(f"checkpatch: {r.errors} errors, {r.warnings} warnings, "
                       f"{r.checks} checks")
        if self.build is None:
            out.append(f"build with patches 1..{self.index} not tried")
        elif not self.build.built:
            out.append(f"the kernel with patches 1..{self.index} does not build")
        for d in self.warnings:
            if d.new:
                out.append(f"W=1 {d.source}: {len(d.new)} new warning(s)")
            elif d.failed:
                out.append(f"W=1 {d.source}: {d.note}")
        return tuple(out)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    kernel: str
    source: str
    package_version: str | None
    configs: tuple[str, ...]
    series: tuple[str, ...]
    patches: tuple[PatchCheck, ...]
    timings: tuple[StageTiming, ...]
    duration_s: float
    error: str = ""  # a set-up error: the check did not finish

    @property
    def exit_code(self) -> int:
        """0 every patch clean, 1 a patch failed a check, 2 a set-up error."""
        if self.error:
            return 2
        return 0 if all(p.ok for p in self.patches) else 1


@dataclass
class _Run:
    """Mutable while the check runs; frozen into a CheckReport at the end."""

    request: CheckRequest
    out_dir: Path
    start: float = field(default_factory=time.monotonic)
    source: str = ""
    package_version: str | None = None
    patches: list[series.Patch] = field(default_factory=list)
    states: dict[int, PatchResult] = field(default_factory=dict)
    c_files: dict[int, tuple[str, ...]] = field(default_factory=dict)
    checkpatch: dict[int, CheckpatchRun] = field(default_factory=dict)
    builds: dict[int, PrefixBuild] = field(default_factory=dict)
    compiles: dict[tuple[int, str], ObjectCompile] = field(default_factory=dict)
    # check says what it does itself, one line per step: the stages are only recorded
    stages: StageLog = field(default_factory=lambda: StageLog("check", announce=False))

    def timed(self, stage: str) -> AbstractContextManager[None]:
        return self.stages.stage(stage, Status.SETUP_ERROR)

    def report(self, error: str = "") -> CheckReport:
        checked = []
        for i, patch in enumerate(self.patches, start=1):
            state = self.states.get(i)
            files = self.c_files.get(i, ())
            deltas = tuple(compare(self.compiles[(i - 1, f)], self.compiles[(i, f)])
                           for f in files
                           if (i - 1, f) in self.compiles and (i, f) in self.compiles)
            checked.append(PatchCheck(
                index=i, name=patch.name, series=patch.series,
                subject=state.subject if state else series.subject_of(patch.path),
                path=patch.path, state=state.state if state else PatchState.NOT_TRIED,
                c_files=files, checkpatch=self.checkpatch.get(i), build=self.builds.get(i),
                warnings=deltas,
            ))
        return CheckReport(
            kernel=self.request.kernel, source=self.source,
            package_version=self.package_version, configs=self.request.configs,
            series=self.request.series, patches=tuple(checked),
            timings=tuple(self.stages.stages),
            duration_s=time.monotonic() - self.start, error=error,
        )


def run(request: CheckRequest, out_dir: Path) -> CheckReport:
    """Check every patch; set-up errors end up in the report (exit code 2), never raised."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = _Run(request=request, out_dir=out_dir)
    try:
        _check(state)
    except series.PatchConflictError as exc:
        state.states.update({i: r for i, r in enumerate(exc.results, start=1)})
        return state.report(str(exc))
    except HarnessError as exc:
        return state.report(str(exc))
    return state.report()


def _check(state: _Run) -> None:
    request, out = state.request, state.out_dir
    spec = sources.parse_spec(request.kernel)
    if not sources.kind_of(spec).has_tree:
        raise CheckSetupError(f"{spec.text} is a prebuilt image: there is no tree to apply "
                              "patches to; use debian:VERSION or git:PATH")
    state.patches = series.collect(request.series, list(request.patches),
                                   series.base_name(spec))
    if not state.patches:
        raise CheckSetupError("nothing to check; fix: pass --series NAME or --patch FILE")
    # the tree's own (tree:PATH) are resolved in the worktree
    checked = {c: kconfig.checked_fragment(c) for c in request.configs
               if not kconfig.is_tree_fragment(c)}
    with state.timed("source"):
        # The same tree service as `run`: the two share the worktree, build directory,
        # locks and stored kernels.
        tree = KernelTree.open(spec, request.configs, log_dir=out, checked=checked,
                               target=target.select(request.arch, request.toolchain))
    state.source, state.package_version = tree.source.describe, tree.source.package_version
    tools = build.tools(tree.target)
    n = len(state.patches)
    for i, patch in enumerate(state.patches, start=1):
        state.c_files[i] = c_sources(series.files_of(tree.path, patch.path))
    log.info("checking %d patch(es) on %s: checkpatch, %d prefix builds, W=1 on %d file(s)",
             n, tree.source.describe, n, len({f for fs in state.c_files.values() for f in fs}))
    # One lock from the first checkout to the last compile: no other run moves this tree.
    with tree.locked():
        for k in range(n, -1, -1):
            _check_prefix(state, k, tree=tree, tools=tools)


def _check_prefix(state: _Run, k: int, *, tree: KernelTree, tools: build.Tools) -> None:
    """Patches 1..k applied: build it, checkpatch patch k+1, W=1 for patches k and k+1."""
    n = len(state.patches)
    pdir = state.out_dir / f"prefix-{k}"
    what = f"patches 1..{k}" if k else "the base"
    log.info("[%d/%d] %s: applying", n - k + 1, n + 1, what)
    with state.timed(f"prefix {k}: series"):
        applied = tree.apply(state.patches[:k], log_dir=pdir)
    if k == n:
        state.states.update({i: r for i, r in enumerate(applied, start=1)})
    tree_id = tree.tree_id()
    with state.timed(f"prefix {k}: kconfig"):
        tree.configure(log_dir=pdir)
    if k >= 1:
        log.info("[%d/%d] %s: building", n - k + 1, n + 1, what)
        b = state.builds[k] = _build_prefix(k, tree, tree_id, pdir, tools)
        state.stages.record(f"prefix {k}: build",
                            Status.PASS if b.built else Status.BUILD_ERROR, b.duration_s,
                            "from the kernel store" if b.cached else "")
        log.info("[%d/%d] %s: %s", n - k + 1, n + 1, what,
                 ("already built" if b.cached else f"built in {b.duration_s:.0f}s")
                 if b.built else f"BUILD FAILED ({b.log})")
    if k < n:
        patch = state.patches[k]
        cp_log = state.out_dir / "checkpatch" / f"{k + 1}-{patch.name}.log"
        with state.timed(f"prefix {k}: checkpatch {patch.name}"):
            state.checkpatch[k + 1] = run_checkpatch(tree.path, patch.path, log_path=cp_log)
        r = state.checkpatch[k + 1].report
        log.info("[%d/%d] checkpatch %s: %d errors, %d warnings, %d checks", n - k + 1, n + 1,
                 patch.name, r.errors, r.warnings, r.checks)
    wanted = set(state.c_files.get(k, ())) | set(state.c_files.get(k + 1, ()))
    for source in sorted(wanted):
        log.info("[%d/%d] %s: W=1 %s", n - k + 1, n + 1, what, source)
        logname = source.replace("/", "_") + ".log"
        with state.timed(f"prefix {k}: W=1 {source}"), tree.build_locked("W=1"):
            state.compiles[(k, source)] = compile_w1(
                tree, source, prefix=k, tools=tools, log_path=pdir / "w1" / logname)


def _build_prefix(k: int, tree: KernelTree, tree_id: str, pdir: Path,
                  tools: build.Tools) -> PrefixBuild:
    start = time.monotonic()
    try:
        image = tree.build(log_dir=pdir, tools=tools)
    except build.BuildError as exc:
        text = exc.log_path.read_text(errors="replace") if exc.log_path.is_file() else str(exc)
        return PrefixBuild(prefix=k, tree_id=tree_id, built=False,
                           duration_s=time.monotonic() - start, error_lines=first_errors(text),
                           log=exc.log_path)
    built_log = pdir / "build.log"
    return PrefixBuild(prefix=k, tree_id=tree_id, built=True, cached=image.cached,
                       kernel_version=image.version, duration_s=time.monotonic() - start,
                       log=built_log if built_log.exists() else None)


# --- results ----------------------------------------------------------------------------


def _rel(path: Path | None, base: Path) -> str | None:
    if path is None:
        return None
    return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)


def _compile_json(c: ObjectCompile, base: Path) -> dict[str, Any]:
    return {"prefix": c.prefix, "state": c.state.value, "warnings": list(c.warnings),
            "normalised": list(c.normalised), "detail": c.detail,
            "error_lines": list(c.error_lines), "log": _rel(c.log, base),
            "duration_s": round(c.duration_s, 2)}


def _patch_json(p: PatchCheck, base: Path) -> dict[str, Any]:
    cp: dict[str, Any] | None = None
    if p.checkpatch is not None:
        r = p.checkpatch.report
        cp = {"clean": r.clean, "errors": r.errors, "warnings": r.warnings, "checks": r.checks,
              "lines_checked": r.lines_checked, "exit_code": p.checkpatch.exit_code,
              "issues": [{"level": i.level, "type": i.type, "message": i.message,
                          "patch_line": i.patch_line, "file": i.file, "file_line": i.file_line}
                         for i in r.issues],
              "command": shlex.join(["scripts/checkpatch.pl", *CHECKPATCH_ARGS, str(p.path)]),
              "output": p.checkpatch.output, "log": _rel(p.checkpatch.log, base),
              "duration_s": round(p.checkpatch.duration_s, 2)}
    b: dict[str, Any] | None = None
    if p.build is not None:
        b = {"prefix": p.build.prefix, "built": p.build.built, "cached": p.build.cached,
             "tree_id": p.build.tree_id, "kernel_version": p.build.kernel_version,
             "duration_s": round(p.build.duration_s, 1), "error_lines": list(p.build.error_lines),
             "log": _rel(p.build.log, base)}
    return {
        "index": p.index, "name": p.name, "series": p.series, "subject": p.subject,
        "path": str(p.path), "state": p.state.value, "ok": p.ok, "failures": list(p.failures),
        "checkpatch": cp, "build": b,
        "w1": {"c_files": list(p.c_files), "new": list(p.new_warnings),
               "files": [{"source": d.source, "compared": d.compared, "failed": d.failed,
                          "note": d.note, "new": list(d.new), "gone": list(d.gone),
                          "before": _compile_json(d.before, base),
                          "after": _compile_json(d.after, base)} for d in p.warnings]},
    }


def to_json(report: CheckReport, out_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    status = "setup-error" if report.error else ("clean" if report.exit_code == 0 else "failed")
    return {
        "schema": SCHEMA_VERSION, **meta,
        "kernel": report.kernel, "source": report.source,
        "package_version": report.package_version, "configs": list(report.configs),
        "series": list(report.series), "status": status, "exit_code": report.exit_code,
        "error": report.error, "duration_s": round(report.duration_s, 1),
        "patches": [_patch_json(p, out_dir) for p in report.patches],
        "timings": [{"stage": t.stage, "status": t.status.value,
                     "duration_s": round(t.duration_s, 2), "detail": t.detail}
                    for t in report.timings],
    }


def write_json(path: Path, report: CheckReport, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, to_json(report, path.parent, meta))


def summary_table(report: CheckReport) -> str:
    rows = [("#", "patch", "checkpatch E/W/C", "builds", "new W=1", "result")]
    for p in report.patches:
        cp = "-"
        if p.checkpatch is not None:
            r = p.checkpatch.report
            cp = f"{r.errors}/{r.warnings}/{r.checks}"
        builds = "-" if p.build is None else ("yes" if p.build.built else "NO")
        compared = [d for d in p.warnings if d.compared]
        w1 = str(len(p.new_warnings)) if compared or p.new_warnings else "-"
        rows.append((str(p.index), p.name, cp, builds, w1, "ok" if p.ok else "FAIL"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"check: {', '.join(report.series) or '--patch'} on {report.kernel}"
             f"{f' ({report.source})' if report.source else ''}, "
             f"config {'+'.join(report.configs)}", ""]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows]
    for p in report.patches:
        if p.ok:
            continue
        lines += ["", f"{p.name}:"]
        if p.checkpatch is not None:
            for i in p.checkpatch.report.issues:
                where = f" ({i.where})" if i.where else ""
                lines.append(f"  checkpatch {i.level}:{i.type or '-'}: {i.message}{where}")
        if p.build is not None and not p.build.built:
            lines.append(f"  build with patches 1..{p.index} failed (log: {p.build.log}):")
            lines += [f"    {e}" for e in p.build.error_lines]
        for d in p.warnings:
            lines += [f"  W=1 new: {w}" for w in d.new]
            if d.failed and not d.new:
                lines.append(f"  W=1 {d.source}: {d.note} (log: {d.after.log}):")
                lines += [f"    {e}" for e in d.after.error_lines]
    if report.error:
        lines += ["", f"SET-UP ERROR: {report.error}"]
    bad = sum(1 for p in report.patches if not p.ok)
    verdict = ("set-up error" if report.error else
               f"{bad} of {len(report.patches)} patch(es) failed" if bad else
               f"all {len(report.patches)} patch(es) clean")
    lines += ["", f"{verdict}; {report.duration_s:.0f}s"]
    return "\n".join(lines)


def command(request: CheckRequest, out: Path, *, argv: tuple[str, ...]) -> int:
    """`harness check`: every patch checked, check.json written, the table printed."""
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": ["harness", *argv], "harness_rev": results.harness_rev()}
    report = run(request, out)
    write_json(out / "check.json", report, meta=meta)
    if report.error:
        log.error("%s", report.error)
    print(summary_table(report))
    print(f"\ncheck: {out / 'check.json'}  (exit {report.exit_code})")
    return report.exit_code
