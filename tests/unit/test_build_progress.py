"""Where an incremental kernel build's time goes (build.PhaseClock), told from make's own
lines as a real build printed them: a one-line change in mm/memcontrol.c on 6.12, its
build.log from a `harness run` (tests/golden/build/README.md)."""

from __future__ import annotations

from pathlib import Path

from harness.kernel import build

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "build"


def _timed(lines: list[str], cost: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """Feed the lines to a clock where each line's command takes cost[its first word]
    seconds (1 for others); the phases it reports."""
    now = [0.0]
    clock = build.PhaseClock(clock=lambda: now[0])
    for line in lines:
        clock.line(line)
        word = line.split()[0] if line.split() else ""
        now[0] += cost.get(word, 1.0)
    return clock.parts()


def test_an_incremental_612_build_is_told_by_phase() -> None:
    lines = (GOLDEN / "incremental-6.12-memcontrol.log").read_text().splitlines()
    cost = {"BTF": 50.0, "LD": 10.0}
    parts = _timed(lines, cost)
    names = [n for n, _ in parts]
    assert names == ["compile", "vmlinux.o", "kallsyms", "link", "btf", "vmlinux", "image"]
    spent = dict(parts)
    # every second told once
    assert sum(spent.values()) == sum(cost.get((ln.split() or [""])[0], 1.0) for ln in lines)
    assert spent["btf"] == 50.0  # then NM .tmp_vmlinux1.syms: kallsyms again
    assert spent["link"] == 2 * 10.0  # LD .tmp_vmlinux1 and .tmp_vmlinux2
    # the three KSYMS, their AS and two NM .tmp_vmlinuxN.syms, between the links
    assert spent["kallsyms"] == 8.0
    # LD vmlinux, BTFIDS, its warning line, NM System.map, SORTTAB
    assert spent["vmlinux"] == 10.0 + 4
    # LD vmlinux.o, then what follows it before the first kallsyms (MODPOST, ...)
    assert spent["vmlinux.o"] == 10.0 + 5


def test_a_build_with_nothing_to_link_is_all_compile() -> None:
    assert [n for n, _ in _timed(["  CC      mm/memcontrol.o"], {})] == ["compile"]


def test_a_cold_72_build_is_told_by_phase() -> None:
    """7.2's x86 compiles arch/x86/boot/startup/ into vmlinux early in the build (lines
    that look like the image's), and links vmlinux.unstripped before vmlinux."""
    lines = [ln for part in ("cold-7.2-part1.log", "cold-7.2-part2.log")
             for ln in (GOLDEN / part).read_text().splitlines()]
    assert any("arch/x86/boot/startup/" in ln for ln in lines[:1000])
    cost = {"CC": 2.0, "BTF": 50.0, "LD": 10.0}
    parts = dict(_timed(lines, cost))
    assert list(parts) == ["compile", "vmlinux.o", "kallsyms", "link", "btf", "vmlinux",
                           "image"]
    image_lines = [ln for ln in lines[next(i for i, ln in enumerate(lines)
                                           if ln.strip() == "GEN     modules.builtin") + 1:]]
    # the image: everything after vmlinux, from the setup code to bzImage
    assert parts["image"] == sum(cost.get((ln.split() or [""])[0], 1.0) for ln in image_lines)
    # LD vmlinux.unstripped, then BTFIDS, NM, SORTTAB, OBJCOPY and two GEN lines
    assert parts["vmlinux"] == 10.0 + 6
    assert parts["compile"] > 0.9 * sum(parts.values())
