"""Sharding the matrix and merging the shards' runs (issue 14): pure planning on the real
matrix and on a synthetic 50-cell one, merging real result trees (tests/golden/compare)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.drivers import matrix, shard
from harness.drivers.matrix import Cell, Tier

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "compare"
VERIFY = GOLDEN / "verify-2026-11-24.json"  # a real run's results.json: see its README


def synthetic() -> list[Cell]:
    """50 cells: 5 kernels x 5 series sets x 2 tests lists (each pair shares a kernel)."""
    kernels = ["debian:6.12", "debian:6.1", "git:/src/a", "git:/src/b", "git:/src/c"]
    series = [(), ("memcg-kfuncs",), ("cgrp-storage",), ("a", "b"), ("x",)]
    return [Cell(name=f"c{i:02d}", tier=Tier.FULL, kernel=k, series=s,
                 tests=tuple(f"t{j}" for j in range(1 + i % 4)) if half else ("t0",))
            for i, (k, s, half) in enumerate(itertools.product(kernels, series, (0, 1)))]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 25, 60])
def test_shards_cover_every_cell_once_and_keep_a_kernel_together(n: int) -> None:
    cells = synthetic()
    shards = shard.plan(cells, n)
    assert len(shards) == n
    placed = [c.name for s in shards for c in s]
    assert sorted(placed) == sorted(c.name for c in cells)  # each exactly once
    where = {c.name: k for k, s in enumerate(shards) for c in s}
    for a, b in itertools.combinations(cells, 2):
        if shard.kernel_of(a) == shard.kernel_of(b):
            assert where[a.name] == where[b.name]
    for s in shards:  # each shard in the matrix's order
        assert s == sorted(s, key=cells.index)
    assert shard.plan(cells, n) == shards  # deterministic


def test_measured_costs_balance_the_shards() -> None:
    cells = synthetic()
    costs = {c.name: (600.0 if c.kernel == "debian:6.1" else 60.0) for c in cells}
    shards = shard.plan(cells, 4, costs)
    loads = [sum(shard.cost(c, costs) for c in s) for s in shards]
    # five 6.1 groups of 1200 s and twenty groups of 120 s over four machines
    assert max(loads) - min(loads) <= 1200
    assert sorted(loads) != [0.0] * 4 and sum(loads) == sum(costs.values())


def test_the_real_matrix_in_two_shards() -> None:
    cells = matrix.select(matrix.load(), Tier.CI)
    one, two = shard.plan(cells, 2)
    assert sorted(c.name for c in one + two) == sorted(c.name for c in cells)
    assert one and two


def test_costs_come_from_an_earlier_run() -> None:
    costs = shard.costs_from(VERIFY)
    assert costs and all(v > 0 for v in costs.values())


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b"])
def test_a_bad_shard_is_refused(text: str) -> None:
    with pytest.raises(shard.ShardError):
        shard.parse(text)


def _run_with(tmp: Path, name: str, cells: list[dict[str, object]], state: str = "complete"
              ) -> Path:
    d = tmp / name
    d.mkdir()
    for c in cells:
        (d / str(c["cell"])).mkdir()
        (d / str(c["cell"]) / "marker").write_text(name)
    (d / "results.json").write_text(json.dumps({"schema": 2, "state": state, "cells": cells}))
    return d


def test_merge_joins_runs_and_exits_like_one_run(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    real = json.loads((VERIFY).read_text())["cells"]
    a = _run_with(tmp_path, "a", real[:1])
    fail = {**real[0], "cell": "other", "status": "FAIL"}
    b = _run_with(tmp_path, "b", [fail])
    code = cli.main(["merge", str(a), str(b), "--out", str(tmp_path / "m")])
    doc = json.loads((tmp_path / "m" / "results.json").read_text())
    assert [c["cell"] for c in doc["cells"]] == [real[0]["cell"], "other"]
    assert code == 1 == doc["exit_code"] and doc["status"] == "FAIL"
    assert (tmp_path / "m" / "other" / "marker").read_text() == "b"
    assert "== other [" in capsys.readouterr().out


def test_merge_reports_a_cell_twice_and_never_overwrites(tmp_path: Path) -> None:
    real = json.loads((VERIFY).read_text())["cells"]
    a = _run_with(tmp_path, "a", real[:1])
    b = _run_with(tmp_path, "b", [{**real[0], "status": "FAIL"}])
    merged = shard.merge([a, b])
    assert [c.status.value for c in merged.run.cells] == [real[0]["status"]]
    assert merged.conflicts and merged.run.exit_code == 2
    assert "conflict: cell" in shard.summary(merged)
    # an interrupted shard makes the merge incomplete, whatever its cells say
    shutil.rmtree(b)
    c = _run_with(tmp_path, "b", [], state="interrupted")
    assert shard.merge([a, c]).run.exit_code == 2
