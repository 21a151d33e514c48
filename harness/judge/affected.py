"""Which checks a change can affect: a map from a coverage run, and the change mapped on it.

The map (`harness run --map`, on the gcov kernel) says, per check of each test, which
kernel functions it ran: each check ran alone with what it needs (`--test T:CHECK`), the
counters reset before it and read after it, and once more with no check at all (the
test's frame: its start, its clean-ups). A function is reached when one of its lines has
a count.

`harness run --affected` maps the lines a change touches (`git diff -U0`, the old side)
onto the functions of the map's files, and picks per test:
- every check whose run (alone, with the checks it needs) reached a changed function
  beyond what the frame reached: its verdict rests on all of that run,
- plus the checks that reached no kernel code of their own (nothing beyond the frame:
  userspace, or code the map does not profile): nothing tells they are safe;
- the whole test when the frame reached a changed function, or a changed line is
  outside any function (data, a registration table: whoever reads it may change);
- nothing when no check of it reached the change (and it has no check without code of
  its own);
and falls back to every test, whole, when the map is missing, does not cover a changed
file, or was recorded on another version of it than the change's base (its blob).

Pure: text and data in, data out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.judge import checks as checks_mod

MAP_VERSION = 1
FRAME = checks_mod.NONE  # the unit that runs no check: the test's frame


@dataclass(frozen=True, kw_only=True)
class Span:
    name: str
    start: int  # first line (1-based), the return type's line when it has one of its own
    end: int  # the closing brace's line


_HEAD = re.compile(r"^(?:[A-Za-z_][^;=(]*?\b)?([A-Za-z_]\w*)\s*\(")


def function_spans(text: str) -> tuple[Span, ...]:
    """The function definitions of a kernel C file, kernel style: the name at column 0
    (its type before it on the line, or on the line above), the parameters closed, then
    the body from a `{` to a `}` at column 0. Macros at column 0 (a registration table's
    lines) and declarations are not functions."""
    lines = text.split("\n")
    out: list[Span] = []
    i = 0
    while i < len(lines):
        m = _HEAD.match(lines[i])
        if m is None:
            i += 1
            continue
        depth, k = 0, i
        while k < len(lines):  # to the line that closes the parameters
            depth += lines[k].count("(") - lines[k].count(")")
            if depth <= 0:
                break
            k += 1
        # sparse's annotations may stand between (`\t__acquires(&lock)`)
        while k + 1 < len(lines) and lines[k + 1].startswith(("\t__", "    __")) and \
                not lines[k + 1].rstrip().endswith(";"):
            k += 1
        if k + 1 >= len(lines) or lines[k].rstrip().endswith(";") or \
                not lines[k + 1].startswith("{"):
            i = k + 1
            continue
        end = next((n for n in range(k + 1, len(lines)) if lines[n].startswith("}")), None)
        if end is None:
            break
        start = i
        above = lines[i - 1].rstrip() if i > 0 else ""
        if above and not above.startswith((" ", "\t", "#", "}", "/", "*")) and \
                not above.endswith((";", "*/", "}", ")")):
            start = i - 1  # `__bpf_kfunc struct mem_cgroup *` over the name
        out.append(Span(name=m.group(1), start=start + 1, end=end + 1))
        i = end + 1
    return tuple(out)


def span_at(spans: Iterable[Span], line: int) -> Span | None:
    return next((s for s in spans if s.start <= line <= s.end), None)


def reached(spans: Iterable[Span], counts: Mapping[int, int]) -> frozenset[str]:
    """The functions with a line that ran (inlined code is counted at its own lines)."""
    ran = sorted(n for n, c in counts.items() if c > 0)
    return frozenset(s.name for s in spans if any(s.start <= n <= s.end for n in ran))


# ---- the map ----


@dataclass(frozen=True, kw_only=True)
class MappedFile:
    blob: str  # its git blob id where the map was recorded
    spans: tuple[Span, ...]


@dataclass(frozen=True, kw_only=True)
class MappedTest:
    """One test's units: its checks (own tests), or the programs of a kselftest target,
    or the whole test; each with the functions ("file:function") it reached."""

    units: Mapping[str, frozenset[str]]
    frame: frozenset[str] = frozenset()  # reached with no check (own tests)
    table: tuple[checks_mod.Check, ...] = ()  # own tests: their CHECK table
    # units that did not pass alone: their coverage may be short; a test with any is
    # taken whole
    failed: tuple[str, ...] = ()
    kind: str = "own"  # own | kselftest | whole


@dataclass(frozen=True, kw_only=True)
class Map:
    key: str  # the cell's kernel, series, configs, arch, toolchain
    tree: str  # the tree (series head) it was recorded on
    recorded: str  # when
    run: str  # the results directory of the run that recorded it
    files: Mapping[str, MappedFile]
    tests: Mapping[str, MappedTest]


def map_json(m: Map) -> dict[str, Any]:
    return {
        "version": MAP_VERSION, "key": m.key, "tree": m.tree, "recorded": m.recorded,
        "run": m.run,
        "files": {f: {"blob": x.blob, "functions": [[s.name, s.start, s.end] for s in x.spans]}
                  for f, x in sorted(m.files.items())},
        "tests": {t: {"kind": x.kind, "frame": sorted(x.frame), "failed": list(x.failed),
                      "table": [[c.name, c.needs, c.function] for c in x.table],
                      "units": {u: sorted(fs) for u, fs in x.units.items()}}
                  for t, x in m.tests.items()},
    }


class MapUnreadable(ValueError):
    pass


def map_from_json(text: str) -> Map:
    try:
        d = json.loads(text)
        if d.get("version") != MAP_VERSION:
            raise MapUnreadable(f"map version {d.get('version')}, not {MAP_VERSION}")
        return Map(
            key=str(d["key"]), tree=str(d["tree"]), recorded=str(d["recorded"]),
            run=str(d["run"]),
            files={f: MappedFile(blob=str(x["blob"]), spans=tuple(
                Span(name=str(n), start=int(a), end=int(b)) for n, a, b in x["functions"]))
                for f, x in d["files"].items()},
            tests={t: MappedTest(
                kind=str(x["kind"]), frame=frozenset(x["frame"]), failed=tuple(x["failed"]),
                table=tuple(checks_mod.Check(name=str(n), needs=str(k), function=str(f))
                            for n, k, f in x["table"]),
                units={u: frozenset(fs) for u, fs in x["units"].items()})
                for t, x in d["tests"].items()})
    except (ValueError, KeyError, TypeError) as exc:
        raise MapUnreadable(str(exc)) from None


# ---- a change ----


@dataclass(frozen=True, kw_only=True)
class FileChange:
    file: str
    old_lines: frozenset[int] = frozenset()  # lines of the base changed or removed
    inserted_after: frozenset[int] = frozenset()  # pure insertions, after these base lines
    new_file: bool = False  # no base version (added, renamed, copied)


_DIFF = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def changed_lines(diff: str) -> tuple[FileChange, ...]:
    """Per file of a `git diff -U0`, the base's lines the change touches."""
    out: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in diff.split("\n"):
        if (m := _DIFF.match(line)) is not None:
            current = out.setdefault(m.group(2), {"old": set(), "after": set(),
                                                  "new": m.group(1) != m.group(2)})
        elif current is not None and line.startswith("--- /dev/null"):
            current["new"] = True
        elif current is not None and (m := _HUNK.match(line)) is not None:
            start, count = int(m.group(1)), int(m.group(2) or "1")
            if count == 0:
                current["after"].add(start)
            else:
                current["old"].update(range(start, start + count))
    return tuple(FileChange(file=f, old_lines=frozenset(x["old"]),
                            inserted_after=frozenset(x["after"]), new_file=x["new"])
                 for f, x in out.items())


# ---- the choice ----


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What --affected runs of one test: None every check; () none; else these checks
    (names of its CHECK table, or the programs of a kselftest target)."""

    test: str
    units: tuple[str, ...] | None
    why: str


@dataclass(frozen=True, kw_only=True)
class Decision:
    changed: tuple[str, ...]  # "file:function" (or "file: line N outside any function")
    choices: tuple[Choice, ...]
    fallback: str = ""  # why every test runs whole ("": the map decided)


def decide(m: Map | None, change: Iterable[FileChange], blobs: Mapping[str, str],
           tests: Iterable[str], *, missing: str = "",
           current: Mapping[str, tuple[str, ...]] | None = None) -> Decision:
    """The checks of each of `tests` (their names) to run for this change. `blobs`: each
    changed file's blob in the change's base ("" when it has none); `missing`: why there
    is no map (with m None); `current`: each own test's checks as its sources have them
    now (a check the map does not know, added after it was recorded, runs)."""
    tests = list(tests)
    change = [c for c in change]

    def everything(why: str, changed: tuple[str, ...] = ()) -> Decision:
        return Decision(changed=changed, fallback=why,
                        choices=tuple(Choice(test=t, units=None, why=why) for t in tests))

    if not change:
        return everything("the change touches no file")
    if m is None:
        return everything(missing or "no map of which checks reach which functions")
    functions: set[str] = set()
    outside: dict[str, list[int]] = {}
    for c in change:
        mapped = m.files.get(c.file)
        if c.new_file or mapped is None:
            return everything(f"{c.file}: not in the map (it profiles "
                              f"{', '.join(sorted(m.files)) or 'no file'})")
        if blobs.get(c.file, "") != mapped.blob:
            return everything(f"{c.file}: the map was recorded on another version of it "
                              f"(blob {mapped.blob[:12]}) than the change's base "
                              f"({(blobs.get(c.file) or 'none')[:12]}): record it again "
                              "(harness run --map)")
        for n in sorted(c.old_lines):
            s = span_at(mapped.spans, n)
            if s is None:
                outside.setdefault(c.file, []).append(n)
            else:
                functions.add(f"{c.file}:{s.name}")
        for n in sorted(c.inserted_after):
            s = span_at(mapped.spans, n)
            if s is None or n == s.end:
                outside.setdefault(c.file, []).append(n)
            else:
                functions.add(f"{c.file}:{s.name}")
    changed = tuple(sorted(functions)) + tuple(
        f"{f}: line {', '.join(map(str, ns))} outside any function" for f, ns in outside.items())
    return Decision(changed=changed, choices=tuple(
        _choose(t, m.tests.get(t), frozenset(functions), frozenset(outside),
                (current or {}).get(t, ())) for t in tests))


def _choose(test: str, mt: MappedTest | None, functions: frozenset[str],
            outside_files: frozenset[str], current: tuple[str, ...] = ()) -> Choice:
    if mt is None:
        return Choice(test=test, units=None, why="not in the map: every check")
    reached_any = frozenset().union(mt.frame, *mt.units.values())
    files = {f.partition(":")[0] for f in reached_any}
    if hit := sorted(outside_files & files):
        return Choice(test=test, units=None,
                      why=f"{', '.join(hit)} changed outside any function, and the test "
                          "reaches that file: every check")
    if hit := sorted(functions & mt.frame):
        return Choice(test=test, units=None,
                      why=f"its set-up or clean-up (outside its checks) reaches "
                          f"{', '.join(hit)}: every check")
    if mt.kind == "whole":
        hit = sorted(functions & reached_any)
        return Choice(test=test, units=None if hit else (),
                      why=f"reaches {', '.join(hit)}" if hit else
                      "reaches no changed function: not run")
    if mt.failed and functions & reached_any:
        return Choice(test=test, units=None,
                      why=f"reaches {', '.join(sorted(functions & reached_any))}; some "
                          f"of its checks did not pass alone when mapped "
                          f"({', '.join(mt.failed)}): every check")
    own = _own(mt)
    picked: dict[str, str] = {}
    for unit, fs in own.items():
        if hit := sorted(functions & fs):
            picked[unit] = f"reaches {', '.join(hit)}"
    if mt.kind == "own":
        for unit, fs in own.items():
            if not fs and unit not in picked and not checks_mod.is_cleanup(unit):
                picked[unit] = "reaches no kernel code of its own"
        for unit in current:
            if unit not in mt.units and not checks_mod.is_cleanup(unit):
                picked[unit] = "not in the map (added after it was recorded): run"
    if not any(w.startswith("reaches ") and "no kernel code" not in w
               for w in picked.values()):
        if mt.kind == "own" and picked:
            why = ("no check reaches a changed function; run: the checks without kernel code "
                   "of their own or not in the map (" + ", ".join(picked) + ")")
            return Choice(test=test, units=tuple(picked), why=why)
        return Choice(test=test, units=(), why="no check reaches a changed function: not run")
    order = list(dict.fromkeys(u for u in (*mt.units, *current) if u in picked))
    why = "; ".join(f"{u}: {picked[u]}" for u in order)
    return Choice(test=test, units=tuple(order), why=why)


def _own(mt: MappedTest) -> dict[str, frozenset[str]]:
    """Each unit's functions beyond its test's frame (what every check of it reaches).
    A check's unit ran it with what it needs: what they reached counts as its own, for
    its verdict rests on what they did."""
    return {u: fs - mt.frame for u, fs in mt.units.items()}


@dataclass(frozen=True, kw_only=True)
class UnitCounts:
    """A unit's line counts per file (file -> line -> count)."""

    name: str
    counts: Mapping[str, Mapping[int, int]] = field(default_factory=dict)


def units_reached(files: Mapping[str, MappedFile], units: Iterable[UnitCounts]
                  ) -> dict[str, frozenset[str]]:
    """unit -> the "file:function"s of the map's files it reached."""
    out = {}
    for u in units:
        out[u.name] = frozenset(f"{f}:{name}" for f, mf in files.items()
                                for name in reached(mf.spans, u.counts.get(f, {})))
    return out
