"""bench/parse_flood.py runs against today's `harness parse`, in its quick mode (2 MB,
one round): the smoke run that keeps it working. Its timings are its own question."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_parse_flood_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "flood.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "parse_flood.py"), "--quick",
                           "--out", str(out)], cwd=REPO, text=True, capture_output=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert set(doc) == {"repeated", "distinct"}
    for kind in doc.values():
        assert kind["mb"] == 2 and kind["rounds"] == 1 and kind["median_s"] > 0
    # the parse keeps results.json bounded: one repeated line once, distinct ones up to the
    # cut (20,000 kept, about 3 MB, whatever the flood's size)
    assert 0 < doc["repeated"]["results_json_bytes"] < 64 * 1024
    assert 0 < doc["distinct"]["results_json_bytes"] < 4 * 2**20
