"""Real runs (tests/golden/compare/README.md) as the nth of a sequence of runs: each with a
run id and a start of its own, one result's status set as that run had it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "compare"


def broken_run() -> dict[str, Any]:
    """The real run of the deliberately broken memcg series (memcg_kfuncs FAIL)."""
    doc: dict[str, Any] = json.loads((GOLDEN / "adhoc-memcg-kfuncs-broken.json").read_text())
    return doc


def as_nth(doc: dict[str, Any], n: int, memcg_status: str) -> dict[str, Any]:
    """The real run, as the nth of a sequence in which memcg_kfuncs had this status."""
    out = copy.deepcopy(doc)
    out["run_id"], out["started"] = f"r{n}", f"2026-11-24T01:{n:02d}:00+0000"
    for t in out["cells"][0]["tests"]:
        if t["name"] == "memcg_kfuncs":
            t["status"] = memcg_status
    return out


def faults_run(n: int, *, bug: bool) -> dict[str, Any]:
    """The real faults run (a WARN and a BUG provoked), as the nth of a sequence; without
    its BUG splat when `bug` is False."""
    doc: dict[str, Any] = json.loads((GOLDEN / "faults.json").read_text())
    doc["run_id"], doc["started"] = f"f{n}", f"2026-11-24T02:{n:02d}:00+0000"
    for t in doc["cells"][0]["tests"]:
        if t["name"] == "lkdtm_bug" and not bug:
            t["splats"], t["status"] = [], "PASS"
    return doc
