"""What a cell costs when shards are planned (`harness run --shard K/N --costs RUN`): its
kernel's build counted once per kernel, a kernel taken from the store at the build time
the store recorded, and a cell the costs lack said and weighed like the measured ones.
On the real 2026-11-24 verify run (tests/golden/compare: see its README), whose kernels
all came from the store (build stages of 0.01 s), and copies of it made as other runs
would have written them."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from harness.drivers import matrix, shard
from harness.drivers.matrix import Tier
from tests.helpers.shards import VERIFY


def _rest(cell: dict[str, Any]) -> float:
    return float(sum(s["duration_s"] for s in cell["stages"] if s["stage"] != "build"))


def _with_builds(doc: dict[str, Any], seconds: dict[str, float]) -> dict[str, Any]:
    """The run as separate jobs would have made it: each cell built its kernel."""
    out = copy.deepcopy(doc)
    for c in out["cells"]:
        c["kernel_from_store"] = False
        for s in c["stages"]:
            if s["stage"] == "build":
                s["duration_s"] = seconds[c["cell"]]
    return out


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_kernel_two_cells_built_is_charged_once(tmp_path: Path) -> None:
    """6.12 and 6.12-hierarchical booted one kernel: 6.12 pays the longer of their two
    builds, 6.12-hierarchical its other stages; each other cell its own build."""
    doc = json.loads(VERIFY.read_text())
    builds = {"6.12": 700.0, "6.12-hierarchical": 720.0, "6.1": 760.0,
              "6.12-rstat-hook-not-called": 90.0, "6.12-rstat-hook-wrong-parent": 80.0}
    costs = shard.costs_from(_write(tmp_path, _with_builds(doc, builds)))
    by = {c["cell"]: c for c in doc["cells"]}
    assert costs["6.12"] == pytest.approx(720.0 + _rest(by["6.12"]))
    assert costs["6.12-hierarchical"] == pytest.approx(_rest(by["6.12-hierarchical"]))
    assert costs["6.1"] == pytest.approx(760.0 + _rest(by["6.1"]))
    assert sum(costs.values()) == pytest.approx(
        720.0 + 760.0 + 90.0 + 80.0 + sum(_rest(c) for c in doc["cells"]))


def test_a_kernel_from_the_store_costs_the_build_the_store_recorded(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    doc = json.loads(VERIFY.read_text())
    for c in doc["cells"]:
        c["kernel_from_store"] = True
    by = {c["cell"]: c for c in doc["cells"]}
    recorded = {by["6.12"]["image"]: 725.0, by["6.1"]["image"]: 760.0}
    with caplog.at_level(logging.WARNING):
        costs = shard.costs_from(_write(tmp_path, doc), recorded)
    assert costs["6.12"] == pytest.approx(725.0 + _rest(by["6.12"]))
    assert costs["6.12-hierarchical"] == pytest.approx(_rest(by["6.12-hierarchical"]))
    assert costs["6.1"] == pytest.approx(760.0 + _rest(by["6.1"]))
    # the two rstat-hook kernels: no record, their build is not counted, and said
    assert costs["6.12-rstat-hook-not-called"] == pytest.approx(
        0.01 + _rest(by["6.12-rstat-hook-not-called"]))
    [warning] = caplog.messages
    assert "6.12-rstat-hook-not-called, 6.12-rstat-hook-wrong-parent" in warning
    assert "their build is not counted" in warning


def test_a_cell_the_costs_lack_is_said_and_weighs_the_mean(
        caplog: pytest.LogCaptureFixture) -> None:
    cells = matrix.select(matrix.load(), Tier.CI)
    costs = {c.name: 600.0 for c in cells if c.name != "6.12-faults"}
    costs["6.12"] = 1200.0
    mean = sum(costs.values()) / len(costs)
    faults = next(c for c in cells if c.name == "6.12-faults")
    assert shard.cost(faults, costs) == pytest.approx(mean)  # seconds, not one unit
    with caplog.at_level(logging.WARNING):
        shard.plan(cells, 3, costs)
    [warning] = caplog.messages
    assert "no measurement of cell(s) 6.12-faults" in warning and f"({mean:.0f} s)" in warning
    caplog.clear()
    shard.plan(cells, 3)  # no costs: nothing to say
    assert caplog.messages == []

