"""`harness run --coverage` for real: the memcg series built with gcov (a kernel of its own;
in CI most of its objects come from ccache after the base kernel), memcg_kfuncs run, and
the counters read in the guest, mapped onto the patches on the host. Every added line gcov
counts must have run except the `pr_warn()` of a failed kfunc registration, which no test
can reach (docs/coverage.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import harness


def test_the_series_lines_are_mapped_and_each_unrun_line_is_named(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("coverage") / "run"
    proc = harness("run", "--kernel", "debian:6.12", "--series", "memcg-kfuncs", "--coverage",
                   "--test", "memcg_kfuncs", "--out", str(out), timeout=3600)
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
