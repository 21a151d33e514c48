"""A reproduction judged against the run it reproduces: pure functions over two runs.

`judge` compares them test by test with `compare.compare` and keeps what changes a
verdict: a result whose status differs (a declared flake never: its changes are FLAKY),
a KTAP check that moved, a splat that came or went, a measurement beyond its spread (one
within its spread is noise). Then it says which inputs differ between the two: the harness
revision and whether its checkout was dirty, the kernel source (package version, tarball,
commit, the commit the patches applied on), each patch, config fragment and test directory
by its hash, the compiler and the other tools, the guest root, and KVM against TCG.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from harness.base.model import (
    KERNEL_PHASES,
    CarriedFile,
    CellInputs,
    CellResult,
    RunResult,
    SourceIdentity,
    Status,
)
from harness.output import compare

MATCH = "verdicts match"


@dataclass(frozen=True, kw_only=True)
class InputDifference:
    cell: str  # "" for the run as a whole
    what: str  # "harness revision", "kernel source", "patch NAME", "accelerator", ...
    original: str
    reproduction: str


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    """A result of a cell whose verdict the reproduction did not give back."""

    cell: str
    test: str  # a test, a kernel phase (boot, shutdown), or "cell" for the cell's own status
    original: str
    reproduction: str
    details: tuple[str, ...] = ()  # the checks, splats, measurements that moved


@dataclass(frozen=True, kw_only=True)
class Judgement:
    original: RunResult  # the cells reproduced (and, with --test, the tests)
    reproduced: RunResult
    comparison: compare.Comparison
    mismatches: tuple[Mismatch, ...]
    inputs: tuple[InputDifference, ...]
    # cells the reproduction could not make (an input that cannot be had): cell -> error
    unreproduced: tuple[tuple[str, str], ...] = ()
    compared: int = 0  # results compared

    @property
    def verdicts_match(self) -> bool:
        return not self.mismatches and not self.unreproduced

    @property
    def exit_code(self) -> int:
        """0 the verdicts match, 1 they differ, 2 a cell could not be reproduced."""
        if self.unreproduced:
            return 2
        return 1 if self.mismatches else 0


# ---- which results ----


def selected(run: RunResult, cells: tuple[str, ...], tests: tuple[str, ...]) -> RunResult:
    """The run's cells named (all: none named) and in them the tests named, with the
    kernel's own results (boot, set-up, shutdown), which every boot has."""
    chosen = [c for c in run.cells if not cells or c.cell in cells]
    if tests:
        wanted = set(tests)
        chosen = [_only(c, wanted) for c in chosen]
    return replace(run, cells=tuple(chosen))


def _only(c: CellResult, wanted: set[str]) -> CellResult:
    def named(name: str) -> bool:
        # a test's own result, its variants (NAME@VARIANT) and its retries ("NAME (retry 1)")
        head = name.split(" ")[0]
        return any(head == w or head.startswith((f"{w}@", f"{w}:")) for w in wanted)

    return replace(c, tests=tuple(t for t in c.tests
                                  if t.phase in KERNEL_PHASES or named(t.name)))


# ---- the verdicts ----


def _status(d: compare.Difference) -> bool:
    """A result's status difference that is a mismatch (a failure that stayed the same
    failure is none; a declared flake is none)."""
    if d.change is compare.Change.FLAKY:
        return False
    return not (d.change is compare.Change.STILL_FAILING and d.before == d.after)


def mismatches(a: RunResult, b: RunResult, comparison: compare.Comparison
               ) -> tuple[Mismatch, ...]:
    """Each result whose verdict differs, with the checks, splats and measurements that
    moved under it."""
    flaky = {(c.cell, t.name) for run in (a, b) for c in run.cells for t in c.tests
             if compare.declared_flaky(t)}
    status: dict[tuple[str, str], tuple[str, str]] = {}
    details: dict[tuple[str, str], list[str]] = {}
    for d in comparison.differences:
        if d.kind == "cell":
            status[(d.cell, "cell")] = (d.before, d.after)
            if d.detail:
                details.setdefault((d.cell, "cell"), []).append(d.detail)
            continue
        if d.kind == "patch":
            details.setdefault((d.cell, "cell"), []).append(
                f"patch {d.name}: {d.before} -> {d.after}")
            continue
        if d.kind not in ("test", "check", "splat", "metric"):
            continue  # kernel version, features, coverage: inputs or not verdicts
        test = d.name.split(": ", 1)[0]
        if (d.cell, test) in flaky:
            continue
        if d.kind == "test":
            if _status(d):
                status[(d.cell, test)] = (d.before, d.after)
            continue
        if d.kind == "metric" and d.change not in (compare.Change.REGRESSED,
                                                   compare.Change.IMPROVED):
            continue
        what = d.name.split(": ", 1)[1] if ": " in d.name else d.name
        details.setdefault((d.cell, test), []).append(
            f"{d.kind} {what}: {d.before} -> {d.after}")
    statuses = {(c.cell, t.name): t for c in b.cells for t in c.tests}
    explained = {cell for cell, test in [*status, *details] if test != "cell"}
    # a cell a stage stopped (a patch that does not apply, a build error): its status and
    # error say it; the results it did not reach are not each a mismatch
    stopped = {c.cell for c in b.cells if c.status.is_stage_error}
    out = []
    for key in dict.fromkeys([*status, *details]):
        cell, test = key
        if test == "cell" and cell in explained and not details.get(key) \
                and cell not in stopped:
            continue  # the cell's status moved with its results: they say it
        if test != "cell" and cell in stopped and (cell, "cell") in status:
            continue
        if key in status:
            before, after = status[key]
        elif test == "cell":
            before = after = next((c.status.value for c in b.cells if c.cell == cell), "-")
        else:
            shown = statuses.get(key)
            before = after = shown.status.value if shown else "-"
        out.append(Mismatch(cell=cell, test=test, original=before, reproduction=after,
                            details=tuple(details.get(key, ()))))
    return tuple(out)


def unreproduced(a: RunResult, b: RunResult) -> tuple[tuple[str, str], ...]:
    """Cells the reproduction could not make where the run did: set up (an input that
    cannot be had here) or stopped."""
    before = {c.cell: c for c in a.cells}
    gone = []
    for c in b.cells:
        was = before.get(c.cell)
        if c.status in (Status.SETUP_ERROR, Status.INTERRUPTED) and \
                (was is None or was.status is not c.status):
            gone.append((c.cell, c.error or c.status.value))
    return tuple(gone)


# ---- the inputs ----


def _short(sha: str) -> str:
    return sha[:12] if sha else "-"


def _source_text(s: SourceIdentity | None) -> str:
    if s is None:
        return "-"
    parts = [s.describe or s.spec]
    if s.commit and s.commit[:12] not in parts[0]:
        parts.append(f"commit {s.commit[:12]}")
    if s.sha256 and s.sha256[:12] not in parts[0]:
        parts.append(f"sha256 {s.sha256[:12]}")
    if s.base_commit:
        parts.append(f"base {s.base_commit[:12]}")
    return ", ".join(parts)


def _source_differs(a: SourceIdentity | None, b: SourceIdentity | None) -> bool:
    if a is None or b is None:
        return False  # the cell said nothing of its source: nothing to tell
    if a.base_commit and b.base_commit:
        return a.base_commit != b.base_commit
    return (a.package_version, a.sha256, a.commit) != (b.package_version, b.sha256, b.commit)


def _files(kind: str, a: tuple[CarriedFile, ...], b: tuple[CarriedFile, ...]
           ) -> Iterator[tuple[str, str, str]]:
    """(what, before, after) for each file (by position) whose name or content differs."""
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x is not None and y is not None and x.name == y.name and x.sha256 == y.sha256:
            continue
        name = y.name if y is not None else x.name if x is not None else "?"
        before = f"sha256 {_short(x.sha256)}" if x is not None else "-"
        after = f"sha256 {_short(y.sha256)}" if y is not None else "-"
        if x is not None and y is not None and x.name != y.name:
            before, after = f"{x.name} ({before})", f"{y.name} ({after})"
        yield f"{kind} {name}", before, after


def _patches(a: CellInputs, b: CellInputs) -> Iterator[tuple[str, str, str]]:
    flat_a = tuple(f for g in a.patches for f in g.patches)
    flat_b = tuple(f for g in b.patches for f in g.patches)
    yield from _files("patch", flat_a, flat_b)


def _cell_inputs(a: CellResult, b: CellResult) -> Iterator[InputDifference]:
    def diff(what: str, before: str, after: str) -> InputDifference:
        return InputDifference(cell=b.cell, what=what, original=before, reproduction=after)

    x, y = a.inputs, b.inputs
    if x is not None and y is not None:
        if _source_differs(x.source, y.source):
            yield diff("kernel source", _source_text(x.source), _source_text(y.source))
        for what, before, after in (*_patches(x, y), *_files("config", x.configs, y.configs),
                                    *_files("test directory", x.test_dirs, y.test_dirs)):
            yield diff(what, before, after)
        if x.guest_root != y.guest_root:
            yield diff("guest root", x.guest_root or "the host's root",
                       y.guest_root or "the host's root")
        said = [(k, getattr(x, k), getattr(y, k)) for k in
                ("tests", "boot_only", "command", "expect_status", "expect", "strict",
                 "repeat", "retry_failed", "coverage")]
        for key, before, after in said:
            if before != after:
                yield diff(key.replace("_", " "), str(before), str(after))
    if a.kernel_version and b.kernel_version and a.kernel_version != b.kernel_version:
        yield diff("kernel version", a.kernel_version, b.kernel_version)
    if a.compiler and b.compiler and a.compiler != b.compiler:
        yield diff("compiler", a.compiler, b.compiler)
    accel_a, accel_b = a.accel.split(" ")[0], b.accel.split(" ")[0]
    if accel_a and accel_b and accel_a != accel_b:
        yield diff("accelerator", accel_a.upper(), accel_b.upper())
    if a.guest is not None and b.guest is not None and a.guest != b.guest:
        yield diff("guest", f"{a.guest.memory} {a.guest.cpus} CPUs {a.guest.append}".strip(),
                   f"{b.guest.memory} {b.guest.cpus} CPUs {b.guest.append}".strip())


def _revision(run: RunResult) -> str:
    rev = (run.harness_rev or "unknown")[:12]
    dirty = {True: " (checkout dirty)", False: " (clean)", None: ""}[run.harness_dirty]
    return rev + dirty


def input_differences(a: RunResult, b: RunResult) -> tuple[InputDifference, ...]:
    """Every input of the run that the reproduction had otherwise."""
    out: list[InputDifference] = []
    if a.harness_rev != b.harness_rev:
        out.append(InputDifference(cell="", what="harness revision", original=_revision(a),
                                   reproduction=_revision(b)))
    elif a.harness_dirty or b.harness_dirty:
        out.append(InputDifference(
            cell="", what="harness checkout (the same revision; a dirty checkout holds "
                          "changes a run does not carry)",
            original=_revision(a), reproduction=_revision(b)))
    tools_a, tools_b = dict(a.tools or ()), dict(b.tools or ())
    for tool in dict.fromkeys([*tools_a, *tools_b]):
        if tool in tools_a and tool in tools_b and tools_a[tool] != tools_b[tool]:
            out.append(InputDifference(cell="", what=f"tool {tool}", original=tools_a[tool],
                                       reproduction=tools_b[tool]))
    native = not any(c.inputs and c.inputs.guest_root for r in (a, b) for c in r.cells)
    os_a = a.host.os if a.host else ""
    os_b = b.host.os if b.host else ""
    if native and os_a and os_b and os_a != os_b:
        out.append(InputDifference(cell="", what="guest root (the host's own)",
                                   original=os_a, reproduction=os_b))
    by_name = {c.cell: c for c in a.cells}
    for c in b.cells:
        if c.cell in by_name:
            out.extend(_cell_inputs(by_name[c.cell], c))
    return tuple(out)


def judge(original: RunResult, reproduced: RunResult, *, cells: tuple[str, ...] = (),
          tests: tuple[str, ...] = ()) -> Judgement:
    """The reproduction against the run: the results that differ, the inputs that differ."""
    a = selected(original, cells, tests)
    b = selected(reproduced, cells, tests)
    comparison = compare.compare(a, b, labels=("the run", "the reproduction"))
    gone = unreproduced(a, b)
    stopped = {cell for cell, _ in gone}  # no result to compare: told as cannot reproduce
    return Judgement(original=a, reproduced=b, comparison=comparison,
                     mismatches=tuple(m for m in mismatches(a, b, comparison)
                                      if m.cell not in stopped),
                     inputs=input_differences(a, b), unreproduced=gone,
                     compared=sum(len(c.tests) for c in b.cells))


# ---- what it says ----


def inputs_lines(run: RunResult) -> list[str]:
    """The inputs a run carries, as the reproduction lists them."""
    lines = [f"harness {_revision(run)}"
             + (f"; guest on the host's root ({run.host.os})" if run.host and run.host.os
                else "")]
    # every tool the run recorded (doctor's list: compilers, pahole, QEMU, vng, ...)
    shown = [f"{k} {(v.splitlines() or [''])[0]}" for k, v in (run.tools or ())]
    if shown:
        lines.append("tools: " + "; ".join(shown))
    for c in run.cells:
        i = c.inputs
        if i is None:
            lines.append(f"{c.cell}: {c.kernel} (inputs not recorded)")
            continue
        lines.append(f"{c.cell}: {_source_text(i.source) if i.source else i.kernel}")
        for g in i.patches:
            kind = "series" if g.series else "--patch"
            lines.append(f"  {kind} {g.given}: " + ", ".join(
                f"{f.name} ({_short(f.sha256)})" for f in g.patches))
        for f in i.configs:
            lines.append(f"  config {f.name}" + (f" ({_short(f.sha256)})" if f.sha256 else
                                                 " (the kernel tree's)"))
        for f in i.test_dirs:
            lines.append(f"  test directory {f.name} ({_short(f.sha256)})")
        tested = ", ".join(i.tests) or ("none (boot only)" if i.boot_only else "none")
        lines.append(f"  tests: {tested}; accel {c.accel.split(' ')[0] or i.accel}"
                     + (f"; guest root {i.guest_root}" if i.guest_root else ""))
        if i.not_carried:
            lines.append(f"  not carried (over the size limit): {', '.join(i.not_carried)}")
    return lines


def render(j: Judgement, width: int = 100) -> str:
    """What `harness reproduce` prints after the reproduction's own summary."""
    lines = ["inputs (as the run carried them):"]
    for x in inputs_lines(j.original):
        indent = "  " + " " * (len(x) - len(x.lstrip(" ")))
        lines += textwrap.wrap(x.strip(), width, initial_indent=indent,
                               subsequent_indent=indent + "    ", break_on_hyphens=False)
    if j.inputs:
        lines.append("inputs that differ (the run's -> this reproduction's):")
        for d in j.inputs:
            where = f"{d.cell}: " if d.cell else ""
            lines += textwrap.wrap(f"{where}{d.what}: {d.original} -> {d.reproduction}",
                                   width, initial_indent="  ", subsequent_indent="      ",
                                   break_on_hyphens=False)
    else:
        lines.append("inputs that differ: none")
    for cell, error in j.unreproduced:
        lines.append(f"cannot reproduce {cell}:")
        lines += ["  " + x for x in error.splitlines()]
    if j.verdicts_match:
        lines += textwrap.wrap(
            f"{MATCH}: {j.compared} result(s) in {len(j.reproduced.cells)} cell(s) as the run "
            "had them (declared flakes and metrics within their spread are no mismatch)",
            width, subsequent_indent="  ")
    elif j.mismatches:
        lines.append(f"verdicts differ: {len(j.mismatches)} result(s) (the run's -> this "
                     "reproduction's):")
        for m in j.mismatches:
            name = f"{m.cell}: cell status" if m.test == "cell" else f"{m.cell}/{m.test}"
            lines.append(f"  {name}: {m.original} -> {m.reproduction}")
            for said in m.details[:8]:
                lines += textwrap.wrap(said, width, initial_indent="      ",
                                       subsequent_indent="        ")
            if len(m.details) > 8:
                lines.append(f"      ... and {len(m.details) - 8} more")
    return "\n".join(lines)


def to_json(j: Judgement) -> dict[str, Any]:
    return {"verdicts_match": j.verdicts_match, "exit_code": j.exit_code,
            "compared": j.compared,
            "mismatches": [{"cell": m.cell, "test": m.test, "original": m.original,
                            "reproduction": m.reproduction, "details": list(m.details)}
                           for m in j.mismatches],
            "inputs_differ": [{"cell": d.cell, "what": d.what, "original": d.original,
                               "reproduction": d.reproduction} for d in j.inputs],
            "unreproduced": [{"cell": c, "error": e} for c, e in j.unreproduced],
            "comparison": compare.to_json(j.comparison)}
