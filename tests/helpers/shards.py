"""Shards cut from real runs, for the merge and its exports (tests/unit/test_merge_plan.py,
tests/unit/test_export.py).

A shard here is a run directory whose results.json is a real run's (tests/golden/compare,
tests/golden/recorded-runs: see their READMEs) holding some of that run's cells, as a
`harness run --shard K/N` of those cells writes it: the run's own fields as recorded, its
cells as recorded, the status and exit code of those cells. Each cell gets its directory,
with a file naming the shard, as a run leaves one. Nothing in a cell is changed.

`ci_shards()` is a run in three shards, of cells that are all in the full tier: the plain
cells of the 2026-11-24 verify run (6.12, 6.1), its broken-variant cells
(6.12-rstat-hook-not-called and -wrong-parent, 6.12-hierarchical: every result declares
`expected_status`), and the ad-hoc run of the
broken memcg series (cell `adhoc`, FAIL). `CI_PLAN` expects those and 6.12-faults, whose
shard is not there (its job failed before uploading): MISSING.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.base.model import Status, worst

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
VERIFY = GOLDEN / "compare" / "verify-2026-11-24.json"
ADHOC_BROKEN = GOLDEN / "compare" / "adhoc-memcg-kfuncs-broken.json"
FAULTS = GOLDEN / "compare" / "faults.json"
LKDTM = GOLDEN / "recorded-runs" / "recorded-lkdtm-6.12.json"

PLAIN = ("6.12", "6.1")
BROKEN_VARIANTS = ("6.12-rstat-hook-not-called", "6.12-rstat-hook-wrong-parent",
                   "6.12-hierarchical")
FAILING = "adhoc"
MISSING = "6.12-faults"
CI_PLAN = (*PLAIN, *BROKEN_VARIANTS, FAILING, MISSING)


def shard_doc(source: Path, cells: Sequence[str] | None = None) -> dict[str, Any]:
    """The real run's results.json with only `cells` (all: None)."""
    doc: dict[str, Any] = json.loads(source.read_text())
    if cells is not None:
        by_name = {c["cell"]: c for c in doc["cells"]}
        doc["cells"] = [by_name[n] for n in cells]
    statuses = [Status(c["status"]) for c in doc["cells"]]
    doc["status"] = worst(statuses).value if statuses else None
    doc["exit_code"] = max((s.exit_code for s in statuses), default=0)
    return doc


def shard_dir(parent: Path, name: str, source: Path, cells: Sequence[str] | None = None
              ) -> Path:
    """A shard's run directory under `parent`."""
    doc = shard_doc(source, cells)
    run = parent / name
    run.mkdir(parents=True)
    for c in doc["cells"]:
        (run / c["cell"]).mkdir()
        (run / c["cell"] / "shard").write_text(name)
    (run / "results.json").write_text(json.dumps(doc, indent=1))
    return run


def ci_shards(parent: Path) -> list[Path]:
    return [shard_dir(parent, "shard-plain", VERIFY, PLAIN),
            shard_dir(parent, "shard-broken", VERIFY, BROKEN_VARIANTS),
            shard_dir(parent, "shard-adhoc", ADHOC_BROKEN)]
