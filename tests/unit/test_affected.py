"""--affected: a change's lines mapped onto the functions a map knows, and the checks of each
test that reached them (judge/affected.py); the map read back as written.

The C text is kernel style as mm/bpf_memcontrol.c writes it (a kfunc's type on the line
above its name, a registration table at file scope); the diffs are `git diff -U0` output.
"""

from __future__ import annotations

import pytest

from harness.base.model import AffectedTest
from harness.drivers import affected as driver
from harness.judge import affected
from harness.judge.checks import Check
from harness.testkinds import resolve

SOURCE = """\
// SPDX-License-Identifier: GPL-2.0
#include <linux/memcontrol.h>

static inline bool valid(int idx)
{
	return idx >= 0;
}

__bpf_kfunc struct mem_cgroup *
bpf_get_mem_cgroup(struct cgroup_subsys_state *css)
{
	struct mem_cgroup *memcg = NULL;

	if (css)
		memcg = mem_cgroup_from_css(css);
	return memcg;
}

__bpf_kfunc unsigned long bpf_mem_cgroup_usage(struct mem_cgroup *memcg)
{
	return page_counter_read(&memcg->memory) * PAGE_SIZE;
}

BTF_KFUNCS_START(bpf_memcontrol_kfuncs)
BTF_ID_FLAGS(func, bpf_get_mem_cgroup, KF_ACQUIRE | KF_RET_NULL | KF_RCU)
BTF_ID_FLAGS(func, bpf_mem_cgroup_usage)
BTF_KFUNCS_END(bpf_memcontrol_kfuncs)

static int __init bpf_memcontrol_init(void)
{
	int err = register_btf_kfunc_id_set(BPF_PROG_TYPE_UNSPEC, &set);

	if (err)
		pr_warn("error\\n");
	return err;
}
late_initcall(bpf_memcontrol_init);
"""
F = "mm/bpf_memcontrol.c"


def test_function_spans_of_kernel_style_c() -> None:
    spans = {s.name: (s.start, s.end) for s in affected.function_spans(SOURCE)}
    assert spans == {"valid": (4, 7), "bpf_get_mem_cgroup": (9, 17),
                     "bpf_mem_cgroup_usage": (19, 22), "bpf_memcontrol_init": (29, 36)}


def test_a_diff_s_lines_on_the_base_side() -> None:
    diff = (f"diff --git a/{F} b/{F}\nindex 1..2 100644\n--- a/{F}\n+++ b/{F}\n"
            "@@ -21 +21 @@ bpf_mem_cgroup_usage\n-\treturn a;\n+\treturn b;\n"
            "@@ -25,0 +26 @@\n+BTF_ID_FLAGS(func, x)\n"
            "diff --git a/mm/new.c b/mm/new.c\nnew file mode 100644\n--- /dev/null\n"
            "+++ b/mm/new.c\n@@ -0,0 +1 @@\n+int x;\n")
    a, b = affected.changed_lines(diff)
    assert (a.file, a.old_lines, a.inserted_after, a.new_file) == (
        F, frozenset({21}), frozenset({25}), False)
    assert b.file == "mm/new.c" and b.new_file


def _map(**tests: affected.MappedTest) -> affected.Map:
    return affected.Map(key="k", tree="t", recorded="then", run="/runs/map", files={
        F: affected.MappedFile(blob="b1", spans=affected.function_spans(SOURCE))},
        tests=tests)


USAGE = f"{F}:bpf_mem_cgroup_usage"
GET = f"{F}:bpf_get_mem_cgroup"
TABLE = (Check(name="load"), Check(name="setup", needs="load"),
         Check(name="usage_check", needs="setup"), Check(name="get_check", needs="setup"),
         Check(name="oracle", needs="setup"), Check(name="refused"),
         Check(name="userspace"), Check(name="cleanup"))
MEMCG = affected.MappedTest(
    kind="own", table=TABLE, frame=frozenset({"kernel/cgroup/cgroup.c:cgroup_mkdir"}),
    units={"load": frozenset({"kernel/bpf/btf.c:btf_kfunc_flags"}),
           "setup": frozenset({"kernel/bpf/btf.c:btf_kfunc_flags", GET}),
           "usage_check": frozenset({"kernel/bpf/btf.c:btf_kfunc_flags", GET, USAGE}),
           "get_check": frozenset({"kernel/bpf/btf.c:btf_kfunc_flags", GET}),
           "oracle": frozenset({"kernel/bpf/btf.c:btf_kfunc_flags", GET}),
           "refused": frozenset({"kernel/bpf/btf.c:btf_kfunc_find"}),
           # nothing beyond the frame: no kernel code of its own
           "userspace": frozenset({"kernel/cgroup/cgroup.c:cgroup_mkdir"}),
           "cleanup": frozenset()})
OTHER = affected.MappedTest(kind="own", table=(Check(name="a"), Check(name="b")),
                            units={"a": frozenset({"kernel/cgroup/rstat.c:flush"}),
                                   "b": frozenset({"kernel/cgroup/rstat.c:flush"})})
KSFT = affected.MappedTest(kind="kselftest", units={
    "test_core": frozenset({"kernel/cgroup/cgroup.c:cgroup_mkdir"}),
    "test_memcontrol": frozenset({USAGE})})


def _diff(old: int, count: int = 1) -> str:
    return (f"diff --git a/{F} b/{F}\n--- a/{F}\n+++ b/{F}\n"
            f"@@ -{old}{'' if count == 1 else f',{count}'} +{old} @@\n")


def _decide(diff: str, *, blob: str = "b1", m: affected.Map | None = None,
            tests: tuple[str, ...] = ("memcg", "other", "kselftest:cgroup")
            ) -> affected.Decision:
    return affected.decide(m if m is not None else _map(memcg=MEMCG, other=OTHER,
                                                         **{"kselftest:cgroup": KSFT}),
                           affected.changed_lines(diff), {F: blob}, tests)


def test_a_change_in_one_function_runs_the_checks_that_reached_it() -> None:
    d = _decide(_diff(21))
    assert d.changed == (USAGE,) and not d.fallback
    by = {c.test: c for c in d.choices}
    # usage_check reached it; userspace reached no kernel code beyond the frame
    assert by["memcg"].units == ("usage_check", "userspace")
    assert "usage_check: reaches mm/bpf_memcontrol.c:bpf_mem_cgroup_usage" in by["memcg"].why
    assert "userspace: reaches no kernel code of its own" in by["memcg"].why
    assert by["other"].units == () and "not run" in by["other"].why
    assert by["kselftest:cgroup"].units == ("test_memcontrol",)


def test_a_check_added_after_the_map_runs() -> None:
    """A check the map does not know (added to the test's sources since it was recorded)
    may reach what changed: it runs, and says why; a clean-up that is new does not."""
    now = {"memcg": (*(c.name for c in TABLE), "new_check", "new_cleanup"),
           "other": ("a", "b", "c_new")}
    d = affected.decide(_map(memcg=MEMCG, other=OTHER, **{"kselftest:cgroup": KSFT}),
                        affected.changed_lines(_diff(21)), {F: "b1"},
                        ("memcg", "other", "kselftest:cgroup"), current=now)
    by = {c.test: c for c in d.choices}
    assert by["memcg"].units == ("usage_check", "userspace", "new_check")
    assert "new_check: not in the map (added after it was recorded): run" in by["memcg"].why
    # a test none of whose mapped checks reaches the change still runs its new one
    assert by["other"].units == ("c_new",) and "not in the map" in by["other"].why
    assert by["kselftest:cgroup"].units == ("test_memcontrol",)


def test_a_function_a_need_reached_runs_every_check_that_needs_it() -> None:
    by = {c.test: c for c in _decide(_diff(14)).choices}
    # setup reached bpf_get_mem_cgroup: what needs it rests on what it did
    assert by["memcg"].units == ("setup", "usage_check", "get_check", "oracle", "userspace")


def test_a_line_outside_any_function_runs_every_check_of_the_tests_reaching_the_file() -> None:
    d = _decide(_diff(25))
    assert d.changed == (f"{F}: line 25 outside any function",)
    by = {c.test: c for c in d.choices}
    assert by["memcg"].units is None and "outside any function" in by["memcg"].why
    assert by["other"].units == ()
    # an insertion after a function's closing brace is outside it too
    assert _decide(_diff(22, 0)).changed == (f"{F}: line 22 outside any function",)
    assert _decide(_diff(20, 0)).changed == (USAGE,)


def test_a_change_the_frame_reaches_runs_the_whole_test() -> None:
    frame = affected.MappedTest(kind="own", table=TABLE, frame=frozenset({USAGE}),
                                units=MEMCG.units)
    [c] = _decide(_diff(21), m=_map(memcg=frame), tests=("memcg",)).choices
    assert c.units is None and "set-up or clean-up" in c.why


def test_a_test_with_a_check_that_failed_alone_runs_whole_when_reached() -> None:
    failed = affected.MappedTest(kind="own", table=TABLE, units=MEMCG.units,
                                 failed=("get_check",))
    [c] = _decide(_diff(21), m=_map(memcg=failed), tests=("memcg",)).choices
    assert c.units is None and "did not pass alone" in c.why


@pytest.mark.parametrize(("diff", "blob", "m", "why"), [
    ("", "b1", None, "touches no file"),
    (_diff(21), "b1", "none", "no map"),
    (_diff(21), "b0", None, "another version of it"),
    ("diff --git a/mm/vmscan.c b/mm/vmscan.c\n--- a/mm/vmscan.c\n+++ b/mm/vmscan.c\n"
     "@@ -3 +3 @@\n", "b1", None, "mm/vmscan.c: not in the map"),
])
def test_every_test_whole_when_the_map_cannot_say(diff: str, blob: str, m: str | None,
                                                  why: str) -> None:
    found = None if m == "none" else _map(memcg=MEMCG)
    d = affected.decide(found, affected.changed_lines(diff), {F: blob}, ["memcg", "other"],
                        missing="no map for this cell")
    assert why in d.fallback
    assert [c.units for c in d.choices] == [None, None]


def test_the_map_reads_back_as_written() -> None:
    m = _map(memcg=MEMCG, other=OTHER, **{"kselftest:cgroup": KSFT})
    import json

    assert affected.map_from_json(json.dumps(affected.map_json(m))) == m
    with pytest.raises(affected.MapUnreadable):
        affected.map_from_json('{"version": 0}')


def test_reached_counts_a_line_of_the_function() -> None:
    spans = affected.function_spans(SOURCE)
    assert affected.reached(spans, {21: 3, 14: 0}) == frozenset({"bpf_mem_cgroup_usage"})
    assert affected.units_reached({F: affected.MappedFile(blob="b", spans=spans)}, [
        affected.UnitCounts(name="u", counts={F: {31: 1}})]) == {
        "u": frozenset({f"{F}:bpf_memcontrol_init"})}


def test_narrowing_the_tests_says_what_ran_and_why() -> None:
    refs = [resolve("memcg_kfuncs"), resolve("rstat_propagation"),
            resolve("kselftest:cgroup")]
    decision = affected.Decision(changed=(USAGE,), choices=(
        affected.Choice(test="memcg_kfuncs", units=("usage_matches_memory_current",),
                        why="usage_matches_memory_current: reaches x"),
        affected.Choice(test="rstat_propagation", units=(), why="not run"),
        affected.Choice(test="kselftest:cgroup", units=("test_memcontrol",), why="w")))
    out, told = driver.narrow(refs, decision, None)
    assert [(r.name, r.checks, r.only) for r in out] == [
        ("memcg_kfuncs", ("usage_matches_memory_current",), ()),
        ("kselftest:cgroup", (), ("test_memcontrol",))]
    assert out[0].checks_why == "usage_matches_memory_current: reaches x"
    assert told.tests[1] == AffectedTest(test="rstat_propagation", ran="none", why="not run")


def test_affected_narrows_a_selection_and_never_widens_it() -> None:
    refs = [resolve("memcg_kfuncs:usage_*,root_*"), resolve("rstat_propagation:flush_*"),
            resolve("kselftest:cgroup:test_core")]
    decision = affected.Decision(changed=(USAGE,), choices=(
        affected.Choice(test="memcg_kfuncs", units=("root_matches_css_read",
                                                     "usage_matches_memory_current",
                                                     "parent_includes_child"), why="w"),
        affected.Choice(test="rstat_propagation", units=("update_on_offlined_cpu_flushed",),
                        why="v"),
        affected.Choice(test=refs[2].name, units=("test_memcontrol",), why="k")))
    out, told = driver.narrow(refs, decision, None)
    assert refs[2].only == ("test_core",)
    assert [(r.name, r.checks) for r in out] == [
        ("memcg_kfuncs", ("root_matches_css_read", "usage_matches_memory_current"))]
    assert out[0].checks_why.startswith("among the checks asked (usage_*,root_*)")
    assert [(t.test, t.ran) for t in told.tests] == [
        ("memcg_kfuncs", "some"), ("rstat_propagation", "none"), (refs[2].name, "none")]
    assert "none of the checks among the checks asked (flush_*)" in told.tests[1].why


def test_spans_through_sparse_annotations_and_not_of_macros() -> None:
    text = ("static void flush_locked(struct cgroup *cgrp)\n"
            "\t__releases(&lock) __acquires(&lock)\n{\n\tx();\n}\n"
            "BTF_ID_FLAGS(func, a)\nDEFINE_BPF_ITER_FUNC(cgroup, struct bpf_iter_meta *meta,\n"
            "\t\t     struct cgroup *cgroup)\n\nint f(void);\n")
    assert affected.function_spans(text) == (affected.Span(name="flush_locked", start=1, end=5),)
