"""Every final status is decided in verdict.judge: splats and taint, known failures, flaky
tests, declared noise, broken-variant cells, and cells in which nothing was tested."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.base.model import KtapResult, Phase, Splat, Status
from harness.base.model import TestCase as Case
from harness.base.model import TestResult as Result
from harness.judge import verdict
from harness.judge.verdict import CellRules, Expectations, KnownFailure, KnownSplat

STALL = Splat(kind="RCU_STALL", title="rcu: INFO: rcu_preempt self-detected stall on CPU",
              text="...", function="native_safe_halt")
WARN = Splat(kind="WARNING", title="WARNING: CPU: 0 PID: 1 at lib/x.c:3 x_init+0x1/0x2",
             text="...", function="x_init")


def res(name: str, status: Status = Status.PASS, *, phase: Phase = Phase.TEST,
        splats: tuple[Splat, ...] = (), taint: str = "",
        ktap: KtapResult | None = None) -> Result:
    return Result(name=name, status=status, duration_s=1.0, exit_code=0, ktap=ktap,
                  splats=splats, taint=taint, phase=phase)


def kernel(boot: Result | None = None, shutdown: Result | None = None) -> list[Result]:
    return [boot or res("boot", phase=Phase.BOOT), res("setup", phase=Phase.SETUP),
            shutdown or res("shutdown", phase=Phase.SHUTDOWN)]


def judge(results: list[Result], rules: CellRules | None = None,
          expectations: Expectations | None = None, version: str = "6.12.117+"
          ) -> verdict.CellVerdict:
    return verdict.judge(results, kernel_version=version,
                         expectations=expectations or Expectations(),
                         rules=rules or CellRules())


def by_name(v: verdict.CellVerdict) -> dict[str, Result]:
    return {r.name: r for r in v.results}


# ---- the kernel's word ----


def test_a_splat_at_boot_fails_a_cell_whose_tests_passed() -> None:
    v = judge([*kernel(boot=res("boot", phase=Phase.BOOT, splats=(WARN,), taint="W")), res("t")])
    assert v.status is Status.CRASHED
    boot = by_name(v)["boot"]
    assert boot.status is Status.CRASHED
    assert "during boot" in boot.reason and "x_init" in boot.reason
    assert v.error == ""  # the boot result says why; the summary shows it once


def test_a_splat_at_shutdown_fails_the_cell() -> None:
    v = judge([*kernel(shutdown=res("shutdown", phase=Phase.SHUTDOWN, splats=(WARN,))), res("t")])
    assert v.status is Status.CRASHED
    assert "during shutdown" in by_name(v)["shutdown"].reason


def test_taint_alone_makes_a_result_crashed() -> None:
    v = judge([*kernel(), res("t", taint="W")])
    assert by_name(v)["t"].status is Status.CRASHED
    assert "taint newly set while it ran: W" in by_name(v)["t"].reason


def test_a_splat_outranks_a_failure_but_keeps_it_in_the_reason() -> None:
    failed = Result(name="t", status=Status.FAIL, duration_s=1.0, exit_code=1, ktap=None,
                    splats=(WARN,), reason="exit 1")
    v = judge([*kernel(), failed])
    assert by_name(v)["t"].status is Status.CRASHED
    assert "before that: FAIL: exit 1" in by_name(v)["t"].reason


def test_declared_noise_is_matched_by_kind_and_function_and_kernel() -> None:
    noise = Expectations(splats=(KnownSplat(kind="RCU_STALL", function="native_safe_halt",
                                            kernel=">=6.12,<6.13", reason="busy TCG host"),))
    boot = res("boot", phase=Phase.BOOT, splats=(STALL,))
    v = judge([*kernel(boot=boot), res("t")], expectations=noise)
    assert v.status is Status.PASS
    assert by_name(v)["boot"].splats[0].expected == "busy TCG host"
    assert any("expected kernel noise (RCU_STALL:native_safe_halt)" in n
               for n in by_name(v)["boot"].notes)
    # Another function, another kind, another kernel: not noise.
    other = Splat(kind="RCU_STALL", title=STALL.title, text="", function="my_loop")
    assert judge([*kernel(boot=res("boot", phase=Phase.BOOT, splats=(other,))), res("t")],
                 expectations=noise).status is Status.CRASHED
    assert judge([*kernel(boot=res("boot", phase=Phase.BOOT, splats=(WARN,))), res("t")],
                 expectations=noise).status is Status.CRASHED
    assert judge([*kernel(boot=boot), res("t")], expectations=noise,
                 version="6.1.192").status is Status.CRASHED


def test_noise_explains_its_own_taint_only() -> None:
    noise = Expectations(splats=(KnownSplat(kind="WARNING", function="x_init",
                                            kernel=">=6.12", reason="r"),))
    boot = res("boot", phase=Phase.BOOT, splats=(WARN,), taint="W")
    assert judge([*kernel(boot=boot), res("t")], expectations=noise).status is Status.PASS
    dirty = res("boot", phase=Phase.BOOT, splats=(WARN,), taint="WD")
    assert judge([*kernel(boot=dirty), res("t")],
                 expectations=noise).status is Status.CRASHED


def test_noise_cannot_be_declared_for_a_whole_kind(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text('[[expected_splat]]\nkind = "RCU_STALL"\nfunction = "*"\n'
                    'kernel = ">=6.12"\nreason = "tcg"\n')
    with pytest.raises(verdict.ExpectationsError, match="never by a kind alone"):
        verdict.load_expectations(path)
    path.write_text('[[expected_splat]]\nkind = "RCU_STALL"\nfunction = "f"\n'
                    'kernel = "6.12"\nreason = "tcg"\n')
    with pytest.raises(verdict.ExpectationsError, match="OP VERSION"):
        verdict.load_expectations(path)


def test_a_boot_error_stays_a_boot_error() -> None:
    panic = Splat(kind="PANIC", title="Kernel panic - not syncing: x", text="", function="f")
    boot = Result(name="boot", status=Status.BOOT_ERROR, duration_s=0.0, exit_code=None,
                  ktap=None, splats=(panic,), phase=Phase.BOOT, reason="panicked")
    v = verdict.judge([boot], kernel_version="6.12", expectations=Expectations(),
                      rules=CellRules(), stage_error=Status.BOOT_ERROR, error="panicked")
    assert v.status is Status.BOOT_ERROR
    assert by_name(v)["boot"].status is Status.BOOT_ERROR


# ---- nothing is green on nothing ----


def test_no_test_planned_is_no_tests_and_exit_1() -> None:
    v = judge(kernel())
    assert v.status is Status.NO_TESTS
    assert v.status.exit_code == 1
    assert "nothing was tested" in v.error


def test_every_test_skipped_is_skip_and_exit_1() -> None:
    v = judge([*kernel(), res("a", Status.SKIP), res("b", Status.SKIP)])
    assert v.status is Status.SKIP and v.status.exit_code == 1
    assert "every test was skipped" in v.error


def test_a_skip_among_passes_does_not_count() -> None:
    assert judge([*kernel(), res("a"), res("b", Status.SKIP)]).status is Status.PASS


def test_boot_only_is_judged_by_boot_and_shutdown() -> None:
    assert judge(kernel(), CellRules(boot_only=True)).status is Status.PASS
    bad = kernel(shutdown=res("shutdown", phase=Phase.SHUTDOWN, splats=(WARN,)))
    assert judge(bad, CellRules(boot_only=True)).status is Status.CRASHED


# ---- known failures and flaky tests ----


def test_known_failure_is_xfail_and_keyed_by_version() -> None:
    known = Expectations(failures=(KnownFailure(test="t", subtest=None, kernel=">=6.12",
                                                reason="no inotify"),))
    v = judge([*kernel(), res("t", Status.FAIL)], expectations=known)
    assert by_name(v)["t"].status is Status.XFAIL
    assert "no inotify" in by_name(v)["t"].reason
    assert v.status is Status.PASS and "known failures" in v.notes[0]
    assert by_name(judge([*kernel(), res("t", Status.FAIL)], expectations=known,
                         version="6.1.192"))["t"].status is Status.FAIL
    xpass = judge([*kernel(), res("t")], expectations=known)
    assert by_name(xpass)["t"].status is Status.XPASS
    assert xpass.status is Status.PASS
    assert judge([*kernel(), res("t")], CellRules(strict=True),
                 expectations=known).status is Status.FAIL


def test_a_declared_flaky_test_that_passes_reads_pass_with_a_note() -> None:
    flaky = Expectations(failures=(KnownFailure(test="t", subtest=None, kernel=">=6.12",
                                                reason="timing under TCG", flaky=True),))
    v = judge([*kernel(), res("t")], expectations=flaky)
    assert by_name(v)["t"].status is Status.PASS
    assert "declared flaky" in by_name(v)["t"].notes[0]
    assert v.status is Status.PASS and not any("XPASS" in n for n in v.notes)
    failed = judge([*kernel(), res("t", Status.FAIL)], expectations=flaky)
    assert by_name(failed)["t"].status is Status.XFAIL
    assert "declared flaky" in by_name(failed)["t"].reason


def _repeated(name: str, *statuses: Status) -> Result:
    status = Status.FLAKY if len(set(statuses)) > 1 else statuses[0]
    return Result(name=name, status=status, duration_s=1.0, exit_code=0, ktap=None,
                  attempts=tuple(res(f"{name} attempt {k}", s)
                                 for k, s in enumerate(statuses, 1)))


@pytest.mark.parametrize(("statuses", "rate", "want"), [
    ((Status.PASS, Status.FAIL, Status.PASS, Status.PASS), 0.75, Status.PASS),
    ((Status.PASS, Status.FAIL, Status.FAIL, Status.PASS), 0.75, Status.FAIL),
    ((Status.FAIL, Status.FAIL), 0.5, Status.FAIL),
    ((Status.FAIL, Status.PASS), None, Status.PASS),  # no rate declared: once is enough
    ((Status.FAIL, Status.FAIL), None, Status.FAIL),
    ((Status.PASS, Status.PASS), 1.0, Status.PASS),
])
def test_a_declared_flaky_test_repeated_is_judged_by_its_pass_rate(
        statuses: tuple[Status, ...], rate: float | None, want: Status) -> None:
    flaky = Expectations(failures=(KnownFailure(test="t", subtest=None, kernel=">=6.12",
                                                reason="timing", flaky=True,
                                                min_pass_rate=rate),))
    v = judge([*kernel(), _repeated("t", *statuses)], expectations=flaky)
    t = by_name(v)["t"]
    passed = statuses.count(Status.PASS)
    assert t.status is want and v.status is want
    said = t.notes[-1] if want is Status.PASS else t.reason
    assert f"passed {passed} of {len(statuses)} attempts" in said
    if rate is not None:
        assert f"declared minimum {rate:.0%}" in said


def test_an_undeclared_flaky_test_stays_flaky_and_fails_the_cell() -> None:
    v = judge([*kernel(), _repeated("t", Status.PASS, Status.FAIL)])
    assert by_name(v)["t"].status is Status.FLAKY
    assert v.status is Status.FLAKY and v.status.exit_code == 1


def test_a_pass_rate_is_only_for_a_whole_flaky_test(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    for bad in ('[[expected_failure]]\nmin_pass_rate = 0.5\n', '[[flaky]]\nmin_pass_rate = 1.5\n',
                '[[flaky]]\nsubtest = "s"\nmin_pass_rate = 0.5\n'):
        path.write_text(bad + 'test = "t"\nkernel = ">=6.12"\nreason = "r"\n')
        with pytest.raises(verdict.ExpectationsError, match="min_pass_rate"):
            verdict.load_expectations(path)
    path.write_text('[[flaky]]\ntest = "t"\nkernel = ">=6.12"\nreason = "r"\n'
                    'min_pass_rate = 0.9\n')
    assert verdict.load_expectations(path).failures[0].min_pass_rate == 0.9


def _memcontrol(low: Status, other: Status) -> Result:
    cases = (Case(name="test_memcg_low", number=1, status=low),
             Case(name="test_memcg_min", number=2, status=other))
    parent = Case(name="selftests: cgroup: test_memcontrol", number=1,
                      status=Status.FAIL if Status.FAIL in (low, other) else Status.PASS,
                      subtests=cases)
    ktap = KtapResult(version="TAP version 13", plan=1, cases=(parent,))
    return res("m", ktap.status, ktap=ktap)


def test_flaky_subtest_pass_fail_and_other_failures_stay_visible() -> None:
    flaky = Expectations(failures=(KnownFailure(test="m", subtest="test_memcg_low",
                                                kernel=">=6.12", reason="tcg", flaky=True),))
    passed = by_name(judge([*kernel(), _memcontrol(Status.PASS, Status.PASS)],
                           expectations=flaky))["m"]
    assert passed.status is Status.PASS and "test_memcg_low" in passed.notes[0]
    failed = by_name(judge([*kernel(), _memcontrol(Status.FAIL, Status.PASS)],
                           expectations=flaky))["m"]
    assert failed.status is Status.XFAIL
    other = by_name(judge([*kernel(), _memcontrol(Status.FAIL, Status.FAIL)],
                          expectations=flaky))["m"]
    assert other.status is Status.FAIL


def test_the_repository_expectations_load() -> None:
    exp = verdict.load_expectations(Path(__file__).parents[2] / "selftests" /
                                    "expectations.toml")
    assert exp.failures and all(e.reason for e in exp.failures)


# ---- cells that declare what they must produce (broken variants) ----


def test_every_result_must_give_its_declared_status() -> None:
    rules = CellRules(expect_status=Status.CRASHED, expect={"hang": Status.TIMEOUT})
    good = judge([*kernel(), res("warn", Status.CRASHED), res("hang", Status.TIMEOUT)], rules)
    assert good.status is Status.PASS
    assert "as declared" in good.notes[-1]
    # The worst status is still CRASHED, but hang did not time out: that is caught.
    bad = judge([*kernel(), res("warn", Status.CRASHED), res("hang")], rules)
    assert bad.status is Status.FAIL
    assert "hang: PASS, expected TIMEOUT" in bad.error


def test_one_broken_test_cannot_hide_another_that_passed() -> None:
    v = judge([*kernel(), res("a", Status.FAIL), res("b")],
              CellRules(expect_status=Status.FAIL))
    assert v.status is Status.FAIL
    assert "b: PASS, expected FAIL" in v.error


def test_boot_and_shutdown_must_pass_even_in_a_broken_variant_cell() -> None:
    rules = CellRules(expect_status=Status.FAIL)
    boot = res("boot", phase=Phase.BOOT, splats=(WARN,), taint="W")
    v = judge([*kernel(boot=boot), res("a", Status.FAIL)], rules)
    assert v.status is Status.FAIL
    assert "boot: CRASHED, expected PASS" in v.error
    # ...unless the cell names them.
    named = CellRules(expect_status=Status.FAIL, expect={"boot": Status.CRASHED})
    assert judge([*kernel(boot=boot), res("a", Status.FAIL)], named).status is Status.PASS


def test_an_expect_naming_no_result_is_an_error() -> None:
    v = judge([*kernel(), res("a")], CellRules(expect={"typo": Status.FAIL}))
    assert v.status is Status.FAIL and "typo: declared FAIL" in v.error


def test_stage_errors_and_empty_runs_are_not_expected_failures() -> None:
    rules = CellRules(expect_status=Status.FAIL)
    v = verdict.judge([], kernel_version="6.12", expectations=Expectations(), rules=rules,
                      stage_error=Status.BUILD_ERROR, error="make failed")
    assert v.status is Status.BUILD_ERROR and v.error == "make failed"
    assert judge(kernel(), rules).status is Status.FAIL


def test_a_failure_of_its_own_is_not_explained_by_known_subtest_failures() -> None:
    """A test whose subtests are all ok but whose runner line says `not ok # exit=139` (a
    crash at exit), or whose KTAP is clean but which exited 1, stays FAIL although one of
    its subtests is declared flaky."""
    flaky = Expectations(failures=(KnownFailure(test="m", subtest="test_memcg_low",
                                                kernel=">=6.12", reason="tcg", flaky=True),))
    cases = (Case(name="test_memcg_low", number=1, status=Status.PASS),
             Case(name="test_memcg_min", number=2, status=Status.PASS))
    parent = Case(name="selftests: cgroup: test_memcontrol", number=1, status=Status.FAIL,
                  directive="exit=139", subtests=cases)
    crashed_at_exit = KtapResult(version="TAP version 13", plan=1, cases=(parent,))
    assert crashed_at_exit.status is Status.FAIL
    got = by_name(judge([*kernel(), res("m", Status.FAIL, ktap=crashed_at_exit)],
                        expectations=flaky))["m"]
    assert got.status is Status.FAIL
    # ...and with a known failure among the subtests too
    mixed = KtapResult(version="TAP version 13", plan=1, cases=(
        Case(name=parent.name, number=1, status=Status.FAIL, directive="exit=139",
             subtests=(Case(name="test_memcg_low", number=1, status=Status.FAIL),
                       cases[1])),))
    got = by_name(judge([*kernel(), res("m", Status.FAIL, ktap=mixed)], expectations=flaky))
    assert got["m"].status is Status.FAIL  # killed by a signal: not the subtest's doing
    exit1 = KtapResult(version="TAP version 13", plan=1, cases=(
        Case(name=parent.name, number=1, status=Status.FAIL, directive="exit=1",
             subtests=mixed.cases[0].subtests),))
    got = by_name(judge([*kernel(), res("m", Status.FAIL, ktap=exit1)], expectations=flaky))
    assert got["m"].status is Status.XFAIL  # exit=1 follows the known subtest failure
    clean = KtapResult(version="TAP version 13", plan=1,
                       cases=(Case(name=parent.name, number=1, status=Status.PASS,
                                   subtests=cases),))
    exited = Result(name="m", status=Status.FAIL, duration_s=1.0, exit_code=1, ktap=clean,
                    reason="KTAP reports success but the test exited 1")
    got = by_name(judge([*kernel(), exited], expectations=flaky))["m"]
    assert got.status is Status.FAIL and "exited 1" in got.reason


@pytest.mark.parametrize(("version", "spec", "matches"), [
    ("6.12.117+", ">=6.12,<6.13", True),
    ("6.1.192", ">=6.12,<6.13", False),
    ("6.1.192", "<6.2", True),
    ("6.12.117+", "==6.12", True),  # as far as the clause goes: every 6.12.x
    ("6.12.117", "<=6.12", True),
    ("6.12.117", ">6.12", False),
    ("6.13.1", ">6.12", True),
    ("6.12.117", "==6.12.117", True),
    ("6.12.116", "==6.12.117", False),
])
def test_version_ranges(version: str, spec: str, matches: bool) -> None:
    assert verdict.version_matches(version, spec) is matches


def test_each_declared_failure_explains_its_own_evidence() -> None:
    """The real output each expectations.toml entry names as evidence, judged with the
    declarations on a 6.12 kernel, is no longer a failure: the entry explains it."""
    from harness.judge import ktap

    repo = Path(__file__).resolve().parents[2]
    expectations = verdict.load_expectations(repo / "selftests" / "expectations.toml")
    judged = 0
    for entry in expectations.failures:
        evidence = repo / entry.evidence
        if not entry.evidence.startswith("tests/golden/") or not evidence.is_file():
            continue
        parsed = ktap.parse(evidence.read_text())
        res = Result(name=entry.test, status=parsed.status, duration_s=1.0, exit_code=1,
                     ktap=parsed)
        assert res.status is Status.FAIL, entry.evidence  # the evidence is a failure
        out = verdict.judge([res], kernel_version="6.12.117+", expectations=expectations,
                            rules=CellRules()).results[0]
        assert out.status is Status.XFAIL, (entry.evidence, out.status, out.reason)
        judged += 1
    assert judged >= 3


def test_a_cell_declares_which_check_must_fail() -> None:
    """A wrong kernel's cell names the check aimed at its bug: the real output of
    memcg_kfuncs on a kernel whose usage counts swap (swapped_out_child failed)."""
    from harness.judge import ktap

    out = (Path(__file__).parent.parent / "golden" / "guest" / "wrong-kernels" /
           "usage-with-swap.memcg_kfuncs.out").read_text()
    mk = res("memcg_kfuncs", Status.FAIL, ktap=ktap.parse(out))
    aimed = CellRules(expect={"memcg_kfuncs": Status.FAIL,
                              "memcg_kfuncs:swapped_out_child": Status.FAIL})
    assert judge([*kernel(), mk], aimed).status is Status.PASS
    # another check declared: the cell fails and says which, and how it came out
    other = CellRules(expect={"memcg_kfuncs": Status.FAIL,
                              "memcg_kfuncs:parent_includes_child": Status.FAIL})
    v = judge([*kernel(), mk], other)
    assert v.status is Status.FAIL
    assert "memcg_kfuncs:parent_includes_child: PASS, expected FAIL" in v.error
    typo = CellRules(expect={"memcg_kfuncs": Status.FAIL,
                             "memcg_kfuncs:swapped_out": Status.FAIL})
    assert "memcg_kfuncs:swapped_out: declared FAIL in expect, but no such check ran" in \
        judge([*kernel(), mk], typo).error


# ---- the diagnosis: why a result did not pass, in a line ----

CGRP_STORAGE_OUT = """TAP version 13
1..3
# storage created on first use
ok 1 create_on_first_use
# attaching the sleepable program
# created 0 times from the sleepable program, expected 1
not ok 2 created_from_sleepable
# deleted with its cgroup
not ok 3 deleted_with_cgroup
"""


def test_a_failing_result_says_its_first_failing_check_and_what_it_said() -> None:
    from harness.judge import ktap

    parsed = ktap.parse(CGRP_STORAGE_OUT)
    v = judge([*kernel(), res("cgrp_storage", Status.FAIL, ktap=parsed),
               res("passing", ktap=ktap.parse("TAP version 13\n1..1\nok 1 a\n"))])
    assert by_name(v)["cgrp_storage"].diagnosis == (
        "created_from_sleepable: created 0 times from the sleepable program, expected 1")
    assert by_name(v)["passing"].diagnosis == "" and by_name(v)["boot"].diagnosis == ""
    # a known failure's check is XFAIL: the next failing check is the diagnosis
    known = Expectations(failures=(KnownFailure(test="cgrp_storage",
                                                subtest="created_from_sleepable",
                                                kernel=">=6.12", reason="a known bug"),))
    v = judge([*kernel(), res("cgrp_storage", Status.FAIL, ktap=parsed)], expectations=known)
    assert by_name(v)["cgrp_storage"].diagnosis == "deleted_with_cgroup: deleted with its cgroup"
