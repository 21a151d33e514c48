"""`harness reproduce` for real: a run made from a clone of the harness that is then deleted,
with a --patch file that is then deleted, its results directory moved; reproduced from
another clone (this checkout) at another path, from its directory and from its bundle; then
with one input changed (the patch under the same name replaced by a wrong kernel's), and
with a kernel source that cannot be had.

Cheap by design: the kernel is the `6.12` cell's (debian:6.12 + memcg-kfuncs + base) with
a one-line comment added to kernel/cgroup/rstat.c (an incremental build, then from the
store); the wrong kernel is the ci tier's `6.12-wrong-rstat-online-cpus` (from the store
after the ci run); one quick test, rstat_propagation."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, Run

TIMEOUT_S = 30 * 60
WRONG = REPO / "patches" / "wrong" / "6.12" / "rstat-online-cpus.patch"


def harness(*args: str, cwd: Path, code: Path = REPO) -> subprocess.CompletedProcess[str]:
    """The harness of the clone `code`, run in `cwd`."""
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=TIMEOUT_S,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(code)})


def said(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout[-4000:] + "\n--- stderr ---\n" + proc.stderr[-4000:]


def comment_patch(ci_run: Run, dest: Path) -> Path:
    """A mail adding a comment at the top of kernel/cgroup/rstat.c of the 6.12 base the ci
    run imported (its first lines are the patch's context)."""
    version = ci_run.cell("6.12")["package_version"]
    src = Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness") / \
        "src" / f"debian-6.12-{re.sub(r'[^A-Za-z0-9._-]', '_', version)}"
    head = subprocess.run(["git", "-C", str(src), "show", "HEAD:kernel/cgroup/rstat.c"],
                          check=True, capture_output=True, text=True).stdout.splitlines()[:3]
    dest.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Harness Test <test@example.org>\n"
        "Date: Sat, 28 Nov 2026 00:00:00 +0000\n"
        "Subject: [PATCH] cgroup/rstat: a comment (harness e2e: reproduce)\n\n"
        "---\n kernel/cgroup/rstat.c | 1 +\n 1 file changed, 1 insertion(+)\n\n"
        "diff --git a/kernel/cgroup/rstat.c b/kernel/cgroup/rstat.c\n"
        "--- a/kernel/cgroup/rstat.c\n+++ b/kernel/cgroup/rstat.c\n"
        "@@ -1,3 +1,4 @@\n"
        f" {head[0]}\n+/* reproduced by harness reproduce (an end-to-end test) */\n"
        f" {head[1]}\n {head[2]}\n-- \n2.39.5\n")
    return dest


@pytest.fixture(scope="module")
def moved_run(ci_run: Run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The producer: a clone of this repository, a run with a --patch, the clone and the
    patch deleted, the results directory moved."""
    root = tmp_path_factory.mktemp("producer")
    clone = root / "harness-clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=600)
    patch = comment_patch(ci_run, root / "0001-cgroup-rstat-a-comment.patch")
    made = harness("run", "--kernel", "debian:6.12", "--series", "memcg-kfuncs", "--config",
                   "base", "--test", "rstat_propagation", "--patch", str(patch),
                   "--out", str(root / "run"), cwd=clone, code=clone)
    assert made.returncode == 0, said(made)
    shutil.rmtree(clone)
    patch.unlink()
    moved = tmp_path_factory.mktemp("moved") / "the-run"
    shutil.move(root / "run", moved)
    return moved


def test_a_moved_run_of_a_deleted_clone_is_reproduced_from_another_clone(
        moved_run: Path, tmp_path: Path) -> None:
    reviewer = tmp_path / "reviewer"
    reviewer.mkdir()
    got = harness("reproduce", str(moved_run), "--out", str(tmp_path / "again"), cwd=reviewer)
    assert got.returncode == 0, said(got)
    flat = " ".join(got.stdout.split())
    assert "verdicts match:" in flat
    # the inputs, listed
    assert re.search(r"adhoc: Debian linux-source-6\.12 6\.12\.\S+, base [0-9a-f]{12}", flat)
    assert "series memcg-kfuncs: 0001-" in flat
    assert "--patch " in flat and "0001-cgroup-rstat-a-comment.patch (" in flat
    assert "tests: rstat_propagation" in flat
    data = json.loads((tmp_path / "again" / "results.json").read_text())
    [cell] = data["cells"]
    assert cell["kernel"].startswith("debian:6.12=")  # the package version, pinned
    assert cell["kernel_from_store"] is True  # the same kernel: a boot, no build


def test_its_bundle_is_reproduced_the_same(moved_run: Path, tmp_path: Path) -> None:
    archive = tmp_path / "mail" / "run.tar.gz"
    made = harness("export", "--bundle", str(moved_run), "-o", str(archive), cwd=tmp_path)
    assert made.returncode == 0, said(made)
    assert archive.stat().st_size < 5 << 20  # no kernel image in it
    got = harness("reproduce", str(archive), "--out", str(tmp_path / "again"), cwd=tmp_path)
    assert got.returncode == 0, said(got)
    assert "verdicts match:" in got.stdout


def test_a_wrong_patch_under_the_same_name_differs_and_both_are_named(
        moved_run: Path, tmp_path: Path) -> None:
    swapped = tmp_path / "0001-cgroup-rstat-a-comment.patch"
    shutil.copyfile(WRONG, swapped)
    got = harness("reproduce", str(moved_run), "--patch", str(swapped),
                  "--out", str(tmp_path / "again"), cwd=tmp_path)
    assert got.returncode == 1, said(got)
    flat = " ".join(got.stdout.split())
    assert "adhoc: patch 0001-cgroup-rstat-a-comment.patch: sha256" in flat
    assert "verdicts differ:" in flat and "adhoc/rstat_propagation: PASS -> FAIL" in flat
    # (the CPU stays offline from this check's updates to its read: every time)
    assert "check update_for_offline_cpu_flushed: PASS -> FAIL" in flat


def test_a_package_version_debian_no_longer_serves_cannot_be_reproduced(
        moved_run: Path, tmp_path: Path) -> None:
    gone = tmp_path / "run"
    shutil.copytree(moved_run, gone)
    data = json.loads((gone / "results.json").read_text())
    data["cells"][0]["inputs"]["source"]["package_version"] = "6.12.0-0~notserved"
    (gone / "results.json").write_text(json.dumps(data))
    got = harness("reproduce", str(gone), "--out", str(tmp_path / "again"), cwd=tmp_path)
    assert got.returncode == 2, said(got)
    assert "adhoc: the run's kernel source debian:6.12=6.12.0-0~notserved cannot be had " \
           "here" in got.stderr
    assert "fix: " in got.stderr and "--kernel debian:6.12 (another source" in got.stderr
    assert "Traceback" not in got.stderr and not (tmp_path / "again").exists()
