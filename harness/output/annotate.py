"""`harness ci annotate RUN...`: a run's failures as GitHub Actions annotations (one
`::error title=TITLE::MESSAGE` line each) and its summary as markdown for
$GITHUB_STEP_SUMMARY. Pure: the run in, text out.

What is a failure is judged as `harness export junit` judges it (`junit.cases`): each
result or subtest that is a failure or an error, with its reason, its failing checks and
its splats' titles; and a cell whose status no result shows (a stage error with its
message, a cell in which nothing was tested, a broken-variant cell whose declared result
is missing). A result a broken-variant cell declares, with the declared status, is none.

A merged run (`harness merge`: it has `merged_from`) is annotated with what only the merge
knows: cells no run holds (MISSING), runs it could not read, cells two runs hold, runs that
did not finish, and (a warning) harness revisions that differ. Each cell's own failures
were annotated by the job that ran it, and GitHub shows at most 10 error annotations of a
step: past 9, the tenth line says how many more there are (the summary lists every cell).
"""

from __future__ import annotations

from harness.base.model import RunResult, Status
from harness.output import junit

MAX_ERRORS = 10  # GitHub shows this many error annotations of a step
FAILED_SHOWN = 5  # failing results named per cell in the summary table


def escape_data(text: str) -> str:
    """A workflow command's message: % and line breaks escaped (GitHub's own rules)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property (title=): also : and , escaped."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, title: str, message: str) -> str:
    return f"::{level} title={escape_property(title)}::{escape_data(message.strip())}"


def failures(run: RunResult) -> list[junit.Case]:
    """The run's results and cells that are failures or errors, in order."""
    return [c for c in junit.cases(run) if c.kind in junit.BAD]


def _merge_problems(run: RunResult) -> list[tuple[str, str, str]]:
    if run.merge is None:
        return []
    m = run.merge
    found = [("error", f"{c.cell} MISSING", c.error or "no run holds it")
             for c in run.cells if c.status is Status.MISSING]
    found += [("error", "run not merged", f"{u.run}: {u.reason}") for u in m.unreadable_runs]
    found += [("error", "cell in two runs", f"{c}: the first run's copy kept")
              for c in m.conflicts]
    found += [("error", "run incomplete", f"{r} did not finish (its results.json says so)")
              for r in m.incomplete_runs]
    if m.revision_conflict:
        found.append(("warning", "harness revisions differ", m.revision_conflict))
    return found


def annotation_lines(run: RunResult, *, label: str = "") -> list[str]:
    """The annotation lines of a run (`label`: put before each title, e.g. which run)."""
    prefix = f"{label}: " if label else ""
    if run.merge is not None:
        found = _merge_problems(run)
    else:
        found = [("error", f"{c.cell}: {c.name} {c.status}",
                  c.detail or f"{c.name} is {c.status}") for c in failures(run)]
    errors = [f for f in found if f[0] == "error"]
    shown = errors if len(errors) <= MAX_ERRORS else errors[:MAX_ERRORS - 1]
    lines = [command(level, prefix + title, message) for level, title, message in shown]
    if len(shown) < len(errors):
        lines.append(command("error", f"{prefix}{len(errors) - len(shown)} more failures",
                             "GitHub shows 10 annotations of a step: the step summary and "
                             "the run's results.json have them all"))
    lines += [command(level, prefix + title, message)
              for level, title, message in found if level != "error"]
    return lines


def _cell(text: str) -> str:
    """Text in a markdown table cell."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def summary(run: RunResult, *, label: str = "") -> str:
    """A markdown table of the run's cells: status, kernel, the results that failed."""
    bad: dict[str, list[str]] = {}
    for case in failures(run):
        bad.setdefault(case.cell, []).append(f"{case.name} {case.status}")
    what = label or run.run_id or "run"
    status = run.status.value if run.status else "-"
    lines = [f"### harness: {_cell(what)}: {status} (exit {run.exit_code})", "",
             "| cell | status | kernel | failed |", "|---|---|---|---|"]
    for c in run.cells:
        names = bad.get(c.cell, [])
        failed = ", ".join(names[:FAILED_SHOWN]) + (
            f" and {len(names) - FAILED_SHOWN} more" if len(names) > FAILED_SHOWN else "")
        kernel = c.kernel_version or c.kernel
        lines.append(f"| {_cell(c.cell)} | {_cell(c.status.value)} | "
                     f"{_cell(kernel)} | {_cell(failed)} |")
    if run.merge is not None:
        lines += [""] + [f"- {level}: {title}: {_cell(message)}"
                         for level, title, message in _merge_problems(run)]
    return "\n".join(lines).rstrip() + "\n"
