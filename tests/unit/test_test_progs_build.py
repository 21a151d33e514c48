"""What a failed test_progs build says: the fix for the one failure whose cause is the
host, not the tree (a kernel BTF made by a pahole that writes no kfunc declarations)."""

from __future__ import annotations

from harness.testkinds.test_progs import undeclared_kfuncs_fix

# Debian sid's 7.2.13 tree, its bpf selftests built against its kernel made with
# bookworm's pahole 1.24 (build-test_progs.log, 2026-11-29)
SEEN = [
    "bpf-harness-258532a3/libarena/include/bpf_arena_spin_lock.h:501:2: error: call to "
    "undeclared function 'bpf_preempt_disable'; ISO C99 and later do not support implicit "
    "function declarations [-Wimplicit-function-declaration]",
    "bpf-harness-258532a3/libarena/src/buddy.bpf.c:517:4: error: call to undeclared "
    "function 'bpf_stream_vprintk'; ISO C99 and later do not support",
    "make: *** [Makefile:839: libarena/libarena.skel.h] Error 2",
]


def test_undeclared_kfuncs_with_an_old_pahole_name_the_pahole_to_install() -> None:
    fix = undeclared_kfuncs_fix(SEEN, 124)
    assert "bpf_preempt_disable, bpf_stream_vprintk" in fix
    assert "pahole 1.24" in fix and "pahole >= 1.27" in fix
    assert "HARNESS_PAHOLE=debian:sid" in fix


def test_other_failures_and_new_pahole_have_no_such_fix() -> None:
    assert undeclared_kfuncs_fix(SEEN, 127) == ""  # then the cause is elsewhere
    assert undeclared_kfuncs_fix(SEEN, None) == ""  # no .config to say
    assert undeclared_kfuncs_fix(["x.c:1:1: error: unknown type name 'u32'"], 124) == ""


def test_a_permissive_build_says_what_it_left_out() -> None:
    from harness.testkinds.test_progs import skipped

    log = ["  CLNG-BPF [test_progs] cpumask_failure.bpf.o",
           "progs/cpumask_common.h:64:5: error: conflicting types for 'bpf_cpumask_populate'",
           "  SKIP-BPF     cpumask_failure.bpf.o", "  SKIP-BPF     cpumask_success.bpf.o",
           "  SKIP-SKEL    cpumask_failure.skel.h", "  SKIP-BPF     cpumask_failure.bpf.o",
           "  SKIP-TEST    cpumask.test.o", "  TEST-OBJ [test_progs] cgroup_iter.test.o"]
    assert skipped(log) == {"SKIP-BPF": ["cpumask_failure.bpf.o", "cpumask_success.bpf.o"],
                            "SKIP-SKEL": ["cpumask_failure.skel.h"],
                            "SKIP-TEST": ["cpumask.test.o"]}
    assert skipped(["  CLNG-BPF [test_progs] x.bpf.o"]) == {}
