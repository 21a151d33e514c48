"""Every benchmark in bench/ keeps running: each has a quick mode (a smoke run of its code
path, not a timing), run here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_parse_flood_runs_in_quick_mode(tmp_path: Path) -> None:
    out = tmp_path / "flood.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "parse_flood.py"), "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert set(data) == {"repeated", "distinct"}
    for r in data.values():
        assert r["mb"] == 2 and r["median_s"] > 0 and r["results_json_bytes"] > 0
    # what the unit tests bound: results.json stays small whatever the flood
    assert data["repeated"]["results_json_bytes"] < 5 * 2**20
