"""test_progs stdout + -J summary -> the result model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.base.model import Status
from harness.judge import test_progs

# The line formats of tools/testing/selftests/bpf/test_progs.c (6.12): print_test_result()
# "#%-7d %s:" + OK|FAIL|SKIP|"OK (SKIP: n/m)", print_subtest_name() "#%-7s %s/%s:%s".
STDOUT_OK = """\
#54      cgroup_hierarchical_stats:OK
#55/1    cgroup_iter/cgroup_iter__invalid_cgroup:OK
#55/2    cgroup_iter/cgroup_iter__preorder:OK
#55/3    cgroup_iter/cgroup_iter__dead_self_only:SKIP
#55      cgroup_iter:OK (SKIP: 1/3)
Summary: 2/2 PASSED, 1 SKIPPED, 0 FAILED
"""

FAILED = """\
test_walk_dead_self_only:PASS:cgroup_iter 0 nsec
#55/1    cgroup_iter/cgroup_iter__invalid_cgroup:OK
#55/2    cgroup_iter/cgroup_iter__dead_self_only:FAIL
#55      cgroup_iter:FAIL
Summary: 0/1 PASSED, 0 SKIPPED, 1 FAILED
"""
FAILED_JSON = json.dumps({
    "success": 0, "success_subtest": 1, "skipped": 0, "failed": 1,
    "results": [{"name": "cgroup_iter", "number": 55, "message": "", "failed": True,
                 "subtests": [{"name": "cgroup_iter__dead_self_only", "number": 2,
                               "message": "test_walk_dead_self_only:FAIL:unexpected\n",
                               "failed": True}]}]})


def test_passing_run_with_a_skipped_subtest() -> None:
    res = test_progs.parse(STDOUT_OK, json.dumps({"success": 2, "failed": 0, "results": []}))
    assert res.errors == ()
    assert res.status is Status.PASS
    assert [(c.name, c.status) for c in res.cases] == [
        ("cgroup_hierarchical_stats", Status.PASS), ("cgroup_iter", Status.PASS)]
    iters = res.cases[1]
    assert iters.directive == "SKIP 1/3 subtests"
    assert [s.status for s in iters.subtests] == [Status.PASS, Status.PASS, Status.SKIP]
    assert iters.subtests[2].name == "cgroup_iter__dead_self_only"


def test_failure_carries_the_json_message() -> None:
    res = test_progs.parse(FAILED, FAILED_JSON)
    assert res.status is Status.FAIL
    sub = res.cases[0].subtests[1]
    assert sub.status is Status.FAIL
    assert "unexpected" in sub.diagnostic


def test_truncated_output_is_an_error_not_a_pass() -> None:
    cut = "#55/1    cgroup_iter/cgroup_iter__invalid_cgroup:OK\n"
    res = test_progs.parse(cut, None)
    assert res.status is Status.FAIL
    assert any("Summary" in e for e in res.errors)
    assert any("-J" in e for e in res.errors)


def test_json_and_stdout_disagreeing_is_reported() -> None:
    res = test_progs.parse(STDOUT_OK, FAILED_JSON)
    assert any("says 1 failed" in e for e in res.errors)
    assert res.status is Status.FAIL


def test_sources_of_named_tests(tmp_path: Path) -> None:
    from harness.testkinds import test_progs as selftests

    pt = tmp_path / "prog_tests"
    pt.mkdir()
    (pt / "cgroup_iter.c").write_text("void test_cgroup_iter(void)\n{\n}\n")
    # defined in a file of another name; a static helper of the same name elsewhere is not it
    (pt / "percpu_alloc.c").write_text("static void test_cgrp_local_storage(void)\n{\n}\n")
    (pt / "storage.c").write_text("void serial_test_cgrp_local_storage(void)\n{\n}\n")
    got = selftests.test_progs_sources(tmp_path, ("cgroup_iter", "cgrp_local_storage"))
    assert [p.name for p in got] == ["cgroup_iter.c", "storage.c"]
    with pytest.raises(selftests.SelftestError, match="defines test_nope"):
        selftests.test_progs_sources(tmp_path, ("nope",))


def test_a_glob_takes_every_file_defining_a_test_it_matches(tmp_path: Path) -> None:
    from harness.testkinds import test_progs as selftests

    pt = tmp_path / "prog_tests"
    pt.mkdir()
    (pt / "cgroup_iter.c").write_text("void test_cgroup_iter(void)\n{\n}\n")
    (pt / "cgroup_link.c").write_text("void serial_test_cgroup_link(void)\n{\n}\n")
    (pt / "cgrp_kfunc.c").write_text("void test_cgrp_kfunc(void)\n{\n}\n")
    (pt / "helpers.c").write_text("static void test_cgroup_helper(void)\n{\n}\n")
    got = selftests.test_progs_sources(tmp_path, ("cgroup_*",))
    assert [p.name for p in got] == ["cgroup_iter.c", "cgroup_link.c"]
    assert [p.name for p in selftests.test_progs_sources(tmp_path, ("cgr?_kfunc",))] == [
        "cgrp_kfunc.c"]
    with pytest.raises(selftests.SelftestError, match="defines test_nomatch_"):
        selftests.test_progs_sources(tmp_path, ("nomatch_*",))
    ref = selftests.resolve("test_progs:cgroup_*")
    # quoted: the guest's shell must hand the glob to test_progs, not expand it
    assert "./test_progs -a 'cgroup_*' -J" in selftests.plan_test_progs(ref, tmp_path).command
    with pytest.raises(selftests.SelftestError, match="test name or glob"):
        selftests.resolve("test_progs:cgroup_$(reboot)")


def test_a_kselftest_glob_runs_each_test_it_matches(tmp_path: Path) -> None:
    from harness.testkinds import kselftest

    (tmp_path / "kselftest-list.txt").write_text(
        "cgroup:test_core\ncgroup:test_kill\ncgroup:test_memcontrol\ncgroup:with_stress.sh\n")
    ref = kselftest.resolve("kselftest:cgroup:test_*,with_stress.sh")
    names = [t.name for t in kselftest.plan_kselftest(ref, tmp_path)]
    assert names == ["kselftest-cgroup-test_core", "kselftest-cgroup-test_kill",
                     "kselftest-cgroup-test_memcontrol", "kselftest-cgroup-with_stress.sh"]
    with pytest.raises(kselftest.SelftestError, match=r"has no test\(s\) nope_"):
        kselftest.plan_kselftest(kselftest.resolve("kselftest:cgroup:nope_*"), tmp_path)
    tree = tmp_path / "tree"
    (tree / "tools/testing/selftests/cgroup").mkdir(parents=True)
    (tree / "tools/testing/selftests/cgroup/Makefile").write_text(
        "TEST_GEN_PROGS = test_core test_kill\n")
    kselftest.check_in_tree(kselftest.resolve("kselftest:cgroup:test_*"), tree)
    with pytest.raises(kselftest.SelftestError, match="builds no test named zz_"):
        kselftest.check_in_tree(kselftest.resolve("kselftest:cgroup:zz_*"), tree)


GOLDEN = Path(__file__).parent.parent / "golden" / "test_progs"


@pytest.mark.parametrize(("name", "subtests"), [
    ("cgroup_hierarchical_stats", 0), ("cgroup_iter", 9), ("cgrp_local_storage", 13)])
def test_real_runs(name: str, subtests: int) -> None:
    out = (GOLDEN / f"test_progs-{name}.out").read_text()
    res = test_progs.parse(out, (GOLDEN / f"test_progs-{name}.json").read_text())
    assert res.errors == ()
    assert [c.name for c in res.cases] == [name]
    assert res.cases[0].status is Status.PASS
    assert len(res.cases[0].subtests) == subtests
    assert all(s.status is Status.PASS for s in res.cases[0].subtests)
    # the same stdout without its -J file is not a clean run
    assert test_progs.parse(out, None).status is Status.FAIL


def test_real_failure_on_a_kernel_without_the_hook_call() -> None:
    stem = GOLDEN / "test_progs-cgroup_hierarchical_stats-hook-not-called"
    res = test_progs.parse(stem.with_suffix(".out").read_text(),
                           stem.with_suffix(".json").read_text())
    assert res.errors == ()
    assert len(res.cases) == 1  # printed twice, counted once
    assert res.cases[0].status is Status.FAIL
    assert "leaf cgroup attach counter" in res.cases[0].diagnostic
