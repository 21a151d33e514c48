"""Sharding on real kernels (issue 14): a small matrix (two cells sharing the 6.12 kernel,
one on the memcg-broken variant's kernel), run whole and as two shards merged; the same
cells, statuses and exit code. The kernels are the ci run's, from the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Run, harness

# the full tier's: tox -e e2e runs it, .ci/run does not (pyproject.toml's markers)
pytestmark = pytest.mark.full

MATRIX = """\
[[cell]]
name = "s-612-rstat"
tier = "ci"
kernel = "debian:6.12"
series = ["memcg-kfuncs"]
tests = ["rstat_propagation"]

[[cell]]
name = "s-612-iter"
tier = "ci"
kernel = "debian:6.12"
series = ["memcg-kfuncs"]
tests = ["cgroup_iter_rstat"]

[[cell]]
name = "s-broken-rstat"
tier = "ci"
kernel = "debian:6.12"
series = ["memcg-kfuncs-broken"]
tests = ["rstat_propagation"]
"""


def _statuses(run: Path) -> dict[str, str]:
    doc = json.loads((run / "results.json").read_text())
    return {c["cell"]: c["status"] for c in doc["cells"]}


def test_two_shards_merged_equal_one_run(ci_run: Run, tmp_path: Path) -> None:
    m = tmp_path / "matrix.toml"
    m.write_text(MATRIX)
    base = ("run", "--matrix", str(m), "--tier", "ci")
    whole = harness(*base, "--out", str(tmp_path / "whole"), timeout=1800)
    shards = [harness(*base, "--shard", f"{k}/2", "--out", str(tmp_path / f"shard{k}"),
                      timeout=1800) for k in (1, 2)]
    merged = harness("merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out",
                     str(tmp_path / "merged"), timeout=300)
    assert _statuses(tmp_path / "whole") == _statuses(tmp_path / "merged") == {
        "s-612-rstat": "PASS", "s-612-iter": "PASS", "s-broken-rstat": "PASS"}, whole.stdout
    assert merged.returncode == whole.returncode == 0
    assert [s.returncode for s in shards] == [0, 0]
    # the 6.12 cells (one kernel) ran together, and each shard said which cells it ran
    split = sorted(sorted(_statuses(tmp_path / f"shard{k}")) for k in (1, 2))
    assert split == [["s-broken-rstat"], ["s-612-iter", "s-612-rstat"]]
    assert "shard 1/2: " in shards[0].stdout.splitlines()[1]
    # the merged run keeps each cell's logs
    assert (tmp_path / "merged" / "s-broken-rstat" / "guest" / "rstat_propagation.out").exists()
