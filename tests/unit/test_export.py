"""`harness export junit|kcidb` on real result trees: tests/golden/compare (a verify run of
the ci tier, an ad-hoc run of the deliberately broken memcg series, the faults cell),
tests/golden/recorded-runs (LKDTM splats), tests/golden/mutants (a run whose accelerator
failed, a kernel that warns at boot and shutdown) and a ci-tier run merged from shards cut
from them (tests/helpers/shards.py). JUnit is valid against our schema
(harness/output/schemas/junit.xsd) and its counts per status equal what results.json says,
counted here independently; KCIDB is valid against kcidb-io's v5.3 schema, with one test
object per result, subtest and measurement, counted here independently too."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from harness import cli
from harness.base.model import Phase, Status
from harness.base.model import TestResult as Result
from harness.drivers import shard
from harness.judge import verdict
from harness.output import junit, kcidb, results
from tests.helpers import shards

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "compare"
SCHEMA = xmlschema.XMLSchema(str(REPO / "harness" / "output" / "schemas" / "junit.xsd"))
ACCEL_ERROR = REPO / "tests" / "golden" / "mutants" / "results-accel-error.json"
WARN_BOOT = REPO / "tests" / "golden" / "mutants" / "results-warn-boot-shutdown.json"
RUNS = [*sorted(GOLDEN.glob("*.json")), shards.LKDTM, ACCEL_ERROR, WARN_BOOT]
BAD_STATUS = ("FAIL", "FLAKY", "TIMEOUT", "CRASHED", "MISSING")


typed = results.from_json  # a results.json document as the one reader reads it


def _measured(metrics: Any) -> list[dict[str, Any]]:
    """The measurements a test reports that the exports take: objects with a numeric
    median, a unit and a direction."""
    if not isinstance(metrics, dict):
        return []
    if {"median", "unit", "direction"} <= metrics.keys():
        median = metrics["median"]
        return [metrics] if isinstance(median, int | float) and not isinstance(median, bool) \
            else []
    return [m for value in metrics.values() for m in _measured(value)]


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


@pytest.fixture(scope="module")
def merged_ci(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The ci-tier merge of tests/helpers/shards.py: a failing, a MISSING and broken-variant
    cells."""
    tmp = tmp_path_factory.mktemp("merged")
    return results.run_json(shard.merge(shards.ci_shards(tmp), expected=[
        shard.Planned(name=n) for n in shards.CI_PLAN]).run)


def _leaf_statuses(cases: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for c in cases:
        out += _leaf_statuses(c["subtests"]) if c.get("subtests") else [c["status"]]
    return out


def _expected_counts(doc: dict[str, Any]) -> dict[str, int]:
    """From results.json alone, by the rules junit.py's docstring states: a result without
    subtests is a testcase; one with subtests is its leaves, and itself only when its bad
    or known-failure outcome is in no leaf (or it is not what its cell declares); XFAIL
    is skipped; a cell says its own bad status in `verdict` when no testcase fails."""
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    strict = bool(doc.get("strict"))

    def kind(status: str) -> str:
        if status in BAD_STATUS or (strict and status == "XPASS"):
            return "failures"
        if status in ("SKIP", "NO_TESTS", "XFAIL"):
            return "skipped"
        if status in ("PASS", "XPASS"):
            return "passed"
        return "errors"

    for cell in doc["cells"]:
        seen: list[str] = []  # kinds of this cell's testcases
        for t in cell["tests"]:
            status, declared = t["status"], t.get("expected_status")
            if declared:
                own = ("passed", status) if declared == status else ("failures", status)
            else:
                own = (kind(status), status)
            leaves = _leaf_statuses((t.get("ktap") or {}).get("subtests", []))
            if declared == status:
                shown = [("passed", s) for s in leaves]
            elif status == "XFAIL":
                shown = [("skipped", "XFAIL") if s == "XFAIL" or kind(s) in
                         ("failures", "errors") else (kind(s), s) for s in leaves]
            else:
                shown = [("skipped", s) if s == "XFAIL" else (kind(s), s) for s in leaves]
            if not leaves or (own[0] != "passed" and (
                    own not in shown or (declared and declared != status))):
                shown.append(own)
            seen += [k for k, _ in shown]
        code = Status(cell["status"]).exit_code
        if not cell["tests"] or (code and not {"failures", "errors"} & set(seen)):
            seen.append({0: "passed", 1: "failures", 2: "errors"}[code])
        counts["tests"] += len(seen)
        for k in ("failures", "errors", "skipped"):
            counts[k] += seen.count(k)
    return counts


def _check_junit(doc: dict[str, Any]) -> ET.Element:
    text = junit.render(typed(doc))
    SCHEMA.validate(text)
    root = ET.fromstring(text)
    want = _expected_counts(doc)
    assert {k: int(root.get(k, -1)) for k in want} == want
    assert [s.get("name") for s in root] == [c["cell"] for c in doc["cells"]]
    for suite in root:
        assert int(suite.get("tests", -1)) == len(suite.findall("testcase"))
        names = [c.get("name") for c in suite.findall("testcase")]
        assert len(names) == len(set(names))  # each result once
    return root


@pytest.mark.parametrize("run", RUNS, ids=[r.stem for r in RUNS])
def test_junit_is_valid_and_counts_what_results_json_says(run: Path) -> None:
    _check_junit(_load(run))


def test_junit_of_the_merged_run_counts_what_results_json_says(
        merged_ci: dict[str, Any]) -> None:
    root = _check_junit(merged_ci)
    assert int(root.get("failures", 0)) > 0


def test_classnames_are_the_cell_without_dots(merged_ci: dict[str, Any]) -> None:
    root = ET.fromstring(junit.render(typed(merged_ci)))
    for suite in root:
        cell = suite.get("name") or ""
        assert {c.get("classname") for c in suite.iter("testcase")} == {
            "harness." + cell.replace(".", "_")}
    assert root.find("testsuite[@name='6.12']/testcase[@classname='harness.6_12']") is not None


def test_subtests_are_leaves_named_by_their_path_and_a_failure_says_why() -> None:
    root = ET.fromstring(junit.render(typed(_load(GOLDEN / "adhoc-memcg-kfuncs-broken.json"))))
    names = [c.get("name") for c in root.iter("testcase")]
    # FAIL with failing leaves: the leaves say it, the test is not counted again
    assert "memcg_kfuncs" not in names
    assert "memcg_kfuncs/parent_includes_child" in names
    leaf = root.find("testsuite/testcase[@name='memcg_kfuncs/parent_includes_child']/failure")
    assert leaf is not None and leaf.get("type") == "FAIL"
    assert "P - C" in (leaf.get("message") or "")
    assert "log: adhoc/guest/memcg_kfuncs.out" in (leaf.text or "")


def test_a_test_bad_after_its_subtests_passed_is_a_testcase_too() -> None:
    root = ET.fromstring(junit.render(typed(_load(shards.LKDTM))))
    crashed = root.find("testsuite/testcase[@name='lkdtm_splats']/failure")
    assert crashed is not None and crashed.get("type") == "CRASHED"
    assert "WARNING" in (crashed.text or "")
    passed = root.find("testsuite/testcase[@name='lkdtm_splats/provoked']")
    assert passed is not None and len(passed) == 0


def test_a_known_failure_is_skipped_with_its_reason() -> None:
    root = ET.fromstring(junit.render(typed(_load(GOLDEN / "verify-2026-11-24.json"))))
    name = ("kselftest-cgroup-test_freezer/selftests: cgroup: test_freezer/"
            "test_cgfreezer_ptrace")
    skipped = root.find(f"testsuite[@name='6.12']/testcase[@name='{name}']/skipped")
    assert skipped is not None and skipped.get("type") == "XFAIL"
    assert (skipped.get("message") or "").startswith("known failure: declared flaky: flaky "
                                                     "under TCG")
    assert root.find("testsuite[@name='6.12']/testcase[@name='kselftest-cgroup-test_freezer']"
                     ) is None  # its leaf says it


def test_declared_results_of_a_broken_cell_pass_and_others_fail() -> None:
    doc = _load(GOLDEN / "faults.json")
    root = ET.fromstring(junit.render(typed(doc)))
    warn = [c for c in root.iter("testcase") if (c.get("name") or "").startswith("lkdtm_warn")]
    assert warn and all(c.find("failure") is None for c in warn)
    assert all("as declared" in (c.findtext("system-out") or "") for c in warn)
    hang = root.find("testsuite/testcase[@name='hang']")
    assert hang is not None and "TIMEOUT as the cell declares" in (
        hang.findtext("system-out") or "")
    # the same result without its declaration is a failure
    for t in doc["cells"][0]["tests"]:
        t.pop("expected_status", None)
    root = ET.fromstring(junit.render(typed(doc)))
    assert root.find("testsuite/testcase[@name='lkdtm_warn']/failure") is not None
    # and a declared status not met is a failure saying what was expected
    doc["cells"][0]["tests"][1]["expected_status"] = "PASS"
    root = ET.fromstring(junit.render(typed(doc)))
    got = root.find("testsuite/testcase[@name='lkdtm_warn']/failure")
    assert got is not None and (got.text or "").startswith("expected PASS, got CRASHED")


def test_a_cell_stopped_before_its_tests_is_one_verdict_error() -> None:
    doc = _load(ACCEL_ERROR)
    root = ET.fromstring(junit.render(typed(doc)))
    assert root.get("errors") == "1" and root.get("tests") == "1"
    err = root.find("testsuite/testcase[@name='verdict']/error")
    assert err is not None and err.get("type") == "BOOT_ERROR"
    assert (err.get("message") or "").startswith("--accel kvm requested but KVM does not work")


def _judged_again(cell: dict[str, Any], rules: verdict.CellRules) -> dict[str, Any]:
    """The cell's recorded results judged by the real verdict against other declarations
    (its results have no splats, taint or known failures that judging again would read)."""
    results = [Result(name=t["name"], status=Status(t["status"]), duration_s=t["duration_s"],
                      exit_code=t["exit_code"], ktap=None, phase=Phase(t["phase"]))
               for t in cell["tests"]]
    judged = verdict.judge(results, kernel_version=cell["kernel_version"],
                           expectations=verdict.Expectations(), rules=rules)
    declared = {r.name: r.expected_status for r in judged.results}
    return {**cell, "status": judged.status.value, "error": judged.error,
            "tests": [{**t, "expected_status": getattr(declared[t["name"]], "value", None)}
                      for t in cell["tests"]]}


def test_a_cell_bad_for_no_result_of_its_own_says_so_in_a_verdict() -> None:
    """A broken-variant cell whose every result is as declared but one declared result is
    missing: FAIL, and only the `verdict` testcase can say so."""
    doc = _load(GOLDEN / "verify-2026-11-24.json")
    cell = next(c for c in doc["cells"] if c["cell"] == "6.12-rstat-hook-not-called")
    cell = _judged_again(cell, verdict.CellRules(expect_status=Status.FAIL,
                                                 expect={"memcg_kfuncs": Status.FAIL}))
    assert cell["status"] == "FAIL"
    doc = {**doc, "cells": [cell]}
    root = _check_junit(doc)
    fails = root.findall("testsuite/testcase/failure")
    assert [f.get("type") for f in fails] == ["FAIL"]
    verdict_fail = root.find("testsuite/testcase[@name='verdict']/failure")
    assert verdict_fail is not None and verdict_fail.get("message") == \
        "not as the cell declares:"
    assert "memcg_kfuncs: declared FAIL in expect, but no result has that name" in (
        verdict_fail.text or "")


def test_a_missing_cell_is_a_verdict_failure(merged_ci: dict[str, Any]) -> None:
    root = ET.fromstring(junit.render(typed(merged_ci)))
    suite = root.find(f"testsuite[@name='{shards.MISSING}']")
    assert suite is not None and suite.get("failures") == "1"
    fail = suite.find("testcase[@name='verdict']/failure")
    assert fail is not None and fail.get("type") == "MISSING"
    assert fail.get("message") == shard.MISSING_REASON


def test_benchmarks_are_properties_of_their_suite() -> None:
    doc = _load(GOLDEN / "verify-2026-11-24.json")
    root = ET.fromstring(junit.render(typed(doc)))
    props = {p.get("name"): p.get("value") for p in
             root.findall("testsuite[@name='6.12']/properties/property")}
    bench = next(t for t in doc["cells"][0]["tests"] if t["name"] == "memcg_kfuncs_bench")
    median = bench["extra"]["metrics"]["methods"]["memstat_read@1"]["median"]
    assert props["memcg_kfuncs_bench.methods/memstat_read@1"] == f"{median:g} us_per_read"
    assert sum(1 for n in props if str(n).startswith("memcg_kfuncs_bench.")) == 10


def test_the_export_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "junit.xml"
    assert cli.main(["export", "junit", str(GOLDEN / "faults.json"), "-o", str(out)]) == 0
    SCHEMA.validate(str(out))
    assert cli.main(["export", "junit", str(tmp_path)]) == 2
    assert "no results.json there" in capsys.readouterr().err
    assert cli.main(["export", "junit", str(GOLDEN / "faults.json"), "--run-id", "1"]) == 2
    assert "harness export junit: error: unrecognized arguments: --run-id" in \
        capsys.readouterr().err


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


def _expected_kcidb_tests(doc: dict[str, Any], include_broken: bool) -> int:
    """Per exported cell: a test per result, per leaf and (several of them) per
    measurement, and a `boot` test for a cell that tried to boot without a boot result."""
    n = 0
    for cell in doc["cells"]:
        if not include_broken and any(t.get("expected_status") for t in cell["tests"]):
            continue
        for t in cell["tests"]:
            leaves = _leaf_statuses((t.get("ktap") or {}).get("subtests", []))
            metrics = _measured((t.get("extra") or {}).get("metrics"))
            n += 1 + len(leaves) + (len(metrics) if len(metrics) > 1 else 0)
        tried = any(s["stage"] == "accel" or s["stage"].startswith("boot")
                    for s in cell["stages"])
        n += tried and not any(t["name"] == "boot" for t in cell["tests"])
    return n


_HOST_PATH = re.compile(r"(?<![\w.])/(?:root|work|tmp|home)/")


@pytest.mark.parametrize("include_broken", [False, True])
@pytest.mark.parametrize("run", RUNS, ids=[r.stem for r in RUNS])
def test_kcidb_is_valid_v5_with_a_test_per_result_subtest_and_measurement(
        run: Path, include_broken: bool) -> None:
    from kcidb_io import schema

    doc = _load(run)
    out = kcidb.export(typed(doc), include_broken=include_broken)
    schema.V5_3.validate_exactly(out)
    assert out["version"]["major"] == 5
    cells = [c for c in doc["cells"]
             if include_broken or not any(t.get("expected_status") for t in c["tests"])]
    assert [c["misc"]["cell"] for c in out["checkouts"]] == [c["cell"] for c in cells]
    assert len(out["tests"]) == _expected_kcidb_tests(doc, include_broken)
    for kind in ("checkouts", "builds", "tests"):
        ids = [o["id"] for o in out[kind]]
        assert len(ids) == len(set(ids))
    builds = {b["id"] for b in out["builds"]}
    assert all(t["build_id"] in builds for t in out["tests"])
    assert not _HOST_PATH.search(json.dumps(out))  # nothing local
    if cells:
        started = datetime.strptime(doc["started"], "%Y-%m-%dT%H:%M:%S%z")
        assert out["checkouts"][0]["start_time"] == started.isoformat()


def test_kcidb_of_the_merged_run(merged_ci: dict[str, Any]) -> None:
    from kcidb_io import schema

    out = kcidb.export(typed(merged_ci), run_id="42")
    schema.V5_3.validate_exactly(out)
    assert len(out["tests"]) == _expected_kcidb_tests(merged_ci, False)
    assert not _HOST_PATH.search(json.dumps(out))
    # each checkout started when the run that holds its cell did
    started = {c["misc"]["cell"]: c.get("start_time") for c in out["checkouts"]}
    assert started == {"6.12": "2026-11-24T01:05:06+00:00", "6.1": "2026-11-24T01:05:06+00:00",
                       "adhoc": "2026-11-24T01:09:15+00:00", shards.MISSING: None}


def test_kcidb_says_what_failed_and_keeps_our_status() -> None:
    out = kcidb.export(typed(_load(GOLDEN / "adhoc-memcg-kfuncs-broken.json")))
    by = {t["path"]: t for t in out["tests"]}
    assert by["harness.memcg_kfuncs"]["status"] == "FAIL"
    leaf = by["harness.memcg_kfuncs.parent_includes_child"]
    assert leaf["status"] == "FAIL" and "P - C" in leaf["log_excerpt"]
    assert by["harness.rstat_propagation"]["status"] == "PASS"
    assert by["boot"]["status"] == "PASS" and by["boot"]["environment"]["misc"]["accel"] == "tcg"
    build = out["builds"][0]
    assert build["status"] == "PASS" and build["config_name"] == "base"
    # recorded before results.json said where the kernel came from: nothing is claimed
    assert build["misc"]["from_store"] is False and "duration" in build
    doc = _load(GOLDEN / "adhoc-memcg-kfuncs-broken.json")
    doc["cells"][0]["kernel_from_store"] = True  # as a run now writes it
    build = kcidb.export(typed(doc))["builds"][0]
    assert build["misc"]["from_store"] is True and "duration" not in build
    assert build["misc"]["kernel_store_key"] == "79f9982f8b212ededfea"
    faults = _load(GOLDEN / "faults.json")
    assert kcidb.export(typed(faults))["tests"] == []  # a broken variant: left out
    every = kcidb.export(typed(faults), include_broken=True)
    warn = next(t for t in every["tests"] if t["path"] == "harness.lkdtm_warn")
    # a WARN provoked on purpose: FAIL kept, marked as what the cell declares
    assert warn["status"] == "FAIL" and warn["misc"]["declared"] == "CRASHED"
    assert warn["misc"]["expected"] is True
    hang = next(t for t in every["tests"] if t["path"] == "harness.hang")
    assert hang["status"] == "ERROR" and hang["misc"]["expected"] is True


def test_kcidb_environment_failures_are_not_kernel_failures() -> None:
    out = kcidb.export(typed(_load(ACCEL_ERROR)))
    assert [(t["path"], t["status"]) for t in out["tests"]] == [("boot", "MISS")]
    assert "KVM does not work here" in out["tests"][0]["log_excerpt"]
    assert out["builds"][0]["status"] == "PASS"
    # a kernel that warns while booting is a kernel failure
    warned = {t["path"]: t["status"] for t in kcidb.export(typed(_load(WARN_BOOT)))["tests"]}
    assert warned["boot"] == "FAIL" and warned["harness.shutdown"] == "FAIL"


def test_kcidb_measurements_are_numbers() -> None:
    doc = _load(GOLDEN / "verify-2026-11-24.json")
    out = kcidb.export(typed(doc))
    bench = [t for t in out["tests"] if t["path"].startswith("harness.memcg_kfuncs_bench.methods.")
             and t["build_id"].endswith(":6_12:build")]
    assert len(bench) == 10 and all(t["status"] == "DONE" for t in bench)
    first = next(t for t in bench if t["path"].endswith(".memstat_read_1"))
    median = doc["cells"][0]["tests"][4]["extra"]["metrics"]["methods"]["memstat_read@1"]
    assert first["number"] == {"value": median["median"], "unit": "us_per_read"}
    assert first["misc"]["direction"] == "lower"


def test_kcidb_config_names_and_kernels_without_host_paths() -> None:
    doc = _load(GOLDEN / "verify-2026-11-24.json")
    builds = {b["checkout_id"].rsplit(":", 1)[1]: b for b in kcidb.export(typed(doc))["builds"]}
    assert builds["6_1"]["config_name"] == "base+6.1"
    assert kcidb.hostless("/home/u/linux at v6.12 (0123456789ab)") == "linux at v6.12 " \
                                                                      "(0123456789ab)"
    kept = "Cgroup /sys/fs/cgroup/cg_test_ptrace isn't frozen; see ../a/b.c and us/read"
    assert kcidb.hostless(kept) == kept
    assert kcidb.hostless("https://example.org/a/b") == "https://example.org/a/b"


def test_kcidb_run_ids() -> None:
    doc = _load(GOLDEN / "faults.json")
    assert kcidb.resolve_run_id(typed(doc), given="7", env={"GITHUB_RUN_ID": "1"}) == "7"
    assert kcidb.resolve_run_id(typed(doc), env={"GITHUB_RUN_ID": "1", "GITHUB_RUN_ATTEMPT": "3",
                                          "CI_PIPELINE_ID": "9"}) == "github_1_3"
    assert kcidb.resolve_run_id(typed(doc), env={"CI_PIPELINE_ID": "9"}) == "gitlab_9"
    derived = kcidb.resolve_run_id(typed(doc), env={})
    assert derived.startswith("20261124010831_") and doc["run_id"] not in derived
    # a run id taken from --out is shared by CI jobs: two runs under the same name differ
    other = _load(GOLDEN / "adhoc-memcg-kfuncs-broken.json")
    other["run_id"] = doc["run_id"]
    assert kcidb.resolve_run_id(typed(other), env={}) != derived
    with pytest.raises(kcidb.ExportError):
        kcidb.export(typed(doc), origin="My-Lab")


@pytest.mark.parametrize("ours, theirs", [("PASS", "PASS"), ("XFAIL", "FAIL"),
                                          ("CRASHED", "FAIL"), ("TIMEOUT", "ERROR"),
                                          ("SKIP", "SKIP"), ("SETUP_ERROR", "MISS"),
                                          ("BOOT_ERROR", "MISS"), ("FLAKY", "FAIL"),
                                          ("MISSING", "MISS")])
def test_kcidb_status_mapping(ours: str, theirs: str) -> None:
    assert kcidb.test_status(ours) == theirs


def test_every_status_of_ours_has_a_kcidb_status() -> None:
    assert {kcidb.test_status(s.value) for s in Status} <= {
        "FAIL", "ERROR", "MISS", "PASS", "DONE", "SKIP"}


def test_a_kernel_of_another_arch_and_its_compiler_are_what_the_exports_say() -> None:
    """A real run of the arm64 cell: KCIDB's architecture and compiler, JUnit's properties
    and results.json say arm64 and the cross compiler the build recorded."""
    doc = _load(REPO / "tests" / "golden" / "recorded-runs" / "recorded-arm64-6.12.json")
    [cell] = doc["cells"]
    assert (cell["arch"], cell["toolchain"]) == ("arm64", "gcc")
    [build] = kcidb.export(typed(doc))["builds"]
    assert build["architecture"] == "arm64"
    assert build["compiler"].startswith("aarch64-linux-gnu-gcc ")
    props = {p.get("name"): p.get("value")
             for p in ET.fromstring(junit.render(typed(doc))).iter("property")}
    assert (props["arch"], props["toolchain"]) == ("arm64", "gcc")
    # an x86 run: its architecture, and the compiler of its build
    [x86] = kcidb.export(typed(_load(REPO / "tests" / "golden" / "recorded-runs"
                               / "recorded-lkdtm-6.12.json")))["builds"]
    assert x86["architecture"] == "x86_64" and x86["compiler"].startswith("gcc (Debian")
