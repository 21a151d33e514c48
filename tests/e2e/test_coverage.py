"""`harness run --coverage --map` for real: the memcg series built with gcov (a kernel of
its own; in CI most of its objects come from ccache after the base kernel), each check of
memcg_kfuncs run alone, and the counters read in the guest, mapped onto the patches on the
host. Every added line gcov counts must have run except the `pr_warn()` of a failed kfunc
registration, which no test can reach (docs/coverage.md). The map it records is then read
by `--affected` for a one-line change of bpf_mem_cgroup_usage() (docs/affected.md); the
benchmark's quick mode (test_speed_benchmarks.py) uses it too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import harness

# the full tier's: tox -e e2e runs it, .ci/run does not (pyproject.toml's markers)
pytestmark = pytest.mark.full


def test_the_series_lines_are_mapped_and_each_unrun_line_is_named(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("coverage") / "run"
    proc = harness("run", "--kernel", "debian:6.12", "--series", "memcg-kfuncs", "--coverage",
                   "--map", "--test", "memcg_kfuncs", "--out", str(out), timeout=3600)
    (out.parent / "output.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["status"] == "PASS"
    cov = cell["coverage"]
    patches = sorted(Path(p).name for p in
                     (Path(__file__).resolve().parents[2] / "patches" / "memcg-kfuncs")
                     .glob("0*.patch"))
    assert [c["patch"] for c in cov] == patches
    code = [c for c in cov if c["executable"]]
    assert len(code) == 3, cov  # the documentation patch has no C
    for c in code:
        assert c["ran"] + len(c["not_run"]) == c["executable"], c
        assert len(c["lines"]) == c["executable"]
        # counters are credited per test, the initcalls to the boot
        assert set(c["by_test"]) <= {"boot", "memcg_kfuncs"} and c["by_test"], c["by_test"]
    not_run = [n for c in code for n in c["not_run"]]
    assert [n for n in not_run if "pr_warn" not in n["source"]] == [], not_run
    assert sum(c["by_test"].get("boot", 0) for c in code) > 0  # the initcall ran at boot
    # the terminal says it, per patch, and names each line not run (lines wrapped there)
    flat = " ".join(proc.stdout.split())
    for c in code:
        assert f"coverage: {c['patch']}: {c['ran']}/{c['executable']} added lines run" \
            in flat, proc.stdout[-3000:]
    for n in not_run:
        assert f"not run: {n['file']}:{n['line']}:" in flat
    # the map: each check of memcg_kfuncs alone, and its frame; what each reached
    doc = json.loads((out / cell["cell"] / "affected-map.json").read_text())
    units = doc["tests"]["memcg_kfuncs"]["units"]
    assert "usage_matches_memory_current" in units and "cgroup_cleanup" in units, sorted(units)
    usage = "mm/bpf_memcontrol.c:bpf_mem_cgroup_usage"
    assert usage in units["usage_matches_memory_current"]
    assert usage not in doc["tests"]["memcg_kfuncs"]["frame"]
    assert not doc["tests"]["memcg_kfuncs"]["failed"], "a check failed alone"
    assert {"mm/bpf_memcontrol.c", "mm/memcontrol.c", "kernel/cgroup/rstat.c"} <= \
        set(doc["files"])


def test_affected_runs_the_checks_that_reach_the_changed_function(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A one-line change in bpf_mem_cgroup_usage(): the checks the map says reach it, not
    every check of memcg_kfuncs; the results say which and why."""
    root = tmp_path_factory.mktemp("affected")
    patch = root / "usage.patch"
    patch.write_text(USAGE_PATCH)
    out = root / "run"
    proc = harness("run", "--kernel", "debian:6.12", "--series", "memcg-kfuncs", "--patch",
                   str(patch), "--affected", "--test", "memcg_kfuncs", "--out", str(out),
                   timeout=3600)
    (root / "output.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    affected = cell["affected"]
    assert affected["fallback"] == "", affected
    assert affected["changed"] == ["mm/bpf_memcontrol.c:bpf_mem_cgroup_usage"]
    [told] = affected["tests"]
    assert told["ran"] == "some" and "usage_matches_memory_current" in told["checks"]
    test = next(t for t in cell["tests"] if t["name"] == "memcg_kfuncs")
    sel = test["selection"]
    assert sel["not_run"] and "bpf_mem_cgroup_usage" in sel["why"]
    ran = [c["name"] for c in test["ktap"]["subtests"]]
    # the guest ran what the selection says, no more (the table has grown since: no count)
    assert "usage_matches_memory_current" in ran
    assert sorted(ran) == sorted([*sel["selected"], *sel["needed"], *sel["cleanup"]]), sel
    assert "affected by the change: mm/bpf_memcontrol.c:bpf_mem_cgroup_usage" in proc.stdout


# the return of bpf_mem_cgroup_usage() in patches/memcg-kfuncs (6.12): the same value
USAGE_PATCH = """From: Harness Tests <tests@example.org>
Subject: [PATCH] mm: bpf_memcontrol: a one-line change of bpf_mem_cgroup_usage()

---
diff --git a/mm/bpf_memcontrol.c b/mm/bpf_memcontrol.c
--- a/mm/bpf_memcontrol.c
+++ b/mm/bpf_memcontrol.c
@@ -149,7 +149,7 @@ bpf_mem_cgroup_memory_events(struct mem_cgroup *memcg,
  */
 __bpf_kfunc unsigned long bpf_mem_cgroup_usage(struct mem_cgroup *memcg)
 {
-\treturn page_counter_read(&memcg->memory) * PAGE_SIZE;
+\treturn page_counter_read(&memcg->memory) * PAGE_SIZE + 0 * 1;
 }
\x20
 __bpf_kfunc_end_defs();
"""
