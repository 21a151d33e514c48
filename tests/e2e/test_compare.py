"""`run --baseline` and `bisect` for real: real kernels (from the store when built before),
real QEMU, our real series. memcg_kfuncs runs one check (and what it needs) where the
question is about one: whether the test runs at all, and which patch breaks that check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import harness


def test_baseline_shows_what_the_memcg_series_changed(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    proc = harness("run", "--kernel", "debian:6.12", "--series", "memcg-kfuncs",
                   "--test", "memcg_kfuncs:usage_matches_memory_current", "--test",
                   "rstat_propagation", "--baseline",
                   "--out", str(out), timeout=40 * 60)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    assert [c["cell"] for c in data["cells"]] == ["adhoc.base", "adhoc"]
    base = {t["name"]: t["status"] for t in data["cells"][0]["tests"]}
    assert base["memcg_kfuncs"] == "SKIP" and base["rstat_propagation"] == "PASS"
    compared = json.loads((out / "comparison.json").read_text())
    assert compared["regressed"] is False
    moved = {(d["kind"], d["name"]): d for d in compared["differences"]}
    assert moved[("test", "memcg_kfuncs")]["change"] == "now runs"
    assert moved[("feature", "bpf_get_mem_cgroup")]["after"] == "added by series"
    assert ("test", "rstat_propagation") not in moved
    # any other test difference must be a declared-flaky one
    assert all(d["change"] == "flaky" for (kind, name), d in moved.items()
               if kind == "test" and name != "memcg_kfuncs")
    assert "what the series changed (--baseline)" in proc.stdout
    assert "NOW RUNS" in proc.stdout and "memcg_kfuncs: SKIP -> PASS" in proc.stdout


@pytest.mark.full  # the full tier's: tox -e e2e runs it, .ci/run does not
def test_bisect_names_the_deliberately_broken_patch(tmp_path: Path) -> None:
    out = tmp_path / "bisect"
    proc = harness("bisect", "--series", "memcg-kfuncs-broken", "--test",
                   "memcg_kfuncs:parent_matches_memory_stat",
                   "--cell", "6.12-memcg-broken", "--out", str(out), timeout=40 * 60)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "bisect.json").read_text())
    assert data["first_bad"] == 5
    assert data["patches"][4]["name"].startswith("0005-mm-DELIBERATELY-BROKEN")
    steps = {s["prefix"]: s for s in data["steps"]}
    assert steps[5]["status"] == "FAIL" and steps[4]["status"] == "PASS"
    assert "parent_matches_memory_stat" in steps[5]["failing"]
    # the prefixes without every kfunc skip the test: stepped over, never called good
    assert all(s["verdict"] == "cannot tell" for s in data["steps"] if s["status"] == "SKIP")
    assert "first bad patch: 5/5 0005-mm-DELIBERATELY-BROKEN" in proc.stdout
