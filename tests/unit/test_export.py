"""`harness export junit` on real result trees (tests/golden/compare: a verify run of the
ci tier, an ad-hoc run of the deliberately broken memcg series, the faults cell): valid
against our JUnit schema (harness/schemas/junit.xsd), and its counts per status equal
what results.json says, counted here independently."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from harness import cli, junit

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "compare"
SCHEMA = xmlschema.XMLSchema(str(REPO / "harness" / "schemas" / "junit.xsd"))
RUNS = sorted(GOLDEN.glob("*.json"))


def _expected_counts(doc: dict[str, Any]) -> dict[str, int]:
    """From results.json alone: every result and every KTAP leaf is a testcase."""
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    def count(status: str, declared: str) -> None:
        counts["tests"] += 1
        if declared:
            counts["failures"] += declared != status
        elif status in ("FAIL", "FLAKY", "TIMEOUT", "CRASHED"):
            counts["failures"] += 1
        elif status in ("SKIP", "NO_TESTS"):
            counts["skipped"] += 1
        elif status not in ("PASS", "XFAIL", "XPASS"):
            counts["errors"] += 1

    def leaves(cases: list[dict[str, Any]], declared: str) -> None:
        for c in cases:
            if c.get("subtests"):
                leaves(c["subtests"], declared)
            else:
                count(c["status"], c["status"] if declared else "")

    for cell in doc["cells"]:
        if not cell["tests"]:
            count(cell["status"], "")
        for t in cell["tests"]:
            declared = t.get("expected_status") or ""
            count(t["status"], declared)
            leaves((t.get("ktap") or {}).get("subtests", []),
                   declared if declared == t["status"] else "")
    return counts


@pytest.mark.parametrize("run", RUNS, ids=[r.stem for r in RUNS])
def test_junit_is_valid_and_counts_what_results_json_says(run: Path) -> None:
    doc = json.loads(run.read_text())
    text = junit.render(doc)
    SCHEMA.validate(text)
    root = ET.fromstring(text)
    want = _expected_counts(doc)
    assert {k: int(root.get(k, -1)) for k in want} == want
    assert [s.get("name") for s in root] == [c["cell"] for c in doc["cells"]]
    for suite in root:
        assert int(suite.get("tests", -1)) == len(suite.findall("testcase"))


def test_a_failure_names_its_checks_diagnostics_and_log() -> None:
    root = ET.fromstring(junit.render(json.loads(
        (GOLDEN / "adhoc-memcg-kfuncs-broken.json").read_text())))
    fail = root.find("testsuite/testcase[@name='memcg_kfuncs']/failure")
    assert fail is not None and fail.get("type") == "FAIL"
    assert (fail.get("message") or "").startswith("failing checks: parent_matches_memory_stat")
    assert "log: adhoc/guest/memcg_kfuncs.out" in (fail.text or "")
    leaf = root.find("testsuite/testcase[@classname='adhoc.memcg_kfuncs']"
                     "[@name='parent_includes_child']/failure")
    assert leaf is not None and "P - C" in (leaf.text or "")


def test_declared_results_of_a_broken_cell_pass_and_others_fail() -> None:
    doc = json.loads((GOLDEN / "faults.json").read_text())
    root = ET.fromstring(junit.render(doc))
    warn = root.find("testsuite/testcase[@name='lkdtm_warn']")
    assert warn is not None and warn.find("failure") is None
    assert "CRASHED as the cell declares" in (warn.findtext("system-out") or "")
    # the same result without its declaration is a failure
    for t in doc["cells"][0]["tests"]:
        t.pop("expected_status", None)
    root = ET.fromstring(junit.render(doc))
    assert root.find("testsuite/testcase[@name='lkdtm_warn']/failure") is not None
    # and a declared status not met is a failure saying what was expected
    doc["cells"][0]["tests"][1]["expected_status"] = "PASS"
    root = ET.fromstring(junit.render(doc))
    got = root.find("testsuite/testcase[@name='lkdtm_warn']/failure")
    assert got is not None and (got.text or "").startswith("expected PASS, got CRASHED")


def test_a_cell_stopped_before_its_tests_is_one_error(tmp_path: Path) -> None:
    doc = {"cells": [{"cell": "c", "status": "BUILD_ERROR", "error": "kernel build failed",
                      "tests": []}]}
    root = ET.fromstring(junit.render(doc))
    SCHEMA.validate(junit.render(doc))
    assert root.get("errors") == "1"
    err = root.find("testsuite/testcase[@name='cell']/error")
    assert err is not None and err.get("message") == "kernel build failed"


def test_the_export_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "junit.xml"
    assert cli.main(["export", "junit", str(GOLDEN / "faults.json"), "-o", str(out)]) == 0
    SCHEMA.validate(str(out))
    assert cli.main(["export", "junit", str(tmp_path)]) == 2
    assert "no results.json there" in capsys.readouterr().err


@pytest.mark.parametrize("broken", [
    '<testsuites tests="1" failures="0" errors="0" skipped="0"><testsuite name="c" tests="1" '
    'failures="0" errors="0" skipped="0"><testcase classname="c"/></testsuite></testsuites>',
    '<testsuites tests="1" failures="0" errors="0" skipped="0"><testsuite name="c" tests="x" '
    'failures="0" errors="0" skipped="0"/></testsuites>',
    '<testsuites tests="1" failures="0" errors="0" skipped="0"><testsuite name="c" tests="1" '
    'failures="0" errors="0" skipped="0"><testcase name="t" classname="c"><failure/><error/>'
    '</testcase></testsuite></testsuites>',
])
def test_the_schema_refuses_what_ci_systems_would_not_read(broken: str) -> None:
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate(broken)


# ---- KCIDB ----


@pytest.mark.parametrize("run", RUNS, ids=[r.stem for r in RUNS])
def test_kcidb_is_valid_v5_and_has_a_test_per_result_and_subtest(run: Path) -> None:
    from kcidb_io import schema

    from harness import kcidb

    doc = json.loads(run.read_text())
    out = kcidb.export(doc)
    schema.V5_3.validate_exactly(out)
    assert out["version"]["major"] == 5
    assert [c["id"].split(":")[-1] for c in out["checkouts"]] == [
        c["cell"].replace(".", "_") for c in doc["cells"]]
    assert len(out["tests"]) == _expected_counts(doc)["tests"] - sum(
        1 for c in doc["cells"] if not c["tests"])
    ids = [t["id"] for t in out["tests"]]
    assert len(ids) == len(set(ids))
    builds = {b["id"] for b in out["builds"]}
    assert all(t["build_id"] in builds for t in out["tests"])


def test_kcidb_says_what_failed_and_keeps_our_status() -> None:
    from harness import kcidb

    out = kcidb.export(json.loads((GOLDEN / "adhoc-memcg-kfuncs-broken.json").read_text()))
    by = {t["path"]: t for t in out["tests"]}
    assert by["harness.memcg_kfuncs"]["status"] == "FAIL"
    leaf = by["harness.memcg_kfuncs.parent_includes_child"]
    assert leaf["status"] == "FAIL" and "P - C" in leaf["log_excerpt"]
    assert by["harness.rstat_propagation"]["status"] == "PASS"
    assert out["builds"][0]["status"] == "PASS"
    faults = kcidb.export(json.loads((GOLDEN / "faults.json").read_text()))
    warn = next(t for t in faults["tests"] if t["path"] == "harness.lkdtm_warn")
    # a WARN provoked on purpose is still a failure of the kernel; ours says it was declared
    assert warn["status"] == "FAIL" and warn["misc"]["declared"] == "CRASHED"
    hang = next(t for t in faults["tests"] if t["path"] == "harness.hang")
    assert hang["status"] == "ERROR"


@pytest.mark.parametrize("ours, theirs", [("PASS", "PASS"), ("XFAIL", "FAIL"),
                                          ("CRASHED", "FAIL"), ("TIMEOUT", "ERROR"),
                                          ("SKIP", "SKIP"), ("SETUP_ERROR", "MISS"),
                                          ("BOOT_ERROR", "FAIL"), ("FLAKY", "FAIL")])
def test_kcidb_status_mapping(ours: str, theirs: str) -> None:
    from harness import kcidb

    assert kcidb.test_status(ours) == theirs


def test_every_status_of_ours_has_a_kcidb_status() -> None:
    from harness import kcidb
    from harness.model import Status

    assert {kcidb.test_status(s.value) for s in Status} <= {
        "FAIL", "ERROR", "MISS", "PASS", "DONE", "SKIP"}
