"""Mutation operators on real kernel C (tests/golden/mutants/README.md), sampling, cache keys,
and verdicts against a baseline from real result trees."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from harness.base.model import CellResult
from harness.drivers.mutate import compare, excluded_tests, run_facts, verdict_key
from harness.drivers.mutate import tests_digest as digest_of_tests
from harness.judge import mutants
from harness.output import results

GOLDEN = Path(__file__).parent.parent / "golden" / "mutants"
OPS = mutants.load_operators()


def rstat() -> str:
    return (GOLDEN / "rstat_flush_locked.c").read_text()


def flush_locked(text: str) -> range:
    span = mutants.function_lines(text, "cgroup_rstat_flush_locked")
    assert span is not None
    return span


def by_summary(ms: list[mutants.Mutant]) -> dict[str, mutants.Mutant]:
    return {f"{m.operator}: {' / '.join(s.strip() for s in m.after)}": m for m in ms}


def test_the_rstat_flush_path_gets_the_bugs_a_reviewer_would_fear() -> None:
    text = rstat()
    span = flush_locked(text)
    assert text.split("\n")[span.start - 1].startswith("static void cgroup_rstat_flush_locked")
    assert text.split("\n")[span.stop - 2] == "}"
    ms = mutants.generate("kernel/cgroup/rstat.c", text, span, OPS, source="target",
                          functions=mutants.defined_functions(text))
    got = by_summary(ms)
    # the BPF hook never called, the base stats never flushed, the lock never dropped
    assert {"delete-call: { }"} <= {k.split(" / ")[0] for k in got}
    deleted = {m.before[0].strip() for m in ms if m.operator == "delete-call"}
    assert {"bpf_rstat_flush(pos, cgroup_parent(pos), cpu);",
            "cgroup_base_stat_flush(pos, cpu);", "__cgroup_rstat_unlock(cgrp, cpu);",
            "lockdep_assert_held(&cgroup_rstat_lock);"} <= deleted
    assert "swap-arguments: __cgroup_rstat_lock(cpu, cgrp);" in got
    assert "drop-negation: if (cond_resched())" in got
    # the lock taken again outside the loop: a statement moved out of its block
    moved = [m for m in ms if m.operator == "move-out-of-block"]
    assert any(m.after[1].strip() == "__cgroup_rstat_lock(cgrp, cpu);" and
               m.after[0].strip() == "}" for m in moved)
    # nothing outside the function, and never a line count changed
    assert all(span.start <= m.start < span.stop for m in ms)
    assert all(len(m.before) == len(m.after) for m in ms)


def test_hierarchical_to_local_leaves_a_function_definition_alone() -> None:
    """mm/memcontrol.c of 6.12, memcg_page_state_output() with its definition line: only
    the call in its body becomes the local twin (the definition renamed would redefine
    the twin: stillborn, a wasted compile, in the yardstick of 2026-11-27)."""
    text = ("unsigned long memcg_page_state_output(struct mem_cgroup *memcg, int item)\n"
            "{\n"
            "\treturn memcg_page_state(memcg, item) *\n"
            "\t\tmemcg_page_state_output_unit(item);\n"
            "}\n")
    op = next(o for o in OPS if o.name == "hierarchical-to-local")
    ms = mutants.generate("mm/memcontrol.c", text, range(1, 6), [op], source="test",
                          functions=frozenset({"memcg_page_state_local_output",
                                               "memcg_page_state_local"}))
    assert [(m.start, m.after[0]) for m in ms] == [
        (3, "\treturn memcg_page_state_local(memcg, item) *")]


def test_the_series_lines_get_every_operator_that_applies() -> None:
    diff = (GOLDEN / "memcg-kfuncs.diff").read_text()
    added = mutants.added_lines(diff)["mm/memcontrol.c"]
    assert len(added) == 222
    # the excerpt starts at line 1528 of the file: shift the added lines to it
    text = (GOLDEN / "memcg_kfuncs_series.c").read_text()
    lines = {n - 1527 for n in added if 1528 <= n <= 1712}
    ms = mutants.generate("mm/memcontrol.c", text, lines, OPS, source="series s",
                          functions=mutants.defined_functions(text) | {
                              "memcg_page_state_local_output", "memcg_events_local"})
    ops = Counter(m.operator for m in ms)
    assert set(ops) >= {"delete-call", "delete-assignment", "flip-comparison", "loosen-bound",
                        "drop-negation", "hierarchical-to-local", "drop-kfunc-flag",
                        "return-constant", "swap-arguments"}
    got = by_summary(ms)
    assert "hierarchical-to-local: val = memcg_page_state_local_output(memcg, item);" in got
    assert "hierarchical-to-local: val = memcg_events_local(memcg, item);" in got
    assert ("drop-kfunc-flag: BTF_ID_FLAGS(func, bpf_memcg_flush_stats, KF_TRUSTED_ARGS)"
            in got)  # KF_SLEEPABLE dropped
    assert "drop-kfunc-flag: BTF_ID_FLAGS(func, bpf_memcg_stat_fetch)" in got
    assert "delete-call: { }" in {k for k in got if k.startswith("delete-call")}
    assert any(m.before[0].strip() == "css_put(&memcg->css);" for m in ms
               if m.operator == "delete-call")
    # file-scope macros (late_initcall, __bpf_kfunc_start_defs) are not statements to drop
    assert not any(m.before[0].startswith(("late_initcall", "__bpf_kfunc")) for m in ms)
    # comments are never mutated
    assert not any(m.before[0].lstrip().startswith(("/*", "*")) for m in ms)


def test_a_mutant_is_a_patch_git_am_takes_and_its_id_is_stable() -> None:
    text = rstat()
    m = mutants.generate("kernel/cgroup/rstat.c", text, flush_locked(text), OPS,
                         source="target")[0]
    patch = m.patch(text)
    assert patch.startswith("From: harness mutate")
    assert "Subject: [PATCH] MUTANT" in patch
    assert "--- a/kernel/cgroup/rstat.c\n+++ b/kernel/cgroup/rstat.c\n@@" in patch
    again = mutants.generate("kernel/cgroup/rstat.c", text, flush_locked(text), OPS,
                             source="target")[0]
    assert again.id == m.id
    assert m.apply(text).count("\n") == text.count("\n")
    with pytest.raises(mutants.MutantError, match="not what it was made from"):
        m.apply(text.replace(m.before[0], m.before[0] + " "))


def test_sampling_is_reproducible_and_takes_every_source() -> None:
    text = rstat()
    a = mutants.generate("r.c", text, flush_locked(text), OPS, source="target")
    b = mutants.generate("m.c", (GOLDEN / "memcg_kfuncs_series.c").read_text(),
                         range(1, 186), OPS, source="series")
    one = mutants.sample(a + b, 3, seed=7)
    assert [m.id for m in one] == [m.id for m in mutants.sample(b + a, 3, seed=7)]
    assert {m.source for m in one} == {"target", "series"}
    assert [m.id for m in mutants.sample(a + b, 3, seed=8)] != [m.id for m in one]
    assert len(mutants.sample(a + b, None, seed=0)) == len(a + b)


def test_cache_keys_change_with_each_input() -> None:
    text = rstat()
    m1, m2 = mutants.generate("r.c", text, flush_locked(text), OPS, source="t")[:2]
    base = {"tree_id": "t", "config": "c", "tests": "s", "harness_rev": "h"}
    key = verdict_key(mutant=m1, **base)
    assert verdict_key(mutant=m1, **base) == key
    assert verdict_key(mutant=m2, **base) != key
    for field in base:
        assert verdict_key(mutant=m1, **{**base, field: "other"}) != key


def test_a_verdict_of_some_checks_is_not_the_whole_tests() -> None:
    """The tests' digest (a verdict's key) holds the checks asked of each: a kill by two
    checks is not cached as the whole test's, nor the other way round."""
    whole = digest_of_tests(("memcg_kfuncs", "hierarchical_stats"))
    two = digest_of_tests(("memcg_kfuncs:child_values_match_created,untrusted_cgroup_rejected",
                        "hierarchical_stats"))
    one = digest_of_tests(("memcg_kfuncs:untrusted_cgroup_rejected", "hierarchical_stats"))
    assert len({whole, two, one}) == 3
    assert digest_of_tests(("memcg_kfuncs", "hierarchical_stats")) == whole


def _statuses(results: Path, cell: str | None = None) -> dict[str, str]:
    data = json.loads(results.read_text())
    c = data["cells"][0] if cell is None else next(x for x in data["cells"]
                                                     if x["cell"] == cell)
    return {t["name"]: t["status"] for t in c["tests"]}


def test_verdicts_against_a_real_baseline() -> None:
    """Real result trees: the default cell (the baseline) and the warn-boot-shutdown kernel
    (tests/golden/mutants/results-*.json, from runs of 2026-11-23)."""
    base = _statuses(GOLDEN / "results-baseline.json")
    warn = _statuses(GOLDEN / "results-warn-boot-shutdown.json")
    assert compare(base, base, stage="") == ("survived", ())
    outcome, differ = compare(base, warn, stage="")
    assert outcome == "killed" and {"boot", "shutdown"} <= set(differ)
    assert compare(base, {}, stage="build", stage_status="BUILD_ERROR")[0] == "stillborn"
    # a build that found the disk full is no verdict on the mutant
    assert compare(base, {}, stage="build", stage_status="SETUP_ERROR") == (
        "error", ("stage build: SETUP_ERROR",))
    # the harness's own feature check (a declared kfunc gone) stops it: that is a kill
    assert compare(base, {}, stage="features", stage_status="BUILD_ERROR") == (
        "killed", ("stage features: BUILD_ERROR",))
    # a boot that failed: a kill only when the kernel complained, else not judged
    assert compare(base, {}, stage="boot+tests", stage_status="BOOT_ERROR",
                   kernel_fault=True)[0] == "killed"
    assert compare(base, {}, stage="boot+tests", stage_status="BOOT_ERROR")[0] == "error"


def _cell(name: str) -> CellResult:
    return results.load_run(str(GOLDEN / name))[0].cells[0]


def test_a_test_red_in_the_baseline_cannot_kill() -> None:
    """Two real runs of the same kernel (2026-11-27): memcg_kfuncs and cgroup_iter_rstat
    failed in the first, passed in the second. Neither may judge a mutant: a mutant run
    like the second (both passing) is not killed by them, nor one like the first."""
    red, green = run_facts(_cell("results-red-baseline.json")), run_facts(
        _cell("results-green-baseline.json"))
    excluded = excluded_tests([dict(red.statuses), dict(green.statuses)])
    assert set(excluded) == {"memcg_kfuncs", "cgroup_iter_rstat", "rstat_propagation",
                             "cgrp_storage"}  # the last two: missing from the second run
    assert "FAIL / PASS" in excluded["memcg_kfuncs"]
    for base, mutant in ((red, green), (green, red)):
        assert compare(base.statuses, mutant.statuses, stage="",
                       excluded=frozenset(excluded)) == ("survived", ())
    # without the exclusion the chance failure would have "killed" it
    assert compare(red.statuses, green.statuses, stage="")[0] == "killed"
    # a run-to-run identical green result still judges
    assert excluded_tests([dict(green.statuses), dict(green.statuses)]) == {}
    assert compare(green.statuses, red.statuses, stage="")[1] == (
        "cgroup_iter_rstat", "cgrp_storage", "memcg_kfuncs", "rstat_propagation")


def test_an_environment_error_is_not_a_kill() -> None:
    """A real run that asked for KVM on this host (QEMU aborts): the accel stage failed
    with BOOT_ERROR and no kernel ever ran. Not a kill, and never cached."""
    facts = run_facts(_cell("results-accel-error.json"))
    assert (facts.stage, facts.stage_status, facts.kernel_fault) == ("accel", "BOOT_ERROR",
                                                                     False)
    base = run_facts(_cell("results-green-baseline.json")).statuses
    assert compare(base, facts.statuses, stage=facts.stage,
                   stage_status=facts.stage_status)[0] == "error"
    for stage, status in (("series", "PATCH_CONFLICT"), ("selftests-build", "SETUP_ERROR"),
                          ("kconfig", "CONFIG_ERROR"), ("plan", "SETUP_ERROR")):
        assert compare(base, {}, stage=stage, stage_status=status)[0] == "error"


def test_a_kernel_that_complained_is_told_by_its_splats() -> None:
    """The warn-boot-shutdown kernel's real run: a WARN at boot and at shutdown."""
    assert run_facts(_cell("results-warn-boot-shutdown.json")).kernel_fault
    assert not run_facts(_cell("results-green-baseline.json")).kernel_fault


def test_a_new_compiler_warning_is_told_from_the_old_ones() -> None:
    """The real warnings of the swapped __cgroup_rstat_unlock(cpu, cgrp) mutant (gcc 12)."""
    from harness.drivers.mutate import compiler_warnings

    out = ("  CC      kernel/cgroup/rstat.o\n"
           "../../work/debian-6.12-6.12.117-1_deb12u1-base/kernel/cgroup/rstat.c:340:39: "
           "warning: passing argument 1 of '__cgroup_rstat_unlock' makes pointer from integer "
           "without a cast [-Wint-conversion]\n")
    got = compiler_warnings(out)
    assert got == {"rstat.c: warning: passing argument 1 of '__cgroup_rstat_unlock' makes "
                   "pointer from integer without a cast [-Wint-conversion]"}
    assert compiler_warnings(out.replace(":340:39:", ":341:2:")) == got  # moved: the same


def test_a_kill_only_by_declared_flaky_tests_is_confirmed() -> None:
    from harness.drivers.mutate import flaky_tests, to_confirm
    from harness.judge import verdict

    exp = verdict.load_expectations(Path(__file__).parents[2] / "selftests" /
                                    "expectations.toml")
    flaky = flaky_tests(exp, "6.12.117+")
    assert "kselftest-cgroup-test_freezer" in flaky
    assert flaky_tests(exp, "6.1.192") == frozenset()  # keyed by version
    base = _statuses(GOLDEN / "results-baseline.json")
    freezer_failed = {**base, "kselftest-cgroup-test_freezer": "XFAIL"}
    outcome, differ = compare(base, freezer_failed, stage="")
    assert outcome == "killed" and to_confirm(outcome, differ, flaky)
    both = {**freezer_failed, "memcg_kfuncs": "FAIL"}
    outcome, differ = compare(base, both, stage="")
    assert not to_confirm(outcome, differ, flaky)  # a real test failed too


def test_mutant_timeouts_follow_the_baseline() -> None:
    from harness.base.model import CellResult, Phase, Status
    from harness.base.model import TestResult as Result
    from harness.drivers.mutate import mutant_timeouts

    def r(name: str, seconds: float, phase: Phase = Phase.TEST) -> Result:
        return Result(name=name, status=Status.PASS, duration_s=seconds, exit_code=0,
                      ktap=None, phase=phase)

    base = CellResult(cell="c", kernel="k", kernel_version="6.12", status=Status.PASS,
                      patches=(), config=None, stages=(),
                      tests=(r("boot", 4.0, Phase.BOOT), r("quick", 1.7), r("slow", 12.4)),
                      arch="x86_64", toolchain="gcc")
    assert mutant_timeouts(base) == {"quick": 30, "slow": 124}


def test_every_declared_equivalent_is_listed_for_a_reviewer() -> None:
    """docs/mutate.md names every mutant declared equivalent, beside its argument."""
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    doc = (repo / "docs" / "mutate.md").read_text()
    declared = [e["mutant"] for f in sorted((repo / "patches").glob("*/equivalent-mutants.toml"))
                for e in tomllib.loads(f.read_text())["equivalent"]]
    assert declared
    assert [m for m in declared if f"| `{m}` |" not in doc] == []


def test_the_readme_yardstick_table_has_every_operator_and_a_not_covered_column() -> None:
    """The yardstick of record in docs/mutate.md: one row per operator of
    harness/judge/mutation_operators.toml (a row of dashes where the scope has no such code), with
    the outcomes harness mutate gives, "not covered" among them."""
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    ops = [o["name"] for o in tomllib.loads(
        (repo / "harness" / "judge" / "mutation_operators.toml").read_text())["operator"]]
    readme = (repo / "docs" / "mutate.md").read_text()
    head = "| operator | killed | survived | not covered | equivalent | stillborn | error |"
    assert head in readme
    table = readme.split(head, 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1].strip().strip("`") for line in table.splitlines()[2:]]
    assert rows[:-1] == ops and rows[-1] == "total"


# ---- semantic operators, on real kernel C (tests/golden/mutants/README.md) ----


def _semantic(file: str, name: str, function: str | None = None) -> list[mutants.Mutant]:
    text = (GOLDEN / file).read_text()
    op = next(o for o in OPS if o.name == name)
    lines: range | None = range(1, text.count("\n") + 2)
    if function is not None:
        lines = mutants.function_lines(text, function)
        assert lines is not None
    return mutants.generate(file, text, lines, [op], source="test")


def _changes(ms: list[mutants.Mutant]) -> list[tuple[int, str]]:
    return [(m.start, m.after[0].strip()) for m in ms]


def test_online_cpus_walks_only_the_online_ones() -> None:
    assert _changes(_semantic("rstat_flush_locked.c", "online-cpus")) == [
        (24, "for_each_online_cpu(cpu) {")]


def test_tryget_online_refuses_an_offline_memcg() -> None:
    assert _changes(_semantic("bpf_memcontrol.c", "tryget-online", "bpf_get_mem_cgroup")) == [
        (61, "if (css && css_tryget_online(css))")]


def test_current_cpu_replaces_a_cpu_argument() -> None:
    got = _changes(_semantic("rstat_flush_locked.c", "current-cpu",
                             "cgroup_rstat_flush_locked"))
    assert (25, "struct cgroup *pos = cgroup_rstat_updated_list(cgrp, raw_smp_processor_id());"
            ) in got
    assert (31, "bpf_rstat_flush(pos, cgroup_parent(pos), raw_smp_processor_id());") in got
    # a name that only starts with cpu is no CPU argument
    assert not any("cpu_in_loop" in after and "raw_smp" in after for _, after in got)


def test_other_flag_tries_each_alternative() -> None:
    got = _changes(_semantic("bpf_cgrp_storage.c", "other-flag"))
    update = [after for _, after in got if after.startswith("value, ")]
    assert "value, BPF_ANY, gfp_flags);" in update and "value, BPF_EXIST, gfp_flags);" in update
    assert any("GFP_KERNEL" in after for _, after in got)


def test_drop_type_check_takes_the_condition_as_false() -> None:
    got = _changes(_semantic("verifier_map_func_compat.c", "drop-type-check"))
    assert (33, "if (0)") in got
    # a condition over several lines is left alone (its parentheses do not close here)
    assert not any(line == 5 for line, _ in got)


def test_callees_are_the_built_c_functions_the_series_calls(tmp_path: Path) -> None:
    """--scope callees: what a changed function calls, defined in a .c file of this kernel
    (its object built); not headers, not tools' own copies."""
    import subprocess

    from harness.drivers.mutate import callees

    files = {
        "mm/new.c": "int mine(int x)\n{\n\treturn helper(x) + in_header(x) + tool_only(x);\n}\n",
        "mm/lib.c": "int helper(int x)\n{\n\treturn x + 1;\n}\n",
        "include/x.h": "static inline int in_header(int x)\n{\n\treturn x;\n}\n",
        "tools/t.c": "int tool_only(int x)\n{\n\treturn x;\n}\n",
        "mm/proto.c": "int helper(int x);\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    build = tmp_path / ".harness-build"
    for obj in ("mm/new.o", "mm/lib.o", "mm/proto.o"):
        (build / obj).parent.mkdir(parents=True, exist_ok=True)
        (build / obj).write_text("")
    assert callees(tmp_path, {"mm/new.c": {3}}, build) == ["mm/lib.c:helper"]
