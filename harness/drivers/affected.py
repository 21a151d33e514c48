"""`harness run --map` and `--affected`: the map of which checks reach which kernel
functions, recorded on the gcov kernel, and the checks a change can affect, read from it.

Recording (`--map`, with `--coverage`): each own test with a CHECK table is planned as one
guest test per check (`T:CHECK`, that check alone with what it needs) and one with no
check (`T:-`, its frame); the runner resets gcov before each and saves the counters after
it; the map keeps, per unit, the functions of the profiled files (the series' C files and
kconfigs/gcov-profile.txt) whose lines ran, with each file's blob and function spans.
Stored per cell (kernel, series, configs, arch, toolchain) in the cache's affected/.

Reading (`--affected`): the change is the last commit the cell's tree was built at (the
series' last patch, the last --patch, or your tree's uncommitted changes); judge/
affected.py decides what of each test runs, and the tests are narrowed to it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness.base import atomic, gitcmd, paths
from harness.base.errors import HarnessError
from harness.base.model import Affected, AffectedTest, KernelImage, Status, TestResult
from harness.drivers.matrix import Cell
from harness.guest.protocol import GuestTest
from harness.judge import affected as judge
from harness.judge import checks
from harness.kernel import build, gcov
from harness.testkinds import TestRef, own

log = logging.getLogger(__name__)


class MapError(HarnessError):
    status = Status.SETUP_ERROR


def key_of(cell: Cell) -> str:
    """What a map is recorded for: the kernel source, its series, configs and target
    (not --patch files, not gcov: the change and the coverage build are not the cell)."""
    configs = [c for c in cell.configs if c != "gcov"]
    return json.dumps({"kernel": cell.kernel, "series": list(cell.series), "configs": configs,
                       "arch": cell.arch, "toolchain": cell.toolchain}, sort_keys=True)


def map_path(key: str) -> Path:
    return paths.sub("affected") / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def load(cell: Cell) -> tuple[judge.Map | None, str]:
    """The cell's map, or None and why there is none."""
    path = map_path(key_of(cell))
    if not path.exists():
        return None, ("no map for this cell's kernel, series and configs: record one with "
                      f"`harness run --map` and the same --kernel/--series/--config ({path})")
    try:
        return judge.map_from_json(path.read_text()), ""
    except judge.MapUnreadable as exc:
        return None, f"the map {path} cannot be read ({exc}): record it again (--map)"


# ---- recording ----


@dataclass(frozen=True, kw_only=True)
class Unit:
    test: str  # the test's name (its TestRef)
    unit: str  # a check, FRAME, a kselftest program, or the test's name (whole)
    kind: str  # own | kselftest | whole


def unit_name(test: str, unit: str) -> str:
    return f"{test}:{unit}"


def plan_units(ref: TestRef, planned: list[GuestTest]) -> list[tuple[GuestTest, Unit]]:
    """A test's guest commands for a map: an own test with a CHECK table as one per check
    and its frame, each alone; a kselftest target's programs as they are; others whole."""
    table = own.check_table(ref.manifest) if ref.manifest is not None and \
        ref.manifest.fmt == "ktap" and ref.kind == "own" else None
    if table is not None and len(planned) == 1:
        base = planned[0]
        assert ref.manifest is not None
        out = []
        for unit in (*(c.name for c in table), judge.FRAME):
            t = own.plan_own(ref.manifest, base.cwd, (unit,))
            out.append((replace(t, name=unit_name(ref.name, unit)),
                        Unit(test=ref.name, unit=unit, kind="own")))
        return out
    if ref.kind == "kselftest":
        return [(t, Unit(test=ref.name, unit=t.name.rsplit("-", 1)[-1] if t.name.startswith(
            "kselftest-") else t.name, kind="kselftest")) for t in planned]
    return [(t, Unit(test=ref.name, unit=ref.name, kind="whole")) for t in planned]


def tables_of(refs: Sequence[TestRef]) -> dict[str, tuple[checks.Check, ...]]:
    """Each own test's CHECK table, as its sources say it."""
    return {r.name: own.check_table(r.manifest) or () for r in refs
            if r.kind == "own" and r.manifest is not None}


def record(cell: Cell, units: Mapping[str, Unit], results: Sequence[TestResult], *,
           tables: Mapping[str, tuple[checks.Check, ...]], image: KernelImage, tree: Path,
           head: str, build_dir: Path, logs: Path, base: str) -> tuple[judge.Map, Path]:
    """The map from one boot's per-unit counters (guest/gcov/UNIT/), stored for the cell
    and written into the run directory."""
    files = sorted({*gcov.series_c_files(tree, base, head), *gcov.profile_list()})
    mapped: dict[str, judge.MappedFile] = {}
    for f in files:
        res = gitcmd.git_run(tree, "rev-parse", "--verify", "-q", f"{head}:{f}", timeout=60)
        if not res.ok:
            continue  # not in this tree
        text = gitcmd.git(tree, "show", f"{head}:{f}", what=f"git show {f}")
        mapped[f] = judge.MappedFile(blob=res.output.strip(), spans=judge.function_spans(text))
    notes = build.gcno_dir(image) or build_dir
    guest = logs / "guest" / "gcov"
    counted = []
    for name in units:
        d = guest / name
        if d.is_dir():
            counted.append(judge.UnitCounts(name=name, counts=gcov.line_counts(
                d, build_dir, gcno_dir=notes, sources=list(mapped),
                log_path=logs / "gcov-json.log")))
    if not counted:
        raise MapError(f"no gcov counters in {guest}: the guest wrote none",
                       fix="is CONFIG_GCOV_KERNEL in the kernel? see its config")
    reached = judge.units_reached(mapped, counted)
    status = {r.name: r.status for r in results}
    tests: dict[str, judge.MappedTest] = {}
    for name, u in units.items():
        if name not in reached:
            continue
        t = tests.get(u.test) or judge.MappedTest(units={}, kind=u.kind)
        fs = reached[name]
        ok = status.get(name) in (Status.PASS, Status.SKIP, Status.XFAIL)
        if u.kind == "own" and u.unit == judge.FRAME:
            t = replace(t, frame=fs)
        else:
            t = replace(t, units={**t.units, u.unit: fs | t.units.get(u.unit, frozenset())},
                        failed=t.failed if ok else (*t.failed, u.unit))
        tests[u.test] = t
    for name, t in list(tests.items()):
        if t.kind == "own":
            tests[name] = replace(t, table=tables.get(name, ()))
    m = judge.Map(key=key_of(cell), tree=gitcmd.git(tree, "rev-parse", f"{head}^{{tree}}",
                                                    what="git rev-parse").strip(),
                  recorded=time.strftime("%Y-%m-%dT%H:%M:%S%z"), run=str(logs),
                  files=mapped, tests=tests)
    text = json.dumps(judge.map_json(m), indent=1) + "\n"
    path = map_path(m.key)
    atomic.write_text(path, text)
    atomic.write_text(logs / "affected-map.json", text)
    return m, path


# ---- reading ----


def change_of(tree: Path, head: str) -> tuple[str, dict[str, str]]:
    """The change a cell's tree was built with: its last commit (head~1..head) as
    `git diff -U0`, and each file's blob in its base."""
    diff = gitcmd.git(tree, "diff", "-U0", "--no-renames", f"{head}~1", head,
                      what="git diff (the change)")
    blobs = {}
    for c in judge.changed_lines(diff):
        res = gitcmd.git_run(tree, "rev-parse", "--verify", "-q", f"{head}~1:{c.file}",
                             timeout=60)
        blobs[c.file] = res.output.strip() if res.ok else ""
    return diff, blobs


def narrow(refs: Sequence[TestRef], decision: judge.Decision, m: judge.Map | None
           ) -> tuple[tuple[TestRef, ...], Affected]:
    """The tests as the decision has them (some checks, all, or none), and what the
    results say of it."""
    by = {c.test: c for c in decision.choices}
    out: list[TestRef] = []
    told: list[AffectedTest] = []
    for ref in refs:
        c = by.get(ref.name)
        asked = ref.only if ref.kind == "kselftest" else ref.checks
        if c is not None and c.units and asked:
            c = within(c, asked)
        if c is None or c.units is None:
            out.append(ref)
            told.append(AffectedTest(test=ref.name, ran="all", why=c.why if c else ""))
        elif not c.units:
            told.append(AffectedTest(test=ref.name, ran="none", why=c.why))
        elif ref.kind == "kselftest":
            out.append(replace(ref, only=c.units, checks_why=c.why))
            told.append(AffectedTest(test=ref.name, ran="some", checks=c.units, why=c.why))
        else:
            out.append(own.with_checks(ref, c.units, c.why))
            told.append(AffectedTest(test=ref.name, ran="some", checks=c.units, why=c.why))
    where = f"recorded {m.recorded} by {m.run}" if m is not None else ""
    return tuple(out), Affected(changed=decision.changed, tests=tuple(told),
                                fallback=decision.fallback, map=where)


def within(choice: judge.Choice, asked: tuple[str, ...]) -> judge.Choice:
    """The affected checks (or kselftest programs) among those the user asked for
    (`--test T:GLOB`): --affected narrows a selection, it never widens one."""
    kept = tuple(u for u in choice.units or () if any(fnmatch.fnmatchcase(u, a) for a in asked))
    among = f"among the checks asked ({','.join(asked)})"
    if not kept:
        return replace(choice, units=(), why=f"none of the checks {among} reaches what "
                                              f"changed ({choice.why})")
    return replace(choice, units=kept, why=f"{among}: {choice.why}")

