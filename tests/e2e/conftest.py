"""End-to-end fixtures: one real `harness run --tier ci`, shared by every e2e test.

The kernel is built once (and not at all when ~/.cache/harness already has it); each
test reads the results of that run instead of booting again, except the tests that
need their own process to kill.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CI_RUN_TIMEOUT_S = 75 * 60


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@dataclass(frozen=True)
class Run:
    returncode: int
    out: Path
    data: dict[str, Any]
    output: str

    def cell(self, name: str) -> dict[str, Any]:
        return next(c for c in self.data["cells"] if c["cell"] == name)

    def test(self, cell: str, name: str) -> dict[str, Any]:
        return next(t for t in self.cell(cell)["tests"] if t["name"] == name)


def harness(*args: str, timeout: float, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("ci-run") / "run"
    proc = harness("run", "--tier", "ci", "--out", str(out), timeout=CI_RUN_TIMEOUT_S)
    log = out.parent / "harness-output.log"
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    sys.stderr.write(proc.stdout[-4000:])
    results = out / "results.json"
    assert results.exists(), f"no results.json; harness said:\n{proc.stderr[-3000:]}"
    return Run(returncode=proc.returncode, out=out, data=json.loads(results.read_text()),
               output=proc.stdout + proc.stderr)
