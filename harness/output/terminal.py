"""The terminal summary of a run: what a user reads when it ends (rendering only).

Whatever a user needs to act on a result is in it, once, at most 100 columns wide: the
cause of a stopped cell with its details, fix and log; for a crashed result the splat with
its decoded location; for a failed test its failing checks and their diagnostics; notes on
known failures and declared noise.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from harness import target
from harness.base.model import (
    KERNEL_PHASES,
    Affected,
    CellResult,
    FeatureKind,
    FeatureReport,
    FeatureState,
    GuestSeen,
    GuestSpec,
    PatchCoverage,
    Phase,
    Splat,
    Status,
    TestCase,
    TestResult,
    leaves,
)
from harness.judge import checks, ktap, splat

WIDTH = 100


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
    if guest := guest_line(c.guest, c.guest_seen):
        lines += _wrap(guest, "   ")
    if c.affected is not None:
        lines += affected_lines(c.affected, "   ")
    if c.map_error:
        lines += _message(f"map not recorded: {c.map_error}", "   ", base)
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


def affected_lines(a: Affected, indent: str) -> list[str]:
    """--affected: what the change touched, what of each test ran and why."""
    lines = _wrap("affected by the change: " + (", ".join(a.changed) or "nothing mapped"),
                  indent)
    if a.fallback:
        lines += _wrap(f"every test, whole: {a.fallback}", indent + "  ")
        return lines
    for t in a.tests:
        ran = {"all": "every check", "none": "not run"}.get(
            t.ran, f"only {', '.join(t.checks)}")
        lines += _wrap(f"{t.test}: {ran}" + (f" ({t.why})" if t.why and t.ran != "some"
                                              else ""), indent + "  ")
    if a.map:
        lines += _wrap(f"(the map: {a.map})", indent + "  ")
    return lines


def guest_line(guest: GuestSpec | None, seen: GuestSeen | None) -> str:
    """What the guest had, when the user changed its size or command line: said on the
    terminal, with whether the appended arguments really reached /proc/cmdline."""
    default, spec = GuestSpec(), guest or GuestSpec()
    asked = [f"--memory {spec.memory}" if spec.memory != default.memory else "",
             f"--cpus {spec.cpus}" if spec.cpus != default.cpus else "",
             f"--append {spec.append}" if spec.append else ""]
    if not any(asked):
        return ""
    had = []
    if seen is not None and seen.cpus is not None:
        had.append(f"{seen.cpus} CPU(s)")
    if seen is not None and seen.memory_kb is not None:
        had.append(f"{seen.memory_kb // 1024} MiB")
    cmdline, appended = (seen.cmdline if seen else None) or "", spec.append.strip()
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
    if (sel := t.selection) is not None:
        lines += _wrap("only " + checks.describe(sel), indent)
        if sel.why:
            lines += _wrap(f"why: {sel.why}", indent + "  ")
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
    if tail := t.output_tail:
        total = t.output_lines
        if t.phase is Phase.BOOT:  # a boot that hung: the console's last lines
            lines.append(f"{indent}console, its last {len(tail)} lines:")
        else:
            lines.append(f"{indent}output:" if total == len(tail) else
                         f"{indent}output (its last {len(tail)} of {total} lines; all of it "
                         "in the log):")
        lines += [f"{indent}| {line}"[:WIDTH + 40] for line in tail]
    if t.metrics is not None and t.metrics.summary:
        lines += _wrap(f"metrics: {t.metrics.summary}", indent)
    if t.log is not None and not said and (t.status not in (Status.PASS, Status.SKIP)
                                           or t.splats or t.output_tail):
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
    return [leaf for _, leaf in leaves(cases)
            if leaf.status not in (Status.PASS, Status.SKIP, Status.XFAIL)]


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
