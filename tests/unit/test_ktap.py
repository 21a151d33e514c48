from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.base.model import KtapResult, Status
from harness.base.model import TestCase as Case
from harness.judge.ktap import extract_ktap_lines, parse, summary_counts

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "ktap"


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


def leaf_statuses(case: Case) -> list[tuple[str, Status]]:
    return [(c.name, c.status) for c in case.subtests]


# --- phase 1: extraction -------------------------------------------------------------


def test_extract_strips_timestamp_and_keeps_indentation() -> None:
    lines = extract_ktap_lines(golden("kunit_boot_dmesg.log"))
    assert lines[:4] == [
        "KTAP version 1",
        "1..2",
        "    # example: initializing suite",
        "    KTAP version 1",
    ]
    assert "        ok 2 example value 2" in lines
    assert lines[-1] == "not ok 2 overflow"


def test_extract_drops_unrelated_lines() -> None:
    lines = extract_ktap_lines(golden("kunit_boot_dmesg.log"))
    joined = "\n".join(lines)
    assert "clocksource" not in joined  # before the header
    assert "systemd" not in joined  # no console prefix: not from this stream
    assert "random: crng init done" not in joined  # kernel noise between suites
    assert "Expected __failed == 0" not in joined  # not a KTAP line
    assert not any(line.startswith("[") for line in lines)


def test_extract_timestamp_with_caller_id() -> None:
    lines = extract_ktap_lines(golden("upstream_kunit_tool_multiple_prefixes.log"))
    assert lines[0] == "TAP version 14"
    assert lines[2] == "\t# Subtest: kunit-resource-test"
    assert lines[-1] == "ok 3 - string-stream-test"


def test_extract_learns_any_prefix_from_the_version_line() -> None:
    text = (
        "guest login: root\n"
        "serial0: TAP version 13\n"
        "serial0: 1..2\n"
        "other: ok 9 not ours\n"
        "serial0: ok 1 first\n"
        "serial0: not ok 2 second\n"
    )
    assert extract_ktap_lines(text) == ["TAP version 13", "1..2", "ok 1 first", "not ok 2 second"]


def test_extract_varying_timestamp_widths_match_the_same_prefix() -> None:
    text = "[    9.999999] KTAP version 1\n[   10.000001] 1..1\n[  100.5] ok 1 slow\n"
    assert extract_ktap_lines(text) == ["KTAP version 1", "1..1", "ok 1 slow"]


def test_extract_ignores_oops_lines_starting_with_hash() -> None:
    text = "TAP version 13\n1..1\n#PF: error_code(0x0000) - not-present page\n# real diag\nok 1 a\n"
    assert extract_ktap_lines(text) == ["TAP version 13", "1..1", "# real diag", "ok 1 a"]


def test_extract_a_second_stream_with_another_prefix() -> None:
    text = "[    1.0] KTAP version 1\n[    1.1] 1..0\nTAP version 13\n1..1\nok 1 user\n"
    assert extract_ktap_lines(text) == [
        "KTAP version 1",
        "1..0",
        "TAP version 13",
        "1..1",
        "ok 1 user",
    ]


def test_extract_without_header_keeps_ktap_looking_lines() -> None:
    assert extract_ktap_lines("boot noise\n1..1\nok 1 x\nmore noise\n") == ["1..1", "ok 1 x"]


# --- headers and plans ----------------------------------------------------------------


@pytest.mark.parametrize("header", ["KTAP version 1", "TAP version 13", "TAP version 14"])
def test_version_lines(header: str) -> None:
    result = parse(f"{header}\n1..1\nok 1 only\n")
    assert result.version == header
    assert result.plan == 1
    assert [(c.number, c.name, c.status) for c in result.cases] == [(1, "only", Status.PASS)]
    assert result.errors == ()
    assert result.status is Status.PASS


def test_plan_at_the_end_tap_style() -> None:
    result = parse("TAP version 13\nok 1 a\nok 2 b\n1..2\n")
    assert result.plan == 2
    assert result.errors == ()
    assert [c.name for c in result.cases] == ["a", "b"]


def test_missing_plan_is_not_an_error() -> None:
    result = parse("KTAP version 1\nok 1 a\nnot ok 2 b\n")
    assert result.plan is None
    assert result.errors == ()
    assert result.status is Status.FAIL


def test_fewer_results_than_planned() -> None:
    result = parse("TAP version 13\n1..3\nok 1 a\nok 2 b\n")
    assert result.errors == ("output ended after 2 of 3 tests (crash?)",)
    assert result.status is Status.FAIL
    assert len(result.cases) == 2


def test_more_results_than_planned() -> None:
    result = parse("TAP version 13\n1..2\nok 1 a\nok 2 b\nok 3 c\n")
    assert result.errors == ("planned 2 tests but got 3 results",)
    assert result.status is Status.FAIL


def test_second_plan_is_an_error() -> None:
    result = parse("TAP version 13\n1..1\nok 1 a\n1..1\n")
    assert result.errors == ("unexpected second plan 1..1",)


def test_wrong_test_number() -> None:
    result = parse("KTAP version 1\n1..2\nok 1 a\nok 3 b\n")
    assert result.errors == ("expected test number 2, got 3",)
    assert [c.number for c in result.cases] == [1, 3]


def test_no_version_line() -> None:
    result = parse("1..1\nok 1 a\n")
    assert result.version is None
    assert result.errors == ("no KTAP/TAP version line found",)
    assert [c.name for c in result.cases] == ["a"]
    assert result.status is Status.FAIL


def test_empty_output() -> None:
    result = parse("")
    assert result.cases == ()
    assert result.errors == ("no KTAP/TAP version line found",)
    assert result.status is Status.FAIL


def test_skip_all_plan_gives_one_skipped_case() -> None:
    result = parse("TAP version 13\n1..0 # SKIP cgroup v2 isn't mounted\n")
    assert result.plan == 0
    assert result.errors == ()
    assert [(c.number, c.status, c.directive) for c in result.cases] == [
        (0, Status.SKIP, "SKIP cgroup v2 isn't mounted")
    ]
    assert result.status is Status.SKIP


# --- result lines ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "name", "status", "directive"),
    [
        ("ok 1 plain", "plain", Status.PASS, ""),
        ("not ok 1 plain", "plain", Status.FAIL, ""),
        ("ok 1 - dashed name", "dashed name", Status.PASS, ""),
        ("ok 1 skipped # SKIP no device", "skipped", Status.SKIP, "SKIP no device"),
        ("not ok 1 skipped # SKIP", "skipped", Status.SKIP, "SKIP"),
        # kselftest.h's skip line has no description: the name is the directive's text
        ("ok 1 # SKIP test_cgcore_destroy", "test_cgcore_destroy", Status.SKIP,
         "SKIP test_cgcore_destroy"),
        ("not ok 1 known # TODO fix locking", "known", Status.XFAIL, "TODO fix locking"),
        ("ok 1 known # TODO fix locking", "known", Status.XPASS, "TODO fix locking"),
        ("ok 1 # XFAIL expected to fail", "", Status.XFAIL, "XFAIL expected to fail"),
        ("ok 1 global.x # XPASS unknown", "global.x", Status.XPASS, "XPASS unknown"),
        ("not ok 1 slow # TIMEOUT 45 seconds", "slow", Status.TIMEOUT, "TIMEOUT 45 seconds"),
        ("not ok 1 selftests: a: b # exit=1", "selftests: a: b", Status.FAIL, "exit=1"),
        ("not ok 1 # error ENOMEM", "", Status.FAIL, "error ENOMEM"),
        ("ok 1 check return code # rcode=0", "check return code", Status.PASS, "rcode=0"),
        ("ok 1 fib#1 works", "fib#1 works", Status.PASS, ""),
    ],
)
def test_result_line(line: str, name: str, status: Status, directive: str) -> None:
    result = parse(f"KTAP version 1\n1..1\n{line}\n")
    assert result.errors == ()
    (case,) = result.cases
    assert (case.name, case.status, case.directive) == (name, status, directive)


def test_diagnostics_belong_to_the_next_result() -> None:
    result = parse(
        "TAP version 13\n1..2\n# first: setting up\n#  indented\nok 1 a\n# why b\nnot ok 2 b\n"
    )
    assert [c.diagnostic for c in result.cases] == ["first: setting up\n indented", "why b"]


def test_bail_out_stops_the_stream() -> None:
    result = parse("TAP version 13\n1..3\nok 1 a\nBail out! /dev/foo missing\nok 2 b\n")
    assert result.errors == ("Bail out! /dev/foo missing",)
    assert [c.name for c in result.cases] == ["a"]
    assert result.status is Status.FAIL


# --- nesting --------------------------------------------------------------------------


def test_ktap_spec_example_two_space_nesting() -> None:
    result = parse(golden("ktap_spec_example.ktap"))
    assert result.errors == ()
    (main,) = result.cases
    assert (main.name, main.status) == ("main_test", Status.FAIL)
    assert [(c.name, c.status) for c in main.subtests] == [
        ("example_test_1", Status.PASS),
        ("example_test_2", Status.PASS),
        ("example_test_3", Status.FAIL),
    ]
    assert leaf_statuses(main.subtests[0]) == [("test_1", Status.PASS)]
    assert main.subtests[0].subtests[0].diagnostic == "test_1: initializing test_1"
    assert leaf_statuses(main.subtests[2]) == [
        ("test_1", Status.PASS),
        ("test_2", Status.FAIL),
        ("test_3", Status.SKIP),
    ]
    assert main.subtests[2].subtests[1].diagnostic == "test_2: FAIL"
    assert main.subtests[1].subtests[0].directive == "SKIP test_1 skipped"


def test_kunit_boot_log_suites_cases_and_params() -> None:
    result = parse(golden("kunit_boot_dmesg.log"))
    assert result.version == "KTAP version 1"
    assert result.plan == 2
    assert result.errors == ()
    example, overflow = result.cases
    assert (example.name, example.status) == ("example", Status.PASS)
    assert [(c.number, c.name, c.status) for c in example.subtests] == [
        (1, "example_simple_test", Status.PASS),
        (2, "example_skip_test", Status.SKIP),
        (3, "example_mark_skipped_test", Status.SKIP),
        (4, "example_params_test", Status.PASS),
        (5, "example_slow_test", Status.PASS),
    ]
    params = example.subtests[3]
    assert [(c.name, c.status) for c in params.subtests] == [
        ("example value 3", Status.SKIP),
        ("example value 2", Status.PASS),
        ("example value 1", Status.PASS),
        ("example value 0", Status.SKIP),
    ]
    # kunit_info() of a parameterised case is one level shallower than its results.
    assert params.subtests[1].diagnostic == (
        "example_params_test: initializing\nexample_params_test: cleaning up"
    )
    assert params.diagnostic == "example_params_test: pass:2 fail:0 skip:2 total:4"
    assert example.diagnostic.splitlines()[-1] == "Totals: pass:4 fail:0 skip:4 total:8"
    assert (overflow.name, overflow.status) == ("overflow", Status.FAIL)
    failed = overflow.subtests[1]
    assert (failed.name, failed.status) == ("overflow_allocation_test", Status.FAIL)
    assert "EXPECTATION FAILED at lib/overflow_kunit.c:713" in failed.diagnostic
    assert result.status is Status.FAIL
    assert summary_counts(result) == {
        Status.PASS: 6,
        Status.XFAIL: 0,
        Status.SKIP: 4,
        Status.XPASS: 0,
        Status.FAIL: 1,
        Status.TIMEOUT: 0,
        Status.CRASHED: 0,
    }


def test_tab_indented_tap14_kunit_output() -> None:
    result = parse(golden("upstream_kunit_tool_multiple_prefixes.log"))
    assert result.errors == ()
    assert [(c.name, len(c.subtests)) for c in result.cases] == [
        ("kunit-resource-test", 5),
        ("kunit-try-catch-test", 2),
        ("string-stream-test", 3),
    ]
    assert summary_counts(result)[Status.PASS] == 10


def test_kselftest_runner_nesting() -> None:
    result = parse(golden("upstream_kunit_tool_kselftest.log"))
    assert result.errors == ()
    assert [(c.name, c.status, len(c.subtests)) for c in result.cases] == [
        ("selftests: membarrier: membarrier_test_single_thread", Status.PASS, 2),
        ("selftests: membarrier: membarrier_test_multi_thread", Status.PASS, 2),
    ]
    assert result.cases[0].subtests[0].name == "sys_membarrier available"


def test_kselftest_cgroup_run() -> None:
    result = parse(golden("kselftest_cgroup_runner.tap"))
    assert result.version == "TAP version 13"
    assert result.plan == 5
    assert result.errors == ()
    assert [(c.name, c.status, c.directive) for c in result.cases] == [
        ("selftests: cgroup: test_core", Status.PASS, ""),
        ("selftests: cgroup: test_freezer", Status.FAIL, "exit=1"),
        ("selftests: cgroup: test_pids", Status.PASS, ""),
        ("selftests: cgroup: test_zswap", Status.SKIP, "SKIP"),
        ("selftests: cgroup: test_kill", Status.TIMEOUT, "TIMEOUT 45 seconds"),
    ]
    core, freezer, pids, zswap, kill = result.cases
    # test_core prints results with no "TAP version" and no plan.
    assert len(core.subtests) == 12
    assert core.subtests[10].status is Status.SKIP
    assert core.subtests[10].directive == "SKIP test_cgcore_lesser_euid_open"
    assert core.diagnostic == "timeout set to 45\nselftests: cgroup: test_core"
    bad = [c for c in freezer.subtests if c.status is not Status.PASS]
    assert [(c.number, c.name) for c in bad] == [(9, "test_cgfreezer_ptraced")]
    # The test's own stderr line (no "#" of its own) is kept as a diagnostic.
    assert bad[0].diagnostic == "Cgroup /sys/fs/cgroup/cg_test_ptraced isn't frozen"
    assert pids.diagnostic.splitlines()[-1] == (
        "Totals: pass:2 fail:0 xfail:0 xpass:0 skip:0 error:0"
    )
    assert zswap.subtests == ()
    assert zswap.diagnostic.splitlines()[-1] == "all subtests skipped: zswap isn't configured"
    assert [c.name for c in kill.subtests] == ["test_cgkill_simple", "test_cgkill_tree"]
    assert result.status is Status.TIMEOUT
    counts = summary_counts(result)
    assert (counts[Status.PASS], counts[Status.FAIL], counts[Status.SKIP]) == (24, 1, 2)
    # test_kill timed out although none of its reported subtests failed: it counts.
    assert counts[Status.TIMEOUT] == 1


def test_kselftest_harness_output() -> None:
    result = parse(golden("kselftest_harness_mincore.tap"))
    assert result.errors == ()
    (case,) = result.cases
    assert (case.name, case.status, case.directive) == (
        "selftests: mincore: mincore_selftest",
        Status.FAIL,
        "exit=1",
    )
    assert [(c.name, c.status) for c in case.subtests] == [
        ("global.basic_interface", Status.PASS),
        ("global.check_anonymous_locked_pages", Status.PASS),
        ("global.check_huge_pages", Status.SKIP),
        ("global.check_file_mmap", Status.FAIL),
        ("global.check_tmpfs_mmap", Status.PASS),
    ]
    assert case.subtests[2].directive == (
        "SKIP No huge pages available or CONFIG_HUGETLB_PAGE disabled."
    )
    assert case.subtests[3].diagnostic.splitlines()[1] == (
        "mincore_selftest.c:248:check_file_mmap:Expected 0 (0) == vec[i] (1)"
    )


def test_parent_ok_but_subtest_failed() -> None:
    text = "TAP version 13\n1..1\n# TAP version 13\n# 1..2\n# ok 1 a\n# not ok 2 b\nok 1 outer\n"
    result = parse(text)
    (outer,) = result.cases
    assert outer.status is Status.FAIL
    assert result.errors == ("outer: result line says ok but subtest 2 (b) failed",)


def test_parent_ok_but_nested_stream_broken() -> None:
    text = "TAP version 13\n1..1\n# TAP version 13\n# 1..3\n# ok 1 a\nok 1 outer\n"
    result = parse(text)
    assert result.cases[0].status is Status.FAIL
    assert result.errors == ("outer: output ended after 1 of 3 tests (crash?)",)


def test_skipped_parent_excuses_a_short_nested_plan() -> None:
    # ksft_exit_skip() after ksft_set_plan(): "ok N # SKIP" then exit 4.
    text = (
        "TAP version 13\n1..1\n# TAP version 13\n# 1..4\n# ok 1 # SKIP no hugepages\n"
        "ok 1 selftests: mm: hugetlb # SKIP\n"
    )
    result = parse(text)
    assert result.errors == ()
    assert result.cases[0].status is Status.SKIP


def test_nested_bail_out_is_reported_with_the_parent_name() -> None:
    text = (
        "TAP version 13\n1..1\n# selftests: x: y\n# TAP version 13\n# 1..2\n"
        "# Bail out! cannot open /dev/kvm\n# # Totals: pass:0 fail:0\n"
        "not ok 1 selftests: x: y # exit=1\n"
    )
    result = parse(text)
    assert result.errors == ("selftests: x: y: Bail out! cannot open /dev/kvm",)
    assert result.cases[0].status is Status.FAIL


def test_indented_plain_text_in_a_nested_block_is_diagnostic() -> None:
    text = (
        "TAP version 13\n1..1\n# ok 1 a\n# Error details:\n#     at line 3\n"
        "ok 1 selftests: s: t\n"
    )
    result = parse(text)
    assert result.errors == ()
    (case,) = result.cases
    assert [c.name for c in case.subtests] == ["a"]
    assert case.diagnostic == "Error details:\nat line 3"
    assert case.status is Status.PASS


def test_two_collections_in_one_run() -> None:
    text = (
        "TAP version 13\n1..2\nok 1 selftests: a: x\nok 2 selftests: a: y\n"
        "TAP version 13\n1..1\nnot ok 1 selftests: b: z # exit=1\n"
    )
    result = parse(text)
    assert result.errors == ()
    assert result.plan == 3
    assert [(c.number, c.name) for c in result.cases] == [
        (1, "selftests: a: x"),
        (2, "selftests: a: y"),
        (1, "selftests: b: z"),
    ]
    assert result.status is Status.FAIL


# --- crashes --------------------------------------------------------------------------


def test_kselftest_cut_off_by_a_kernel_crash() -> None:
    result = parse(golden("kselftest_crash_midtest.log"))
    assert result.errors == (
        "selftests: cgroup: test_kmem: output ended after 1 of 5 tests (crash?)",
        "output ended after 1 of 2 tests (crash?)",
    )
    pids, kmem = result.cases
    assert pids.status is Status.PASS
    # The test that was running has no result line; it is kept, failed, named
    # after the runner's "# selftests: ..." line.
    assert (kmem.number, kmem.name, kmem.status) == (2, "selftests: cgroup: test_kmem", Status.FAIL)
    assert [c.name for c in kmem.subtests] == ["test_kmem_basic"]
    assert kmem.diagnostic.endswith("no result line: output ended")
    assert result.status is Status.FAIL


def test_kunit_cut_off_by_a_panic() -> None:
    result = parse(golden("kunit_panic_cutoff.log"))
    assert result.errors == (
        "mytree: output ended after 1 of 4 tests (crash?)",
        "output ended after 1 of 2 tests (crash?)",
    )
    assert [(c.name, c.status) for c in result.cases] == [
        ("list-kernel-test", Status.PASS),
        ("mytree", Status.FAIL),
    ]
    # "#PF: ..." oops lines are not diagnostics.
    assert "#PF" not in result.cases[1].diagnostic


def test_upstream_kernel_panic_interrupt() -> None:
    result = parse(golden("upstream_kunit_tool_kernel_panic_interrupt.log"))
    assert [c.status for c in result.cases] == [Status.PASS, Status.PASS, Status.FAIL]
    assert result.cases[2].name == "string-stream-test"
    assert "output ended after 2 of 3 tests (crash?)" in result.errors


def test_crash_without_plan_names_the_unfinished_test() -> None:
    result = parse("KTAP version 1\n  KTAP version 1\n  # Subtest: suite\n  ok 1 a\n")
    assert result.errors == ("output ended inside test 1 (suite) (crash?)",)
    assert [(c.name, c.status) for c in result.cases] == [("suite", Status.FAIL)]


# --- summaries ------------------------------------------------------------------------


def test_summary_counts_leaves_only() -> None:
    result = KtapResult(
        version="KTAP version 1",
        plan=2,
        cases=(
            Case(
                name="suite",
                number=1,
                status=Status.FAIL,
                subtests=(
                    Case(name="a", number=1, status=Status.PASS),
                    Case(name="b", number=2, status=Status.FAIL),
                    Case(name="c", number=3, status=Status.XFAIL),
                ),
            ),
            Case(name="d", number=2, status=Status.SKIP),
        ),
    )
    counts = summary_counts(result)
    assert counts == {
        Status.PASS: 1,
        Status.XFAIL: 1,
        Status.SKIP: 1,
        Status.XPASS: 0,
        Status.FAIL: 1,
        Status.TIMEOUT: 0,
        Status.CRASHED: 0,
    }


def test_results_json_of_a_ktap_result_is_serialisable_with_status_strings() -> None:
    """The KTAP tree as results.json carries it (ktap.to_json, never called, is gone)."""
    from harness.base.model import TestResult
    from harness.output.results import test_json

    result = parse(golden("kselftest_harness_mincore.tap"))
    data = test_json(TestResult(name="mincore", status=result.status, duration_s=1.0,
                                exit_code=1, ktap=result))["ktap"]
    round_tripped = json.loads(json.dumps(data))
    assert round_tripped["version"] == "TAP version 13"
    assert round_tripped["plan"] == 1
    assert round_tripped["errors"] == []
    assert round_tripped["counts"]["PASS"] == 3
    assert round_tripped["counts"]["SKIP"] == 1
    (case,) = round_tripped["subtests"]
    assert case["name"] == "selftests: mincore: mincore_selftest"
    assert case["status"] == "FAIL"
    assert case["directive"] == "exit=1"
    assert [s["status"] for s in case["subtests"]] == ["PASS", "PASS", "SKIP", "FAIL", "PASS"]
    assert "subtests" not in case["subtests"][0]


def test_a_duplicated_console_capture_counts_each_result_once() -> None:
    """console_duplicated_test_memcontrol.log: test_memcontrol's stdout piped (full
    buffering) on the serial console of a real 6.12 TCG guest; forked children repeat the
    unflushed lines, so "ok 1 test_memcg_subtree_control" came 6 times."""
    text = golden("console_duplicated_test_memcontrol.log")
    assert text.count("ok 1 test_memcg_subtree_control") == 6
    r = parse(text)
    counts = summary_counts(r)
    assert (counts[Status.PASS], counts[Status.FAIL], counts[Status.SKIP]) == (6, 6, 2)
    assert [c.number for c in r.cases] == list(range(1, 15))
    assert not any("expected test number" in e for e in r.errors)
    assert "result 'ok 1 test_memcg_subtree_control' came 6 times: counted once" in r.warnings
    assert "result 'not ok 3 test_memcg_min' came 4 times: counted once" in r.warnings


def test_the_same_result_under_another_parent_is_another_result() -> None:
    text = ("TAP version 13\n1..2\n"
            "    KTAP version 1\n    1..1\n    ok 1 x\nok 1 a\n"
            "    KTAP version 1\n    1..1\n    ok 1 x\nok 2 b\n")
    r = parse(text)
    assert [len(c.subtests) for c in r.cases] == [1, 1]
    assert r.warnings == ()


def test_a_repeated_block_is_one_result_with_its_subtests() -> None:
    block = "    KTAP version 1\n    1..1\n    ok 1 x\nok 1 a\n"
    r = parse("TAP version 13\n1..1\n" + block + block)
    assert len(r.cases) == 1 and len(r.cases[0].subtests) == 1
    assert r.errors == ()


def test_a_result_again_with_other_subtests_is_an_error() -> None:
    ok = "    KTAP version 1\n    1..1\n    ok 1 x\nok 1 a\n"
    failing = "    KTAP version 1\n    1..1\n    not ok 1 x\nok 1 a\n"
    r = parse("TAP version 13\n1..1\n" + ok + failing)
    assert any("came again with other subtests" in e for e in r.errors)
    assert r.status is Status.FAIL
