"""A reproduction judged against its run (harness/output/reproduction.py), on real results
(tests/golden/compare, see its README): which results differ, which inputs differ."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.base.model import (
    CarriedFile,
    CarriedPatches,
    CellInputs,
    CellResult,
    RunResult,
    SourceIdentity,
    Status,
)
from harness.output import reproduction, results

GOLDEN = Path(__file__).parent.parent / "golden" / "compare"
VERIFY = GOLDEN / "verify-2026-11-24.json"  # cell 6.12 with memcg_kfuncs_bench's metrics


def doc() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VERIFY.read_text())
    data["cells"] = [c for c in data["cells"] if c["cell"] == "6.12"]
    return data


def result_of(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in d["cells"][0]["tests"] if t["name"] == name)


def judged(a: dict[str, Any], b: dict[str, Any], **how: Any) -> reproduction.Judgement:
    return reproduction.judge(results.from_json(a), results.from_json(b), **how)


def test_the_same_run_again_matches() -> None:
    j = judged(doc(), doc())
    assert j.verdicts_match and j.exit_code == 0 and j.mismatches == () and j.inputs == ()
    assert j.compared == len(doc()["cells"][0]["tests"])
    assert "verdicts match: " in reproduction.render(j)


def test_a_test_that_fails_now_differs_and_is_named_with_its_checks() -> None:
    after = doc()
    t = result_of(after, "rstat_propagation")
    t["status"] = "FAIL"
    t["ktap"]["subtests"][0]["status"] = "FAIL"
    first = t["ktap"]["subtests"][0]["name"]
    j = judged(doc(), after)
    assert j.exit_code == 1 and not j.verdicts_match
    [m] = j.mismatches
    assert (m.cell, m.test, m.original, m.reproduction) == ("6.12", "rstat_propagation",
                                                            "PASS", "FAIL")
    assert m.details == (f"check {first}: PASS -> FAIL",)
    said = reproduction.render(j)
    assert "verdicts differ: 1 result(s)" in said
    assert "6.12/rstat_propagation: PASS -> FAIL" in said and first in said


def test_a_failure_that_fails_the_same_matches_and_another_failure_does_not() -> None:
    before, after = doc(), doc()
    for d in (before, after):
        result_of(d, "cgroup_iter_rstat")["status"] = "FAIL"
    assert judged(before, after).verdicts_match
    result_of(after, "cgroup_iter_rstat")["status"] = "CRASHED"
    [m] = judged(before, after).mismatches
    assert (m.test, m.original, m.reproduction) == ("cgroup_iter_rstat", "FAIL", "CRASHED")


def test_a_declared_flake_is_no_mismatch() -> None:
    after = doc()
    freezer = result_of(after, "kselftest-cgroup-test_freezer")
    assert "declared flaky" in freezer["reason"]
    freezer["status"] = "FAIL"
    for case in freezer["ktap"]["subtests"]:
        case["status"] = "FAIL"
    j = judged(doc(), after)
    assert j.verdicts_match, j.mismatches
    # it was compared, and compare said FLAKY
    assert any(d.change.value == "flaky" for d in j.comparison.differences)


def _bench(d: dict[str, Any]) -> dict[str, Any]:
    metrics: dict[str, Any] = result_of(d, "memcg_kfuncs_bench")["extra"]["metrics"]
    return metrics


def _medians(node: Any) -> list[dict[str, Any]]:
    if not isinstance(node, dict):
        return []
    if "median" in node:
        return [node]
    return [m for v in node.values() for m in _medians(v)]


def test_a_metric_within_its_spread_is_no_mismatch_and_one_beyond_it_is() -> None:
    after = doc()
    [m, *_] = _medians(_bench(after))
    lo, hi = (m["q1"], m["q3"]) if m.get("q1") is not None else (m["min"], m["max"])
    m["median"] = (lo + hi) / 2  # still inside the spread
    assert judged(doc(), after).verdicts_match
    width = hi - lo or 1
    for key in ("median", "q1", "q3", "min", "max"):
        if m.get(key) is not None:
            m[key] = m[key] + 10 * width + hi  # beyond it, spread and all
    [mismatch] = judged(doc(), after).mismatches
    assert mismatch.test == "memcg_kfuncs_bench" and mismatch.original == mismatch.reproduction
    assert mismatch.details and mismatch.details[0].startswith("metric ")


def test_with_test_only_those_and_the_kernels_own_results_are_judged() -> None:
    after = doc()
    result_of(after, "cgroup_iter_rstat")["status"] = "FAIL"
    j = judged(doc(), after, tests=("rstat_propagation",))
    assert j.verdicts_match
    assert {t.name for t in j.reproduced.cells[0].tests} == {
        "boot", "setup", "shutdown", "rstat_propagation"}


def _with_inputs(run: RunResult, **source: Any) -> RunResult:
    patch = CarriedFile(name="0001-x.patch", sha256="a" * 64, path="6.12/inputs/p/0001-x.patch")
    inputs = CellInputs(
        kernel="debian:6.12",
        source=SourceIdentity(spec="debian:6.12", describe="Debian linux-source-6.12 "
                              f"{source.get('version', '6.12.117-1')}",
                              base_commit=source.get("base", "b" * 40),
                              package="linux-source-6.12",
                              package_version=source.get("version", "6.12.117-1")),
        patches=(CarriedPatches(given="memcg-kfuncs", series=True, directory="6.12/inputs/s",
                                patches=(replace(patch, sha256=source.get("patch", "a" * 64)),
                                         )),),
        configs=(CarriedFile(name="base", sha256="c" * 64, path="6.12/inputs/c/base.config"),),
        tests=("rstat_propagation",))
    cell = replace(run.cells[0], inputs=inputs, accel=source.get("accel", "tcg (no KVM)"))
    return replace(run, cells=(cell,), harness_rev=source.get("rev", "1" * 40),
                   harness_dirty=False)


def test_each_input_that_differs_is_named() -> None:
    run = results.from_json(doc())
    same = reproduction.judge(_with_inputs(run), _with_inputs(run))
    assert same.inputs == () and same.verdicts_match
    other = _with_inputs(run, version="6.12.115-1", base="d" * 40, patch="e" * 64,
                         accel="kvm (a short boot worked)", rev="2" * 40)
    j = reproduction.judge(_with_inputs(run), other)
    told = {d.what: (d.original, d.reproduction) for d in j.inputs}
    assert told["harness revision"] == ("111111111111 (clean)", "222222222222 (clean)")
    assert told["kernel source"] == (
        "Debian linux-source-6.12 6.12.117-1, base bbbbbbbbbbbb",
        "Debian linux-source-6.12 6.12.115-1, base dddddddddddd")
    assert told["patch 0001-x.patch"] == ("sha256 aaaaaaaaaaaa", "sha256 eeeeeeeeeeee")
    assert told["accelerator"] == ("TCG", "KVM")
    # inputs differ, the verdicts do not: still a match (exit 0), the inputs said
    assert j.verdicts_match and j.exit_code == 0
    said = reproduction.render(j)
    assert "inputs that differ (the run's -> this reproduction's):" in said
    assert "6.12: kernel source: Debian linux-source-6.12 6.12.117-1" in said


def test_another_toolchain_and_another_hosts_root_are_named() -> None:
    run = _with_inputs(results.from_json(doc()))
    assert run.tools is not None and run.host is not None
    tools = dict(run.tools)
    other = replace(run, tools=tuple({**tools, "gcc": "gcc 14.2.0"}.items()),
                    host=replace(run.host, os="Debian GNU/Linux 13 (trixie)"),
                    cells=(replace(run.cells[0], compiler="gcc 14.2.0"),))
    base = replace(run, host=replace(run.host, os="Debian GNU/Linux 12 (bookworm)"),
                   cells=(replace(run.cells[0], compiler="gcc 12.2.0"),))
    told = {d.what: (d.original, d.reproduction) for d in
            reproduction.input_differences(base, other)}
    assert told["tool gcc"] == (tools["gcc"], "gcc 14.2.0")
    assert told["guest root (the host's own)"] == ("Debian GNU/Linux 12 (bookworm)",
                                                   "Debian GNU/Linux 13 (trixie)")
    assert told["compiler"][1] == "gcc 14.2.0"
    # a guest root of its own: its content hash decides, not the host's system
    rooted = replace(other, cells=(replace(other.cells[0], inputs=replace(
        other.cells[0].inputs, guest_root="sha256:f00")),))  # type: ignore[type-var]
    told = {d.what: (d.original, d.reproduction) for d in
            reproduction.input_differences(base, rooted)}
    assert "guest root (the host's own)" not in told
    assert told["guest root"] == ("the host's root", "sha256:f00")


def test_a_cell_that_could_not_be_set_up_cannot_be_reproduced() -> None:
    run = results.from_json(doc())
    cell: CellResult = run.cells[0]
    stopped = replace(cell, status=Status.SETUP_ERROR, tests=(), error=(
        "no Debian suite serves linux-source-6.12 version 6.12.117-1\nfix: pin another"))
    j = reproduction.judge(run, replace(run, cells=(stopped,)))
    assert j.exit_code == 2 and not j.verdicts_match
    assert j.unreproduced == (("6.12", stopped.error),)
    assert "cannot reproduce 6.12:\n  no Debian suite serves" in reproduction.render(j)


def test_the_guest_root_is_read_from_the_inputs_as_written() -> None:
    """The pipeline writes the hash of the root the guest booted on into the cell's inputs
    once it booted; the reader takes it from there and nowhere else, so a record reads
    back as it was written (one from before the boot: none)."""
    d = copy.deepcopy(doc())
    d["cells"][0]["isolation"] = {"guest_root": {"hash": "sha256:abc"}}
    d["cells"][0]["inputs"] = {"kernel": "debian:6.12", "tests": [], "guest_root": "sha256:abc"}
    inputs = results.from_json(d).cells[0].inputs
    assert inputs is not None and inputs.guest_root == "sha256:abc"
    d["cells"][0]["inputs"] = {"kernel": "debian:6.12", "tests": []}
    inputs = results.from_json(d).cells[0].inputs
    assert inputs is not None and inputs.guest_root == ""
