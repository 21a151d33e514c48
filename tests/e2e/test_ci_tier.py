"""The whole loop on a real Debian 6.12 kernel: build, boot under QEMU, selftests, faults."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.base import paths

from .conftest import REPO, Run, harness


def test_ci_tier_passes_and_exits_0(ci_run: Run) -> None:
    bad = [(c["cell"], c["status"], c["error"]) for c in ci_run.data["cells"]
           if c["status"] != "PASS"]
    assert not bad, bad
    assert ci_run.returncode == 0, ci_run.output[-3000:]
    assert ci_run.data["exit_code"] == 0
    assert ci_run.data["state"] == "complete"


def test_every_cell_judged_its_boot_setup_and_shutdown(ci_run: Run) -> None:
    """Clean kernels keep boot, set-up and shutdown PASS, the broken-variant cells too."""
    for cell in ci_run.data["cells"]:
        kernel = {t["name"]: t for t in cell["tests"] if t["phase"] != "test"}
        assert set(kernel) == {"boot", "setup", "shutdown"}, cell["cell"]
        for name, t in kernel.items():
            assert t["status"] == "PASS" and t["splats"] == [], (cell["cell"], name, t)
        console = (ci_run.out / cell["cell"] / "guest" / "console.log").read_text()
        # the shutdown was seen: what follows the runner's last marker
        assert "harness: runner-done" in console and "reboot: Power down" in console
    assert "kernel log: boot, set-up between tests and shutdown clean" in ci_run.output


def test_default_cell_built_and_booted_a_real_6_12(ci_run: Run) -> None:
    cell = ci_run.cell("6.12")
    assert re.match(r"6\.12\.\d+", cell["kernel_version"])
    assert cell["package_version"].startswith("6.12.")
    stages = {s["stage"]: s for s in cell["stages"]}
    for stage in ("plan", "source", "series", "kconfig", "build", "selftests-build",
                  "boot+tests"):
        assert stages[stage]["status"] == "PASS", stages.get(stage)
    assert "CONFIG_BUG" in cell["config"]["requested"]
    assert cell["config"]["dropped"] == []
    config = (ci_run.out / "6.12" / "config").read_text()
    assert "CONFIG_BUG=y" in config and "CONFIG_DEBUG_INFO_BTF=y" in config
    assert (ci_run.out / "6.12" / "guest" / "console.log").stat().st_size > 0
    assert (ci_run.out / "6.12" / "guest" / "dmesg.txt").read_text().count("Linux version") >= 1
    assert cell["accel"].startswith(("tcg", "kvm"))
    if cell["accel"].startswith("tcg"):
        assert "KVM" in cell["accel"] or "TCG requested" in cell["accel"]


def test_our_selftest_ran_every_check(ci_run: Run) -> None:
    t = ci_run.test("6.12", "cgroup_iter_rstat")
    assert t["status"] == "PASS", t
    assert t["ktap"]["errors"] == []
    names = [s["name"] for s in t["ktap"]["subtests"]]
    assert len(names) >= 5, names
    # children_order needs BPF_CGROUP_ITER_CHILDREN, which 6.12 does not have (7.x does)
    assert {s["name"]: s["status"] for s in t["ktap"]["subtests"]
            if s["status"] != "PASS"} == {"children_order": "SKIP"}, t["ktap"]["subtests"]
    assert any("neg" in n or "sleep" in n or "reject" in n for n in names), names


def test_kselftest_cgroup_ran_through_its_runner(ci_run: Run) -> None:
    tests = [t for t in ci_run.cell("6.12")["tests"] if t["name"].startswith("kselftest-cgroup")]
    assert len(tests) >= 3
    core = next(t for t in tests if t["name"] == "kselftest-cgroup-test_core")
    assert core["status"] == "PASS", core
    # The inner KTAP of the test arrived whole: nested results under the runner's line.
    assert core["ktap"]["subtests"][0]["subtests"], core["ktap"]
    for t in tests:
        assert t["status"] in ("PASS", "XFAIL", "SKIP", "XPASS"), (t["name"], t["reason"])


def test_lkdtm_warning_is_crashed_with_decoded_splat(ci_run: Run) -> None:
    t = ci_run.test("6.12-faults", "lkdtm_warn")
    assert t["status"] == "CRASHED", t
    splat = t["splats"][0]
    assert splat["kind"] == "WARNING"
    assert "lkdtm" in splat["title"]
    # decode_stacktrace.sh turned the frames into file:line.
    assert re.search(r"drivers/misc/lkdtm/\w+\.c:\d+", splat["decoded"]), splat["decoded"][:2000]
    # what WARN() printed, in results.json and on the terminal
    assert re.fullmatch(r"Warning message trigger count: \d+", splat["message"]), splat
    assert "message: Warning message trigger count:" in ci_run.output


def test_lkdtm_bug_is_crashed(ci_run: Run) -> None:
    t = ci_run.test("6.12-faults", "lkdtm_bug")
    assert t["status"] == "CRASHED", t
    assert t["splats"][0]["kind"] in ("BUG", "OOPS")


def test_hung_test_is_timeout_and_the_run_goes_on(ci_run: Run) -> None:
    t = ci_run.test("6.12-faults", "hang")
    assert t["status"] == "TIMEOUT", t
    assert 7 <= t["duration_s"] < 60


def test_second_cell_reused_the_built_kernel(ci_run: Run) -> None:
    faults = {s["stage"]: s for s in ci_run.cell("6.12-faults")["stages"]}
    assert faults["build"]["duration_s"] < 60, faults["build"]


def test_results_directory_is_complete(ci_run: Run) -> None:
    data = ci_run.data
    for tool in ("gcc", "clang-19", "pahole", "qemu-system-x86_64", "vng"):
        assert data["tools"][tool] != "missing", tool
    assert (ci_run.out / "reproduce.sh").exists()
    script = (ci_run.out / "6.12" / "reproduce.sh").read_text()
    assert "--kernel debian:6.12" in script and "--test cgroup_iter_rstat" in script
    assert json.loads((ci_run.out / "results.json").read_text())["schema"] == 2


def test_conflicting_patch_stops_the_cell_with_exit_2(tmp_path: Path, ci_run: Run) -> None:
    patch = tmp_path / "0001-conflict.patch"
    patch.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Test <t@example.org>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\n"
        "Subject: [PATCH] mm: change a line that is not there\n\n---\n"
        " mm/memcontrol.c | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n\n"
        "diff --git a/mm/memcontrol.c b/mm/memcontrol.c\n"
        "--- a/mm/memcontrol.c\n+++ b/mm/memcontrol.c\n"
        "@@ -1,3 +1,3 @@\n-this line is not in memcontrol.c\n+neither is this one\n"
        " nor this\n and not this\n-- \n2.39.5\n")
    out = tmp_path / "run"
    proc = harness("run", "--kernel", "debian:6.12", "--patch", str(patch), "--test",
                   "cgroup_iter_rstat", "--out", str(out), timeout=900)
    assert proc.returncode == 2, proc.stderr[-2000:]
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["status"] == "PATCH_CONFLICT"
    assert cell["patches"][0]["state"] == "conflict"
    assert "mm/memcontrol.c:1: hunk does not apply" in cell["error"]
    # ...and the terminal says it: file:line, the hunk, the fix, the log
    screen = " ".join(proc.stdout.split())
    assert "mm/memcontrol.c:1: hunk does not apply" in screen
    assert "| this line is not in memcontrol.c" in screen
    assert "fix: rebase the patch onto this base" in screen and "git-am.log" in screen
    assert "Traceback" not in proc.stdout + proc.stderr
    tree = next(p for p in (paths.cache_root() / "work").iterdir() if "6.12" in p.name
                and p.name.endswith("-base"))
    status = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], text=True,
                            capture_output=True, check=True).stdout
    assert status == "", "half-applied state left in the worktree"


def _qemu_pids() -> set[int]:
    pids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if cmd.startswith(b"qemu-system") or b"/qemu-system" in cmd.split(b"\0")[0]:
                pids.add(int(d.name))
    return pids


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_leaves_no_qemu_behind_and_says_where_it_stopped(
        tmp_path: Path, ci_run: Run, signum: signal.Signals, code: int) -> None:
    before = _qemu_pids()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--kernel", "debian:6.12", "--series",
         "memcg-kfuncs", "--test", str(REPO / "tests/e2e/faults/hang"),
         "--out", str(tmp_path / "run")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # A suite started in the background (nohup, `&`) passes SIGINT on as ignored,
        # and Python keeps an inherited SIG_IGN: give the harness the default, as a
        # terminal's Ctrl-C would find it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not (_qemu_pids() - before) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.5)
        started = _qemu_pids() - before
        assert started, "qemu never started"
        time.sleep(3)
        proc.send_signal(signum)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = proc.stdout.read().decode() if proc.stdout else ""
    assert proc.returncode == code, output[-2000:]
    time.sleep(1)
    assert not (_qemu_pids() & started), f"qemu survived {signum.name} to the harness"
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data["state"] == "interrupted"
    assert data["interrupted"]["signal"] == signum.name
    assert data["interrupted"]["stage"] == "boot+tests"
    cell = data["cells"][0]
    assert cell["status"] == "INTERRUPTED"
    # what finished before the signal is there
    assert [s["status"] for s in cell["stages"] if s["stage"] == "build"] == ["PASS"]
    assert f"interrupted ({signum.name}) in cell adhoc, stage boot+tests" in output
    assert "Traceback" not in output


def test_prebuilt_image_boots_and_runs_bpf_tests(tmp_path: Path, ci_run: Run) -> None:
    """image:PATH — no patches, no build: boot the stored kernel and run our BPF selftest."""
    image = ci_run.cell("6.12")["image"]  # the default cell's kernel, by its store key
    assert image.startswith(str(paths.cache_root() / "kernels"))
    out = tmp_path / "run"
    proc = harness("run", "--kernel", f"image:{image}", "--test", "cgroup_iter_rstat",
                   "--out", str(out), timeout=900)
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert proc.returncode == 0, (cell["status"], cell["error"], proc.stderr[-2000:])
    stages = [s["stage"] for s in cell["stages"]]
    assert "build" not in stages and "series" not in stages
    assert cell["tests"][0]["status"] == "PASS"
    # no tree: the KTAP printer is the kselftest.h of a 6.12 tree, and the results say so
    assert cell["kselftest_h"].startswith("tools/testing/selftests/kselftest.h of Debian "
                                          "linux-source-6.12"), cell["kselftest_h"]
    assert cell["kselftest_h"].endswith("(same major version as the image)")


def test_a_release_tarball_is_the_same_kernel_as_its_debian_twin(tmp_path: Path,
                                                                 ci_run: Run) -> None:
    """tarball:PATH, with a kernel.org-style tarball repacked from the Debian source the
    default cell imported (kernel.org is out of reach here): imported once, the same tree,
    so the same stored kernel (no build), and the series' test passes on it (one check of
    it, with what it needs: the kernel is the question here, not the test)."""
    source = ci_run.cell("6.12")["source"]  # "Debian linux-source-6.12 VERSION"
    version = source.split()[-1]
    imported = next(p for p in (paths.cache_root() / "src").glob("debian-6.12-*")
                    if (p / ".git" / "harness-imported").exists())
    release = re.match(r"\d+\.\d+\.\d+", version)
    assert release is not None, version
    tarball = tmp_path / f"linux-{release.group(0)}.tar.gz"
    with tarball.open("wb") as out:
        archive = subprocess.Popen(["git", "-C", str(imported), "archive",
                                    f"--prefix=linux-{release.group(0)}/", "HEAD"],
                                   stdout=subprocess.PIPE)
        subprocess.run(["gzip", "-1"], stdin=archive.stdout, stdout=out, check=True)
        assert archive.wait() == 0
    out = tmp_path / "run"
    proc = harness("run", "--kernel", f"tarball:{tarball}", "--series", "memcg-kfuncs",
                   "--test", "memcg_kfuncs:usage_matches_memory_current", "--out", str(out),
                   timeout=1800)
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert proc.returncode == 0, (cell["status"], cell["error"], proc.stderr[-2000:])
    assert cell["source"].startswith(f"Linux {release.group(0)} from {tarball.name} (sha256 ")
    assert cell["kernel_from_store"] is True and cell["image"] == ci_run.cell("6.12")["image"]
    assert [t["status"] for t in cell["tests"] if t["name"] == "memcg_kfuncs"] == ["PASS"]


def test_memcg_kfuncs_selftest_passes_with_the_series(ci_run: Run) -> None:
    # 6.1 is a full-tier cell (its cold build would take a cold CI past an hour)
    t = ci_run.test("6.12", "memcg_kfuncs")
    assert t["status"] == "PASS", (t["reason"], t.get("ktap", {}).get("subtests"))
    patches = ci_run.cell("6.12")["patches"]
    assert patches and all(p["state"] == "applied" for p in patches), patches


def test_memcg_selftest_catches_the_broken_variant(ci_run: Run) -> None:
    cell = ci_run.cell("6.12-memcg-broken")
    # The cell passes only because its selftest FAILED (expect_status), not crashed.
    assert cell["status"] == "PASS", cell["error"]
    t = ci_run.test("6.12-memcg-broken", "memcg_kfuncs")
    assert t["status"] == "FAIL"
    failed = [s["name"] for s in t["ktap"]["subtests"] if s["status"] == "FAIL"]
    assert failed, t["ktap"]["subtests"]
    assert any(s["state"] == "applied" and "BROKEN" in s["subject"].upper()
               for s in cell["patches"]), cell["patches"]


def test_root_memcg_is_null_when_the_controller_is_disabled(ci_run: Run) -> None:
    """The default kernel booted with cgroup_disable=memory: bpf_get_root_mem_cgroup()
    gives NULL (mainline's result), and the guest really booted so."""
    t = ci_run.test("6.12-memcg-disabled", "memcg_kfuncs")
    assert t["status"] == "PASS", (t["reason"], t.get("ktap", {}).get("subtests"))
    assert {s["name"]: s["status"] for s in t["ktap"]["subtests"]}[
        "root_memcg_null_when_disabled"] == "PASS", t["ktap"]["subtests"]
    info = (ci_run.out / "6.12-memcg-disabled" / "guest" / "guest-info.tsv").read_text()
    assert "cgroup_disable=memory" in info, info
    out = (ci_run.out / "6.12-memcg-disabled" / "guest" / "memcg_kfuncs.out").read_text()
    assert "bpf_get_root_mem_cgroup() gave NULL" in out, out


def test_memcg_benchmark_methods_agree_and_report_ratios(ci_run: Run) -> None:
    t = ci_run.test("6.12", "memcg_kfuncs_bench")
    assert t["status"] == "PASS", t["reason"]
    metrics = t["extra"]["metrics"]
    assert metrics["summary"]
    assert metrics["ratios"], metrics
    # mainline's API read two ways: a cgroup iterator, and a syscall program run once per
    # read (BPF_PROG_RUN), each against memory.stat of the same cgroups
    for method in ("memstat_read", "iter_self", "iter_tree", "syscall_run"):
        assert metrics["methods"][f"{method}@1"]["valid"] is True, (method, metrics)
    assert metrics["ratios"]["elapsed"]["memstat_read/syscall_run@1"] > 0


def test_vm_wall_clock_timeout_kills_qemu(tmp_path: Path, ci_run: Run) -> None:
    """A guest that never finishes is killed at the host-side timeout, qemu included."""
    from harness.base.model import Accel, GuestSpec
    from harness.guest import vm
    from harness.kernel import build

    kernel = build.image_from_file(Path(ci_run.cell("6.12")["image"]))
    before = _qemu_pids()
    start = time.monotonic()
    boot = vm.Boot(kernel=kernel, accel=Accel.TCG, guest=GuestSpec(), rwdirs=(tmp_path,))
    guest = vm.run_guest(boot, command=["sleep", "3600"], timeout=25,
                         console_log=tmp_path / "console.log")
    assert guest.timed_out
    assert guest.returncode is None
    assert time.monotonic() - start < 25 + 15
    time.sleep(1)
    assert not (_qemu_pids() - before), "qemu survived the wall-clock timeout"
    assert "killed after 25" in (tmp_path / "console.log").read_text()


# ---- issue 4: hierarchical stats, feature probe, broken kernels, tree-size benchmark ----

RSTAT_FEATURES = {"bpf_rstat_flush", "cgroup_rstat_updated", "cgroup_rstat_flush", "cgroup"}
# mainline's memcg kfuncs (mm/bpf_memcontrol.c), which patches/memcg-kfuncs backports
MEMCG_KFUNCS = {"bpf_get_mem_cgroup", "bpf_get_root_mem_cgroup", "bpf_put_mem_cgroup",
                "bpf_mem_cgroup_flush_stats", "bpf_mem_cgroup_page_state",
                "bpf_mem_cgroup_vm_events", "bpf_mem_cgroup_memory_events",
                "bpf_mem_cgroup_usage"}


def test_feature_probe_reports_base_and_series_confirmed_by_btf(ci_run: Run) -> None:
    for name in ("6.12", "6.12-hierarchical"):
        feats = {f["name"]: f for f in ci_run.cell(name)["features"]}
        assert set(feats) >= RSTAT_FEATURES | MEMCG_KFUNCS, (name, feats)
        for f in RSTAT_FEATURES:
            assert feats[f]["state"] == "in base", (name, feats[f])
            assert feats[f]["btf"] is True, (name, feats[f])
        for f in MEMCG_KFUNCS:
            assert feats[f]["state"] == "added by series", (name, feats[f])
            assert feats[f]["btf"] is True, (name, feats[f])
            # mainline's file, built when CONFIG_MEMCG and CONFIG_BPF_SYSCALL are set
            assert feats[f]["where"].startswith("mm/bpf_memcontrol.c:"), feats[f]
        # cgroup local storage: 6.12's own (mainline's UAPI numbers, checked against the
        # BTF's enumerators)
        for f, where in (("BPF_MAP_TYPE_CGRP_STORAGE", "include/linux/bpf_types.h:"),
                         ("bpf_cgrp_storage_get", "kernel/bpf/bpf_cgrp_storage.c:"),
                         ("bpf_cgrp_storage_delete", "kernel/bpf/bpf_cgrp_storage.c:")):
            assert (feats[f]["state"], feats[f]["btf"]) == ("in base", True), feats[f]
            assert feats[f]["where"].startswith(where), feats[f]
    assert "features" in ci_run.output and "added by series" in ci_run.output


def _checks(t: dict[str, Any], status: str | None = None) -> set[str]:
    return {s["name"] for s in t["ktap"]["subtests"] if status is None or s["status"] == status}


def test_our_selftests_print_ktap_through_the_trees_kselftest_h(ci_run: Run) -> None:
    for cell, version in (("6.12", "6.12"),):
        origin = ci_run.cell(cell)["kselftest_h"]
        assert origin.startswith("tools/testing/selftests/kselftest.h of Debian "
                                 f"linux-source-{version}"), origin
        out = (ci_run.out / cell / "guest" / "memcg_kfuncs.out").read_text()
        # kselftest.h's own closing line, which our old printer did not write this way
        assert "# Totals: pass:" in out and "TAP version 13" in out


def test_hierarchical_stats_passes_in_the_default_cell(ci_run: Run) -> None:
    t = ci_run.test("6.12", "hierarchical_stats")
    assert t["status"] == "PASS", (t["reason"], t.get("ktap"))
    assert {"parent_a_equals_sum", "leaf_a1_pages_vs_pgsteal", "reread_stable"} <= _checks(t)
    assert t["extra"]["metrics"]["retries"]["total"] >= 0


def test_rstat_propagation_is_exact_with_the_series(ci_run: Run) -> None:
    for cell in ("6.12",):
        t = ci_run.test(cell, "rstat_propagation")
        assert t["status"] == "PASS", (cell, t["reason"], t.get("ktap"))
        out = (ci_run.out / cell / "guest" / "rstat_propagation.out").read_text()
        # the loader picked the object of the kernel's rstat API, and says which
        assert "rstat API: cgroup_rstat_*" in out, out[:2000]


def test_hierarchical_stats_20_attempts_in_one_boot(ci_run: Run) -> None:
    t = ci_run.test("6.12-hierarchical", "hierarchical_stats@reliability")
    assert t["status"] == "PASS", t["reason"]
    assert t["reason"] == "all 20 attempts PASS"
    assert [a["status"] for a in t["attempts"]] == ["PASS"] * 20
    # each attempt a fresh process with its own output and measurements
    assert len({a["log"] for a in t["attempts"]}) == 20
    assert all(a["extra"]["metrics"]["retries"]["total"] >= 0 for a in t["attempts"])
    assert "all 20 attempts PASS" in ci_run.output


@pytest.mark.parametrize("test", ["hierarchical_stats", "rstat_propagation"])
def test_broken_bpf_propagation_fails_the_parent_checks(ci_run: Run, test: str) -> None:
    assert ci_run.cell("6.12-hierarchical")["status"] == "PASS"
    t = ci_run.test("6.12-hierarchical", f"{test}@broken_propagation")
    assert t["status"] == "FAIL"
    failed = _checks(t, "FAIL")
    assert any(n.startswith("parent_a_") for n in failed), failed
    assert not any(n.startswith("leaf_") for n in failed), failed


@pytest.mark.parametrize("cell", ["6.12-rstat-hook-not-called"])
def test_broken_kernels_fail_both_rstat_tests(ci_run: Run, cell: str) -> None:
    c = ci_run.cell(cell)
    assert c["status"] == "PASS", c["error"]  # PASS = every test gave its expected FAIL
    assert [p["state"] for p in c["patches"]][-1] == "applied"
    for test in ("hierarchical_stats", "rstat_propagation"):
        t = ci_run.test(cell, test)
        assert t["status"] == "FAIL", (test, t["reason"])
        failed = _checks(t, "FAIL")
        assert any(n.startswith(("parent_", "leaf_", "test_root")) for n in failed), failed


def _table_checks(source: Path) -> set[str]:
    """The checks a selftest's main() table runs (its CHECK(name, ...) lines): a check added
    to the table is expected here without a second list to keep in step."""
    table = source.read_text().split("static const struct check checks[] = {", 1)[1]
    return set(re.findall(r"^\s*CHECK\((\w+)", table.split("};", 1)[0], re.M))


CGRP_STORAGE_CHECKS = _table_checks(REPO / "selftests/cgrp_storage/cgrp_storage.c")


def test_cgroup_local_storage_semantics_on_6_12(ci_run: Run) -> None:
    """6.12's own cgroup local storage, with the selftest that also runs on 6.1 with our
    backport (the full tier's 6.1-cgrp-storage cell)."""
    t = ci_run.test("6.12-hierarchical", "cgrp_storage")
    assert t["status"] == "PASS", t["reason"]
    assert _checks(t, "PASS") == CGRP_STORAGE_CHECKS, _checks(t)


def test_rstat_tree_benchmark_methods_agree(ci_run: Run) -> None:
    t = ci_run.test("6.12-hierarchical", "rstat_tree_bench")
    assert t["status"] == "PASS", t["reason"]
    m = t["extra"]["metrics"]
    assert m["sizes"] == [10, 100]
    for size in (10, 100):
        for mode in ("few", "all"):
            for method in ("rstat_root", "rstat_walk", "user_walk"):
                read = m["reads"][f"{mode}/{method}@{size}"]
                assert read["n"] == 3 and read["unit"] == "ms", read
                assert 0 < read["min"] <= read["median"] <= read["max"], read


def test_a_flooding_test_is_cut_in_the_guest_and_counted_once(ci_run: Run) -> None:
    t = ci_run.test("6.12-faults", "flood")
    assert t["status"] == "PASS", t
    assert t["ktap"]["counts"]["PASS"] == 1
    assert any("counted once" in w for w in t["ktap"]["warnings"]), t["ktap"]["warnings"]
    assert any("output cut in the guest at 8388608 bytes" in n for n in t["notes"]), t
    out = ci_run.out / "6.12-faults" / "guest" / "flood.out"
    assert 8 * 2**20 <= out.stat().st_size <= 8 * 2**20 + 200
    assert (ci_run.out / "results.json").stat().st_size < 5 * 2**20
    assert "output cut in the guest" in ci_run.output  # on the terminal too


def test_a_test_that_leaves_a_child_running_does_not_hold_the_runner(ci_run: Run) -> None:
    t = ci_run.test("6.12-faults", "orphan")
    assert t["status"] == "PASS", t
    assert t["duration_s"] < 30


def test_a_real_results_json_has_every_key_of_the_recorded_one(ci_run: Run) -> None:
    """The recorded real run the orchestrator's unit tests hold the fake one to is still what
    a real run writes: every key path it has (splats and their messages included: the faults
    cell has them), the ci run has with the same type."""
    from tests.unit.test_pipeline import RECORDED, schema_of

    real = schema_of(ci_run.data)
    recorded = schema_of(json.loads(RECORDED.read_text()))
    assert {k: v for k, v in recorded.items() if real.get(k) != v} == {}


@pytest.mark.parametrize("test", ["cgroup_iter_rstat", "rstat_propagation", "hierarchical_stats",
                                  "rstat_tree_bench"])
def test_the_css_rstat_object_is_built_and_calls_mainlines_names(ci_run: Run, test: str,
                                                                 tmp_path: Path) -> None:
    """Only the cgroup_rstat_* object can run here (6.1, 6.12); the css_rstat_* one (6.16+)
    is compiled beside it, and must call mainline's names and not the old ones."""
    from harness.kernel import build
    from harness.testkinds import own

    kernel = build.image_from_file(Path(ci_run.cell("6.12")["image"]))
    manifest = own.resolve(test).manifest
    assert manifest is not None
    header = own.stored_kselftest_h(kernel.version)
    built = own.build_own(manifest, kernel, log_dir=tmp_path, kselftest=header)

    def kfuncs(obj: Path) -> set[str]:
        dump = subprocess.run(["bpftool", "btf", "dump", "file", str(obj)], check=True,
                              capture_output=True, text=True).stdout
        return set(re.findall(r"FUNC '((?:css|cgroup)_rstat_(?:updated|flush))'", dump))

    css, old = kfuncs(built / f"{test}_css.bpf.o"), kfuncs(built / f"{test}.bpf.o")
    assert css and css <= {"css_rstat_updated", "css_rstat_flush"}, css
    assert old == {n.replace("css_", "cgroup_") for n in css}, (old, css)


@pytest.mark.parametrize("test", ["cgroup_iter_rstat", "rstat_propagation", "hierarchical_stats",
                                  "rstat_tree_bench", "memcg_kfuncs", "memcg_kfuncs_bench"])
def test_the_standalone_makefile_builds_what_the_harness_builds(ci_run: Run, test: str,
                                                                tmp_path: Path) -> None:
    """A reviewer without the harness: `make` in the test's directory, given vmlinux.h and a
    kernel tree's kselftest.h, builds the same program and BPF objects."""
    from harness.base import paths
    from harness.kernel import build
    from harness.testkinds import own

    kernel = build.image_from_file(Path(ci_run.cell("6.12")["image"]))
    header = own.stored_kselftest_h(kernel.version)
    subprocess.run(["make", "-s", "-C", str(paths.repo_root() / "selftests" / test),
                    f"VMLINUX_H_DIR={own.vmlinux_h(kernel).parent}",
                    f"KSFT_DIR={header.directory}", f"OUT={tmp_path}"], check=True,
                   capture_output=True, timeout=600)
    manifest = own.resolve(test).manifest
    assert manifest is not None
    assert (tmp_path / test).is_file()
    assert {p.name for p in tmp_path.glob("*.bpf.o")} == {
        b.removesuffix(".c") + ".o" for b in manifest.bpf}
