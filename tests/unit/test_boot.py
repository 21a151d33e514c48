"""The boot stage with QEMU faked at the process boundary (vm.run_guest writes what a guest
would): a first boot that never reached the runner is retried and what its kernel printed
still counts; a panic is not retried; the stage records the failure. The guest files of
the boot that works are the real ones of tests/golden/guest/clean-6.12."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.base.model import Accel, CellResult, KernelImage, Phase, Status
from harness.base.model import TestResult as Result
from harness.drivers import pipeline
from harness.drivers.matrix import Cell, Tier
from harness.drivers.stages import StageLog
from harness.guest import vm
from harness.judge import verdict

from .test_outcome import GOLDEN, plan_of

WARN_AT_BOOT = ("[    0.000000] Linux version 6.12.117+ (harness@harness)\n"
                "[    1.000000] ------------[ cut here ]------------\n"
                "[    1.000001] WARNING: CPU: 0 PID: 1 at kernel/reboot.c:1404 "
                "warn_at_boot_init+0x15/0x23\n"
                "[    1.000002] Call Trace:\n"
                "[    1.000003]  <TASK>\n"
                "[    1.000004]  do_one_initcall+0x45/0x1e0\n"
                "[    1.000005]  </TASK>\n"
                "[    1.000006] ---[ end trace 0000000000000000 ]---\n")
PANIC = ("[    0.000000] Linux version 6.12.117+ (harness@harness)\n"
         "[    1.000000] Kernel panic - not syncing: VFS: Unable to mount root fs\n"
         "[    1.000001] ---[ end Kernel panic - not syncing: VFS: Unable to mount root fs ]---\n")


def fake_guests(monkeypatch: pytest.MonkeyPatch, first_console: str) -> list[Path]:
    """run_guest: the first boot prints first_console and never starts the runner; later
    ones are the real clean boot of the golden."""
    boots: list[Path] = []

    def run_guest(boot: vm.Boot, *, console_log: Path, **_: Any) -> vm.GuestRun:
        guest = boot.rwdirs[0]
        boots.append(guest)
        if len(boots) == 1:
            console_log.write_text(first_console)
            return vm.GuestRun(returncode=255, timed_out=False, duration_s=1.0,
                               console_log=console_log, argv=("vng",))
        for f in (GOLDEN / "clean-6.12").iterdir():
            if f.name != "plan.tsv":
                shutil.copy(f, guest / f.name)
        return vm.GuestRun(returncode=255, timed_out=False, duration_s=30.0,
                           console_log=console_log, argv=("vng",))

    monkeypatch.setattr(vm, "run_guest", run_guest)
    monkeypatch.setattr(vm, "choose_accel", lambda *a, **k: (Accel.TCG, "test"))
    return boots


@dataclass
class Booted:
    """What the boot stage left: its stages, and the cell's facts as run_cell keeps them."""

    cell: Cell
    stages: StageLog
    facts: pipeline.CellFacts

    @property
    def retries(self) -> list[str]:
        return list(self.facts.retries)

    @property
    def tests(self) -> list[Result]:
        return list(self.facts.tests)

    def result(self, judged: verdict.CellVerdict) -> CellResult:
        return self.facts.result(self.cell, self.stages, judged)


def boot(tmp_path: Path) -> tuple[Booted, Exception | None]:
    cell = Cell(name="c", tier=Tier.DEFAULT, kernel="debian:6.12")
    run = Booted(cell=cell, stages=StageLog("c"), facts=pipeline.CellFacts())
    kernel = KernelImage(boot_image=tmp_path / "bzImage", vmlinux=None, config=None,
                         version="6.12.117+", arch="x86_64", toolchain="gcc")
    try:
        pipeline._drive(pipeline._boot_and_test(
            cell, kernel, tuple(plan_of(GOLDEN / "clean-6.12")), (), tmp_path, run.stages,
            pipeline.RunOptions(), Accel.TCG), run.facts)
    except vm.BootError as exc:
        return run, exc
    return run, None


def test_a_failed_first_boot_is_retried_and_its_splat_still_counts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    boots = fake_guests(monkeypatch, WARN_AT_BOOT)
    run, error = boot(tmp_path)
    assert error is None
    assert [b.name for b in boots] == ["guest", "guest-2"]
    assert run.retries and "never started the test runner" in run.retries[0]
    stages = [(s.stage, s.status) for s in run.stages.stages]
    assert stages == [("accel", Status.PASS), ("boot+tests", Status.BOOT_ERROR),
                      ("boot+tests (attempt 2)", Status.PASS)]
    results = {r.name: r for r in run.tests}
    first = results["boot"].splats
    assert [(s.function, s.where) for s in first] == [
        ("warn_at_boot_init", "first boot (failed; booted again)")]
    judged = verdict.judge(run.tests, kernel_version="6.12.117+",
                           expectations=verdict.Expectations(), rules=verdict.CellRules())
    assert judged.status is Status.CRASHED
    assert {r.name: r.status for r in judged.results}["boot"] is Status.CRASHED
    # everything else of the second boot is the real clean run
    assert all(r.status in (Status.PASS, Status.FAIL) for r in run.tests
               if r.phase is Phase.TEST)


def test_a_clean_failed_first_boot_costs_only_the_retry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_guests(monkeypatch, "[    0.000000] Linux version 6.12.117+\n")
    run, error = boot(tmp_path)
    assert error is None and len(run.retries) == 1
    assert {r.name: r for r in run.tests}["boot"].splats == ()


def test_a_panic_at_boot_is_not_retried_and_the_stage_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    boots = fake_guests(monkeypatch, PANIC)
    run, error = boot(tmp_path)
    assert isinstance(error, vm.BootError)
    assert "panicked during boot" in str(error) and "console.log" in str(error)
    assert len(boots) == 1 and run.retries == []
    last = run.stages.stages[-1]
    assert (last.stage, last.status) == ("boot+tests", Status.BOOT_ERROR)
    boot_result = {r.name: r for r in run.tests}["boot"]
    assert boot_result.status is Status.BOOT_ERROR
    assert [s.kind for s in boot_result.splats] == ["PANIC"]


def test_a_retried_boot_is_said_on_the_terminal(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.output import terminal

    fake_guests(monkeypatch, "[    0.000000] Linux version 6.12.117+\n")
    run, _ = boot(tmp_path)
    judged = verdict.judge(run.tests, kernel_version="6.12.117+",
                           expectations=verdict.Expectations(), rules=verdict.CellRules())
    text = " ".join(terminal.summary([run.result(judged)]).split())
    assert "retried: boot: the guest never started the test runner" in text
