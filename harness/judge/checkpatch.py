"""checkpatch.pl's output -> its issues and counts (pure: text in, data out).

`harness check` runs the tree's own `scripts/checkpatch.pl --strict --show-types` on each
patch (drivers/check.py); this reads what it printed: each ERROR, WARNING or CHECK with
its type and where (the patch line, the file and line it changes), the `total:` line, and
a Python traceback when its SPDX check (scripts/spdxcheck.py) could not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CP_ISSUE = re.compile(r"^(ERROR|WARNING|CHECK)(?::([A-Z0-9_]+))?: (.*)$")
_CP_WHERE = re.compile(r"^#(\d+): (?:FILE: (.+):(\d+):)?\s*$")
_CP_TOTAL = re.compile(
    r"^total: (\d+) errors, (\d+) warnings, (?:(\d+) checks, )?(\d+) lines checked")
_PY_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):$")
_PY_ERROR = re.compile(r"^\w+(Error|Exception): ")


@dataclass(frozen=True, kw_only=True)
class CheckpatchIssue:
    level: str  # ERROR, WARNING, CHECK
    type: str  # e.g. TRAILING_WHITESPACE (from --show-types); "" if not shown
    message: str
    patch_line: int | None = None  # line in the patch file (checkpatch's "#N:")
    file: str = ""  # the file and line the patch changes, when checkpatch names them
    file_line: int | None = None

    @property
    def where(self) -> str:
        if self.file:
            return f"{self.file}:{self.file_line}"
        return f"patch line {self.patch_line}" if self.patch_line is not None else ""


@dataclass(frozen=True, kw_only=True)
class CheckpatchReport:
    errors: int
    warnings: int
    checks: int
    lines_checked: int
    issues: tuple[CheckpatchIssue, ...]

    @property
    def clean(self) -> bool:
        return self.errors == 0 and self.warnings == 0 and self.checks == 0


def parse_checkpatch(text: str) -> CheckpatchReport:
    """checkpatch.pl output -> issues and counts; ValueError if it has no `total:` line."""
    issues: list[CheckpatchIssue] = []
    total: re.Match[str] | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if m := _CP_TOTAL.match(line):
            total = m
            continue
        m = _CP_ISSUE.match(line)
        if not m:
            continue
        where = _CP_WHERE.match(lines[i + 1]) if i + 1 < len(lines) else None
        issues.append(CheckpatchIssue(
            level=m.group(1), type=m.group(2) or "", message=m.group(3).strip(),
            patch_line=int(where.group(1)) if where else None,
            file=(where.group(2) or "") if where else "",
            file_line=int(where.group(3)) if where and where.group(3) else None,
        ))
    if total is None:
        raise ValueError("checkpatch output has no 'total: N errors, N warnings' line")
    return CheckpatchReport(
        errors=int(total.group(1)), warnings=int(total.group(2)),
        checks=int(total.group(3) or 0), lines_checked=int(total.group(4)),
        issues=tuple(issues),
    )


def python_failure(text: str) -> str:
    """A Python traceback in checkpatch's output (spdxcheck.py failed), or ""."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _PY_TRACEBACK.match(line):
            end = next((j for j in range(i + 1, len(lines)) if _PY_ERROR.match(lines[j])),
                       min(i + 8, len(lines) - 1))
            return "\n".join(lines[i:end + 1])
    return ""
