"""--retry-failed on a real kernel: a deliberately intermittent test (fails in the first
boot, passes once the guest's command line says it is a retry) becomes FLAKY with the
share of fresh boots it failed in; a test that fails in every boot stays FAIL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import REPO, harness

# the full tier's: tox -e e2e runs it, .ci/run does not (pyproject.toml's markers)
pytestmark = pytest.mark.full


def test_retry_failed_measures_a_flake_over_fresh_boots(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = harness("run", "--kernel", "debian:6.12", "--series", "memcg-kfuncs",
                   "--test", "tests/e2e/faults/intermittent",
                   "--test", "tests/e2e/faults/always_fails",
                   "--retry-failed", "2", "--out", str(out), timeout=30 * 60, cwd=REPO)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    by = {t["name"]: t for t in cell["tests"]}
    assert by["intermittent"]["status"] == "FLAKY", by["intermittent"]
    assert by["intermittent"]["reason"].startswith("flaky: failed in 1 of 3 fresh boots")
    assert by["always_fails"]["status"] == "FAIL"
    assert "failed again in 2 more fresh boot(s): not flaky" in by["always_fails"]["reason"]
    assert [s["stage"] for s in cell["stages"]][-1] == "retry-failed"
    # the terminal says it where the user looks
    assert "flaky: failed in 1 of 3 fresh boots" in done.stdout
    for k in (1, 2):
        assert "harness.retry=" in (out / "adhoc" / f"guest-retry-{k}" /
                                    "guest-info.tsv").read_text()
