"""A CI build job and test job of the generated pipelines, on a real kernel: the build job's
commands (`harness run --cell C --build-only`, `harness cache export --run ... -o
build/C/kernel.tar`), then the test job's (`harness run --cell C --prebuilt build/C`) in
an empty cache with make, gcc, clang and bpftool failing if called: the real kernel and
our real selftest binary boot from the archive, and the results are the full run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .conftest import REPO, Run

CELL = "6.12-memcg-broken"  # one kernel of its own, one own BPF selftest, declared FAIL


def _harness(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=timeout, env=env)


def test_a_test_job_boots_the_build_jobs_kernel_and_tests_without_source_or_compiler(
        tmp_path: Path, ci_run: Run) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    build = tmp_path / "build" / CELL
    # the build job (its kernel is in the store since the ci run: nothing is compiled)
    done = _harness("run", "--cell", CELL, "--build-only", "--out", str(build), env=env,
                    timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = _harness("cache", "export", "--run", str(build), "-o", str(build / "kernel.tar"),
                    env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    # the test job: another cache, no compiler
    trap = tmp_path / "trap"
    trap.mkdir()
    for tool in ("make", "gcc", "clang-19", "bpftool", "pahole"):
        (trap / tool).write_text(f"#!/bin/sh\necho '{tool} called' >&2\nexit 97\n")
        (trap / tool).chmod(0o755)
    test_env = {**env, "HARNESS_CACHE": str(tmp_path / "test-job-cache"),
                "PATH": f"{trap}:{os.environ['PATH']}"}
    out = tmp_path / "results" / CELL
    done = _harness("run", "--cell", CELL, "--prebuilt", str(build), "--accel", "tcg",
                    "--out", str(out), env=test_env, timeout=900)
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    full = ci_run.cell(CELL)
    assert cell["status"] == full["status"], (cell["error"], done.stderr[-3000:])
    assert [s["stage"] for s in cell["stages"]] == ["plan", "prebuilt", "tests-plan", "accel",
                                                    "boot+tests"]
    assert {t["name"]: t["status"] for t in cell["tests"]} == \
        {t["name"]: t["status"] for t in full["tests"]}
    assert cell["kernel_version"] == full["kernel_version"]
    assert cell["image"].startswith(str(tmp_path / "test-job-cache" / "kernels"))
    assert cell["kernel_from_store"] is True  # and a build would have failed: make is a trap
