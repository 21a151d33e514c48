"""`harness mutate` for real, judged anew (--fresh): three mutants named by id, two from the
series and one from the rstat flush path (--target), each built, booted and killed by the
test that must kill it; the baseline runs twice and every test counts. memcg_kfuncs runs
the two checks that kill its mutants (with what they need), as a developer would pick
them: the whole test takes 30 s a boot under TCG, they take a third of it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.base import paths

from .conftest import harness

# the full tier's: tox -e e2e runs it, .ci/run does not (pyproject.toml's markers)
pytestmark = pytest.mark.full

TARGET = "kernel/cgroup/rstat.c:cgroup_rstat_flush_locked"
# Three mutants of today's series and target, and the one test each must fail: its value
# read as 0 (child_values_match_created), the BPF hook never called, a reader that takes
# untrusted pointers (untrusted_cgroup_rejected).
KILLERS = {"0f7b00375773": ("memcg_kfuncs",), "f0517af0a948": ("hierarchical_stats",),
           "d4d8eab21600": ("memcg_kfuncs",)}
MEMCG_CHECKS = "memcg_kfuncs:child_values_match_created,untrusted_cgroup_rejected"


def mutate(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = harness("mutate", "--series", "memcg-kfuncs", "--target", TARGET,
                   "--test", MEMCG_CHECKS, "--test", "hierarchical_stats",
                   *(a for m in KILLERS for a in ("--mutant", m)), "--out", str(out), *extra,
                   timeout=3600)
    (out.parent / f"{out.name}-output.log").write_text(proc.stdout + "\n--- stderr ---\n"
                                                       + proc.stderr)
    return proc, json.loads((out / "mutants.json").read_text())


def test_three_mutants_are_each_killed_by_their_test(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("mutate") / "out"
    proc, data = mutate(out, "--fresh")
    assert data["baseline"]["status"] == "PASS", data["baseline"]
    assert data["baseline"]["runs"] == 2 and data["baseline"]["excluded"] == {}
    runs = data["mutants"]
    assert len(runs) == 3
    assert {m["source"].split()[0] for m in runs} == {"series", "target"}
    for m in runs:
        assert not m["cached"]
        assert (m["outcome"], tuple(m["killed_by"])) == ("killed", KILLERS[m["id"]]), (
            m["id"], m["outcome"], m["killed_by"], m["before"], m["after"], m["why"])
        assert (out / m["patch"]).read_text().startswith("From: harness mutate")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "killed" in proc.stdout and "operator" in proc.stdout
    # the mutant kernels were not kept (the baseline's was), and the worktree is back at
    # the series
    baseline = json.loads((out / "baseline" / "results.json").read_text())["cells"][0]
    assert Path(baseline["image"]).exists()
    for m in runs:
        if m["run"]:
            image = json.loads((out / m["run"] / "results.json").read_text())["cells"][0]["image"]
            assert image and image != baseline["image"] and not Path(image).exists()
    tree = next(p for p in (paths.cache_root() / "work").iterdir()
                if p.name.startswith("debian-6.12") and p.name.endswith("-base"))
    subject = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%s"], text=True,
                             capture_output=True, check=True).stdout
    assert "MUTANT" not in subject
    assert subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], text=True,
                          capture_output=True, check=True).stdout == ""

    # The same command again: every verdict from the cache (same tree, config, tests and
    # harness), the same outcomes, and still every mutant's patch in the new directory.
    again = out.parent / "again"
    proc2, data2 = mutate(again)
    assert proc2.returncode == 0, proc2.stdout[-3000:]
    assert [(m["id"], m["outcome"]) for m in data2["mutants"]] == [
        (m["id"], m["outcome"]) for m in runs]
    for m in data2["mutants"]:
        assert m["cached"] is True and m["run"] == ""
        assert (again / m["patch"]).read_text() == (out / m["patch"]).read_text()
