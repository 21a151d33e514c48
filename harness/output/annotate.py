"""`harness ci annotate RUN...`: a run's failures as GitHub Actions annotations (one
`::error title=TITLE::MESSAGE` line each) and its summary as markdown for
$GITHUB_STEP_SUMMARY. Pure: results.json in, text out.

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

from collections.abc import Mapping
from typing import Any

from harness.base.model import Status
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


def failures(doc: Mapping[str, Any]) -> list[junit.Case]:
    """The run's results and cells that are failures or errors, in order."""
    return [c for c in junit.cases(doc) if c.kind in junit.BAD]


def is_merged(doc: Mapping[str, Any]) -> bool:
    return "merged_from" in doc


def _merge_problems(doc: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    found = [("error", f"{c['cell']} MISSING", str(c.get("error") or "no run holds it"))
             for c in doc.get("cells", []) if c.get("status") == Status.MISSING.value]
    found += [("error", "run not merged", f"{u.get('run')}: {u.get('reason')}")
              for u in doc.get("unreadable_runs", [])]
    found += [("error", "cell in two runs", f"{c}: the first run's copy kept")
              for c in doc.get("conflicts", [])]
    found += [("error", "run incomplete", f"{r} did not finish (its results.json says so)")
              for r in doc.get("incomplete_runs", [])]
    if doc.get("revision_conflict"):
        found.append(("warning", "harness revisions differ", str(doc["revision_conflict"])))
    return found


def annotation_lines(doc: Mapping[str, Any], *, label: str = "") -> list[str]:
    """The annotation lines of a run (`label`: put before each title, e.g. which run)."""
    prefix = f"{label}: " if label else ""
    if is_merged(doc):
        found = _merge_problems(doc)
    else:
        found = [("error", f"{c.cell}: {c.name} {c.status}",
                  c.detail or f"{c.name} is {c.status}") for c in failures(doc)]
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


def summary(doc: Mapping[str, Any], *, label: str = "") -> str:
    """A markdown table of the run's cells: status, kernel, the results that failed."""
    bad: dict[str, list[str]] = {}
    for c in failures(doc):
        bad.setdefault(c.cell, []).append(f"{c.name} {c.status}")
    what = label or str(doc.get("run_id") or "run")
    lines = [f"### harness: {_cell(what)}: {doc.get('status') or '-'} "
             f"(exit {doc.get('exit_code', '-')})", "",
             "| cell | status | kernel | failed |", "|---|---|---|---|"]
    for c in doc.get("cells", []):
        names = bad.get(str(c["cell"]), [])
        failed = ", ".join(names[:FAILED_SHOWN]) + (
            f" and {len(names) - FAILED_SHOWN} more" if len(names) > FAILED_SHOWN else "")
        kernel = str(c.get("kernel_version") or c.get("kernel") or "")
        lines.append(f"| {_cell(str(c['cell']))} | {_cell(str(c['status']))} | "
                     f"{_cell(kernel)} | {_cell(failed)} |")
    if is_merged(doc):
        lines += [""] + [f"- {level}: {title}: {_cell(message)}"
                         for level, title, message in _merge_problems(doc)]
    return "\n".join(lines).rstrip() + "\n"
