"""The checks of our selftests (their CHECK tables) and the selection of some of them.

A selftest's main() is a table of named checks (selftests/lib/check.h): `CHECK(name)`,
`CHECK(name, need)`, `CHECK_BY(name, fn, need)`. `--test memcg_kfuncs:usage_*` runs the
checks whose names match the globs, the checks they need (transitively) and the clean-up
checks (named `cleanup` or `*_cleanup`), and nothing else; selftests/lib/check.c reads
the globs from `$HARNESS_CHECKS` and does the same selection in the guest, and prints
one `# harness-checks:` line that says what it ran (`selection_from_output`).

Pure functions over text: the table is read from the test's C sources (a table built at
run time, as memcg_kfuncs_bench's, is not known here: None, and the guest alone checks
the names).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

from harness.base.model import CheckSelection

ENV = "HARNESS_CHECKS"  # what check.c reads
NONE = "-"  # a selection of no check: only the clean-ups (what runs around the checks)

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_ENTRY = re.compile(r"\bCHECK\(\s*(\w+)\s*(?:,\s*(\w+)\s*)?\)"
                    r"|\bCHECK_BY\(\s*(\w+)\s*,\s*(\w+)\s*(?:,\s*(\w+)\s*)?\)")
_LINE = re.compile(r"^# harness-checks: (.*)$", re.MULTILINE)
GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    needs: str = ""  # the earlier check it needs ("": none)
    function: str = ""  # the C function that makes it (CHECK: check_NAME)


def table_of(sources: Iterable[str]) -> tuple[Check, ...] | None:
    """The CHECK table of a test's C sources, in order; None when they have none that
    can be read (a table filled at run time)."""
    found: list[Check] = []
    for text in sources:
        for m in _ENTRY.finditer(_COMMENT.sub(" ", text)):
            if m.group(1):
                name, fn, needs = m.group(1), f"check_{m.group(1)}", m.group(2)
            else:
                name, fn, needs = m.group(3), m.group(4), m.group(5)
            found.append(Check(name=name, needs=needs or "", function=fn))
    return tuple(found) or None


def is_cleanup(name: str) -> bool:
    return name == "cleanup" or (name.endswith("_cleanup") and len(name) > len("_cleanup"))


def unknown(table: tuple[Check, ...], asked: Iterable[str]) -> list[str]:
    """The names or globs that match no check of the table."""
    names = [c.name for c in table]
    return [a for a in asked if a != NONE and not fnmatch.filter(names, a)]


def select(table: tuple[Check, ...], asked: tuple[str, ...], *, why: str = "") -> CheckSelection:
    """What check.c runs for these globs: the checks they match, what those need
    (transitively: their needs, and the earlier checks made by the same function), the
    clean-ups; each list in the table's order."""
    names = [c.name for c in table]
    chosen = {n for a in asked if a != NONE for n in fnmatch.filter(names, a)}
    needed: set[str] = set()
    todo = list(chosen)
    while todo:
        i = names.index(todo.pop())
        wanted = [table[i].needs] + [c.name for c in table[:i]
                                     if c.function and c.function == table[i].function]
        for need in wanted:
            if need and need in names and need not in chosen | needed:
                needed.add(need)
                todo.append(need)
    cleanup = {n for n in names if is_cleanup(n) and n not in chosen | needed}
    ran = chosen | needed | cleanup
    return CheckSelection(
        asked=asked, selected=tuple(n for n in names if n in chosen),
        needed=tuple(n for n in names if n in needed),
        cleanup=tuple(n for n in names if n in cleanup),
        not_run=tuple(n for n in names if n not in ran), why=why)


def selection_from_output(text: str, *, why: str = "") -> CheckSelection | None:
    """The `# harness-checks: asked=... selected=... needed=... cleanup=... not_run=...`
    line check.c prints when it ran a selection; None without one."""
    m = _LINE.search(text)
    if m is None:
        return None
    fields: dict[str, tuple[str, ...]] = {}
    for part in m.group(1).split():
        key, _, value = part.partition("=")
        fields[key] = tuple(v for v in value.split(",") if v)
    return CheckSelection(asked=fields.get("asked", ()), selected=fields.get("selected", ()),
                          needed=fields.get("needed", ()), cleanup=fields.get("cleanup", ()),
                          not_run=fields.get("not_run", ()), why=why)


def describe(sel: CheckSelection) -> str:
    """One line: "3 of 24 checks: usage_* (usage_a); needed: load, setup; clean-up:
    cleanup; 21 not run"."""
    total = len(sel.ran) + len(sel.not_run)
    asked = ",".join(sel.asked) or "-"
    ran = f" ({', '.join(sel.selected) or 'none ran'})" if tuple(sel.selected) != sel.asked \
        else ""
    # test_progs and kselftest programs do not say which they did not run
    parts = [f"{len(sel.ran)} of {total} checks: {asked}{ran}" if sel.not_run else
             f"{asked}{ran}; the others not run"]
    if sel.needed:
        parts.append(f"needed: {', '.join(sel.needed)}")
    if sel.cleanup:
        parts.append(f"clean-up: {', '.join(sel.cleanup)}")
    if sel.not_run:
        parts.append(f"{len(sel.not_run)} not run")
    return "; ".join(parts)
