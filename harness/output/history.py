"""Results with a memory: every run's cells, tests, subtests, splats and metrics in one
SQLite database, so that a failure can be told "new" or "known since RUN", and a test's
record over the last runs read (`harness history`).

The database is $HARNESS_HISTORY, else ~/.cache/harness/history.sqlite. It is opened in
WAL mode with a busy timeout, so parallel runs and a merge write one database; its schema
carries a version and is migrated forward on open. A run is keyed by its run id and start:
recording the same results.json again changes nothing. History is a record beside the
run, never part of it: a database that cannot be written is told as a warning with its
fix, and the run's results.json stands.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from harness import target
from harness.base import paths
from harness.base.errors import EnvironmentProblem
from harness.base.model import CellResult, Number, RunResult, leaves

SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 30_000
PASSING = ("PASS", "XFAIL", "SKIP")  # what a later failure is not "known" from

# Each migration takes the database from the version before it to its own: SQL, or a
# function for what SQL cannot compute.
MIGRATIONS: tuple[str | Callable[[sqlite3.Connection], None], ...] = (
    """
    CREATE TABLE runs (
        run_key TEXT PRIMARY KEY,   -- run_id and start: one per results.json
        run_id TEXT NOT NULL, started TEXT NOT NULL,
        started_epoch REAL NOT NULL,  -- the order of runs (started carries a time zone)
        status TEXT, exit_code INTEGER,
        harness_rev TEXT, host TEXT, command TEXT, recorded TEXT NOT NULL);
    CREATE TABLE cells (
        run_key TEXT NOT NULL REFERENCES runs, cell TEXT NOT NULL,
        kernel TEXT, kernel_version TEXT, source TEXT, package_version TEXT,
        arch TEXT, toolchain TEXT, status TEXT, patches TEXT, config TEXT,
        PRIMARY KEY (run_key, cell));
    CREATE TABLE tests (
        run_key TEXT NOT NULL REFERENCES runs, cell TEXT NOT NULL, test TEXT NOT NULL,
        status TEXT NOT NULL, duration_s REAL, reason TEXT,
        expected TEXT,  -- the status its cell declares for it (a broken variant's FAIL)
        PRIMARY KEY (run_key, cell, test));
    CREATE TABLE subtests (
        run_key TEXT NOT NULL REFERENCES runs, cell TEXT NOT NULL, test TEXT NOT NULL,
        subtest TEXT NOT NULL, status TEXT NOT NULL,
        PRIMARY KEY (run_key, cell, test, subtest));
    CREATE TABLE splats (
        run_key TEXT NOT NULL REFERENCES runs, cell TEXT NOT NULL, test TEXT NOT NULL,
        fingerprint TEXT NOT NULL, title TEXT,
        PRIMARY KEY (run_key, cell, test, fingerprint));
    CREATE TABLE metrics (
        run_key TEXT NOT NULL REFERENCES runs, cell TEXT NOT NULL, test TEXT NOT NULL,
        metric TEXT NOT NULL, median REAL, spread REAL, unit TEXT,
        PRIMARY KEY (run_key, cell, test, metric));
    CREATE INDEX tests_by_name ON tests (test, cell);
    """,
    # 2: ad-hoc cells kept under what they tested (cell_key), not all as "adhoc"
    lambda conn: _rekey_ad_hoc(conn),
)


class HistoryError(EnvironmentProblem):
    """The history database cannot be read or written."""


def default_path() -> Path:
    env = os.environ.get("HARNESS_HISTORY")
    return Path(env) if env else paths.cache_root() / "history.sqlite"


@contextmanager
def opened(path: Path | None = None) -> Iterator[sqlite3.Connection]:
    """The database, migrated to SCHEMA_VERSION; one transaction, committed on success."""
    where = path or default_path()
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(where, timeout=BUSY_TIMEOUT_MS / 1000)) as conn:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            _migrate(conn, where)
            try:
                yield conn
                conn.commit()
            except BaseException:
                # sqlite may have rolled back already (a full disk does): the first error
                # is the one to tell
                with suppress(sqlite3.Error):
                    conn.rollback()
                raise
    except sqlite3.DatabaseError as exc:
        raise _told(where, exc) from None
    except OSError as exc:
        raise HistoryError(f"history database {where}: {exc.strerror or exc}",
                           fix="free space there, or point HARNESS_HISTORY at a writable "
                               "file") from None


def _told(where: Path, exc: sqlite3.DatabaseError) -> HistoryError:
    """What went wrong with the database, and what to do about it."""
    text = str(exc)
    if "full" in text:
        return HistoryError(f"history database {where}: the disk under it is full ({text})",
                            fix="free space there, or point HARNESS_HISTORY at another "
                                "disk; then record the run: harness history import RUN")
    if "locked" in text or "busy" in text:
        return HistoryError(f"history database {where}: another harness held it longer "
                            f"than {BUSY_TIMEOUT_MS // 1000} s ({text})",
                            fix="record the run when it is done: harness history import RUN")
    return HistoryError(
        f"history database {where}: {text}",
        fix=f"if it is damaged, move it away (mv {where} {where}.bad) and import the runs "
            "again: harness history import RUN...")


def _migrate(conn: sqlite3.Connection, where: Path) -> None:
    """Forward to SCHEMA_VERSION, under the database's write lock (BEGIN IMMEDIATE): two
    harnesses opening a new database at once migrate it once."""
    if _version(conn, where) == SCHEMA_VERSION:
        return
    level = conn.isolation_level
    conn.isolation_level = None  # the transaction is ours to begin and end
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for number in range(_version(conn, where) + 1, SCHEMA_VERSION + 1):
                step = MIGRATIONS[number - 1]
                if callable(step):
                    step(conn)
                else:
                    for statement in step.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):  # sqlite may have rolled back itself (disk full)
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.isolation_level = level


def _version(conn: sqlite3.Connection, where: Path) -> int:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise HistoryError(f"history database {where} has schema {version}; this harness "
                           f"knows up to {SCHEMA_VERSION}",
                           fix="use the newer harness, or another HARNESS_HISTORY")
    return version


def _until(run: RunResult) -> float:
    """A run's start, for "the runs before it" (no start: after every recorded run)."""
    return _epoch(run.started or "") or float("inf")


def cell_key(c: CellResult) -> str:
    """The name a cell's results are kept under (`ad_hoc_key`)."""
    return ad_hoc_key(c.cell, kernel=c.kernel, patches=[p.name for p in c.patches],
                      fragments=c.config.fragments if c.config else (), arch=c.arch,
                      toolchain=c.toolchain)


def ad_hoc_key(name: str, *, kernel: str, patches: Sequence[str], fragments: Sequence[str],
               arch: str, toolchain: str) -> str:
    """The name a cell's results are kept under. A matrix cell is its name (its definition
    is what it tests); an ad-hoc cell ("adhoc", "adhoc-N") is named by what it was asked
    to test: the kernel spec, the patches applied (how many, a hash of their names), the
    config fragments and the target when not the defaults. Runs of other series are then
    other records, and a run of your tree (git:PATH) continues its record as HEAD moves."""
    if not re.fullmatch(r"adhoc(-\d+)?(\.base)?", name):
        return name
    parts = [kernel or "?"]
    if patches:
        digest = hashlib.sha1("\n".join(patches).encode()).hexdigest()[:8]
        parts.append(f"{len(patches)} patches {digest}")
    stems = [Path(f).stem for f in fragments]
    if stems and stems != ["base"]:
        parts.append("config " + "+".join(stems))
    for value, default in ((arch, target.DEFAULT_ARCH), (toolchain, target.DEFAULT_TOOLCHAIN)):
        if value and value != default:
            parts.append(value)
    return ("adhoc " + ", ".join(parts) +
            (" (baseline)" if name.endswith(".base") else ""))


def cell_keys(cells: Sequence[CellResult]) -> list[str]:
    """Each cell's cell_key, made unique within its run (`unique`)."""
    return unique([cell_key(c) for c in cells])


def unique(keys: Sequence[str]) -> list[str]:
    """Keys made unique within their run: two ad-hoc cells asked to test the same thing
    (--kernel X --kernel X) are "KEY" and "KEY #2"."""
    out: list[str] = []
    for key in keys:
        n = 1
        while (f"{key} #{n}" if n > 1 else key) in out:
            n += 1
        out.append(f"{key} #{n}" if n > 1 else key)
    return out


def _rekey_ad_hoc(conn: sqlite3.Connection) -> None:
    """Every ad-hoc cell's rows renamed to its cell_key, from what the cells table kept."""
    rows = conn.execute("SELECT run_key, cell, kernel, patches, config, arch, toolchain "
                        "FROM cells ORDER BY run_key, rowid").fetchall()
    by_run: dict[str, list[tuple[str, str]]] = {}
    for run, cell, kernel, patches, config, arch, toolchain in rows:
        by_run.setdefault(run, []).append((cell, ad_hoc_key(
            cell, kernel=kernel or "", patches=[str(n) for n in json.loads(patches or "[]")],
            fragments=[str(f) for f in json.loads(config or "[]")], arch=arch or "",
            toolchain=toolchain or "")))
    for run, cells in by_run.items():
        renamed = [(old, new) for (old, _), new in zip(
            cells, unique([key for _, key in cells]), strict=True) if old != new]
        for table in ("cells", "tests", "subtests", "splats", "metrics"):
            # through a name no cell has, so that no rename meets a row not yet renamed
            for old, _new in renamed:
                conn.execute(f"UPDATE {table} SET cell = ? WHERE run_key = ? AND cell = ?",
                             (f"\0{old}", run, old))
            for old, new in renamed:
                conn.execute(f"UPDATE {table} SET cell = ? WHERE run_key = ? AND cell = ?",
                             (new, run, f"\0{old}"))


def run_key(run: RunResult) -> str:
    return f"{run.run_id or 'run'}@{run.started or ''}"


def record(conn: sqlite3.Connection, run: RunResult) -> bool:
    """A run into the database; False when this run is there already."""
    key = run_key(run)
    if not conn.in_transaction:
        # the write lock first: a reader that upgrades to a writer after another
        # harness committed gets SQLITE_BUSY at once, whatever the busy timeout
        conn.execute("BEGIN IMMEDIATE")
    if conn.execute("SELECT 1 FROM runs WHERE run_key = ?", (key,)).fetchone():
        return False
    host = {} if run.host is None else {"kernel": run.host.kernel, "cpus": run.host.cpus}
    conn.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (
        key, run.run_id or "", run.started or "", _epoch(run.started or ""),
        run.status.value if run.status else None, run.exit_code, run.harness_rev,
        json.dumps(host, sort_keys=True), json.dumps(list(run.command or ())),
        time.strftime("%Y-%m-%dT%H:%M:%S%z")))
    for c, cell in zip(run.cells, cell_keys(run.cells), strict=True):
        conn.execute("INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (
            key, cell, c.kernel, c.kernel_version, c.source, c.package_version, c.arch,
            c.toolchain, c.status.value, json.dumps([p.name for p in c.patches]),
            json.dumps(list(c.config.fragments) if c.config else [])))
        for t in c.tests:
            conn.execute("INSERT OR IGNORE INTO tests VALUES (?, ?, ?, ?, ?, ?, ?)", (
                key, cell, t.name, t.status.value, t.duration_s, t.reason,
                t.expected_status.value if t.expected_status else None))
            # a KTAP tree's leaf results by their own names (a kselftest runner wraps each
            # program's cases in one "selftests: TARGET: PROGRAM" result; declarations and
            # `TEST:SUBTEST` name the cases)
            for _, leaf in leaves(t.ktap.cases if t.ktap else ()):
                conn.execute("INSERT OR IGNORE INTO subtests VALUES (?, ?, ?, ?, ?)", (
                    key, cell, t.name, leaf.name, leaf.status.value))
            # declared noise is no splat of the kernel's to know a later one by
            for s in [s for s in t.splats if not s.expected]:
                conn.execute("INSERT OR IGNORE INTO splats VALUES (?, ?, ?, ?, ?)", (
                    key, cell, t.name, s.fingerprint, s.title))
            for m in t.metrics.measurements if t.metrics else ():
                conn.execute("INSERT OR IGNORE INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?)", (
                    key, cell, t.name, m.path, _number(m.median), _number(m.spread),
                    m.unit or ""))
    return True


def _epoch(started: str) -> float:
    """results.json's start (%Y-%m-%dT%H:%M:%S%z) as seconds since the epoch: runs from
    machines in other time zones, or across a clock change, order by when they ran."""
    try:
        return datetime.strptime(started, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return 0.0


def _number(value: Number | None) -> float | None:
    """A measurement as SQLite can keep it (a u64 beyond its integers is a float here)."""
    return None if value is None else float(value)


def record_file(results_json: Path, path: Path | None = None) -> bool:
    """A run's results.json (read and checked as every command reads one) recorded."""
    from harness.output.results import load_run

    run, _cell, _file = load_run(str(results_json))
    with opened(path) as conn:
        return record(conn, run)


@dataclass(frozen=True, kw_only=True)
class SplatSeen:
    """A splat fingerprint in a test's runs: the first and last run with it, how many."""

    fingerprint: str
    title: str
    first_run: str
    last_run: str
    runs: int


@dataclass(frozen=True, kw_only=True)
class Record:
    """One test (or subtest) of one cell over the last runs, oldest first."""

    cell: str
    test: str
    kernel_version: str
    outcomes: tuple[tuple[str, str], ...]  # (run_id, status)
    splats: tuple[SplatSeen, ...] = ()

    @property
    def passed(self) -> int:
        return sum(s in PASSING for _, s in self.outcomes)

    @property
    def flips(self) -> int:
        ok = [s in PASSING for _, s in self.outcomes]
        return sum(a != b for a, b in itertools.pairwise(ok))

    @property
    def failures(self) -> tuple[str, ...]:
        return tuple(r for r, s in self.outcomes if s not in PASSING)


def records(conn: sqlite3.Connection, selector: str = "", last: int = 10) -> list[Record]:
    """The record of each (cell, test) the selector names (a cell, a test, TEST:SUBTEST,
    or all), over the last `last` runs that ran it."""
    # a cell first: an ad-hoc cell's name holds colons ("adhoc debian:6.12, ...");
    # "adhoc" names every ad-hoc cell (a word that begins cell names, when no cell is it)
    exact = bool(selector) and conn.execute(
        "SELECT 1 FROM cells WHERE cell = ? LIMIT 1", (selector,)).fetchone() is not None
    prefix = "" if exact or not selector else _like_prefix(selector) + " %"
    is_cell = exact or (bool(prefix) and conn.execute(
        "SELECT 1 FROM cells WHERE cell LIKE ? ESCAPE '!' LIMIT 1", (prefix,)
    ).fetchone() is not None)
    test, _, subtest = ((selector, "", "") if is_cell or ":" not in selector
                        else selector.partition(":"))
    if subtest:
        rows = conn.execute(
            "SELECT r.run_id, r.started, s.cell, s.test || ':' || s.subtest, s.status, "
            "c.kernel_version FROM subtests s JOIN runs r USING (run_key) "
            "JOIN cells c USING (run_key, cell) WHERE s.test = ? AND s.subtest = ? "
            "ORDER BY r.started_epoch", (test, subtest)).fetchall()
    else:
        rows = conn.execute(
            "SELECT r.run_id, r.started, t.cell, t.test, t.status, c.kernel_version "
            "FROM tests t JOIN runs r USING (run_key) JOIN cells c USING (run_key, cell) "
            "WHERE ? = '' OR t.cell = ? OR t.cell LIKE ? ESCAPE '!' OR t.test = ? "
            "ORDER BY r.started_epoch",
            (selector, selector, prefix or "\0", selector)).fetchall()
    grouped: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for run_id, _started, cell, name, status, version in rows:
        grouped.setdefault((cell, name), []).append((run_id, status, version or ""))
    return [Record(cell=cell, test=name, kernel_version=seen[-1][2],
                   outcomes=tuple((r, s) for r, s, _ in seen[-last:]),
                   splats=() if subtest else _splats_seen(conn, cell, name))
            for (cell, name), seen in sorted(grouped.items())]


def _like_prefix(text: str) -> str:
    """text as a LIKE pattern matching itself only (escaped with '!')."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def _splats_seen(conn: sqlite3.Connection, cell: str, test: str) -> tuple[SplatSeen, ...]:
    """Every splat fingerprint the test ever had in this cell, over all recorded runs."""
    rows = conn.execute(
        "SELECT s.fingerprint, s.title, r.run_id FROM splats s JOIN runs r USING (run_key) "
        "WHERE s.cell = ? AND s.test = ? ORDER BY r.started_epoch", (cell, test)).fetchall()
    seen: dict[str, list[tuple[str, str]]] = {}
    for fp, title, run_id in rows:
        seen.setdefault(fp, []).append((run_id, title or ""))
    return tuple(SplatSeen(fingerprint=fp, title=runs[0][1], first_run=runs[0][0],
                           last_run=runs[-1][0], runs=len(runs))
                 for fp, runs in seen.items())


def labels(conn: sqlite3.Connection, run: RunResult, last: int = 20,
           ) -> dict[tuple[str, str], str]:
    """(cell, test) -> "new" or "known since RUN (N of the last M runs)" for each failing
    test of this run, judged by the runs of the same cell (cell_key) recorded before it
    (this one left out); (cell, "test: splat FINGERPRINT") the same for each splat."""
    key = run_key(run)
    out: dict[tuple[str, str], str] = {}
    for c, held in zip(run.cells, cell_keys(run.cells), strict=True):
        for t in c.tests:
            if t.status.value in PASSING:
                continue
            before = conn.execute(
                "SELECT r.run_id, t.status FROM tests t JOIN runs r USING (run_key) "
                "WHERE t.cell = ? AND t.test = ? AND r.run_key != ? AND r.started_epoch < ? "
                "ORDER BY r.started_epoch DESC LIMIT ?",
                (held, t.name, key, _until(run), last)).fetchall()
            failed = [r for r, s in before if s not in PASSING]
            out[(c.cell, t.name)] = _known(failed, len(before))
        for t in c.tests:
            for fp in dict.fromkeys(s.fingerprint for s in t.splats if not s.expected):
                # a splat is the cell's kernel's, whichever test it came up in
                before = conn.execute(
                    "SELECT r.run_id, EXISTS (SELECT 1 FROM splats s WHERE s.run_key = "
                    "r.run_key AND s.cell = c.cell AND s.fingerprint = ?) FROM cells c "
                    "JOIN runs r USING (run_key) WHERE c.cell = ? AND r.run_key != ? AND "
                    "r.started_epoch < ? ORDER BY r.started_epoch DESC LIMIT ?",
                    (fp, held, key, _until(run), last)).fetchall()
                out[(c.cell, f"{t.name}: splat {fp}")] = _known(
                    [r for r, seen in before if seen], len(before))
    return out


def _known(failed: Sequence[str], runs: int) -> str:
    """`failed`: the runs before this one that had it, newest first."""
    return (f"known since {failed[-1]} ({len(failed)} of the last {runs} runs)"
            if failed else "new")


def render(found: Sequence[Record]) -> str:
    if not found:
        return "no such test in the history (harness history lists what it holds)"
    rows = [("cell", "test", "kernel", "passed", "flips", "first failure", "last failure",
             "recent (oldest first)")]
    for r in found:
        fails = r.failures
        rows.append((r.cell, r.test, r.kernel_version, f"{r.passed}/{len(r.outcomes)}",
                     str(r.flips), fails[0] if fails else "-", fails[-1] if fails else "-",
                     "".join("." if s in PASSING else "F" for _, s in r.outcomes)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    splats = [f"  {r.cell}/{r.test}: {p.fingerprint} first in {p.first_run}, last in "
              f"{p.last_run}, in {p.runs} runs ({p.title})" for r in found for p in r.splats]
    return "\n".join(table + (["", "splats (every recorded run):", *splats] if splats else []))


def to_json(found: Sequence[Record]) -> list[dict[str, Any]]:
    return [{"cell": r.cell, "test": r.test, "kernel_version": r.kernel_version,
             "runs": len(r.outcomes), "passed": r.passed, "flips": r.flips,
             "first_failure": (r.failures or (None,))[0],
             "last_failure": (r.failures or (None,))[-1],
             "outcomes": [{"run_id": run, "status": s} for run, s in r.outcomes],
             "splats": [{"fingerprint": p.fingerprint, "title": p.title,
                         "first_run": p.first_run, "last_run": p.last_run, "runs": p.runs}
                        for p in r.splats]}
            for r in found]


# A boot in which a test (or subtest) failed: judged statuses included, since a declared
# flaky test's failure is recorded as XFAIL.
FAILED_IN_BOOT = ("FAIL", "TIMEOUT", "XFAIL", "FLAKY", "CRASHED")
ENOUGH_BOOTS = 10  # fewer fresh boots than this tell nothing about a flake either way
# A declared flake is "no longer flaky" when the interval says its failure rate is below
# this: with no failure, that takes about 75 fresh boots (0 of 20 still allows 16%).
DROP_BELOW = 0.05


def wilson(failed: int, boots: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% (Wilson score) interval of a failure rate seen in `failed` of `boots`."""
    if boots == 0:
        return 0.0, 1.0
    p = failed / boots
    centre = (p + z * z / (2 * boots)) / (1 + z * z / boots)
    half = z * ((p * (1 - p) / boots + z * z / (4 * boots * boots)) ** 0.5) / (1 + z * z / boots)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True, kw_only=True)
class Flake:
    """A test's (or subtest's) failures over fresh boots: one recorded run is one boot."""

    test: str
    kernel: str  # the declaration's range, or the kernel's major.minor
    failed: int
    boots: int
    declared: bool

    def advice(self) -> str:
        low, high = wilson(self.failed, self.boots)
        rate = f"{self.failed} of {self.boots} fresh boots (95%: {low:.0%}-{high:.0%})"
        if not self.declared:
            return f"fails intermittently: {rate}; not declared flaky: declare it or fix it"
        if self.boots < ENOUGH_BOOTS:
            return f"declared flaky; {rate}: too few boots to tell"
        if self.failed == 0 and high < DROP_BELOW:
            return f"declared flaky, but no failure in {rate}: drop the declaration"
        if self.failed == 0:
            return (f"declared flaky; no failure in {rate}: not enough to drop it (the "
                    f"interval must fall under {DROP_BELOW:.0%})")
        return f"declared flaky, measured: failed in {rate}"

    @property
    def warn(self) -> bool:
        """The data contradicts the declaration (or its absence)."""
        high = wilson(self.failed, self.boots)[1]
        return not self.declared or (self.failed == 0 and high < DROP_BELOW)


def flakes(conn: sqlite3.Connection, declared: Sequence[Any]) -> list[Flake]:
    """Each declared-flaky test with its measured failure rate (on the kernels its range
    names), and each test not declared that failed in some fresh boots and passed in
    others. `declared`: verdict.KnownFailure entries (expected failures are left alone)."""
    from harness.judge.verdict import version_matches

    # a result whose cell declares it (a broken variant's FAIL) is no evidence of a flake
    rows = conn.execute(
        "SELECT t.cell, t.test, '', t.status, c.kernel_version FROM tests t "
        "JOIN cells c USING (run_key, cell) WHERE coalesce(t.expected, 'PASS') = 'PASS' "
        "UNION ALL SELECT s.cell, s.test, s.subtest, s.status, c.kernel_version "
        "FROM subtests s JOIN cells c USING (run_key, cell) JOIN tests t "
        "USING (run_key, cell, test) WHERE coalesce(t.expected, 'PASS') = 'PASS'").fetchall()
    out: list[Flake] = []
    known = {(d.test, d.subtest or "") for d in declared}
    # a test whose cases are declared is judged by its cases, not as a whole
    known |= {(d.test, "") for d in declared}
    for d in declared:
        if not d.flaky:
            continue
        seen = [s for _cell, test, sub, s, v in rows
                if (test, sub) == (d.test, d.subtest or "") and version_matches(v or "",
                                                                                  d.kernel)]
        out.append(Flake(test=f"{d.test}:{d.subtest}" if d.subtest else d.test,
                         kernel=d.kernel, failed=sum(s in FAILED_IN_BOOT for s in seen),
                         boots=len(seen), declared=True))
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for cell, test, sub, status, version in rows:
        if (test, sub) not in known and status != "SKIP":
            line = ".".join((version or "?").split(".")[:2])
            grouped.setdefault((cell, test, sub, line), []).append(status)
    for (cell, test, sub, line), statuses in sorted(grouped.items()):
        failed = sum(s in FAILED_IN_BOOT for s in statuses)
        if 0 < failed < len(statuses) and "CRASHED" not in statuses:
            out.append(Flake(test=f"{test}:{sub}" if sub else test, kernel=f"{cell}, {line}",
                             failed=failed, boots=len(statuses), declared=False))
    return out


def strips(conn: sqlite3.Connection, run: RunResult, last: int = 20,
           ) -> dict[tuple[str, str], str]:
    """(cell, test) -> its outcomes in the last runs up to this one, oldest first
    (. passed, F failed): the strip the HTML report shows beside each test."""
    out: dict[tuple[str, str], str] = {}
    until = _until(run)
    for c, held in zip(run.cells, cell_keys(run.cells), strict=True):
        for t in c.tests:
            rows = conn.execute(
                "SELECT t.status FROM tests t JOIN runs r USING (run_key) WHERE t.cell = ? "
                "AND t.test = ? AND r.started_epoch <= ? ORDER BY r.started_epoch DESC "
                "LIMIT ?", (held, t.name, until, last)).fetchall()
            if rows:
                out[(c.cell, t.name)] = "".join(
                    "." if s in PASSING else "F" for (s,) in reversed(rows))
    return out
