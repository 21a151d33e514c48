from __future__ import annotations

from pathlib import Path

import pytest

from harness.judge.splat import (
    TAINT_LETTERS,
    _strip_prefix,
    faulting_function,
    find_splats,
    taint_flags_changed,
)

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "dmesg"


def golden(name: str) -> str:
    return (GOLDEN / name).read_text()


LKDTM = [
    ("WARNING", "WARNING: CPU: 1 PID: 62 at drivers/misc/lkdtm/bugs.c:112 lkdtm_WARNING+0x11/0x14"),
    ("WARNING", "WARNING: CPU: 1 PID: 84 at drivers/misc/lkdtm/bugs.c:117 "
                "lkdtm_WARNING_MESSAGE+0x24/0x27"),
    ("BUG", "kernel BUG at drivers/misc/lkdtm/bugs.c:105!"),
    ("BUG", "BUG: kernel NULL pointer dereference, address: 0000000000000000"),
]
BOOT_WARN = "WARNING: CPU: 0 PID: 1 at kernel/reboot.c:1404 warn_at_boot_init+0x15/0x23"
SOFT = "watchdog: BUG: soft lockup - CPU#0 stuck for {}s! [sh:{}]"
STALL = "rcu: INFO: rcu_sched self-detected stall on CPU"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("recorded_lkdtm.dmesg", LKDTM),
        ("recorded_warn_boot_shutdown.console", [
            ("WARNING", BOOT_WARN),
            ("WARNING", "WARNING: CPU: 0 PID: 1 at kernel/reboot.c:1394 "
                        "warn_on_power_off+0x15/0x1a"),
        ]),
        ("recorded_warn_boot_shutdown_arm64.console", [
            ("WARNING", "WARNING: CPU: 1 PID: 1 at kernel/reboot.c:1404 "
                        "warn_at_boot_init+0x1c/0x48"),
            ("WARNING", "WARNING: CPU: 1 PID: 151 at kernel/reboot.c:1394 "
                        "warn_on_power_off+0x1c/0x38"),
        ]),
        ("recorded_panic_on_warn.console", [
            ("WARNING", BOOT_WARN),
            ("PANIC", "Kernel panic - not syncing: kernel: panic_on_warn set ..."),
        ]),
        ("recorded_soft_lockup.console", [
            ("RCU_STALL", STALL), ("SOFT_LOCKUP", SOFT.format(48, 65)),
            ("SOFT_LOCKUP", SOFT.format(74, 65)), ("RCU_STALL", STALL),
            ("SOFT_LOCKUP", SOFT.format(104, 65)), ("SOFT_LOCKUP", SOFT.format(130, 65)),
            ("RCU_STALL", STALL), ("SOFT_LOCKUP", SOFT.format(164, 65)),
        ]),
        ("recorded_hung_task.console", [
            ("HUNG_TASK", f"INFO: task sh:65 blocked for more than {n} seconds.")
            for n in (30, 61, 92, 122, 153)
        ]),
        ("recorded_debug_lkdtm.dmesg", [
            ("UBSAN", "UBSAN: array-index-out-of-bounds in ../drivers/misc/lkdtm/bugs.c:426:16"),
            ("KASAN", "BUG: KASAN: slab-out-of-bounds in lkdtm_SLAB_LINEAR_OVERFLOW+0x4c/0x61"),
            ("BUG", "BUG: kernel NULL pointer dereference, address: 0000000000000000"),
        ]),
        ("recorded_lockdep_held_lock.console", [
            ("LOCKDEP", "WARNING: lock held when returning to user space!"),
            ("BUG", "BUG: sleeping function called from invalid context at fs/file_table.c:452"),
            ("SOFT_LOCKUP", SOFT.format(26, 68)), ("RCU_STALL", STALL),
            ("SOFT_LOCKUP", SOFT.format(52, 68)), ("SOFT_LOCKUP", SOFT.format(78, 68)),
            ("RCU_STALL", STALL), ("SOFT_LOCKUP", SOFT.format(123, 68)),
        ]),
        ("recorded_lockdep_circular.dmesg", [
            ("LOCKDEP", "WARNING: possible circular locking dependency detected"),
        ]),
        ("recorded_null_deref_panic.console", [
            ("BUG", "BUG: kernel NULL pointer dereference, address: 0000000000000000"),
            ("PANIC", "Kernel panic - not syncing: Fatal exception"),
        ]),
        ("recorded_clean_boot.dmesg", []),
    ],
)
def test_recorded_kinds_and_titles(name: str, expected: list[tuple[str, str]]) -> None:
    assert [(s.kind, s.title) for s in find_splats(golden(name))] == expected


@pytest.mark.parametrize(
    ("name", "index", "last_line"),
    [
        ("recorded_lkdtm.dmesg", 0, "---[ end trace 0000000000000000 ]---"),
        ("recorded_lkdtm.dmesg", 2, "---[ end trace 0000000000000000 ]---"),
        ("recorded_debug_lkdtm.dmesg", 0, "---[ end trace ]---"),
        ("recorded_debug_lkdtm.dmesg", 1, "=" * 66),
        ("recorded_soft_lockup.console", 0, " </TASK>"),
        ("recorded_soft_lockup.console", 1, " </TASK>"),
        ("recorded_hung_task.console", 0, " </TASK>"),
        ("recorded_panic_on_warn.console", 0, " </TASK>"),
    ],
)
def test_recorded_text_runs_from_title_to_end(name: str, index: int, last_line: str) -> None:
    splat = find_splats(golden(name))[index]
    lines = splat.text.split("\n")
    assert lines[0] == splat.title
    assert lines[-1] == last_line
    assert not any(line.startswith("[") and "] " in line[:16] for line in lines)  # no timestamps


def test_a_null_deref_and_its_oops_are_one_bug_splat() -> None:
    bug = find_splats(golden("recorded_lkdtm.dmesg"))[3]
    assert "Oops: Oops: 0002 [#2] SMP" in bug.text
    assert "#PF: error_code(0x0002) - not-present page" in bug.text
    assert bug.text.endswith("---[ end trace 0000000000000000 ]---")


def test_a_panic_after_an_oops_is_its_own_splat() -> None:
    """oops=panic: the NULL dereference, then the panic it causes (the VM stops before
    the panic's end marker is printed)."""
    bug, panic = find_splats(golden("recorded_null_deref_panic.console"))
    assert "Kernel panic" not in bug.text
    assert bug.text.endswith("---[ end trace 0000000000000000 ]---")
    assert panic.text == "Kernel panic - not syncing: Fatal exception\nKernel Offset: disabled"


def test_lockdep_report_is_whole() -> None:
    (splat,) = find_splats(golden("recorded_lockdep_circular.dmesg"))
    assert "*** DEADLOCK ***" in splat.text
    assert "-> #1 (lkdtm_abba_b){+.+.}-{3:3}:" in splat.text
    assert splat.text.split("\n")[-1] == " </TASK>"
    assert splat.function == "lkdtm_LOCKDEP_ABBA"
    assert "harness: test-end" not in splat.text


def test_kernel_bug_at_with_its_invalid_opcode_oops_is_one_splat() -> None:
    bug = find_splats(golden("recorded_lkdtm.dmesg"))[2]
    assert "Oops: invalid opcode: 0000 [#1] SMP" in bug.text
    assert "harness: test-end" not in bug.text


def test_the_message_the_code_printed_is_kept() -> None:
    """WARN(1, fmt, ...)'s text sits between "cut here" and the WARNING line; the line
    printed at the same moment before a BUG's "cut here" is the code speaking too."""
    warn, warn_msg, bug, null = find_splats(golden("recorded_lkdtm.dmesg"))
    assert warn.message == ""  # WARN_ON(): nothing said
    assert warn_msg.message == "Warning message trigger count: 2"
    assert bug.message == "lkdtm: Performing direct entry BUG"
    assert null.message == ""  # a page fault prints no "cut here"
    boot, shutdown = find_splats(golden("recorded_warn_boot_shutdown.console"))
    assert boot.message == "reboot: deliberate warning at boot"
    assert shutdown.message == "reboot: deliberate warning at shutdown (action 3)"
    assert "reboot: deliberate" not in boot.text


def test_an_arm64_warning_is_whole_with_its_registers_and_call_trace() -> None:
    """arm64 prints its registers (pc, lr, x0-x29) and "Call trace:" with frames indented
    by one space: the splat runs to its end marker, and the function is the pc's when the
    title does not name it."""
    boot, shutdown = find_splats(golden("recorded_warn_boot_shutdown_arm64.console"))
    assert boot.message == "reboot: deliberate warning at boot"
    assert shutdown.message == "reboot: deliberate warning at shutdown (action 3)"
    lines = boot.text.splitlines()
    assert any(ln.endswith("Call trace:") for ln in lines)
    assert lines[-1].endswith("---[ end trace 0000000000000000 ]---")
    assert any("do_one_initcall+0x64/0x1a8" in ln for ln in lines)
    plain = [_strip_prefix(ln) for ln in lines]
    assert faulting_function(plain) == "warn_at_boot_init"  # the title names it
    # without the title and the trace's first frame: the pc line says where the CPU was
    untitled = [ln for ln in plain[1:] if not ln.startswith(" warn_at_boot_init")]
    assert faulting_function(untitled) == "warn_at_boot_init"
    # and without the pc line, the first frame of the call trace left
    assert faulting_function([ln for ln in untitled if not ln.startswith("pc :")]) == \
        "do_one_initcall"


def test_a_message_is_never_taken_from_the_splat_before() -> None:
    text = ("[ 1.0] ------------[ cut here ]------------\n"
            "[ 1.0] WARNING: CPU: 0 PID: 1 at a.c:1 f+0x1/0x2\n"
            "[ 1.0] ---[ end trace 0000000000000000 ]---\n"
            "[ 1.0] kernel BUG at b.c:2!\n")
    first, second = find_splats(text)
    assert (first.message, second.message) == ("", "")


def test_kasan_report_is_whole_and_not_a_bug() -> None:
    kasan = find_splats(golden("recorded_debug_lkdtm.dmesg"))[1]
    assert kasan.kind == "KASAN"
    assert "Allocated by task 85:" in kasan.text
    assert "Memory state around the buggy address:" in kasan.text
    assert "harness: test-end" not in kasan.text


def test_panic_after_a_warning_is_its_own_splat() -> None:
    warning, panic = find_splats(golden("recorded_panic_on_warn.console"))
    assert "Kernel panic" not in warning.text
    assert panic.text.startswith("Kernel panic - not syncing: kernel: panic_on_warn set ...")
    assert panic.function == "warn_at_boot_init"


def test_a_bug_without_end_marker_ends_with_its_trace() -> None:
    """might_sleep()'s BUG prints no end marker: the line after its trace (the next test's
    LKDTM line) is not part of it."""
    bug = find_splats(golden("recorded_lockdep_held_lock.console"))[1]
    assert bug.text.split("\n")[-1] == " </TASK>"
    assert "Performing direct entry" not in bug.text


def test_hung_task_reports_stay_apart() -> None:
    first, second, *_ = find_splats(golden("recorded_hung_task.console"))
    assert first.text.split("\n")[-1] == " </TASK>"
    assert "blocked for more than 61 seconds" not in first.text
    assert second.function == "lkdtm_HUNG_TASK"


def test_unrelated_lines_after_a_warning_are_not_included() -> None:
    warn = find_splats(golden("recorded_lkdtm.dmesg"))[0]
    assert "harness: test-end" not in warn.text
    assert "lkdtm: Performing direct entry" not in warn.text


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
    ("golden", "index", "kind", "function"),
    [
        ("recorded_lkdtm.dmesg", 0, "WARNING", "lkdtm_WARNING"),  # "at FILE:LINE f+"
        ("recorded_lkdtm.dmesg", 2, "BUG", "lkdtm_BUG"),  # RIP:
        ("recorded_debug_lkdtm.dmesg", 1, "KASAN", "lkdtm_SLAB_LINEAR_OVERFLOW"),  # "in f+"
        ("recorded_debug_lkdtm.dmesg", 0, "UBSAN", "lkdtm_ARRAY_BOUNDS"),  # past the reporter
        ("recorded_soft_lockup.console", 0, "RCU_STALL", "lkdtm_SOFTLOCKUP"),
        ("recorded_soft_lockup.console", 1, "SOFT_LOCKUP", "lkdtm_SOFTLOCKUP"),
        # past __schedule: where it waits, not how
        ("recorded_hung_task.console", 0, "HUNG_TASK", "lkdtm_HUNG_TASK"),
        ("recorded_lockdep_held_lock.console", 1, "BUG", "__might_resched"),
    ],
)
def test_faulting_function(golden: str, index: int, kind: str, function: str) -> None:
    splat = find_splats((GOLDEN / golden).read_text())[index]
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

    from harness.judge.splat import relative_to_tree
    (found,) = find_splats("WARNING: CPU: 0 PID: 1 at mm/memcontrol.c:1234 f+0x1/0x2\n"
                           "---[ end trace 0000000000000000 ]---\n")
    out = relative_to_tree(replace(found, decoded=decoded), "T")
    assert out.decoded == "memcg_stat_show (mm/memcontrol.c:1234)"


def test_every_tree_builds_in_itself_with_its_paths_mapped_away(tmp_path: Path) -> None:
    """What makes ccache hit across trees: kbuild sees srctree "..", the same in every tree,
    and the debug info has no worktree path (build.make_argv, paths.build_dir)."""
    from harness import target
    from harness.base import paths
    from harness.kernel import build
    tools = build.Tools(target=target.default(), compiler="gcc", pahole="pahole", ccache=True)
    argvs = []
    for name in ("debian-6.12-base", "mytree-base+debug"):
        tree = tmp_path / "work" / name
        argv = build.make_argv(tree, paths.build_dir(tree), tools, "bzImage")
        assert paths.build_dir(tree).parent == tree
        assert f"KCFLAGS=-fdebug-prefix-map={tree}/=" in argv
        argvs.append([a.replace(str(tree), "TREE") for a in argv])
    assert argvs[0] == argvs[1]
    assert build.lock_name(tmp_path / "a") != build.lock_name(tmp_path / "b")
