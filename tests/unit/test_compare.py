"""`harness compare` on real results (tests/golden/compare, see its README)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.base.model import Measurement
from harness.output import compare, results
from harness.output.compare import Change

GOLDEN = Path(__file__).parent.parent / "golden" / "compare"
VERIFY = GOLDEN / "verify-2026-11-24.json"  # cells 6.12, 6.1, broken rstat cells, ...
BROKEN = GOLDEN / "adhoc-memcg-kfuncs-broken.json"  # memcg_kfuncs FAIL, no expectations
FAULTS = GOLDEN / "faults.json"  # lkdtm_warn CRASHED (declared), with its splat


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def cell(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in doc["cells"] if c["cell"] == name)


def result_of(c: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in c["tests"] if t["name"] == name)


def compared(a: dict[str, Any], b: dict[str, Any], **how: Any) -> compare.Comparison:
    """compare.compare of two results.json documents, as the one reader reads them."""
    return compare.compare(results.from_json(a), results.from_json(b), **how)


def measurement_objects(node: Any) -> list[dict[str, Any]]:
    """The objects with a median in a test's metrics, to edit."""
    if not isinstance(node, dict):
        return []
    if "median" in node:
        return [node]
    return [m for value in node.values() for m in measurement_objects(value)]


def by_change(result: compare.Comparison, change: Change) -> set[str]:
    return {f"{d.kind} {d.name}" for d in result.differences if d.change is change}


def test_a_broken_kfunc_is_a_regression_named_down_to_its_checks() -> None:
    r = compared(load(VERIFY), load(BROKEN), cells=("6.12", "adhoc"))
    assert r.regressed
    assert by_change(r, Change.REGRESSED) == {
        "cell status", "test memcg_kfuncs",
        "check memcg_kfuncs: parent_matches_memory_stat",
        "check memcg_kfuncs: parent_includes_child",
        "check memcg_kfuncs: flush_makes_new_memory_visible"}
    assert any(d.kind == "patch" and "DELIBERATELY-BROKEN" in d.name and d.after == "applied"
               for d in r.differences)
    # the tests the second run did not run are gone, not failed
    assert "test hierarchical_stats" in by_change(r, Change.GONE)
    assert "test rstat_propagation" not in {f"{d.kind} {d.name}" for d in r.differences}


def test_the_same_run_twice_has_no_difference() -> None:
    doc = load(VERIFY)
    r = compared(doc, copy.deepcopy(doc))
    assert not r.differences and not r.regressed
    assert "no regression (no differences)" in compare.render_terminal(r)


def test_benchmarks_are_judged_beyond_their_spread_in_their_direction() -> None:
    doc = load(VERIFY)
    r = compared(doc, doc, cells=("6.12", "6.1"))
    regressed = by_change(r, Change.REGRESSED)
    assert regressed == {"metric memcg_kfuncs_bench: methods/iter_self@100"}
    improved = by_change(r, Change.IMPROVED)
    assert "metric memcg_kfuncs_bench: methods/memstat_read@100" in improved
    # 6.1 has no bpf_cgroup_from_id(): its skip is reported, not a regression
    assert "check memcg_kfuncs: untrusted_cgroup_rejected" in by_change(r, Change.NEWLY_SKIPPED)
    assert any(d.kind == "kernel" and d.after == "6.1.192+" for d in r.differences)
    # "higher is better" turns the same numbers round
    flipped = copy.deepcopy(doc)
    for c in flipped["cells"]:
        for t in c["tests"]:
            for m in measurement_objects(t.get("extra", {}).get("metrics")):
                m["direction"] = "higher"
    r = compared(flipped, flipped, cells=("6.12", "6.1"))
    assert "metric memcg_kfuncs_bench: methods/iter_self@100" in by_change(r, Change.IMPROVED)
    assert "metric memcg_kfuncs_bench: methods/memstat_read@100" in by_change(r, Change.REGRESSED)


def test_overlapping_spreads_are_no_change_and_quartiles_beat_min_max() -> None:
    a = Measurement(path="m", median=10.0, min=5.0, max=30.0, unit="us", direction="lower")
    assert compare.metric_change(a, replace(a, median=12.0, min=9.0))[0] is None
    # beyond min..max only
    b = replace(a, median=40.0, min=35.0, max=50.0)
    assert compare.metric_change(a, b)[0] is Change.REGRESSED
    # with quartiles, a move beyond them counts even inside min..max (outliers)
    qa = replace(a, q1=9.5, q3=10.5)
    qb = replace(a, median=12.0, q1=11.5, q3=12.5)
    assert compare.metric_change(qa, qb)[0] is Change.REGRESSED
    assert compare.metric_change(qb, qa)[0] is Change.IMPROVED


def _undeclared(doc: dict[str, Any]) -> dict[str, Any]:
    """The faults run as if its cell declared nothing (a splat is then a finding)."""
    doc = copy.deepcopy(doc)
    for t in cell(doc, "6.12-faults")["tests"]:
        t.pop("expected_status", None)
    return doc


def test_a_new_splat_is_a_regression_matched_by_fingerprint_not_by_address() -> None:
    after = _undeclared(load(FAULTS))
    warn = result_of(cell(after, "6.12-faults"), "lkdtm_warn")
    assert warn["status"] == "CRASHED" and warn["splats"]
    before = copy.deepcopy(after)
    quiet = result_of(cell(before, "6.12-faults"), "lkdtm_warn")
    quiet.update(status="PASS", splats=[], reason="")
    r = compared(before, after)
    regressed = by_change(r, Change.REGRESSED)
    assert "test lkdtm_warn" in regressed
    assert any(n.startswith("splat lkdtm_warn: WARNING:lkdtm_WARNING")
               for n in regressed), regressed
    # the same splat in another boot: other CPU, PID, addresses and line numbers
    moved = copy.deepcopy(after)
    title = warn["splats"][0]["title"]
    for s in result_of(cell(moved, "6.12-faults"), "lkdtm_warn")["splats"]:
        s["title"] = (s["title"].replace("CPU: 1 PID: ", "CPU: 0 PID: 9")
                      .replace("+0x", "+0x1").replace(".c:", ".c:1"))
        assert s["title"] != title
    same = compared(after, moved)
    assert not same.regressed and "splat" not in {d.kind for d in same.differences}
    assert "test lkdtm_warn" in by_change(same, Change.STILL_FAILING)
    # ... and gone again: fixed
    assert "splat" in {d.kind for d in compared(after, before).differences
                       if d.change is Change.FIXED}


def test_a_declared_failure_is_a_change_not_a_regression() -> None:
    doc = load(VERIFY)
    r = compared(doc, doc, cells=("6.12", "6.12-rstat-hook-not-called"))
    assert not r.regressed
    moved = {d.name: (d.before, d.after) for d in r.differences if d.kind == "test"}
    assert moved["rstat_propagation"] == ("PASS", "FAIL (as declared)")


def test_a_declared_flaky_test_changes_as_flaky() -> None:
    before = load(VERIFY)
    after = copy.deepcopy(before)
    freezer = result_of(cell(after, "6.12"), "kselftest-cgroup-test_freezer")
    assert freezer["status"] == "XFAIL" and "declared flaky" in freezer["reason"]
    freezer.update(status="FAIL")  # as if its flaky subtest failed and another one too
    r = compared(before, after, cells=("6.12", "6.12"))
    assert by_change(r, Change.FLAKY) == {"test kselftest-cgroup-test_freezer"}
    assert not r.regressed


@pytest.mark.parametrize(("before", "after", "change"), [
    ("PASS", "FAIL", Change.REGRESSED), ("PASS", "CRASHED", Change.REGRESSED),
    ("FAIL", "CRASHED", Change.REGRESSED), ("PASS", "BUILD_ERROR", Change.REGRESSED),
    ("CRASHED", "FAIL", Change.STILL_FAILING), ("FAIL", "FAIL", Change.STILL_FAILING),
    ("FAIL", "PASS", Change.FIXED), ("SKIP", "PASS", Change.NOW_RUNS),
    ("PASS", "SKIP", Change.NEWLY_SKIPPED), ("PASS", "XPASS", Change.XPASS),
    ("PASS", "FLAKY", Change.REGRESSED), ("PASS", "PASS", None),
])
def test_status_changes(before: str, after: str, change: Change | None) -> None:
    assert compare.status_change(before, after) is change


def test_the_cli_writes_markdown_and_json_and_exits_1_on_a_regression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md, js = tmp_path / "c.md", tmp_path / "c.json"
    code = cli.main(["compare", f"{VERIFY}:6.12", f"{BROKEN}:adhoc", "--markdown", str(md),
                     "--json", str(js)])
    out = capsys.readouterr().out
    assert code == 1
    assert "REGRESSED" in out and "memcg_kfuncs: parent_includes_child: PASS -> FAIL" in out
    assert "| 6.12 -> adhoc | regressed | check | memcg_kfuncs: parent_includes_child |" in \
        md.read_text()
    data = json.loads(js.read_text())
    assert data["regressed"] is True and data["counts"]["regressed"] == 5
    assert cli.main(["compare", str(VERIFY), str(VERIFY)]) == 0


def test_the_cli_names_what_is_wrong_with_its_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", str(tmp_path), str(VERIFY)]) == 2
    assert "no results.json there" in capsys.readouterr().err
    assert cli.main(["compare", f"{VERIFY}:nope", str(VERIFY)]) == 2
    assert "has no cell 'nope' (its cells: 6.12, 6.1" in capsys.readouterr().err
    (tmp_path / "results.json").write_text("{not json")
    assert cli.main(["compare", str(tmp_path), str(VERIFY)]) == 2
    assert "not a readable results.json" in capsys.readouterr().err


def test_each_checks_verdict_side_by_side_in_real_runs(tmp_path: Path) -> None:
    """`harness verdicts`: the good 6.12 and 6.1 cells and the broken kfunc, check by check:
    the broken one's three failing checks are the rows whose verdicts differ."""
    verify = results.from_json(load(VERIFY))
    broken = results.from_json(load(BROKEN))
    cells = [("6.12", next(c for c in verify.cells if c.cell == "6.12")),
             ("6.1", next(c for c in verify.cells if c.cell == "6.1")),
             ("broken", next(c for c in broken.cells if c.cell == "adhoc"))]
    table = compare.verdict_table(cells)
    rows = {r.check: r for r in table.rows}
    assert table.columns == ("6.12", "6.1", "broken")
    assert rows["memcg_kfuncs:parent_includes_child"].verdicts == ("PASS", "PASS", "FAIL")
    assert rows["memcg_kfuncs:parent_includes_child"].said[2] != ""
    differ = {r.check for r in table.rows if len(set(r.verdicts) - {"-"}) > 1}
    assert differ == {"memcg_kfuncs:parent_matches_memory_stat",
                      "memcg_kfuncs:parent_includes_child",
                      "memcg_kfuncs:flush_makes_new_memory_visible",
                      # 6.1 has no trusted-pointer check of the iterator's cgroup: SKIP
                      "memcg_kfuncs:untrusted_cgroup_rejected"}
    assert rows["memcg_kfuncs:untrusted_cgroup_rejected"].verdicts == ("PASS", "SKIP", "PASS")
    # a test the broken run did not run is "-" there, not a failure
    assert rows["hierarchical_stats:bpf_load_attach"].verdicts[2] == "-"
    md = compare.render_table_markdown(table)
    assert "| `memcg_kfuncs:parent_includes_child` | PASS | PASS | FAIL |" in md
    assert "- `memcg_kfuncs:parent_includes_child` on broken: " in md
    out = tmp_path / "t.md"
    assert cli.main(["verdicts", f"{VERIFY}:6.12", f"{BROKEN}:adhoc", "--markdown",
                     str(out)]) == 1
    assert out.read_text().startswith("| check | 6.12 | adhoc |")
    assert cli.main(["verdicts", f"{VERIFY}:6.12", f"{VERIFY}:6.12"]) == 0
