from __future__ import annotations

from pathlib import Path

import pytest

from harness.splat import TAINT_LETTERS, find_splats, taint_flags_changed

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "dmesg"


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "warning.dmesg",
            [
                (
                    "WARNING",
                    "WARNING: CPU: 1 PID: 412 at lib/test_firmware.c:1123"
                    " trigger_batched_requests_store+0x4e/0x60 [test_firmware]",
                )
            ],
        ),
        (
            "null_deref_oops_panic.dmesg",
            [
                ("BUG", "BUG: kernel NULL pointer dereference, address: 0000000000000008"),
                ("PANIC", "Kernel panic - not syncing: Fatal exception"),
            ],
        ),
        ("kernel_bug_at.dmesg", [("BUG", "kernel BUG at mm/slub.c:553!")]),
        (
            "gpf_kasan_oops.dmesg",
            [
                (
                    "OOPS",
                    "Oops: general protection fault, probably for non-canonical address"
                    " 0xdffffc0000000002: 0000 [#1] PREEMPT SMP KASAN NOPTI",
                )
            ],
        ),
        (
            "kasan_slab_oob.dmesg",
            [
                (
                    "KASAN",
                    "BUG: KASAN: slab-out-of-bounds in kmalloc_oob_right+0x1c2/0x3f0 [kasan_test]",
                )
            ],
        ),
        (
            "ubsan_array_index.dmesg",
            [("UBSAN", "UBSAN: array-index-out-of-bounds in lib/test_ubsan.c:114:15")],
        ),
        (
            "lockdep_circular.dmesg",
            [("LOCKDEP", "WARNING: possible circular locking dependency detected")],
        ),
        ("lockdep_recursive.dmesg", [("LOCKDEP", "WARNING: possible recursive locking detected")]),
        ("rcu_stall.dmesg", [("RCU_STALL", "rcu: INFO: rcu_preempt self-detected stall on CPU")]),
        (
            "hung_task.dmesg",
            [
                ("HUNG_TASK", "INFO: task kworker/0:2:88 blocked for more than 30 seconds."),
                ("HUNG_TASK", "INFO: task cat:512 blocked for more than 30 seconds."),
            ],
        ),
        (
            "soft_lockup.dmesg",
            [("SOFT_LOCKUP", "watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [spin_test:455]")],
        ),
        (
            "panic_on_warn.dmesg",
            [
                (
                    "WARNING",
                    "WARNING: CPU: 0 PID: 1 at drivers/base/core.c:2511 device_release+0x8a/0xa0",
                ),
                ("PANIC", "Kernel panic - not syncing: kernel: panic_on_warn set ..."),
            ],
        ),
        ("clean_boot.dmesg", []),
    ],
)
def test_golden_kinds_and_titles(name: str, expected: list[tuple[str, str]]) -> None:
    assert [(s.kind, s.title) for s in find_splats(golden(name))] == expected


@pytest.mark.parametrize(
    ("name", "last_line"),
    [
        ("warning.dmesg", "---[ end trace 0000000000000000 ]---"),
        ("kernel_bug_at.dmesg", "---[ end trace 0000000000000000 ]---"),
        ("gpf_kasan_oops.dmesg", "---[ end trace 0000000000000000 ]---"),
        ("ubsan_array_index.dmesg", "---[ end trace ]---"),
        ("kasan_slab_oob.dmesg", "=" * 66),
        ("lockdep_circular.dmesg", " </TASK>"),
        ("rcu_stall.dmesg", " </TASK>"),
        ("soft_lockup.dmesg", " </TASK>"),
    ],
)
def test_golden_text_runs_from_title_to_end(name: str, last_line: str) -> None:
    (splat,) = find_splats(golden(name))
    lines = splat.text.split("\n")
    assert lines[0] == splat.title
    assert lines[-1] == last_line
    assert not any(line.startswith("[") and "] " in line[:16] for line in lines)  # no timestamps


def test_null_deref_and_its_oops_are_one_bug_splat() -> None:
    bug, panic = find_splats(golden("null_deref_oops_panic.dmesg"))
    assert bug.kind == "BUG"
    assert "Oops: Oops: 0000 [#1] PREEMPT SMP NOPTI" in bug.text
    assert "#PF: error_code(0x0000) - not-present page" in bug.text
    assert bug.text.endswith("---[ end trace 0000000000000000 ]---")
    assert "Kernel panic" not in bug.text
    assert panic.text.split("\n")[-1] == "---[ end Kernel panic - not syncing: Fatal exception ]---"


def test_kernel_bug_at_with_invalid_opcode_oops_is_one_splat() -> None:
    (splat,) = find_splats(golden("kernel_bug_at.dmesg"))
    assert splat.kind == "BUG"
    assert "Oops: invalid opcode: 0000 [#1] PREEMPT SMP NOPTI" in splat.text
    assert "note: kworker/1:1[77] exited" not in splat.text


def test_kasan_report_is_whole_and_not_a_bug() -> None:
    (splat,) = find_splats(golden("kasan_slab_oob.dmesg"))
    assert splat.kind == "KASAN"
    assert "Allocated by task 152:" in splat.text
    assert "Memory state around the buggy address:" in splat.text
    assert "ok 1 kmalloc_oob_right" not in splat.text


def test_gpf_kasan_hint_line_does_not_start_a_kasan_splat() -> None:
    (splat,) = find_splats(golden("gpf_kasan_oops.dmesg"))
    assert "KASAN: null-ptr-deref in range [0x0000000000000010-0x0000000000000017]" in splat.text


def test_panic_interrupting_a_warning_ends_it() -> None:
    warning, panic = find_splats(golden("panic_on_warn.dmesg"))
    assert warning.text.split("\n") == [warning.title, "Modules linked in:"]
    assert panic.text.startswith("Kernel panic - not syncing: kernel: panic_on_warn set ...")
    assert "check_panic_on_warn+0x4f/0x60" in panic.text


def test_lockdep_report_ends_after_its_backtrace() -> None:
    (splat,) = find_splats(golden("lockdep_circular.dmesg"))
    assert " *** DEADLOCK ***" in splat.text
    assert "-> #1 (lock_a){+.+.}-{3:3}:" in splat.text
    assert "lockdep_test: thread b done" not in splat.text


def test_hung_task_does_not_swallow_the_lock_dump() -> None:
    first, second = find_splats(golden("hung_task.dmesg"))
    assert first.text.split("\n")[-1] == " </TASK>"
    assert "INFO: task cat:512" not in first.text
    assert "Showing all locks held in the system:" not in second.text
    assert "RIP: 0033:0x7f8b1e2e21d2" in second.text  # user regs inside the trace


def test_unrelated_lines_after_a_warning_are_not_included() -> None:
    (splat,) = find_splats(golden("warning.dmesg"))
    assert "eth0: renamed from eth1" not in splat.text
    assert "kselftest: Running tests" not in splat.text
    assert "Tainted: [E]=UNSIGNED_MODULE" in splat.text


def test_heuristic_end_caps_a_splat_without_trace_or_marker() -> None:
    noise = "\n".join(f"[  {i:3d}.000000] unrelated line {i}" for i in range(200))
    text = "[    1.000000] BUG: scheduling while atomic: swapper/0/1/0x00000002\n" + noise
    (splat,) = find_splats(text)
    assert splat.kind == "BUG"
    assert len(splat.text.split("\n")) == 80


def test_missing_end_marker_ends_after_the_call_trace() -> None:
    text = "\n".join(
        [
            "[    2.0] WARNING: CPU: 0 PID: 1 at kernel/foo.c:1 foo+0x1/0x2",
            "[    2.0] Call Trace:",
            "[    2.0]  <TASK>",
            "[    2.0]  foo+0x1/0x2",
            "[    2.0]  </TASK>",
        ]
        + [f"[    3.{i:06d}] later message {i}" for i in range(30)]
        # A stray marker far below does not belong to this warning any more.
        + ["[    4.000000] ---[ end trace 0000000000000000 ]---"]
    )
    (splat,) = find_splats(text)
    assert splat.text.split("\n")[-1] == " </TASK>"


def test_splat_cut_off_by_end_of_text() -> None:
    text = "WARNING: CPU: 0 PID: 1 at kernel/foo.c:1 foo+0x1/0x2\nCall Trace:\n <TASK>\n f+0x1/0x2"
    (splat,) = find_splats(text)
    assert splat.text == text


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("Oops: 0000 [#1] SMP", "OOPS"),
        ("general protection fault: 0000 [#1] SMP PTI", "OOPS"),
        ("kernel BUG at mm/x.c:12!", "BUG"),
        ("BUG: sleeping function called from invalid context at kernel/locking/mutex.c:585", "BUG"),
        ("BUG: KASAN: use-after-free in foo+0x1/0x2", "KASAN"),
        ("UBSAN: shift-out-of-bounds in lib/test_ubsan.c:30:13", "UBSAN"),
        ("WARNING: inconsistent lock state", "LOCKDEP"),
        ("WARNING: suspicious RCU usage", "LOCKDEP"),
        ("[ BUG: Invalid wait context ]", "LOCKDEP"),
        ("rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:", "RCU_STALL"),
        ("INFO: rcu_sched self-detected stall on CPU", "RCU_STALL"),
        ("INFO: task X:123 blocked for more than 30 seconds.", "HUNG_TASK"),
        ("watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [a:1]", "SOFT_LOCKUP"),
        ("watchdog: Watchdog detected hard LOCKUP on cpu 1", "SOFT_LOCKUP"),
        ("Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)", "PANIC"),
    ],
)
def test_single_line_kinds(line: str, kind: str) -> None:
    (splat,) = find_splats(f"[   12.345678] {line}\n")
    assert (splat.kind, splat.title, splat.text) == (kind, line, line)


@pytest.mark.parametrize(
    "line",
    [
        "RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks",
        "WARNING: kernel not compiled with CPU_SRSO",
        "    # test_warning_message: BUG: inside a KUnit diagnostic",
        "Oops: something went wrong in userspace",
        "watchdog: hard LOCKUP detector disabled (nmi_watchdog=0)",
        "KASAN: null-ptr-deref in range [0x0000000000000010-0x0000000000000017]",
    ],
)
def test_lookalikes_are_not_splats(line: str) -> None:
    assert find_splats(f"[    1.000000] {line}\n") == []


def test_arm64_null_dereference_and_internal_error_are_one_splat() -> None:
    text = (
        "[    5.1] Unable to handle kernel NULL pointer dereference at virtual address 00000000\n"
        "[    5.1] Mem abort info:\n"
        "[    5.1] Internal error: Oops: 0000000096000005 [#1] PREEMPT SMP\n"
        "[    5.1] ---[ end trace 0000000000000000 ]---\n"
    )
    (splat,) = find_splats(text)
    assert splat.kind == "BUG"
    assert splat.text.split("\n")[-1] == "---[ end trace 0000000000000000 ]---"


@pytest.mark.parametrize(
    "prefix",
    ["", "[    1.234567] ", "[    1.234567][    T1] ", "<4>[    1.234567] ", "4,1021,1234567,-;"],
)
def test_console_prefixes_are_stripped(prefix: str) -> None:
    text = f"{prefix}UBSAN: array-index-out-of-bounds in a.c:1:2\n{prefix}---[ end trace ]---\n"
    (splat,) = find_splats(text)
    assert splat.title == "UBSAN: array-index-out-of-bounds in a.c:1:2"
    assert splat.text == "UBSAN: array-index-out-of-bounds in a.c:1:2\n---[ end trace ]---"


# --- the faulting function (the fingerprint of a splat across runs) ------------------


@pytest.mark.parametrize(
    ("golden", "kind", "function"),
    [
        ("warning.dmesg", "WARNING", "trigger_batched_requests_store"),  # "at FILE:LINE f+"
        ("kasan_slab_oob.dmesg", "KASAN", "kmalloc_oob_right"),  # "in f+"
        ("rcu_stall.dmesg", "RCU_STALL", "spin_forever"),  # RIP:
        ("soft_lockup.dmesg", "SOFT_LOCKUP", "spin_forever"),
        ("kernel_bug_at.dmesg", "BUG", "__slab_free"),
        ("ubsan_array_index.dmesg", "UBSAN", "test_ubsan_out_of_bounds"),  # past the reporter
        # past __schedule/__mutex_lock.constprop.0: where it waits, not how
        ("hung_task.dmesg", "HUNG_TASK", "deadlock_work_fn"),
        ("lockdep_circular.dmesg", "LOCKDEP", "thread_b_fn"),
    ],
)
def test_faulting_function(golden: str, kind: str, function: str) -> None:
    splat = find_splats((GOLDEN / golden).read_text())[0]
    assert splat.kind == kind
    assert splat.function == function
    assert splat.fingerprint == f"{kind}:{function}"
    assert splat.identity.startswith(f"{kind}:{function}:")


def test_clone_suffixes_are_not_part_of_the_function() -> None:
    text = ("INFO: task a:1 blocked for more than 30 seconds.\nCall Trace:\n <TASK>\n"
            " __schedule+0x1/0x2\n wait_it.isra.0+0x1/0x2\n other+0x1/0x2\n </TASK>\n")
    assert find_splats(text)[0].function == "wait_it"


def test_real_lkdtm_splats_name_the_lkdtm_function() -> None:
    splats = find_splats((GOLDEN.parent / "guest" / "faults" / "dmesg.txt").read_text())
    assert [(s.kind, s.function) for s in splats] == [("WARNING", "lkdtm_WARNING"),
                                                      ("BUG", "lkdtm_BUG")]


# --- taint ----------------------------------------------------------------------------


def test_taint_letters_follow_the_kernel_bit_order() -> None:
    assert TAINT_LETTERS == "PFSRMBUDAWCIOELKXTN"
    assert taint_flags_changed(0, (1 << 19) - 1) == list("PFSRMBUDAWCIOELKXTN")


@pytest.mark.parametrize(
    ("before", "after", "letters"),
    [
        (0, 1 << 9, ["W"]),
        (1 << 13, (1 << 13) | (1 << 9) | (1 << 18), ["W", "N"]),
        ((1 << 9) | (1 << 7), (1 << 9) | (1 << 7), []),
        (1 << 9, 0, []),
        (0, (1 << 7) | (1 << 14), ["D", "L"]),
        (0, 1 << 19, ["bit19"]),
    ],
)
def test_taint_flags_changed(before: int, after: int, letters: list[str]) -> None:
    assert taint_flags_changed(before, after) == letters


def test_taint_flags_changed_rejects_negative_masks() -> None:
    with pytest.raises(ValueError):
        taint_flags_changed(-1, 0)


@pytest.mark.parametrize("decoded", [
    # this layout: the build directory inside the tree, its path mapped away
    "memcg_stat_show (.harness-build/../mm/memcontrol.c:1234)",
    # addr2line joining an unmapped absolute build directory
    "memcg_stat_show (/root/.cache/harness/work/T/.harness-build/../mm/memcontrol.c:1234)",
    # the layout before: build/T next to work/T
    "memcg_stat_show (/root/.cache/harness/build/T/../../work/T/mm/memcontrol.c:1234)",
])
def test_decoded_paths_become_relative_to_the_tree(decoded: str) -> None:
    from dataclasses import replace

    from harness.splat import relative_to_tree
    (found,) = find_splats("WARNING: CPU: 0 PID: 1 at mm/memcontrol.c:1234 f+0x1/0x2\n"
                           "---[ end trace 0000000000000000 ]---\n")
    out = relative_to_tree(replace(found, decoded=decoded), "T")
    assert out.decoded == "memcg_stat_show (mm/memcontrol.c:1234)"


def test_every_tree_builds_in_itself_with_its_paths_mapped_away(tmp_path: Path) -> None:
    """What makes ccache hit across trees: kbuild sees srctree "..", the same in every tree,
    and the debug info has no worktree path (build.make_argv, paths.build_dir)."""
    from harness import build, paths
    tools = build.Toolchain(gcc="gcc", pahole="pahole", ccache=True)
    argvs = []
    for name in ("debian-6.12-base", "mytree-base+debug"):
        tree = tmp_path / "work" / name
        argv = build.make_argv(tree, paths.build_dir(tree), tools, "bzImage")
        assert paths.build_dir(tree).parent == tree
        assert f"KCFLAGS=-fdebug-prefix-map={tree}/=" in argv
        argvs.append([a.replace(str(tree), "TREE") for a in argv])
    assert argvs[0] == argvs[1]
    assert build.lock_name(tmp_path / "a") != build.lock_name(tmp_path / "b")
