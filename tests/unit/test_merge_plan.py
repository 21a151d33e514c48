"""`harness merge` against a plan, and the exports of the merged run (issue 28): shards cut
from real runs (tests/helpers/shards.py), merged by the real merge, exported by the real exports.

The ci-tier merge holds a failing cell (adhoc), broken-variant cells whose results are as
declared, and a planned cell no shard holds (6.12-faults): it exits 1, says MISSING, and
its JUnit and KCIDB documents are valid and say the same."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from harness import cli
from harness.base.model import Status
from harness.drivers import matrix, shard
from harness.drivers.matrix import Cell, Tier
from harness.output import junit, kcidb, results
from tests.helpers import shards
from tests.helpers.shards import BROKEN_VARIANTS, CI_PLAN, FAILING, MISSING, PLAIN

REPO = Path(__file__).resolve().parents[2]
SCHEMA = xmlschema.XMLSchema(str(REPO / "harness" / "output" / "schemas" / "junit.xsd"))
# the ad-hoc cell of adhoc-memcg-kfuncs-broken.json, as its run's "what" names it
ADHOC_CELL = Cell(name=FAILING, tier=Tier.DEFAULT, kernel="debian:6.12",
                  series=("memcg-kfuncs-broken",), tests=("memcg_kfuncs", "rstat_propagation"))


@pytest.fixture(autouse=True)
def _no_ci_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kcidb export reads the CI system's run id: not this machine's CI's."""
    for var in ("GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT", "CI_PIPELINE_ID"):
        monkeypatch.delenv(var, raising=False)


def _plan_file(tmp: Path) -> Path:
    """The plan a CI generator writes: the matrix cells it runs, and the ad-hoc cell."""
    by_name = {c.name: c for c in matrix.load()}
    cells = [by_name.get(n, ADHOC_CELL) for n in CI_PLAN]
    shard.write_plan(tmp / "plan.json", cells)
    return tmp / "plan.json"


def _merge(tmp: Path, out: str, capsys: pytest.CaptureFixture[str]
           ) -> tuple[int, dict[str, Any], str]:
    runs = tmp / "runs"
    if not runs.exists():
        shards.ci_shards(runs)
    code = cli.main(["merge", *map(str, sorted(runs.iterdir())), "--out", str(tmp / out),
                     "--plan", str(_plan_file(tmp))])
    return code, json.loads((tmp / out / "results.json").read_text()), capsys.readouterr().out


def test_the_ci_merge_exits_1_and_says_missing(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, text = _merge(tmp_path, "merged", capsys)
    assert code == 1 == doc["exit_code"]
    assert [c["cell"] for c in doc["cells"]] == list(CI_PLAN)  # the plan's order
    by = {c["cell"]: c for c in doc["cells"]}
    assert by[MISSING]["status"] == "MISSING" and by[MISSING]["tests"] == []
    assert by[MISSING]["kernel"] == "debian:6.12"  # from the plan
    assert by[FAILING]["status"] == "FAIL"
    assert all(by[n]["status"] == "PASS" for n in (*PLAIN, *BROKEN_VARIANTS))
    assert doc["status"] == "MISSING" and doc["state"] == "incomplete"
    assert doc["missing"] == [MISSING] and doc["unexpected"] == []
    assert f"== {MISSING}  MISSING  (no run holds it: its job failed before uploading " \
           "results?)" in text
    assert "warning: no plan" not in text
    # each present cell's directory came along from its shard
    assert (tmp_path / "merged" / FAILING / "shard").read_text() == "shard-adhoc"
    assert not (tmp_path / "merged" / MISSING).exists()


def test_the_merged_run_keeps_run_ids_revision_and_tools(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _code, doc, _ = _merge(tmp_path, "merged", capsys)
    verify = json.loads(shards.VERIFY.read_text())
    adhoc = json.loads(shards.ADHOC_BROKEN.read_text())
    assert re.fullmatch(r"merge-\d{8}-\d{6}-[0-9a-f]{8}", doc["run_id"])
    assert [r["run_id"] for r in doc["runs"]] == ["r-adhoc-broken", "r-verify1", "r-verify1"]
    assert doc["harness_rev"] == verify["harness_rev"] == adhoc["harness_rev"]
    assert doc["tools"] == verify["tools"] == adhoc["tools"]
    assert doc["started"] == min(verify["started"], adhoc["started"])
    assert doc["revision_conflict"] == ""
    _code, again, _ = _merge(tmp_path, "merged-again", capsys)
    assert again["run_id"] != doc["run_id"]  # a new id per merge


def test_the_merged_junit_fails_the_failing_and_missing_cells_not_the_broken_variants(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _code, _doc, _ = _merge(tmp_path, "merged", capsys)
    out = tmp_path / "junit.xml"
    assert cli.main(["export", "junit", str(tmp_path / "merged"), "-o", str(out)]) == 0
    SCHEMA.validate(str(out))
    root = ET.parse(out).getroot()
    suites = {s.get("name"): s for s in root}
    assert list(suites) == list(CI_PLAN)
    bad = {n for n, s in suites.items() if int(s.get("failures", 0)) + int(s.get("errors", 0))}
    assert bad == {FAILING, MISSING}
    missing = suites[MISSING].findall("testcase")
    assert [(c.get("name"), c.get("classname")) for c in missing] == [
        ("verdict", "harness.6_12-faults")]
    fail = missing[0].find("failure")
    assert fail is not None and fail.get("type") == "MISSING"
    assert "no run holds it" in (fail.get("message") or "")
    for name in BROKEN_VARIANTS:  # FAIL as declared: passes, and says so
        outs = [c.findtext("system-out") or "" for c in suites[name].iter("testcase")]
        assert any("as the cell declares" in o or "as declared" in o for o in outs)


def test_the_merged_kcidb_is_valid_and_its_ids_are_per_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kcidb_io import schema

    _merge(tmp_path, "merged", capsys)
    _merge(tmp_path, "merged-again", capsys)

    def export(run: str, *options: str) -> dict[str, Any]:
        out = tmp_path / f"{run}-{len(options)}.json"
        assert cli.main(["export", "kcidb", str(tmp_path / run), "-o", str(out),
                         *options]) == 0
        data: dict[str, Any] = json.loads(out.read_text())
        schema.V5_3.validate_exactly(data)
        return data

    one = export("merged", "--run-id", "1111")
    two = export("merged", "--run-id", "2222")
    ids = [o["id"] for kind in ("checkouts", "builds", "tests") for o in one[kind]]
    assert len(ids) == len(set(ids))
    assert not set(ids) & {o["id"] for kind in ("checkouts", "builds", "tests")
                           for o in two[kind]}
    assert all(i.startswith("harness:1111:") for i in ids)
    # no CI run id: derived per merged run, so two merges of the same shards differ
    a, b = export("merged"), export("merged-again")
    assert {c["id"] for c in a["checkouts"]}.isdisjoint(c["id"] for c in b["checkouts"])
    assert export("merged")["checkouts"] == a["checkouts"]  # the same run: the same ids
    # the broken variants are left out; the failing cell fails; the missing one is MISS
    cells = [c["misc"]["cell"] for c in one["checkouts"]]
    assert cells == [*PLAIN, FAILING, MISSING]
    missing = next(b for b in one["builds"] if b["checkout_id"].endswith(":6_12-faults"))
    assert missing["status"] == "MISS" and missing["misc"]["harness_status"] == "MISSING"
    assert {t["status"] for t in one["tests"] if t["build_id"].endswith(":adhoc:build")
            and t["path"] == "harness.memcg_kfuncs"} == {"FAIL"}
    every = export("merged", "--include-broken", "--origin", "my_lab")
    assert [c["misc"]["cell"] for c in every["checkouts"]] == list(CI_PLAN)
    assert all(o["id"].startswith("my_lab:") and o["origin"] == "my_lab"
               for o in every["tests"])
    declared = [t for t in every["tests"] if t["misc"].get("expected")]
    assert declared and all(t["misc"]["harness_status"] != "PASS" for t in declared)
    # CI's run id, from its environment
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GITHUB_RUN_ID", "987")
        mp.setenv("GITHUB_RUN_ATTEMPT", "2")
        assert export("merged")["checkouts"][0]["id"].startswith("harness:github_987_2:")


def test_a_run_without_results_is_reported_and_the_merge_goes_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = shards.ci_shards(tmp_path / "runs")
    # the plain shard's job was killed while it wrote: half a results.json
    cut = runs[0] / "results.json"
    cut.write_text(cut.read_text()[: len(cut.read_text()) // 2])
    empty = tmp_path / "runs" / "shard-empty"
    empty.mkdir()  # a job that uploaded nothing
    plan = [shard.Planned(name=n) for n in CI_PLAN]
    merged = shard.merge([*runs, empty], expected=plan)
    doc = results.run_json(merged.run)  # as merge writes it
    assert [u["run"] for u in doc["unreadable_runs"]] == [str(runs[0]), str(empty)]
    assert "not readable JSON" in doc["unreadable_runs"][0]["reason"]
    assert "no results.json" in doc["unreadable_runs"][1]["reason"]
    assert doc["missing"] == [*PLAIN, MISSING] and doc["exit_code"] == 1
    text = shard.summary(merged)
    assert f"unreadable: {empty}: no results.json in it" in text
    assert f"== {PLAIN[0]}  MISSING" in text
    six = next(c for c in doc["cells"] if c["cell"] == PLAIN[0])
    assert str(runs[0]) in six["error"]  # it may have held it
    # without a plan, what the unreadable runs held cannot be told: exit 2
    blind = shard.merge([*runs, empty])
    assert blind.run.exit_code == 2 and blind.run.merge is not None
    assert blind.run.merge.missing == ()
    assert "warning: no plan" in shard.summary(blind)


def test_a_cell_the_plan_does_not_expect_is_kept_and_reported(tmp_path: Path) -> None:
    runs = shards.ci_shards(tmp_path)
    merged = shard.merge(runs, expected=[shard.Planned(name=n) for n in PLAIN])
    assert merged.run.merge is not None
    assert merged.run.merge.unexpected == (*BROKEN_VARIANTS, FAILING)
    assert [c.cell for c in merged.run.cells] == [*PLAIN, *BROKEN_VARIANTS, FAILING]
    assert merged.run.exit_code == 1  # the failing cell's; unexpected ones add nothing
    assert f"unexpected: cell {FAILING} (from {runs[2]}) is not in the plan: kept" in \
        shard.summary(merged)


def test_runs_of_different_harness_revisions_are_said_to_differ(tmp_path: Path) -> None:
    a = shards.shard_dir(tmp_path, "a", shards.VERIFY, PLAIN)
    b = shards.shard_dir(tmp_path, "b", shards.LKDTM)
    merged = shard.merge([a, b])
    revs = [json.loads(p.read_text())["harness_rev"] for p in (shards.VERIFY, shards.LKDTM)]
    assert revs[0] != revs[1] and merged.run.harness_rev is None
    assert merged.run.exit_code == 1  # the CRASHED cell's: a revision changes nothing
    line = next(ln for ln in shard.summary(merged).splitlines()
                if ln.startswith("conflict: harness revision"))
    assert revs[0] in line and revs[1] in line


def test_the_plan_from_the_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--tier full: every full cell is expected; those no shard holds are MISSING, the
    ad-hoc cell is unexpected."""
    runs = shards.ci_shards(tmp_path / "runs")
    out = tmp_path / "m"
    code = cli.main(["merge", *map(str, runs), "--out", str(out), "--tier", "full"])
    doc = json.loads((out / "results.json").read_text())
    ci = [c.name for c in matrix.select(matrix.load(), Tier.FULL)]
    held = [*PLAIN, *BROKEN_VARIANTS, FAILING]
    assert doc["plan"] == ci
    assert doc["missing"] == [n for n in ci if n not in held]
    assert doc["unexpected"] == [FAILING]
    assert code == 1
    assert cli.main(["merge", *map(str, runs), "--out", str(tmp_path / "n"), "--cell",
                     "6.12", "--cell", "6.1"]) == 1
    assert json.loads((tmp_path / "n" / "results.json").read_text())["plan"] == ["6.12", "6.1"]


def test_no_plan_merges_as_before_with_a_warning(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    runs = shards.ci_shards(tmp_path / "runs")
    assert cli.main(["merge", *map(str, runs), "--out", str(tmp_path / "m")]) == 1
    text = capsys.readouterr().out
    assert "warning: no plan (--tier, --cell or --plan): a cell whose run is missing " \
           "cannot be detected" in text
    assert "MISSING" not in text


def test_plan_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cells = matrix.select(matrix.load(), Tier.CI)
    shard.write_plan(tmp_path / "plan.json", cells)
    assert shard.read_plan(tmp_path / "plan.json") == tuple(
        shard.Planned(name=c.name, kernel=c.kernel) for c in cells)
    (tmp_path / "names.json").write_text('["6.12", "6.1"]')
    assert [p.name for p in shard.read_plan(tmp_path / "names.json")] == ["6.12", "6.1"]
    for bad, why in [('{"cells": [1]}', "is not a name"), ('["a", "a"]', "named twice"),
                     ("{", "not a readable plan"), ('{"x": 1}', "no list of cells")]:
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(shard.ShardError, match=why):
            shard.read_plan(tmp_path / "bad.json")
    runs = shards.ci_shards(tmp_path / "runs")
    assert cli.main(["merge", *map(str, runs), "--out", str(tmp_path / "m"), "--plan",
                     str(tmp_path / "plan.json"), "--tier", "ci"]) == 2
    assert "--plan and --tier/--cell" in capsys.readouterr().err


def test_missing_is_never_hidden_and_exits_1() -> None:
    assert Status.MISSING.exit_code == 1 and not Status.MISSING.is_stage_error
    from harness.base.model import worst

    assert worst([Status.PASS, Status.MISSING, Status.CRASHED]) is Status.MISSING
    assert worst([Status.MISSING, Status.BUILD_ERROR]) is Status.BUILD_ERROR
    assert junit.outcome("MISSING") == "failure" and kcidb.test_status("MISSING") == "MISS"


def _build_run(tmp: Path, name: str, cells: dict[str, str]) -> Path:
    """A CI build job's --build-only run: the 6.12 cell's record of the verify run under
    other names and statuses (a stage error carries the build's error)."""
    verify = json.loads(shards.VERIFY.read_text())
    base = next(c for c in verify["cells"] if c["cell"] == "6.12")
    run = tmp / "builds" / name
    run.mkdir(parents=True)
    docs = []
    for cell, status in cells.items():
        (run / cell).mkdir()
        (run / cell / "build.log").write_text("kernel/fake.c:1: error: broken\n")
        docs.append({**base, "cell": cell, "status": status, "tests": [],
                     "error": "kernel build failed (exit 2)" if status != "PASS" else ""})
    (run / "results.json").write_text(json.dumps(
        {**verify, "state": "complete", "cells": docs}))
    return run


def test_a_cell_whose_build_failed_takes_the_build_error_not_missing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CI layout: a test job per cell, a build job per kernel. 6.12-faults' kernel
    did not build (its test job never ran): BUILD_ERROR from its build run, with its log;
    a build run's PASS (built, not booted) is never a result: 6.12, from its test run,
    stays as tested, and a cell only built is MISSING, saying so."""
    shards.ci_shards(tmp_path / "runs")
    failed = _build_run(tmp_path, "6.12-faults", {"6.12-faults": "BUILD_ERROR"})
    built = _build_run(tmp_path, "6.12", {"6.12": "PASS", "6.12-lockdep": "PASS"})
    code = cli.main(["merge", *map(str, sorted((tmp_path / "runs").iterdir())),
                     "--builds", str(failed), str(built), str(tmp_path / "builds" / "gone"),
                     "--out", str(tmp_path / "merged"), "--plan", str(_plan_file(tmp_path)),
                     ])
    assert code == 2  # a stage error
    doc = json.loads((tmp_path / "merged" / "results.json").read_text())
    by = {c["cell"]: c for c in doc["cells"]}
    assert by["6.12-faults"]["status"] == "BUILD_ERROR"
    assert any("did not build" in n for n in by["6.12-faults"]["notes"])
    assert (tmp_path / "merged" / "6.12-faults" / "build.log").is_file()
    assert by["6.12"]["status"] != "BUILD_ERROR" and by["6.12"]["tests"]  # the test run's
    assert doc["missing"] == []
    assert [b.get("unreadable", "") != "" for b in doc["builds"]] == [False, False, True]
    assert "6.12-faults" in capsys.readouterr().out


def test_a_cell_only_built_is_missing_and_says_it_was_built(tmp_path: Path) -> None:
    from harness.drivers import shard

    built = _build_run(tmp_path, "6.12", {"6.12": "PASS"})
    merged = shard.merge([], expected=[shard.Planned(name="6.12")], builds=[built]).run
    [cell] = merged.cells
    assert merged.merge is not None
    assert cell.status.value == "MISSING" and merged.merge.missing == ("6.12",)
    assert cell.error.startswith("no test run holds it, though its build run built it")
