"""The history over real runs of the session: the ci tier's run recorded the broken
variant's failure; running that cell again tells it "known since" the ci run, and
`harness history` gives its record over both (every harness process of the test session
writes the session's own history: tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import REPO, Run, harness


def test_a_failure_seen_before_is_known_and_the_record_counts_both(
        ci_run: Run, tmp_path: Path) -> None:
    broken = ci_run.cell("6.12-memcg-broken")
    memcg = next(t for t in broken["tests"] if t["name"] == "memcg_kfuncs")
    assert memcg["status"] == "FAIL"
    again = harness("run", "--cell", "6.12-memcg-broken", "--out", str(tmp_path / "again"),
                    timeout=20 * 60, cwd=REPO)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    ci_id = ci_run.data["run_id"]
    # known from the runs before it (the ci run among them), never "new" again
    assert "6.12-memcg-broken/memcg_kfuncs: known since " in again.stdout, again.stdout
    told = harness("history", "memcg_kfuncs", "--json", timeout=120, cwd=REPO)
    assert told.returncode == 0, told.stderr
    records = {r["cell"]: r for r in json.loads(told.stdout)}
    rec = records["6.12-memcg-broken"]
    assert rec["runs"] >= 2 and rec["passed"] == 0
    assert ci_id in [o["run_id"] for o in rec["outcomes"]]
    assert records["6.12"]["passed"] == records["6.12"]["runs"] >= 1
