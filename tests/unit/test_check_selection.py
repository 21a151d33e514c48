"""Checks by name: `--test memcg_kfuncs:usage_*` runs the matching checks of the CHECK
table, what they need and the clean-ups, and says that the rest did not run.

The guest side is real: selftests/lib/check.c compiled (gcc, against the kselftest.h of
Debian's 6.12 tree, tests/golden/ksft/) with a CHECK table and run with $HARNESS_CHECKS;
the host's idea of the same selection (judge/checks.py, from the same C source) must be
what the program ran. The host side resolves real tests of selftests/.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from harness.base.errors import HarnessError
from harness.base.model import CheckSelection, Status
from harness.drivers import pipeline
from harness.guest.protocol import GuestTest
from harness.judge import checks, ktap, outcome
from harness.output import results, terminal
from harness.testkinds import kselftest, own, resolve, test_progs

ROOT = Path(__file__).resolve().parents[2]
KSFT = ROOT / "tests" / "golden" / "ksft"

TABLE_C = r"""
#include "selftest.h"
static int check_load(void) { return KSFT_PASS; }
static int check_setup(void) { return KSFT_PASS; }
static int check_usage_a(void) { return KSFT_PASS; }
static int check_usage_b(void) { ksft_print_msg("b ran\n"); return KSFT_PASS; }
static int check_values(void)
{
	static int calls;	/* values_x, then values_y: judged by the order of its calls */

	ksft_print_msg("values call %d\n", calls);
	return calls++ < 2 ? KSFT_PASS : KSFT_FAIL;
}
static int check_fails(void) { return check_fail("it broke"); }
static int check_tree_cleanup(void) { return KSFT_PASS; }
int main(void)
{
	static const struct check checks[] = {
		CHECK(load),
		CHECK(setup, load),
		CHECK(usage_a, setup),
		/* CHECK(commented_out), */
		CHECK(usage_b,
			load),
		CHECK_BY(values_x, check_values, setup),
		CHECK(fails),
		CHECK_BY(values_y, check_values, load),
		CHECK(tree_cleanup),
	};
	return checks_run(checks, ARRAY_SIZE(checks), NULL);
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("checks")
    (d / "t.c").write_text(TABLE_C)
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", f"-I{ROOT / 'selftests/lib'}",
                    f"-I{KSFT}", str(d / "t.c"), str(ROOT / "selftests/lib/check.c"),
                    "-o", str(d / "t")], check=True, capture_output=True)
    return d / "t"


def _run(program: Path, spec: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != checks.ENV}
    if spec is not None:
        env[checks.ENV] = spec
    return subprocess.run([str(program)], env=env, text=True, capture_output=True,
                          check=False)


def test_the_table_read_from_the_source_is_the_table() -> None:
    table = checks.table_of([TABLE_C])
    assert table is not None
    assert [(c.name, c.needs) for c in table] == [
        ("load", ""), ("setup", "load"), ("usage_a", "setup"), ("usage_b", "load"),
        ("values_x", "setup"), ("fails", ""), ("values_y", "load"), ("tree_cleanup", "")]
    assert [c.function for c in table][-4:] == [
        "check_values", "check_fails", "check_values", "check_tree_cleanup"]
    # a table filled at run time is not known on the host
    assert checks.table_of(['checks[n++] = (struct check){ "load", check_load, NULL };']) \
        is None


@pytest.mark.parametrize("spec", ["usage_*", "usage_a", "values_x,usage_b", "-", "fails",
                                  "values_y"])
def test_the_guest_runs_what_the_host_says(program: Path, spec: str) -> None:
    res = _run(program, spec)
    said = checks.selection_from_output(res.stdout)
    table = checks.table_of([TABLE_C])
    assert table is not None
    expected = checks.select(table, tuple(spec.split(",")))
    assert said == expected
    parsed = ktap.parse(res.stdout)
    # only what ran is in the KTAP output, in the table's order, numbered 1..n
    ran = [c.name for c in parsed.cases]
    assert ran == [c.name for c in table if c.name in expected.ran]
    assert parsed.plan == len(ran) and not parsed.errors
    assert res.returncode == (1 if "fails" in ran else 0)


def test_what_comes_along_is_said(program: Path) -> None:
    sel = checks.selection_from_output(_run(program, "usage_*").stdout)
    assert sel == CheckSelection(asked=("usage_*",), selected=("usage_a", "usage_b"),
                                 needed=("load", "setup"), cleanup=("tree_cleanup",),
                                 not_run=("values_x", "fails", "values_y"))
    assert checks.describe(sel) == ("5 of 8 checks: usage_* (usage_a, usage_b); needed: "
                                    "load, setup; clean-up: tree_cleanup; 3 not run")


def test_a_shared_function_s_earlier_checks_come_along(program: Path) -> None:
    """values_y is check_values' second call: alone, the function would judge it as its
    first (values_x); values_x and what it needs come along."""
    res = _run(program, "values_y")
    sel = checks.selection_from_output(res.stdout)
    assert sel is not None and sel.needed == ("load", "setup", "values_x")
    assert "values call 1" in res.stdout and res.returncode == 0


def test_without_a_selection_every_check_runs_and_nothing_is_said(program: Path) -> None:
    res = _run(program, None)
    assert checks.selection_from_output(res.stdout) is None
    assert len(ktap.parse(res.stdout).cases) == 8


def test_an_unknown_name_in_the_guest_ends_the_program_with_the_names(program: Path) -> None:
    res = _run(program, "usage_a,nope")
    assert res.returncode == 1
    assert "no check named nope; the checks are: load setup usage_a usage_b values_x " \
           "fails values_y tree_cleanup" in res.stdout
    assert ktap.parse(res.stdout).status is Status.FAIL


def test_a_test_by_check_name_resolves_and_an_unknown_one_lists_the_names() -> None:
    ref = resolve("memcg_kfuncs:usage_*,root_*")
    assert (ref.name, ref.checks) == ("memcg_kfuncs", ("usage_*", "root_*"))
    table = own.check_table(ref.manifest) if ref.manifest else None
    assert table is not None and "usage_matches_memory_current" in [c.name for c in table]
    with pytest.raises(HarnessError) as err:
        resolve("memcg_kfuncs:usage_*,no_such_check")
    assert "has no check no_such_check" in str(err.value)
    assert "charge_memory_in_child" in (err.value.fix or "")
    # a variant keeps its name; its checks as any other's
    assert resolve("rstat_propagation@broken_propagation:leaf_*").name == \
        "rstat_propagation@broken_propagation"
    with pytest.raises(HarnessError, match="no check named after the colon"):
        resolve("memcg_kfuncs:")


@pytest.mark.parametrize("test", own.own_tests())
def test_every_check_of_our_selftests_can_be_picked_by_name(test: str) -> None:
    """Each check a selftest's table has (the ones added since checks by name too) is
    one the host reads: its needs name an earlier check, its function is in the test's
    source, and picking it alone runs it, what it needs and the clean-ups."""
    ref = resolve(test)
    assert ref.manifest is not None
    table = own.check_table(ref.manifest)
    if table is None:  # filled at run time (a benchmark's) or no C program: the guest checks
        return
    names = [c.name for c in table]
    assert len(set(names)) == len(names), names
    source = "".join((ref.manifest.directory / s).read_text() for s in ref.manifest.userspace
                     if s.endswith(".c"))
    for i, check in enumerate(table):
        assert not check.needs or check.needs in names[:i], check
        assert re.search(rf"\b{check.function}\b\s*\(void\)|NODE_CHECK\({check.function},",
                         source), check
        sel = checks.select(table, (check.name,))
        assert check.name in sel.selected
        assert not check.needs or check.needs in sel.ran
        assert set(sel.ran) | set(sel.not_run) == set(names)


def test_the_guest_command_carries_the_selection(tmp_path: Path) -> None:
    ref = resolve("memcg_kfuncs:usage_*")
    [planned] = own.KIND.plan(ref, tmp_path)
    assert planned.command == "export HARNESS_CHECKS='usage_*'; ./memcg_kfuncs"
    assert planned.checks == ("usage_*",)
    assert own.KIND.plan(resolve("memcg_kfuncs"), tmp_path)[0].command == "./memcg_kfuncs"


def test_the_same_test_twice_is_one_with_both_selections() -> None:
    refs = [resolve("memcg_kfuncs:usage_*"), resolve("memcg_kfuncs:root_*")]
    [one] = pipeline.merged_checks(refs)
    assert one.checks == ("usage_*", "root_*")
    [whole] = pipeline.merged_checks([*refs, resolve("memcg_kfuncs")])
    assert whole.checks == ()
    # the same test twice with no selection stays twice: the plan says so
    assert len(pipeline.merged_checks([resolve("memcg_kfuncs")] * 2)) == 2


def test_a_result_says_which_checks_ran_and_keeps_it_in_results_json(program: Path) -> None:
    out = _run(program, "usage_a").stdout
    test = GuestTest(name="t", timeout_s=10, cwd=Path("/"), command="./t",
                     checks=("usage_a",), checks_why="asked for")
    record = outcome.BootRecord(
        status_text="t\tended\t2.0\t0\t0\t0\t1.0\n", info_text="ready\t1.0\n",
        outputs={"t": out}, runner_done=True,
        dmesg="harness: runner-start\nharness: test-start t\nharness: test-end t rc=0\n"
              "harness: runner-done\n",
        console="harness: runner-done\n")
    result = next(r for r in outcome.evaluate([test], record) if r.name == "t")
    assert result.status is Status.PASS
    assert result.selection is not None and result.selection.not_run == (
        "usage_b", "values_x", "fails", "values_y")
    assert result.selection.why == "asked for"
    back = results._test(results._Object(results.test_json(result), "t"))
    assert back.selection == result.selection
    lines = terminal._result_lines(result, 10, None)
    assert "only 4 of 8 checks: usage_a; needed: load, setup; clean-up: tree_cleanup; " \
           "4 not run" in "\n".join(lines)


def test_test_progs_subtests_by_name(tmp_path: Path) -> None:
    ref = resolve("test_progs:cgroup_iter/cgroup_iter__pre*,cgroup_iter__self_only")
    assert (ref.name, ref.target, ref.checks) == (
        "test_progs:cgroup_iter", "cgroup_iter", ("cgroup_iter__pre*", "cgroup_iter__self_only"))
    planned = test_progs.plan_test_progs(ref, tmp_path)
    assert "-a 'cgroup_iter/cgroup_iter__pre*,cgroup_iter/cgroup_iter__self_only'" in \
        planned.command
    bpf = tmp_path / "bpf"
    (bpf / "prog_tests").mkdir(parents=True)
    (bpf / "prog_tests" / "cgroup_iter.c").write_text(
        'void test_cgroup_iter(void)\n{\n\tif (test__start_subtest("cgroup_iter__preorder"))\n'
        '\t\tf();\n\tif (test__start_subtest("cgroup_iter__self_only"))\n\t\tg();\n}\n')
    test_progs.check_subtests(ref, bpf)
    with pytest.raises(HarnessError) as err:
        test_progs.check_subtests(resolve("test_progs:cgroup_iter/memcg*"), bpf)
    assert "no subtest memcg*" in str(err.value)
    assert "cgroup_iter__preorder, cgroup_iter__self_only" in (err.value.fix or "")
    with pytest.raises(HarnessError):
        resolve("test_progs:cgroup_*/x")


def test_kselftest_names_only_for_a_program_that_takes_them(tmp_path: Path) -> None:
    ref = resolve("kselftest:cgroup:test_memcontrol:test_memcg_low")
    assert (ref.name, ref.only, ref.checks) == (
        "kselftest:cgroup:test_memcontrol", ("test_memcontrol",), ("test_memcg_low",))
    tree = tmp_path
    cg = tree / "tools/testing/selftests/cgroup"
    cg.mkdir(parents=True)
    (cg / "test_memcontrol.c").write_text(
        "#define T(x) { x, #x }\nstruct memcg_test tests[] = {\n\tT(test_memcg_min),\n"
        "\tT(test_memcg_low),\n};\n")
    with pytest.raises(HarnessError) as err:
        kselftest.check_names(ref, tree)
    assert "test_memcontrol takes no test name" in str(err.value)
    assert "its tests: test_memcg_min, test_memcg_low" in str(err.value)
    (cg / "test_core.c").write_text('#include "../kselftest_harness.h"\nTEST(one)\n{\n}\n'
                                    "TEST_F(fix, two)\n{\n}\n")
    kselftest.check_names(resolve("kselftest:cgroup:test_core:two,one"), tree)
    with pytest.raises(HarnessError, match="has no test three"):
        kselftest.check_names(resolve("kselftest:cgroup:test_core:three"), tree)
    installed = tmp_path / "installed"
    installed.mkdir()
    (installed / "kselftest-list.txt").write_text("cgroup:test_core\n")
    [planned] = kselftest.plan_kselftest(resolve("kselftest:cgroup:test_core:two,one"),
                                         installed)
    assert planned.name == "kselftest-cgroup-test_core"
    assert planned.command.endswith("cd $HARNESS_SCRATCH/kselftest-cgroup/cgroup && "
                                    "./test_core -t two -t one")
