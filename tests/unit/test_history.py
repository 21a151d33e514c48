"""The history database (harness/output/history.py) on real results.json files
(tests/golden/compare/README.md): recorded once however often imported, records over
runs with pass rates and flips, failures told new or known, subtests, a damaged or newer
database told as cause and fix, and writers in parallel processes losing nothing."""

from __future__ import annotations

import copy
import json
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.base.model import CellResult, Status
from harness.drivers import run
from harness.output import history, results
from tests.helpers.runseq import as_nth, broken_run, faults_run

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "compare"


typed = results.from_json  # a results.json document as the one reader reads it


def test_a_run_is_recorded_once_however_often_imported(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    with history.opened(db) as conn:
        assert history.record(conn, typed(broken_run()))
        assert not history.record(conn, typed(broken_run()))
        tests = conn.execute("SELECT count(*) FROM tests").fetchone()[0]
        subtests = conn.execute("SELECT count(*) FROM subtests").fetchone()[0]
    assert tests == 5 and subtests > 20  # memcg_kfuncs' KTAP cases are there
    assert not history.record_file(GOLDEN / "adhoc-memcg-kfuncs-broken.json", db)


def test_rates_flips_and_new_or_known(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    sequence = ["PASS", "PASS", "FAIL", "PASS", "FAIL"]
    told = []
    with history.opened(db) as conn:
        for n, status in enumerate(sequence, start=1):
            doc = as_nth(broken_run(), n, status)
            told.append(history.labels(conn, typed(doc)).get(("adhoc", "memcg_kfuncs")))
            history.record(conn, typed(doc))
        [rec] = history.records(conn, "memcg_kfuncs")
        [rstat] = history.records(conn, "rstat_propagation")
    assert told == [None, None, "new", None, "known since r3 (1 of the last 4 runs)"]
    assert (rec.passed, len(rec.outcomes), rec.flips) == (3, 5, 3)
    assert rec.failures == ("r3", "r5") and rec.kernel_version == "6.12.117+"
    assert (rstat.passed, rstat.flips) == (5, 0)
    table = history.render([rec])
    assert "3/5" in table and "..F.F" in table


def test_a_subtest_has_its_own_record(tmp_path: Path) -> None:
    doc = broken_run()
    memcg = next(t for t in doc["cells"][0]["tests"] if t["name"] == "memcg_kfuncs")
    failing = next(s["name"] for s in memcg["ktap"]["subtests"] if s["status"] == "FAIL")
    with history.opened(tmp_path / "h.sqlite") as conn:
        history.record(conn, typed(doc))
        [rec] = history.records(conn, f"memcg_kfuncs:{failing}")
    assert rec.test == f"memcg_kfuncs:{failing}" and rec.failures == ("r-adhoc-broken",)


def test_a_damaged_database_is_told_and_the_run_stands(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(history.HistoryError, match="history database") as exc, \
            history.opened(db):
        pass
    assert "mv " in exc.value.fix and "harness history import" in exc.value.fix
    assert "not a database" in exc.value.message
    results = tmp_path / "results.json"
    results.write_text(json.dumps(broken_run()))
    run.remember(results, db)  # a warning, not an error
    assert "history not recorded" in caplog.text
    assert json.loads(results.read_text())["run_id"] == "r-adhoc-broken"


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {history.SCHEMA_VERSION + 1}")
    with pytest.raises(history.HistoryError, match="knows up to"), history.opened(db):
        pass


def _write(args: tuple[str, int]) -> None:
    db, n = args
    with history.opened(Path(db)) as conn:
        history.record(conn, typed(as_nth(broken_run(), n, "FAIL")))


def test_parallel_writers_lose_no_row(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    # spawned, not forked: a child forked from a process that has used SQLite inherits its
    # table of file locks, and the inode of a removed earlier database may be this one's
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_write, [(str(db), n) for n in range(1, 25)])
    with history.opened(db) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 24
        assert conn.execute("SELECT count(*) FROM tests").fetchone()[0] == 24 * 5


def test_the_history_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "h.sqlite")
    run_dir = GOLDEN / "adhoc-memcg-kfuncs-broken.json"
    assert cli.main(["history", "import", str(run_dir), "--history", db]) == 0
    assert cli.main(["history", "import", str(run_dir), "--history", db]) == 0
    out = capsys.readouterr().out
    assert "recorded:" in out and "already recorded:" in out
    assert cli.main(["history", "memcg_kfuncs", "--json", "--history", db]) == 0
    [rec] = json.loads(capsys.readouterr().out)
    assert rec["runs"] == 1 and rec["first_failure"] == "r-adhoc-broken"
    assert cli.main(["history", "no_such_test", "--history", db]) == 1
    assert "no such test" in capsys.readouterr().out
    assert cli.main(["history", "a", "b", "--history", db]) == 2


def test_flakes_are_measured_over_fresh_boots_not_declared(tmp_path: Path) -> None:
    from harness.judge.verdict import KnownFailure

    low, high = history.wilson(0, 20)
    assert low == 0.0 and 0.15 < high < 0.17
    assert history.wilson(5, 10) == pytest.approx((0.237, 0.763), abs=0.001)
    declared_stable = KnownFailure(test="rstat_propagation", subtest=None,
                                   kernel=">=6.12,<6.13", reason="r", flaky=True)
    declared_flaky = KnownFailure(test="memcg_kfuncs", subtest="parent_includes_child",
                                  kernel=">=6.12,<6.13", reason="r", flaky=True)
    on_61 = KnownFailure(test="memcg_kfuncs", subtest=None, kernel="<6.2", reason="r",
                         flaky=True)
    with history.opened(tmp_path / "h.sqlite") as conn:
        for n in range(1, 13):  # memcg_kfuncs fails in every third boot
            history.record(conn, typed(as_nth(broken_run(), n, "FAIL" if n % 3 == 0 else "PASS")))
        found = {f.test: f for f in history.flakes(conn, [declared_stable, declared_flaky,
                                                          on_61])}
    stable = found["rstat_propagation"]
    # 0 of 12 still allows a 24% failure rate: not enough to call it stable
    assert (stable.failed, stable.boots, stable.warn) == (0, 12, False)
    assert "not enough to drop it" in stable.advice()
    # about 75 clean boots bring the interval under 5%: then drop it
    many = history.Flake(test="t", kernel="k", failed=0, boots=80, declared=True)
    assert many.warn and many.advice().endswith("drop the declaration")
    # the subtest failed in every recorded run (the golden's own FAIL): measured, kept
    sub = found["memcg_kfuncs:parent_includes_child"]
    assert (sub.failed, sub.boots, sub.warn) == (12, 12, False)
    assert found["memcg_kfuncs"].declared and found["memcg_kfuncs"].boots == 0  # not 6.1
    assert "too few boots to tell" in found["memcg_kfuncs"].advice()


def test_an_intermittent_test_not_declared_is_told(tmp_path: Path) -> None:
    with history.opened(tmp_path / "h.sqlite") as conn:
        for n in range(1, 7):
            history.record(conn, typed(as_nth(broken_run(), n, "FAIL" if n in (2, 5) else "PASS")))
        found = {f.test: f for f in history.flakes(conn, [])}
    flake = found["memcg_kfuncs"]
    assert (flake.failed, flake.boots, flake.declared, flake.warn) == (2, 6, False, True)
    assert flake.advice().startswith("fails intermittently: 2 of 6 fresh boots")
    assert "declare it or fix it" in flake.advice()
    assert "rstat_propagation" not in found  # passed every time: nothing to tell


def _report_page(tmp_path: Path, doc: dict[str, Any]) -> str:
    """`harness report` of this run (the history as $HARNESS_HISTORY holds it)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(doc))
    assert cli.main(["report", str(run_dir)]) == 0
    return (run_dir / "report" / "index.html").read_text()


def test_the_report_shows_each_tests_recent_outcomes(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_HISTORY", str(tmp_path / "h.sqlite"))
    docs = [as_nth(broken_run(), n, s) for n, s in enumerate(["PASS", "FAIL", "PASS"], 1)]
    with history.opened() as conn:
        for doc in docs:
            history.record(conn, typed(doc))
        assert history.strips(conn, typed(docs[1]))[("adhoc", "memcg_kfuncs")] == ".F"
    page = _report_page(tmp_path, docs[2])
    assert '<code class="strip">.F.</code>' in page


def test_a_full_disk_under_the_history_is_told_and_the_run_stands(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, tiny_disk: Path) -> None:
    """A real ENOSPC: the history on a 64 KiB tmpfs, a run with thousands of subtests."""
    doc = broken_run()
    memcg = next(t for t in doc["cells"][0]["tests"] if t["name"] == "memcg_kfuncs")
    memcg["ktap"]["subtests"] = [{"name": f"case_{i}_" + "x" * 40, "status": "PASS"}
                                 for i in range(4000)]
    results = tmp_path / "results.json"
    results.write_text(json.dumps(doc))
    with pytest.raises(history.HistoryError) as exc:
        history.record_file(results, tiny_disk / "h.sqlite")
    assert "the disk under it is full" in str(exc.value)
    assert "free space there" in exc.value.fix
    run.remember(results, tiny_disk / "h.sqlite")  # a warning; the run's record stands
    assert "history not recorded" in caplog.text
    assert json.loads(results.read_text())["run_id"] == "r-adhoc-broken"


def test_a_kselftest_runners_cases_are_recorded_by_their_own_names(tmp_path: Path) -> None:
    """The kselftest runner wraps a program's cases in one result ("selftests: cgroup:
    test_freezer"); declarations and TEST:SUBTEST name the cases."""
    from harness.judge.verdict import KnownFailure

    doc = broken_run()
    memcg = next(t for t in doc["cells"][0]["tests"] if t["name"] == "memcg_kfuncs")
    memcg["ktap"]["subtests"] = [{"name": "selftests: x: memcg_kfuncs", "status": "XFAIL",
                                  "subtests": [{"name": "case_a", "status": "PASS"},
                                               {"name": "case_b", "status": "XFAIL"}]}]
    memcg["status"] = "XFAIL"
    declared = KnownFailure(test="memcg_kfuncs", subtest="case_b", kernel=">=6.12",
                            reason="r", flaky=True)
    with history.opened(tmp_path / "h.sqlite") as conn:
        history.record(conn, typed(doc))
        [rec] = history.records(conn, "memcg_kfuncs:case_b")
        found = {f.test: f for f in history.flakes(conn, [declared])}
    assert rec.outcomes == (("r-adhoc-broken", "XFAIL"),)
    assert found["memcg_kfuncs:case_b"].failed == 1
    assert "memcg_kfuncs" not in found  # judged by its declared case, not as a whole


def test_concurrent_runs_and_a_merge_write_one_history(tmp_path: Path) -> None:
    """Real harness processes at once (`run` on the fake kernel tree and the fake vng,
    `merge` of two shards recorded elsewhere), one database: no row lost."""
    import subprocess
    import sys

    from tests.helpers.faketree import FAKES, committed_tree, fake_vng_env

    tree = committed_tree(tmp_path / "linux")
    test = tmp_path / "fake_pass"
    test.mkdir()
    (test / "run.sh").write_text("echo 'TAP version 13'; echo '1..2'; echo 'ok 1 - a'; "
                                 "echo 'ok 2 - b'\n")
    (test / "test.toml").write_text(f'name = "fake_pass"\n[run]\ncommand = ["sh", '
                                    f'"{test / "run.sh"}"]\ntimeout = 5\n')
    cells = "abcd"
    (tmp_path / "m.toml").write_text("".join(
        f'[[cell]]\nname = "{c}"\ntier = "default"\nkernel = "git:{tree}"\n'
        f'configs = ["{FAKES / "fake.config"}"]\ntests = ["{test}"]\n\n' for c in cells))
    env = fake_vng_env(tmp_path / "cache")

    def harness(*args: str, db: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "harness", *args], text=True,
                                cwd=tmp_path, env={**env, "HARNESS_HISTORY": db},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def done(procs: list[subprocess.Popen[str]]) -> None:
        for p in procs:
            out = p.communicate(timeout=300)[0]
            assert p.returncode == 0, out[-3000:]

    matrix = ("--matrix", str(tmp_path / "m.toml"))
    # the kernel into the store, and two shards recorded in another database
    done([harness("run", *matrix, "--cell", "a", "--out", str(tmp_path / "shard-a"),
                  db=str(tmp_path / "elsewhere.sqlite"))])
    done([harness("run", *matrix, "--cell", "b", "--out", str(tmp_path / "shard-b"),
                  db=str(tmp_path / "elsewhere.sqlite"))])
    shared = str(tmp_path / "shared.sqlite")
    done([harness("run", *matrix, "--cell", "c", "--out", str(tmp_path / "run-c"), db=shared),
          harness("run", *matrix, "--cell", "d", "--out", str(tmp_path / "run-d"), db=shared),
          harness("merge", str(tmp_path / "shard-a"), str(tmp_path / "shard-b"), "--out",
                  str(tmp_path / "merged"), db=shared)])
    with history.opened(Path(shared)) as conn:
        ids = {json.loads((tmp_path / d / "results.json").read_text())["run_id"]
               for d in ("run-c", "run-d", "merged")}
        assert {r for (r,) in conn.execute("SELECT run_id FROM runs")} == ids
        by_run = dict(conn.execute(
            "SELECT r.run_id, group_concat(DISTINCT t.cell) FROM tests t JOIN runs r "
            "USING (run_key) WHERE t.test = 'fake_pass' GROUP BY r.run_id"))
        assert sorted(",".join(sorted(v.split(","))) for v in by_run.values()) == [
            "a,b", "c", "d"]
        assert conn.execute("SELECT count(*) FROM subtests WHERE test = 'fake_pass'"
                            ).fetchone()[0] == 4 * 2


def test_each_splat_is_told_new_or_known_and_its_first_run_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_HISTORY", str(tmp_path / "h.sqlite"))
    # a splat's fingerprint is its kind and faulting function (faults.json was written when
    # it held the normalised title too; the reader derives it from the splat)
    warn = ("6.12-faults", "lkdtm_warn: splat WARNING:lkdtm_WARNING")
    bug = ("6.12-faults", "lkdtm_bug: splat BUG:lkdtm_BUG")
    told = []
    docs = [faults_run(1, bug=True), faults_run(2, bug=False), faults_run(3, bug=True)]
    with history.opened() as conn:
        for doc in docs:
            told.append(history.labels(conn, typed(doc)))
            history.record(conn, typed(doc))
        [rec] = history.records(conn, "lkdtm_bug")
    assert (told[0][warn], told[0][bug]) == ("new", "new")
    assert told[1][warn] == "known since f1 (1 of the last 1 runs)" and bug not in told[1]
    assert told[2][bug] == "known since f1 (1 of the last 2 runs)"
    assert told[2][warn] == "known since f1 (2 of the last 2 runs)"
    [seen] = rec.splats
    assert (seen.first_run, seen.last_run, seen.runs) == ("f1", "f3", 2)
    assert "lkdtm_bug: BUG:lkdtm_BUG" in history.render([rec])
    assert history.to_json([rec])[0]["splats"][0]["first_run"] == "f1"
    # the report of the third run says so beside the test and beside the splat
    page = _report_page(tmp_path, docs[2])
    assert "history: known since f1 (1 of the last 2 runs)" in page
    assert "&middot; history: known since f1 (2 of the last 2 runs)" in page


def test_ad_hoc_runs_of_other_series_are_other_records(tmp_path: Path) -> None:
    """Every ad-hoc run is cell "adhoc": its record is kept under what it tested, so a
    deliberately broken series after runs of the good one is a new failure of its own
    record, not a flip or an intermittent failure of the good one's."""
    broken = broken_run()
    good = copy.deepcopy(broken)
    cell = good["cells"][0]
    cell["patches"] = [p for p in cell["patches"] if "BROKEN" not in p["name"]]
    for t in cell["tests"]:
        t["status"] = "PASS"
    docs = []
    for n, doc in enumerate((good, good, broken), start=1):
        one = copy.deepcopy(doc)
        one["run_id"], one["started"] = f"r{n}", f"2026-11-24T03:{n:02d}:00+0000"
        docs.append(one)
    with history.opened(tmp_path / "h.sqlite") as conn:
        for doc in docs[:2]:
            history.record(conn, typed(doc))
        told = history.labels(conn, typed(docs[2]))
        history.record(conn, typed(docs[2]))
        found = history.records(conn, "memcg_kfuncs")
        flaky = history.flakes(conn, [])
    assert told[("adhoc", "memcg_kfuncs")] == "new"
    assert sorted((r.cell, r.passed, len(r.outcomes), r.flips) for r in found) == [
        ("adhoc debian:6.12, 4 patches " + history.cell_key(typed(good).cells[0])[-8:], 2, 2, 0),
        (history.cell_key(typed(broken).cells[0]), 0, 1, 0)]
    assert history.cell_key(typed(broken).cells[0]).startswith("adhoc debian:6.12, 5 patches ")
    assert not [f for f in flaky if f.test == "memcg_kfuncs"]
    # a matrix cell is its name, whatever it applies
    assert history.cell_key(CellResult(cell="6.12", kernel="debian:6.12", kernel_version="",
                                       status=Status.PASS, patches=(), config=None, stages=(),
                                       tests=(), arch="x86_64", toolchain="gcc")) == "6.12"


def test_a_version_1_database_is_migrated_forward(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 1 kept every ad-hoc run as cell "adhoc"; opening it renames those rows to
    what each run tested, once, and keeps matrix cells as they were."""
    db = tmp_path / "h.sqlite"
    doc = broken_run()
    matrix_run = faults_run(1, bug=True)
    with closing_db(db) as conn:
        first = history.MIGRATIONS[0]
        assert isinstance(first, str)
        conn.executescript(first)
        conn.execute("PRAGMA user_version = 1")
        with monkeypatch.context() as m:
            m.setattr(history, "cell_key", lambda c: c.cell)
            history.record(conn, typed(doc))
            history.record(conn, typed(matrix_run))
        conn.commit()
    with history.opened(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION
        cells = {c for (c,) in conn.execute("SELECT DISTINCT cell FROM tests")}
        [rec] = history.records(conn, "memcg_kfuncs")
    assert cells == {history.cell_key(typed(doc).cells[0]), "6.12-faults"}
    assert rec.cell.startswith("adhoc debian:6.12, 5 patches ")


def closing_db(path: Path) -> Any:
    from contextlib import closing

    return closing(sqlite3.connect(path))


def test_ad_hoc_cells_twice_in_a_run_their_baselines_and_lookup_by_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--kernel X --kernel X: two cells asking for the same thing are kept apart (also
    when a version-1 database is migrated); a baseline cell is its own record; an ad-hoc
    cell is found by its name (which holds colons) and by "adhoc"."""
    doc = broken_run()
    one = doc["cells"][0]
    base = {**copy.deepcopy(one), "cell": "adhoc.base", "patches": []}
    doc["cells"] = [{**copy.deepcopy(one), "cell": "adhoc-0"},
                    {**copy.deepcopy(one), "cell": "adhoc-1"}, base]
    keys = history.cell_keys(typed(doc).cells)
    assert keys[1] == keys[0] + " #2" and keys[2] == "adhoc debian:6.12 (baseline)"
    db = tmp_path / "h.sqlite"
    with closing_db(db) as conn:
        first = history.MIGRATIONS[0]
        assert isinstance(first, str)
        conn.executescript(first)
        conn.execute("PRAGMA user_version = 1")
        with monkeypatch.context() as m:
            m.setattr(history, "cell_keys", lambda cells: [c.cell for c in cells])
            history.record(conn, typed(doc))
        conn.commit()
    with history.opened(db) as conn:
        for table in ("cells", "tests", "subtests"):
            assert {c for (c,) in conn.execute(f"SELECT DISTINCT cell FROM {table}")} == \
                set(keys), table
        assert {r.cell for r in history.records(conn, keys[0])} == {keys[0]}
        assert {r.cell for r in history.records(conn, "adhoc")} == set(keys)
        assert history.records(conn, "memcg_kfuncs:parent_includes_child")


def test_declared_noise_is_not_kept_as_a_splat(tmp_path: Path) -> None:
    doc = faults_run(1, bug=True)
    warn = next(t for t in doc["cells"][0]["tests"] if t["name"] == "lkdtm_warn")
    warn["splats"][0]["expected"] = "declared in a test"
    with history.opened(tmp_path / "h.sqlite") as conn:
        history.record(conn, typed(doc))
        kept = {fp for (fp,) in conn.execute("SELECT fingerprint FROM splats")}
    assert kept == {"BUG:lkdtm_BUG"}
