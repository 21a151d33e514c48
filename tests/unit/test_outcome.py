"""Guest results -> raw results, on files recorded from real guest runs (golden/guest/README.md).

Every kernel-log line belongs to one result: boot, a test, the runner's set-up, shutdown.
The variants that inject a splat are made from the real clean run by adding lines of the
kernel's own format; the final statuses they lead to are verdict.judge's (test_verdict.py)
and are checked here end to end through judge as well.
"""

from __future__ import annotations

from pathlib import Path

from harness.base.model import Phase, Status
from harness.base.model import TestResult as Result
from harness.guest import protocol
from harness.guest.protocol import GuestTest
from harness.judge import outcome, verdict

GOLDEN = Path(__file__).parent.parent / "golden" / "guest"
WARN = ("[   37.700000] ------------[ cut here ]------------\n"
        "[   37.700001] WARNING: CPU: 1 PID: 1 at kernel/reboot.c:80 my_notifier+0x9/0x10\n"
        "[   37.700002] Call Trace:\n"
        "[   37.700003]  <TASK>\n"
        "[   37.700004]  my_notifier+0x9/0x10\n"
        "[   37.700005]  blocking_notifier_call_chain+0x5f/0x80\n"
        "[   37.700006]  </TASK>\n"
        "[   37.700007] ---[ end trace 0000000000000000 ]---\n")


def plan_of(d: Path) -> list[GuestTest]:
    plan = []
    for line in (d / "plan.tsv").read_text().splitlines():
        name, timeout, cwd, *rest = line.split("\t")
        plan.append(GuestTest(name=name, timeout_s=int(timeout), cwd=Path(cwd),
                              command=rest[-1]))
    return plan


def record(run: str, **changes: object) -> tuple[list[GuestTest], outcome.BootRecord]:
    d = GOLDEN / run

    def read(name: str) -> str:
        return (d / name).read_text() if (d / name).exists() else ""

    plan = plan_of(d)
    fields: dict[str, object] = dict(
        status_text=read("status.tsv"), info_text=read("guest-info.tsv"),
        outputs={t.name: read(f"{t.name}.out") for t in plan if (d / f"{t.name}.out").exists()},
        dmesg=read("dmesg.txt"), console=read("console.log"),
        runner_done=(d / "runner-done").exists())
    fields.update(changes)
    return plan, outcome.BootRecord(**fields)  # type: ignore[arg-type]


def by_name(results: list[Result]) -> dict[str, Result]:
    return {r.name: r for r in results}


def judged(plan: list[GuestTest], rec: outcome.BootRecord) -> verdict.CellVerdict:
    return verdict.judge(outcome.evaluate(plan, rec), kernel_version="6.12.117+",
                         expectations=verdict.Expectations(), rules=verdict.CellRules())


# ---- a real clean boot of the default cell (runner with boot/shutdown markers) ----


def test_real_clean_run_has_a_result_for_every_part_of_the_log() -> None:
    plan, rec = record("clean-6.12")
    results = outcome.evaluate(plan, rec)
    assert [r.name for r in results] == ["boot", *(t.name for t in plan), "setup", "shutdown"]
    assert [r.phase for r in results][:1] == [Phase.BOOT]
    assert [r.phase for r in results][-2:] == [Phase.SETUP, Phase.SHUTDOWN]
    freezer = "kselftest-cgroup-test_freezer"
    for r in results:
        assert r.splats == () and r.taint == "", r.name
        assert r.status is (Status.FAIL if r.name == freezer else Status.PASS), r.name
    assert 2 < results[0].duration_s < 30  # the runner was ready this many seconds in
    # the memcg OOM reports of test_memcontrol carry a call trace but are not splats
    assert "invoked oom-killer" in rec.console
    # test_cgfreezer_ptrace failed in this run: declared flaky in the repository
    known = verdict.load_expectations(Path(__file__).parents[2] / "selftests" /
                                      "expectations.toml")
    v = verdict.judge(results, kernel_version="6.12.117+", expectations=known,
                      rules=verdict.CellRules())
    assert v.status is Status.PASS
    assert by_name(list(v.results))[freezer].status is Status.XFAIL
    assert "declared flaky" in by_name(list(v.results))[freezer].reason


def test_a_warn_at_boot_is_the_boots() -> None:
    plan, rec = record("clean-6.12")
    dmesg = rec.dmesg.replace("harness: runner-start", "harness: runner-start-x", 0)
    head, sep, tail = dmesg.partition("[    3.170921] harness: runner-start")
    assert sep, "the real dmesg has the marker"
    plan, rec = record("clean-6.12", dmesg=head + WARN.replace("37.7", "3.1") + sep + tail)
    res = by_name(outcome.evaluate(plan, rec))
    assert [s.function for s in res["boot"].splats] == ["my_notifier"]
    assert all(not r.splats for n, r in res.items() if n != "boot")
    v = judged(plan, rec)
    assert v.status is Status.CRASHED
    assert "during boot" in by_name(list(v.results))["boot"].reason


def test_a_warn_at_shutdown_is_found_in_the_console_only() -> None:
    plan, rec = record("clean-6.12")
    marker = "[   37.662189] harness: runner-done\n"
    assert marker in rec.console
    console = rec.console.replace(marker, marker + WARN)
    plan, rec = record("clean-6.12", console=console)
    res = by_name(outcome.evaluate(plan, rec))
    assert [s.kind for s in res["shutdown"].splats] == ["WARNING"]
    assert sum(len(r.splats) for r in res.values()) == 1
    assert judged(plan, rec).status is Status.CRASHED


def test_a_warn_between_tests_is_the_setups() -> None:
    plan, rec = record("clean-6.12")
    end = "harness: test-end memcg_kfuncs rc=0\n"
    line = next(ln for ln in rec.dmesg.splitlines(keepends=True) if ln.endswith(end))
    plan, rec = record("clean-6.12", dmesg=rec.dmesg.replace(line, line + WARN))
    res = by_name(outcome.evaluate(plan, rec))
    assert len(res["setup"].splats) == 1
    assert not res["memcg_kfuncs"].splats


def test_taint_set_between_tests_is_the_setups() -> None:
    plan, rec = record("clean-6.12")
    lines = rec.status_text.splitlines()
    # the second test started with W (512) set, after the first ended clean
    parts = lines[3].split("\t")
    parts[4] = parts[5] = "512"
    lines[3] = "\t".join(parts)
    plan, rec = record("clean-6.12", status_text="\n".join(lines) + "\n",
                       info_text=rec.info_text.replace("tainted_at_end\t0",
                                                       "tainted_at_end\t512"))
    res = by_name(outcome.evaluate(plan, rec))
    assert res["setup"].taint == "W"
    assert res["memcg_kfuncs"].taint == ""


def test_a_guest_that_did_not_power_off_fails_shutdown() -> None:
    plan, rec = record("clean-6.12", vm_timed_out=True)
    res = by_name(outcome.evaluate(plan, rec))
    assert res["shutdown"].status is Status.TIMEOUT


# ---- the real faults run (a runner without the boot/shutdown markers) ----


def test_real_faults_are_classified() -> None:
    plan, rec = record("faults")
    plan = [t for t in plan if t.name in rec.outputs]
    res = by_name(outcome.evaluate(plan, rec))
    warn = res["lkdtm_warn"]
    assert warn.exit_code == 0  # the test "passed": only the splat says otherwise
    assert [s.kind for s in warn.splats] == ["WARNING"] and warn.taint == "W"
    assert "lkdtm_WARNING" in warn.splats[0].text
    bug = res["lkdtm_bug"]
    assert bug.splats and bug.splats[0].kind == "BUG"
    hang = res["hang"]
    assert hang.status is Status.TIMEOUT
    assert "per-test timeout (8s)" in hang.reason
    assert 8 <= hang.duration_s < 10
    rstat = res["cgroup_iter_rstat"]
    assert rstat.status is Status.PASS
    assert rstat.splats == ()  # the WARN before it is not attributed to it
    assert rstat.ktap is not None and len(rstat.ktap.cases) == 12
    v = by_name(list(judged(plan, rec).results))
    assert v["lkdtm_warn"].status is Status.CRASHED
    assert v["lkdtm_bug"].status is Status.CRASHED
    assert v["cgroup_iter_rstat"].status is Status.PASS


def test_taint_alone_is_recorded_without_the_kernel_log() -> None:
    plan, rec = record("faults", dmesg="")
    plan = [t for t in plan if t.name == "lkdtm_warn"]
    res = outcome.evaluate(plan, rec)
    warn = by_name(res)["lkdtm_warn"]
    assert warn.splats == () and warn.taint == "W"
    assert by_name(list(judged(plan, rec).results))["lkdtm_warn"].status is Status.CRASHED


def test_vm_killed_mid_test_is_timeout_and_rest_never_started() -> None:
    plan, rec = record("faults", dmesg="", runner_done=False, vm_timed_out=True)
    cut = "\n".join(rec.status_text.splitlines()[:3])  # lkdtm_warn ended, hang started
    plan, rec = record("faults", dmesg="", runner_done=False, vm_timed_out=True,
                       status_text=cut, info_text="ready\t3.0\ntainted_at_boot\t0\n")
    res = by_name(outcome.evaluate(plan, rec))
    assert res["hang"].status is Status.TIMEOUT
    assert "wall-clock" in res["hang"].reason
    assert res["lkdtm_bug"].status is Status.TIMEOUT
    assert "never started" in res["lkdtm_bug"].reason
    assert res["shutdown"].status is Status.SKIP and "not reached" in res["shutdown"].reason


def test_panic_mid_test_is_crashed() -> None:
    plan, rec = record("faults")
    cut = "\n".join(rec.status_text.splitlines()[:3])
    console = ("[   1.0] Linux version 6.12.117+\n[   3.0] harness: runner-start\n"
               "[  19.0] harness: test-start hang\n"
               "[  20.0] Kernel panic - not syncing: Fatal exception\n")
    plan, rec = record("faults", status_text=cut, dmesg="", console=console,
                       runner_done=False, info_text="ready\t3.0\n")
    res = by_name(outcome.evaluate(plan, rec))
    assert res["hang"].status is Status.CRASHED
    assert [s.kind for s in res["hang"].splats] == ["PANIC"]


def test_a_panic_before_the_runner_is_a_boot_error() -> None:
    console = ("[    0.0] Linux version 6.12.117+\n"
               "[    1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n")
    plan, rec = record("faults", status_text="", info_text="", dmesg="", console=console,
                       runner_done=False)
    res = by_name(outcome.evaluate(plan, rec))
    assert res["boot"].status is Status.BOOT_ERROR
    assert "panicked during boot" in res["boot"].reason
    assert res["lkdtm_warn"].status is Status.BOOT_ERROR


def test_output_cut_in_the_guest_is_noted() -> None:
    plan, rec = record("clean-6.12")
    name = plan[0].name
    text = rec.outputs[name] + ("\n[harness: output cut: 1234 bytes over the 8388608-byte cap "
                                "were discarded, 0 failed result lines among them]\n")
    plan, rec = record("clean-6.12", outputs={**rec.outputs, name: text})
    res = by_name(outcome.evaluate(plan, rec))
    assert "1234 more bytes were discarded" in res[name].notes[0]
    assert res[name].status is Status.PASS
    # a failure in what was cut still fails the test
    failed = text.replace("0 failed result lines", "2 failed result lines")
    plan, rec = record("clean-6.12", outputs={**rec.outputs, name: failed})
    res = by_name(outcome.evaluate(plan, rec))
    assert res[name].status is Status.FAIL
    assert "2 failed result lines were in the output cut" in res[name].reason


# ---- kselftests through their own runner ----


def test_kselftest_nested_results_and_known_failures() -> None:
    plan, rec = record("kselftest", dmesg="")
    res = by_name(outcome.evaluate(plan, rec))
    core = res["kselftest-cgroup-test_core"]
    assert core.status is Status.PASS
    assert core.ktap is not None
    inner = core.ktap.cases[0].subtests
    assert len(inner) == 12
    # the real kselftest skip line "ok 12 # SKIP test_cgcore_lesser_ns_open" keeps its name
    assert inner[11].name == "test_cgcore_lesser_ns_open" and inner[11].status is Status.SKIP
    freezer = res["kselftest-cgroup-test_freezer"]
    assert freezer.status is Status.FAIL
    known = verdict.Expectations(failures=(verdict.KnownFailure(
        test="kselftest-cgroup-test_freezer", subtest=None, kernel=">=6.12,<6.13",
        reason="no inotify"),))
    v = by_name(list(verdict.judge(list(res.values()), kernel_version="6.12.117+",
                                   expectations=known, rules=verdict.CellRules()).results))
    assert v["kselftest-cgroup-test_freezer"].status is Status.XFAIL


def test_a_warning_in_a_loop_keeps_a_few_splats_and_counts_the_rest() -> None:
    plan, rec = record("clean-6.12")
    marker = "[   37.662189] harness: runner-done\n"
    plan, rec = record("clean-6.12", console=rec.console.replace(marker, marker + WARN * 500))
    res = by_name(outcome.evaluate(plan, rec))["shutdown"]
    assert len(res.splats) == outcome.MAX_SAME_SPLATS
    assert res.notes == ("more splats than kept: WARNING:my_notifier x497",)


def test_a_huge_console_is_read_head_and_tail(tmp_path: Path) -> None:

    log = tmp_path / "console.log"
    log.write_text("boot line\n" + "x" * 1000 + "\nharness: runner-done\nlast line\n")
    text = protocol.read_bounded(log, cap=200)
    assert text.startswith("boot line\n") and text.endswith("last line\n")
    assert "bytes of console.log not read" in text
    assert len(text) < 300


def test_a_console_read_in_part_is_not_called_clean(tmp_path: Path) -> None:

    plan, rec = record("clean-6.12")
    log = tmp_path / "console.log"
    log.write_text(rec.console.replace("[   37.662189] harness: runner-done",
                                       "x" * 2000 + "\n[   37.662189] harness: runner-done"))
    console = protocol.read_bounded(log, cap=len(rec.console))
    plan, rec = record("clean-6.12", console=console)
    res = by_name(outcome.evaluate(plan, rec))
    assert any("not judged" in n for n in res["shutdown"].notes)
    assert not any("not judged" in n for n in res["boot"].notes)  # boot came from dmesg.txt


def test_the_line_the_cap_cut_in_two_is_not_a_result() -> None:

    text = ("TAP version 13\n1..1\nok 1 flood\nok 1 flood\nok 1 flo\n"
            "[harness: output cut: 99 bytes over the 40-byte cap were discarded, "
            "0 failed result lines among them]\n")
    # (the runner writes a newline before its marker: "flo" had none of its own)
    kept = protocol.without_cut_line(text)
    on_a_boundary = text.replace("ok 1 flo\n", "\n")
    assert protocol.without_cut_line(on_a_boundary) == kept
    assert "ok 1 flo\n" not in kept and "ok 1 flo[" not in kept
    assert kept.startswith("TAP version 13\n1..1\nok 1 flood\nok 1 flood\n[harness: output cut")
    plan, rec = record("clean-6.12")
    name = plan[0].name
    plan, rec = record("clean-6.12", outputs={**rec.outputs, name: text})
    res = by_name(outcome.evaluate(plan, rec))[name]
    assert res.ktap is not None and res.ktap.errors == ()
    assert [c.name for c in res.ktap.cases] == ["flood"]


def test_fail_fast_tests_after_a_dying_kernel_are_skipped_with_why() -> None:
    plan, rec = record("clean-6.12")
    first = plan[0].name
    status = "\n".join(ln for ln in rec.status_text.splitlines() if ln.startswith(first))
    plan, rec = record("clean-6.12", status_text=status,
                       info_text=rec.info_text + f"stopped\t{first}\n")
    res = by_name(outcome.evaluate(plan, rec))
    later = res[plan[1].name]
    assert later.status is Status.SKIP
    assert later.reason == f"not run: the kernel died in {first} (fail-fast)"
