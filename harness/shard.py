"""Split the selected cells into N shards for N machines, and merge their runs back.

`plan()` is a pure function of (cells, N, costs). Cells that build the same kernel (same
kernel spec, series, configs and patches) stay in one shard, so that kernel is built once.
Those groups are placed largest first on the shard with the least cost so far (ties: the
lower shard). A group's cost is the sum of its cells' costs, taken from an earlier run's
results.json (the durations of its stages) where one is given, else one unit per cell
plus one per test. Every cell lands in exactly one shard, and the same inputs give the
same shards on every machine.

`merge()` joins the results.json of several runs (the shards) into one. A cell that two
runs both hold is a conflict: it is reported, and neither copy is overwritten. The merged
status and exit code follow the same precedence as a single run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import HarnessError
from .matrix import Cell
from .model import Status, worst


class ShardError(HarnessError):
    status = Status.SETUP_ERROR


def parse(text: str) -> tuple[int, int]:
    """'K/N' (1-based) -> (K, N)."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ShardError(f"--shard {text!r}: K/N with 1 <= K <= N, e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


def kernel_of(cell: Cell) -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """What decides the kernel a cell builds: cells that share it share a shard."""
    return (cell.kernel, cell.series, cell.configs, cell.patches)


def cost(cell: Cell, costs: Mapping[str, float]) -> float:
    return costs.get(cell.name, 1.0 + len(cell.tests))


def plan(cells: Sequence[Cell], n: int, costs: Mapping[str, float] | None = None
         ) -> list[list[Cell]]:
    """The N shards, each in the cells' own order."""
    if n < 1:
        raise ShardError(f"{n} shards: at least 1")
    costs = costs or {}
    groups: dict[tuple[Any, ...], list[Cell]] = {}
    for c in cells:
        groups.setdefault(kernel_of(c), []).append(c)
    order = sorted(groups.values(),
                   key=lambda g: (-sum(cost(c, costs) for c in g), g[0].name))
    load = [0.0] * n
    placed: dict[str, int] = {}
    for group in order:
        k = min(range(n), key=lambda i: (load[i], i))
        load[k] += sum(cost(c, costs) for c in group)
        placed.update({c.name: k for c in group})
    return [[c for c in cells if placed[c.name] == k] for k in range(n)]


def costs_from(results: Path) -> dict[str, float]:
    """Seconds per cell in an earlier run's results.json (what its stages took)."""
    try:
        doc = json.loads(results.read_text())
    except (OSError, ValueError) as exc:
        raise ShardError(f"--costs {results}: not a readable results.json: {exc}",
                         fix="give the results.json of an earlier run") from None
    return {c["cell"]: float(sum(s.get("duration_s", 0.0) for s in c.get("stages", [])))
            for c in doc.get("cells", []) if isinstance(c, dict) and "cell" in c}


@dataclass(frozen=True, kw_only=True)
class Merged:
    doc: dict[str, Any]  # the merged results.json
    sources: dict[str, Path]  # cell -> the run directory it came from
    conflicts: tuple[str, ...]  # cells that more than one run holds


def merge(runs: Sequence[Path]) -> Merged:
    cells: list[dict[str, Any]] = []
    sources: dict[str, Path] = {}
    conflicts: list[str] = []
    states: list[str] = []
    for run in runs:
        file = run / "results.json"
        try:
            doc = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise ShardError(f"{file}: not a readable results.json: {exc}",
                             fix="give the run directories the shards wrote") from None
        states.append(str(doc.get("state", "")))
        for c in doc.get("cells", []):
            if c["cell"] in sources:
                conflicts.append(f"{c['cell']} (in {sources[c['cell']]} and {run})")
                continue
            sources[c["cell"]] = run
            cells.append(c)
    statuses = [Status(c["status"]) for c in cells]
    incomplete = [str(r) for r, s in zip(runs, states, strict=True) if s != "complete"]
    code = max((s.exit_code for s in statuses), default=0)
    if conflicts or incomplete:
        code = max(code, 2)
    doc = {"schema": 2, "merged_from": [str(r) for r in runs],
           "state": "complete" if not incomplete else "incomplete",
           "incomplete_runs": incomplete, "conflicts": conflicts,
           "status": worst(statuses).value if statuses else None, "exit_code": code,
           "cells": cells}
    return Merged(doc=doc, sources=sources, conflicts=tuple(conflicts))


def summary(m: Merged) -> str:
    lines = []
    for c in m.doc["cells"]:
        version = c.get("kernel_version") or c.get("kernel", "")
        bad = [t["name"] for t in c.get("tests", [])
               if t.get("status") not in ("PASS", "SKIP", "XFAIL")]
        lines.append(f"== {c['cell']} [{version}]  {c['status']}"
                     + (f"  ({', '.join(bad)})" if bad else "")
                     + f"   from {m.sources[c['cell']]}")
    for conflict in m.doc["conflicts"]:
        lines.append(f"conflict: cell {conflict}: the first run's kept, the other left "
                     "where it is")
    for run in m.doc["incomplete_runs"]:
        lines.append(f"incomplete: {run} did not finish (its results.json says so)")
    return "\n".join(lines)
