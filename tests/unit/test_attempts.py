"""Repetition (`--repeat`, test.toml `repeat`): attempts planned as NAME~k, folded back."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness import cli
from harness.base.model import Phase, Status, TestResult
from harness.guest.protocol import GuestTest
from harness.judge import attempts


def _result(name: str, status: Status, reason: str = "", taint: str = "") -> TestResult:
    return TestResult(name=name, status=status, duration_s=1.5, exit_code=0, ktap=None,
                      reason=reason, taint=taint)


def test_expand_names_every_attempt_and_keeps_the_rest_of_the_test() -> None:
    t = GuestTest(name="hs", timeout_s=300, cwd=Path("/x"), command="./hs", needs=("swap",))
    planned = attempts.expand([t], 3)
    assert [p.name for p in planned] == ["hs~1", "hs~2", "hs~3"]
    assert all(p.command == "./hs" and p.timeout_s == 300 and p.needs == ("swap",)
               for p in planned)
    assert attempts.expand([t], 1) == [t]


def test_attempts_that_all_pass_fold_into_one_pass_keeping_each() -> None:
    folded = attempts.fold([_result("boot", Status.PASS),
                            *(_result(f"hs~{k}", Status.PASS) for k in (1, 2, 3)),
                            _result("other", Status.PASS)])
    assert [r.name for r in folded] == ["boot", "hs", "other"]
    hs = folded[1]
    assert hs.status is Status.PASS and hs.reason == "all 3 attempts PASS"
    assert [a.name for a in hs.attempts] == ["hs attempt 1", "hs attempt 2", "hs attempt 3"]
    assert hs.duration_s == 4.5


def test_one_bad_attempt_makes_the_test_flaky_and_the_reason_counts_it() -> None:
    folded = attempts.fold([_result("hs~1", Status.PASS),
                            _result("hs~2", Status.FAIL, "exit code 1", taint="W"),
                            _result("hs~3", Status.PASS)])
    assert len(folded) == 1
    hs = folded[0]
    assert hs.status is Status.FLAKY and hs.status.exit_code == 1
    assert hs.reason.startswith("flaky: 2 of 3 attempts passed; attempt 2 FAIL")
    assert "exit code 1" in hs.reason
    assert hs.taint == "W"
    assert [a.status for a in hs.attempts] == [Status.PASS, Status.FAIL, Status.PASS]


def test_the_worst_attempt_decides_a_crash_over_a_failure() -> None:
    hs = attempts.fold([_result("hs~1", Status.FAIL), _result("hs~2", Status.CRASHED)])[0]
    assert hs.status is Status.CRASHED
    # a crash is the kernel's, not flakiness: it stays CRASHED beside a pass
    hs = attempts.fold([_result("hs~1", Status.PASS), _result("hs~2", Status.CRASHED)])[0]
    assert hs.status is Status.CRASHED
    # every attempt failing is a failure, a skip among passes is not flaky
    assert attempts.fold([_result("a~1", Status.FAIL), _result("a~2", Status.FAIL)]
                         )[0].status is Status.FAIL
    assert attempts.fold([_result("a~1", Status.PASS), _result("a~2", Status.SKIP)]
                         )[0].status is Status.SKIP


def test_names_that_only_look_like_attempts_are_left_alone() -> None:
    results = [_result("a~b", Status.PASS), _result("x~0", Status.PASS),
               _result("boot", Status.PASS)]
    results[2] = TestResult(name="boot", status=Status.PASS, duration_s=0, exit_code=None,
                            ktap=None, phase=Phase.BOOT)
    assert [r.name for r in attempts.fold(results)] == ["a~b", "x~0", "boot"]
    assert attempts.base_name("hs~12") == "hs" and attempts.base_name("hs") == "hs"


def test_the_cli_takes_a_number_of_attempts_and_refuses_nonsense() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["run", "--repeat", "20"]).repeat == 20
    assert parser.parse_args(["run"]).repeat is None
    for bad in ("0", "-1", "x", "1001"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.ATTEMPTS(bad)
