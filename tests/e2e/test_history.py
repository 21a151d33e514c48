"""The history over real runs: a cell that passes, is broken by a patch, stays broken and is
fixed (the default kernel and its broken variant under one cell name, in a database of the
test's own) gives `harness history` the right rates and flips for the test and for its
failing check; its first failure is told "new", its second "known since" the first. The
cell runs the one check of memcg_kfuncs the broken kfunc fails (and what it needs): a
run of some checks is recorded under the test's name as a whole run is. The ci run was
recorded in the session's history (tests/conftest.py) as it ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, Run, harness

CELL = """[[cell]]
name = "regressed"
tier = "default"
kernel = "debian:6.12"
series = ["{series}"]
configs = ["base"]
tests = ["memcg_kfuncs:parent_includes_child"]
"""


@pytest.mark.full  # the full tier's: tox -e e2e runs it, .ci/run does not
def test_a_regression_and_its_fix_in_the_history(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HARNESS_HISTORY": str(db)}

    def run(n: int, series: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        matrix = tmp_path / f"matrix-{n}.toml"
        matrix.write_text(CELL.format(series=series))
        out = tmp_path / f"run-{n}"
        proc = subprocess.run([sys.executable, "-m", "harness", "run", "--matrix", str(matrix),
                               "--cell", "regressed", "--out", str(out)], cwd=REPO, env=env,
                              text=True, capture_output=True, timeout=20 * 60)
        assert (out / "results.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc, json.loads((out / "results.json").read_text())

    # the kernels are those of the ci cells 6.12 and 6.12-memcg-broken, from the store
    good, good_doc = run(1, "memcg-kfuncs")
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-3000:]
    broken, broken_doc = run(2, "memcg-kfuncs-broken")
    assert broken.returncode == 1, broken.stdout[-3000:] + broken.stderr[-3000:]
    assert "regressed/memcg_kfuncs: new" in broken.stdout, broken.stdout[-3000:]
    again, again_doc = run(3, "memcg-kfuncs-broken")
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    first = broken_doc["run_id"]
    assert (f"regressed/memcg_kfuncs: known since {first} (1 of the last 2 runs)"
            in again.stdout), again.stdout[-3000:]
    fixed, fixed_doc = run(4, "memcg-kfuncs")
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-3000:]

    def record(selector: str) -> dict[str, Any]:
        told = subprocess.run([sys.executable, "-m", "harness", "history", selector, "--json"],
                              cwd=REPO, env=env, text=True, capture_output=True, timeout=120)
        assert told.returncode == 0, told.stderr
        [rec] = [r for r in json.loads(told.stdout) if r["cell"] == "regressed"]
        return rec

    ids = [d["run_id"] for d in (good_doc, broken_doc, again_doc, fixed_doc)]
    memcg = record("memcg_kfuncs")
    assert [o["run_id"] for o in memcg["outcomes"]] == ids
    assert (memcg["runs"], memcg["passed"], memcg["flips"]) == (4, 2, 2)
    assert (memcg["first_failure"], memcg["last_failure"]) == (ids[1], ids[2])
    # a check that failed on the broken kernel has the same record as its own
    test = next(t for t in broken_doc["cells"][0]["tests"] if t["name"] == "memcg_kfuncs")
    failing = [c["name"] for c in test["ktap"]["subtests"] if c["status"] == "FAIL"]
    assert failing, test["ktap"]
    check = record(f"memcg_kfuncs:{failing[0]}")
    assert (check["runs"], check["passed"], check["flips"]) == (4, 2, 2)
    assert record("boot")["passed"] == 4


def test_the_ci_run_was_recorded_with_its_failures_told(ci_run: Run) -> None:
    assert "6.12-memcg-broken/memcg_kfuncs: " in ci_run.output, ci_run.output[-3000:]
    told = harness("history", "memcg_kfuncs", "--json", timeout=120, cwd=REPO)
    assert told.returncode == 0, told.stderr
    records = {r["cell"]: r for r in json.loads(told.stdout)}
    ci_id = ci_run.data["run_id"]
    assert ci_id in [o["run_id"] for o in records["6.12-memcg-broken"]["outcomes"]]
    assert records["6.12-memcg-broken"]["passed"] == 0
    assert records["6.12"]["passed"] == records["6.12"]["runs"] >= 1
