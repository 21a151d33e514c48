"""Every benchmark in bench/ runs against today's code: each in its quick mode, a smoke run
through its whole code path (the harness runs, the builds and boots by hand, the tables
and the JSON it writes). Its figures are not judged here: one round on a shared machine
is no measurement (docs/benchmarks.md has the measured ones and their commands)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def bench(script: str, *args: str, timeout: float) -> tuple[str, dict[str, object]]:
    """Run bench/SCRIPT --quick; its output and the JSON it says it wrote."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / script), "--quick", *args],
                          cwd=REPO, text=True, capture_output=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, f"{script}: exit {done.returncode}\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    written = Path(done.stdout.rsplit("results: ", 1)[1].strip())
    assert written.is_file() and not written.is_relative_to(REPO / "bench"), written
    return done.stdout, json.loads(written.read_text())


def test_the_loop_benchmark_runs_both_sides() -> None:
    out, doc = bench("pipeline.py", timeout=30 * 60)
    assert "harness / by hand:" in out
    rows = doc["rows"]
    assert isinstance(rows, dict) and all(len(v) == 1 and v[0] > 0 for v in rows.values())
    assert doc["command"] == "bench/pipeline.py --quick"
    assert doc["test"] == "memcg_kfuncs:usage_matches_memory_current", doc["test"]
    stages = doc["harness_stage_median"]
    assert isinstance(stages, dict) and {"build", "boot+tests"} <= set(stages), stages
    # the developer's case: a line of bpf_mem_cgroup_usage(), --affected, memcg_kfuncs
    case = doc["affected"]
    assert isinstance(case, dict)
    assert all(len(v) == 1 and v[0] > 0 for v in case["rows"].values()), case["rows"]
    if case["fallback"]:  # no map yet (test_coverage.py records it): every check ran
        assert "map" in case["fallback"], case["fallback"]
    else:
        [picked] = case["picked"]
        assert picked["test"] == "memcg_kfuncs" and picked["ran"] == "some", picked
        assert "usage_matches_memory_current" in picked["checks"]
    assert "the developer's case" in out


def test_the_new_tree_benchmark_builds_a_user_tree_from_ccache() -> None:
    out, doc = bench("cross_tree.py", timeout=30 * 60)
    variants = doc["variants"]
    assert isinstance(variants, dict) and list(variants) == ["this"]
    first = variants["this"]["new_tree"]
    # the user's tree is built (its own worktree), and mostly from ccache: the objects
    # of the stored Debian build it equals but for one line
    assert first["build_s"] > 0 and first["ccache_hits"] > first["ccache_misses"], first
    assert "new tree build s" in out
    # the one-off tree's import, worktree (and its build directory) and kernel left the
    # cache with it
    cache = Path(variants["this"]["cache"])
    assert not [p for top in ("src", "work", "build") for p in (cache / top).glob(
        f"git-{variants['this']['tree']}-*")]
    kernels = {p.name for p in (cache / "kernels").iterdir()}
    assert variants["this"]["new_tree"]["kernel"] not in kernels


def test_the_isolation_benchmark_boots_on_both_roots() -> None:
    out, doc = bench("isolation.py", timeout=30 * 60)
    assert doc["command"] == "bench/isolation.py --quick"
    root = doc["root"]
    assert isinstance(root, dict) and root["size_bytes"] > 10**7 and root["packages"] > 20
    boots = doc["boots"]
    assert isinstance(boots, dict) and all(len(boots[k]) == 1 and boots[k][0]["boot"] > 0
                                           for k in ("own root", "host root")), boots
    assert "boot (kernel start to runner)" in out
