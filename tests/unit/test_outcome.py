"""Guest results -> statuses, on files recorded from real guest runs (golden/guest/README.md)."""

from __future__ import annotations

from pathlib import Path

from harness import outcome
from harness.model import Status
from harness.selftests import GuestTest

GOLDEN = Path(__file__).parent.parent / "golden" / "guest"


def load(run: str) -> tuple[list[GuestTest], str, dict[str, str], str]:
    d = GOLDEN / run
    plan = []
    for line in (d / "plan.tsv").read_text().splitlines():
        name, timeout, cwd, command = line.split("\t")
        plan.append(GuestTest(name=name, timeout_s=int(timeout), cwd=Path(cwd), command=command))
    outputs = {t.name: (d / f"{t.name}.out").read_text() for t in plan
               if (d / f"{t.name}.out").exists()}
    dmesg = (d / "dmesg.txt").read_text() if (d / "dmesg.txt").exists() else ""
    return plan, (d / "status.tsv").read_text(), outputs, dmesg


def by_name(results: list[outcome.TestResult]) -> dict[str, outcome.TestResult]:
    return {r.name: r for r in results}


def test_real_faults_are_classified() -> None:
    plan, status, outputs, dmesg = load("faults")
    plan = [t for t in plan if t.name in outputs]
    res = by_name(outcome.evaluate(plan, status_text=status, outputs=outputs, kernel_log=dmesg,
                                   vm_timed_out=False))
    warn = res["lkdtm_warn"]
    assert warn.status is Status.CRASHED
    assert warn.exit_code == 0  # the test "passed": only the splat says otherwise
    assert [s.kind for s in warn.splats] == ["WARNING"]
    assert "lkdtm_WARNING" in warn.splats[0].text
    bug = res["lkdtm_bug"]
    assert bug.status is Status.CRASHED
    assert bug.splats and bug.splats[0].kind == "BUG"
    hang = res["hang"]
    assert hang.status is Status.TIMEOUT
    assert "per-test timeout (8s)" in hang.reason
    assert 8 <= hang.duration_s < 10
    rstat = res["cgroup_iter_rstat"]
    assert rstat.status is Status.PASS
    assert rstat.splats == ()  # the WARN before it is not attributed to it
    assert rstat.ktap is not None and len(rstat.ktap.cases) == 12


def test_splat_outside_markers_is_not_attributed() -> None:
    plan, status, outputs, dmesg = load("faults")
    only_rstat = [t for t in plan if t.name == "cgroup_iter_rstat"]
    res = outcome.evaluate(only_rstat, status_text=status, outputs=outputs, kernel_log=dmesg,
                           vm_timed_out=False)
    assert res[0].status is Status.PASS


def test_taint_alone_marks_crashed() -> None:
    plan, status, outputs, _ = load("faults")
    plan = [t for t in plan if t.name == "lkdtm_warn"]
    # Without the kernel log (say it was lost), the W taint set during the test still counts.
    res = outcome.evaluate(plan, status_text=status, outputs=outputs, kernel_log="",
                           vm_timed_out=False)
    assert res[0].status is Status.CRASHED
    assert "taint" in res[0].reason and "W" in res[0].reason


def test_vm_killed_mid_test_is_timeout_and_rest_never_started() -> None:
    plan, status, outputs, _ = load("faults")
    cut = "\n".join(status.splitlines()[:3])  # lkdtm_warn ended, hang started, then nothing
    res = by_name(outcome.evaluate(plan, status_text=cut, outputs=outputs, kernel_log="",
                                   vm_timed_out=True))
    assert res["hang"].status is Status.TIMEOUT
    assert "wall-clock" in res["hang"].reason
    assert res["lkdtm_bug"].status is Status.TIMEOUT
    assert "never started" in res["lkdtm_bug"].reason


def test_panic_mid_test_is_crashed() -> None:
    plan, status, outputs, _ = load("faults")
    cut = "\n".join(status.splitlines()[:3])
    log = ("[  19.0] harness: test-start hang\n"
           "[  20.0] Kernel panic - not syncing: Fatal exception\n")
    res = by_name(outcome.evaluate(plan, status_text=cut, outputs=outputs, kernel_log=log,
                                   vm_timed_out=False))
    assert res["hang"].status is Status.CRASHED


def test_kselftest_nested_results_and_expectations() -> None:
    plan, status, outputs, dmesg = load("kselftest")
    res = by_name(outcome.evaluate(plan, status_text=status, outputs=outputs, kernel_log=dmesg,
                                   vm_timed_out=False))
    core = res["kselftest-cgroup-test_core"]
    assert core.status is Status.PASS
    assert core.ktap is not None
    inner = core.ktap.cases[0].subtests
    assert len(inner) == 12
    freezer = res["kselftest-cgroup-test_freezer"]
    assert freezer.status is Status.FAIL
    exp = [outcome.Expectation(test="kselftest-cgroup-test_freezer", subtest=None,
                               kernel=">=6.12,<6.13", reason="no inotify", evidence="x")]
    marked = by_name(outcome.apply_expectations(list(res.values()), exp, "6.12.117+"))
    assert marked["kselftest-cgroup-test_freezer"].status is Status.XFAIL
    assert "no inotify" in marked["kselftest-cgroup-test_freezer"].reason
    # Keyed by version: not applied to another kernel.
    other = by_name(outcome.apply_expectations(list(res.values()), exp, "6.1.192"))
    assert other["kselftest-cgroup-test_freezer"].status is Status.FAIL
    # An expected failure that passes is reported, not hidden.
    exp_core = [outcome.Expectation(test="kselftest-cgroup-test_core", subtest=None,
                                    kernel=">=6.12", reason="r", evidence="")]
    xpass = by_name(outcome.apply_expectations(list(res.values()), exp_core, "6.12.117"))
    assert xpass["kselftest-cgroup-test_core"].status is Status.XPASS


def test_subtest_expectations_leave_other_failures_visible() -> None:
    plan, status, outputs, dmesg = load("kselftest")
    res = by_name(outcome.evaluate(plan, status_text=status, outputs=outputs, kernel_log=dmesg,
                                   vm_timed_out=False))
    memctl = res["kselftest-cgroup-test_memcontrol"]
    assert memctl.status is Status.FAIL
    failing = ["test_memcg_current_peak", "test_memcg_min", "test_memcg_low", "test_memcg_high",
               "test_memcg_high_sync", "test_memcg_max", "test_memcg_reclaim"]
    exp = [outcome.Expectation(test=memctl.name, subtest=s, kernel=">=6.12", reason="tcg",
                               evidence="") for s in failing]
    all_known = outcome.apply_expectations([memctl], exp, "6.12.117")[0]
    assert all_known.status is Status.XFAIL
    some_known = outcome.apply_expectations([memctl], exp[1:], "6.12.117")[0]
    assert some_known.status is Status.FAIL


def test_version_ranges() -> None:
    assert outcome.version_matches("6.12.117+", ">=6.12,<6.13")
    assert not outcome.version_matches("6.1.192", ">=6.12,<6.13")
    assert outcome.version_matches("6.1.192", "<6.2")
