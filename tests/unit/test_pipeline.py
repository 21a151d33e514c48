"""The orchestrator end to end in seconds: `pipeline.run_cell` with fakes only at the
process boundary. A fake kernel tree (tests/fakes/kernel-tree: its Makefile makes the
config and the artefacts the harness reads; kernel/*.c are compiled for real) and a fake
`vng` on PATH (tests/fakes/bin/vng: plays the guest runner's side of the protocol on the
host). Everything between is the real harness: git, the series, kconfig checks, the
kernel store, the test backends, the guest protocol, the verdict, results.json.

The real thing (real kernel, real QEMU) is tests/e2e."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.base.model import (
    Accel,
    CellResult,
    FeatureKind,
    FeatureState,
    GuestSpec,
    RunResult,
    Status,
)
from harness.drivers import pipeline
from harness.drivers.matrix import Cell, Tier
from harness.output import results, terminal
from harness.testkinds import SelftestError
from tests.helpers.faketree import FAKES, committed_tree

RECORDED = (Path(__file__).resolve().parents[1] / "golden" / "recorded-runs" /
            "recorded-lkdtm-6.12.json")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, text=True,
                          capture_output=True).stdout


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache, a user's kernel tree (git), and the fake vng first on PATH."""
    root = tmp_path_factory.mktemp("orchestrator")
    committed_tree(root / "linux")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_CACHE", str(root / "cache"))
        mp.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
        mp.delenv("FAKE_VNG", raising=False)
        # a hung guest is killed in seconds, not after the real allowance
        mp.setattr(pipeline, "BOOT_ALLOWANCE_S", 3)
        mp.setattr(pipeline, "PER_TEST_ALLOWANCE_S", 0)
        yield root


def own_test(root: Path, name: str, script: str, *, timeout: int = 5,
             userspace: str = "", requires: tuple[str, ...] = (), repeat: int = 1) -> str:
    d = root / "tests" / name
    d.mkdir(parents=True, exist_ok=True)
    build = ""
    if userspace:
        (d / "prog.c").write_text(userspace)
        build = '[build]\nuserspace = ["prog.c"]\n'
    (d / "run.sh").write_text(script)
    needs = f"requires = {json.dumps(list(requires))}\n" if requires else ""
    (d / "test.toml").write_text(f'name = "{name}"\n{needs}{build}[run]\n'
                                 f'command = ["sh", "{d / "run.sh"}"]\ntimeout = {timeout}\n'
                                 f'repeat = {repeat}\n')
    return str(d)


KTAP_PASS = "echo 'TAP version 13'; echo '1..2'; echo 'ok 1 - first'; echo 'ok 2 - second'\n"
KTAP_FAIL = "echo 'TAP version 13'; echo '1..2'; echo 'ok 1 - first'; echo 'not ok 2 - second'\n"


def run(world: Path, out: str, *, tests: tuple[str, ...] = (), patches: tuple[str, ...] = (),
        configs: tuple[str, ...] = (str(FAKES / "fake.config"),), scenario: str = "",
        monkeypatch: pytest.MonkeyPatch | None = None) -> CellResult:
    if monkeypatch is not None:
        monkeypatch.setenv("FAKE_VNG", scenario)
        monkeypatch.setenv("FAKE_VNG_STATE", str(world / out / "vng-state"))
    tests = tests or (own_test(world, "fake_pass", KTAP_PASS),)
    cell = Cell(name=out, tier=Tier.DEFAULT, kernel=f"git:{world / 'linux'}", configs=configs,
                tests=tests, patches=patches)
    result = pipeline.run_cell(cell, world / out, accel=Accel.TCG)
    results.write_json(world / out / "results.json", RunResult(
        cells=(result,), exit_code=results.exit_code([result]), command=("test",)))
    return result


def stage_statuses(r: CellResult) -> list[tuple[str, str]]:
    return [(s.stage, s.status.value) for s in r.stages]


def test_a_clean_cell_passes_every_stage_and_its_tests(world: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(world, "clean", monkeypatch=monkeypatch)
    assert r.status is Status.PASS, r.error
    # the fake vmlinux has no BTF: the features stage lets the source verdicts stand, noted
    assert stage_statuses(r) == [(s, "PASS") for s in (
        "plan", "source", "series", "kconfig", "build", "features", "kselftests-build",
        "selftests-build", "accel", "boot+tests")]
    # (config options are not in BTF: the kernel's .config decides them)
    assert r.features and all("BTF unreadable" in f.note for f in r.features
                              if f.feature.kind is not FeatureKind.CONFIG)
    assert {f.feature.name: f.state for f in r.features
            if f.feature.kind is FeatureKind.CONFIG} == {
        "CGROUP_PERF": FeatureState.ABSENT, "FHANDLE": FeatureState.ABSENT,
        "DYNAMIC_FTRACE_WITH_DIRECT_CALLS": FeatureState.ABSENT}
    by = {t.name: t for t in r.tests}
    assert [by[n].status for n in ("boot", "fake_pass", "setup", "shutdown")] == [
        Status.PASS] * 4
    fake = by["fake_pass"].ktap
    assert fake is not None and [c.status for c in fake.cases] == [Status.PASS] * 2
    assert r.kernel_version == "6.99.0-fake"
    assert r.config is not None and "CONFIG_FAKE_FEATURE" in r.config.requested
    # the kernel went into the store; the summary says PASS
    assert Path(r.image).parent.parent == world / "cache" / "kernels"
    assert "PASS" in terminal.summary([r])


def test_the_second_run_takes_the_kernel_from_the_store(world: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    first = run(world, "store-1", monkeypatch=monkeypatch)
    caplog.set_level("INFO")
    second = run(world, "store-2", monkeypatch=monkeypatch)
    assert first.image == second.image and second.status is Status.PASS
    assert "already built" in caplog.text


def test_build_only_builds_the_kernel_and_tests_into_the_store_and_boots_nothing(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = Cell(name="built", tier=Tier.DEFAULT, kernel=f"git:{world / 'linux'}",
                configs=(str(FAKES / "fake.config"),),
                tests=(own_test(world, "fake_pass", KTAP_PASS),))
    r = pipeline.run_cell(cell, world / "built", accel=Accel.TCG,
                          options=pipeline.RunOptions(build_only=True))
    assert r.status is Status.PASS, r.error
    assert [s for s, _ in stage_statuses(r)] == [
        "plan", "source", "series", "kconfig", "build", "features", "kselftests-build",
        "selftests-build"]
    assert r.tests == () and any("--build-only" in n for n in r.notes)  # no guest: no boot
    again = run(world, "after", monkeypatch=monkeypatch)  # the same kernel, now tested
    assert again.status is Status.PASS and again.kernel_from_store is True


def test_a_kernel_evicted_from_the_cache_is_built_again(world: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    from harness.kernel import cache

    first = run(world, "evict-1", monkeypatch=monkeypatch)
    key = Path(first.image).parent.name
    entry = {e.name: e for e in cache.entries()}[key]
    assert entry.used_for == f"git:{world / 'linux'} + config {FAKES / 'fake.config'}"
    assert [e.name for e in cache.drop((key,)).evicted] == [key]
    caplog.set_level("INFO")
    caplog.clear()
    second = run(world, "evict-2", monkeypatch=monkeypatch)
    assert second.status is Status.PASS and second.image == first.image
    assert "already built" not in caplog.text and Path(second.image).exists()
    # and a worktree evicted (with its build directory) is checked out again
    trees = [e.name for e in cache.entries() if e.kind is cache.Kind.WORKTREE]
    assert trees and len(cache.drop(tuple(trees)).evicted) == len(trees)
    caplog.clear()
    third = run(world, "evict-3", monkeypatch=monkeypatch)
    assert third.status is Status.PASS and "creating worktree" in caplog.text


def test_results_json_has_the_keys_of_a_real_run(world: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key path this fake run writes, a real run wrote with the same JSON type
    (tests/golden/recorded-runs/README.md: a recorded results.json, not one this test makes)."""
    run(world, "schema", monkeypatch=monkeypatch)
    got = schema_of(json.loads((world / "schema" / "results.json").read_text()))
    # a key the real run wrote as null is one its source kind leaves empty (a Debian
    # source's `inputs.source.commit`, which the fake's git tree fills): there, presence
    real = schema_of(json.loads(RECORDED.read_text()), nulls=True)
    assert {k: (v, real.get(k)) for k, v in got.items()
            if real.get(k) not in (v, "null")} == {}, \
        f"not in {RECORDED.name} (record a real run again: see its README)"


def schema_of(data: Any, path: str = "$", nulls: bool = False) -> dict[str, str]:
    """key path -> JSON type; list items merged under [] (free-form maps not descended);
    a null value left out, or with `nulls` kept as "null" (unless a value of the same key
    path elsewhere gives its type)."""
    out: dict[str, str] = {}

    def merge(inner: dict[str, str]) -> None:
        out.update({k: v for k, v in inner.items() if v != "null" or k not in out})

    if isinstance(data, dict):
        out[path] = "object"
        if path.endswith((".extra", ".metrics", ".counts", ".parts")):
            return out
        for k, v in data.items():
            merge(schema_of(v, f"{path}.{k}", nulls))
    elif isinstance(data, list):
        out[path] = "array"
        for v in data:
            merge(schema_of(v, f"{path}[]", nulls))
    else:
        out[path] = {bool: "boolean", int: "number", float: "number", str: "string",
                     type(None): "null"}[type(data)]
        if out[path] == "null" and not nulls:
            del out[path]  # optional values: their presence as a key is what is checked
    return out


def test_a_failing_subtest_fails_the_cell(world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(world, "fail", tests=(own_test(world, "fake_fail", KTAP_FAIL),),
            monkeypatch=monkeypatch)
    assert r.status is Status.FAIL
    assert {t.name: t.status for t in r.tests}["fake_fail"] is Status.FAIL
    assert "not ok 2 - second" in terminal.summary([r]) or "second" in terminal.summary([r])


def test_a_patch_that_does_not_apply_is_a_patch_conflict_and_the_tree_is_untouched(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patch = world / "conflict.patch"
    patch.write_text("From 1 Mon Sep 17 00:00:00 2001\nFrom: T <t@t>\nSubject: [PATCH] x\n\n"
                     "---\n kernel/fake.c | 2 +-\n\n--- a/kernel/fake.c\n+++ b/kernel/fake.c\n"
                     "@@ -3,3 +3,3 @@ int fake_answer(void)\n {\n-\treturn 41;\n+\treturn 43;\n }\n"
                     "-- \n2.39\n")
    head = _git(world / "linux", "rev-parse", "HEAD")
    r = run(world, "conflict", patches=(str(patch),), monkeypatch=monkeypatch)
    assert r.status is Status.PATCH_CONFLICT
    assert stage_statuses(r)[-1] == ("series", "PATCH_CONFLICT")
    assert "conflict.patch" in r.error and "kernel/fake.c" in r.error
    assert [p.state.value for p in r.patches] == ["conflict"]
    assert _git(world / "linux", "rev-parse", "HEAD") == head
    assert _git(world / "linux", "status", "--porcelain") == ""


def _one_line_patch(world: Path, name: str, new: str) -> Path:
    linux = world / "linux"
    original = (linux / "kernel/fake.c").read_text()
    (linux / "kernel/fake.c").write_text(original.replace("\treturn 42;", new))
    diff = _git(linux, "diff")
    _git(linux, "checkout", "kernel/fake.c")
    patch = world / name
    patch.write_text(f"From 1 Mon Sep 17 00:00:00 2001\nFrom: T <t@t>\nSubject: [PATCH] "
                     f"{name}\n\n---\n{diff}-- \n2.39\n")
    return patch


def test_a_patch_that_breaks_the_build_is_a_build_error_with_the_compiler_line(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patch = _one_line_patch(world, "broken.patch", "\treturn 42 +;")
    r = run(world, "broken", patches=(str(patch),), monkeypatch=monkeypatch)
    assert r.status is Status.BUILD_ERROR
    assert stage_statuses(r)[-1] == ("build", "BUILD_ERROR")
    assert "fake.c" in r.error and "error" in r.error and "build.log" in r.error
    assert [p.state.value for p in r.patches] == ["applied"]
    # the report of a cell stopped before any test: its status, error and patch table
    from harness.output import report

    page = report.render(results.load_run(str(world / "broken"))[0], {})
    assert "BUILD_ERROR" in page and "fake.c" in page and "broken.patch" in page


def test_a_build_that_found_the_disk_full_is_a_set_up_error_not_a_verdict(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the build's last write meets ENOSPC for real (/dev/full), as on a full disk
    linux = world / "linux"
    original = (linux / "Makefile").read_text()
    (linux / "Makefile").write_text(original.replace(
        "\t@cp $(O)/vmlinux $(O)/arch/x86/boot/bzImage\n",
        "\t@cp $(O)/vmlinux $(O)/arch/x86/boot/bzImage\n\t@cp $(O)/vmlinux /dev/full\n"))
    diff = _git(linux, "diff")
    _git(linux, "checkout", "Makefile")
    patch = world / "full.patch"
    patch.write_text("From 1 Mon Sep 17 00:00:00 2001\nFrom: T <t@t>\nSubject: [PATCH] "
                     f"full\n\n---\n{diff}-- \n2.39\n")
    from harness.base import proc

    # the disk agrees: less than DISK_LOW free where the run writes
    monkeypatch.setattr(proc, "DISK_LOW", 2**60)
    r = run(world, "full", patches=(str(patch),), monkeypatch=monkeypatch)
    assert r.status is Status.SETUP_ERROR
    assert stage_statuses(r)[-1] == ("build", "SETUP_ERROR")
    assert r.error.startswith("a disk is full (cp: error writing '/dev/full': No space left "
                              "on device); now ")
    assert "kernel build failed" in r.error and "fix: free space there" in r.error


def test_an_option_kconfig_drops_is_a_config_error_naming_it(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frag = world / "unknown.config"
    frag.write_text("CONFIG_FAKE_FEATURE=y\nCONFIG_NO_SUCH_OPTION=y\n")
    r = run(world, "unknown-config", configs=(str(frag),), monkeypatch=monkeypatch)
    assert r.status is Status.CONFIG_ERROR
    assert stage_statuses(r)[-1] == ("kconfig", "CONFIG_ERROR")
    assert "CONFIG_NO_SUCH_OPTION" in r.error and "unknown.config:2" in r.error


def test_a_test_that_does_not_build_is_a_build_error(world: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    test = own_test(world, "fake_nobuild", KTAP_PASS, userspace="int main(void) { return }\n")
    r = run(world, "nobuild", tests=(test,), monkeypatch=monkeypatch)
    assert r.status is Status.BUILD_ERROR
    assert stage_statuses(r)[-1] == ("selftests-build", "BUILD_ERROR")
    assert "fake_nobuild" in r.error


def test_an_unknown_test_stops_the_cell_at_the_plan(world: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(world, "typo", tests=("no_such_test",), monkeypatch=monkeypatch)
    assert r.status is Status.SETUP_ERROR
    assert stage_statuses(r) == [("plan", "SETUP_ERROR")]
    assert "no_such_test" in r.error and "fix:" in r.error


def test_a_first_boot_that_never_reached_the_runner_is_booted_again(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(world, "retry", scenario="no-runner-once", monkeypatch=monkeypatch)
    assert r.status is Status.PASS, r.error
    assert [s for s, _ in stage_statuses(r)][-2:] == ["boot+tests", "boot+tests (attempt 2)"]
    assert stage_statuses(r)[-2][1] == "BOOT_ERROR"
    assert len(r.retries) == 1 and "booted again" in r.retries[0]
    assert (world / "retry" / "guest-2" / "runner-done").exists()


def test_a_panic_at_boot_is_a_boot_error_not_retried(world: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(world, "panic", scenario="panic", monkeypatch=monkeypatch)
    assert r.status is Status.BOOT_ERROR
    assert stage_statuses(r)[-1] == ("boot+tests", "BOOT_ERROR") and r.retries == ()
    boot = {t.name: t for t in r.tests}["boot"]
    assert [s.kind for s in boot.splats] == ["PANIC"]
    assert not (world / "panic" / "guest-2").exists()
    assert "Unable to mount root fs" in terminal.summary([r])


def test_a_warning_while_a_test_runs_makes_it_crashed(world: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(world, "warn", scenario="warn-in:fake_pass", monkeypatch=monkeypatch)
    assert r.status is Status.CRASHED
    fake = {t.name: t for t in r.tests}["fake_pass"]
    assert fake.status is Status.CRASHED and fake.taint == "W"
    assert [s.function for s in fake.splats] == ["fake_answer"]


def test_a_command_after_the_tests_is_judged_by_its_exit_status_and_its_splats(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`harness run ... -- CMD`: its own output file, its exit status, its splats, its
    directory and its guest size; the tests before it unaffected."""
    monkeypatch.setenv("FAKE_VNG", "warn-in:cmd-sh")
    monkeypatch.setenv("FAKE_VNG_STATE", str(world / "cmd" / "vng-state"))
    cell = Cell(name="cmd", tier=Tier.DEFAULT, kernel=f"git:{world / 'linux'}",
                configs=(str(FAKES / "fake.config"),),
                tests=(own_test(world, "fake_pass", KTAP_PASS),),
                guest=GuestSpec(memory="1G", cpus=1, append="fake.arg=1"),
                command=("sh", "-c", "pwd; echo said; exit 3"),
                command_cwd=str(world), command_timeout=20)
    r = pipeline.run_cell(cell, world / "cmd", accel=Accel.TCG)
    by = {t.name: t for t in r.tests}
    assert [t.name for t in r.tests if t.phase.value == "test"] == ["fake_pass", "cmd-sh"]
    assert by["fake_pass"].status is Status.PASS
    cmd = by["cmd-sh"]
    assert cmd.status is Status.CRASHED and cmd.exit_code == 3
    assert [s.function for s in cmd.splats] == ["fake_answer"] and cmd.taint == "W"
    assert cmd.log is not None and cmd.log.read_text() == f"{world}\nsaid\n"
    assert r.guest_seen is not None and r.guest_seen.cpus == 1
    assert r.guest_seen.memory_kb == 1024 * 1024 - 65536
    assert "fake.arg=1" in str(r.guest_seen.cmdline)
    # the command's output is on the terminal, under its result
    screen = terminal.summary([r]).splitlines()
    at = next(i for i, line in enumerate(screen) if line.lstrip().startswith("cmd-sh"))
    assert [ln.strip() for ln in screen[at:] if ln.strip().startswith("|")] == [
        f"| {world}", "| said"]
    assert "guest (--memory 1G --cpus 1 --append fake.arg=1): 1 CPU(s), 960 MiB, " \
        "/proc/cmdline has the appended arguments" in " ".join(terminal.summary([r]).split())
    monkeypatch.setenv("FAKE_VNG", "")
    ok = pipeline.run_cell(replace(cell, name="cmd-ok", command=("true",)), world / "cmd-ok",
                           accel=Accel.TCG)
    assert {t.name: t.status for t in ok.tests}["cmd-true"] is Status.PASS
    failed = pipeline.run_cell(replace(cell, name="cmd-fail", command=("false",)),
                               world / "cmd-fail", accel=Accel.TCG)
    assert {t.name: t.reason for t in failed.tests}["cmd-false"] == "exit 1"
    assert failed.status is Status.FAIL


def test_a_warning_at_shutdown_fails_the_shutdown(world: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(world, "warn-shutdown", scenario="warn-at-shutdown", monkeypatch=monkeypatch)
    assert r.status is Status.CRASHED
    by = {t.name: t for t in r.tests}
    assert by["fake_pass"].status is Status.PASS and by["shutdown"].status is Status.CRASHED


def test_a_hung_guest_is_killed_and_said(world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(world, "hang", scenario="hang", monkeypatch=monkeypatch)
    assert r.status is Status.BOOT_ERROR
    assert "timed out" in r.error or "never" in r.error
    # the kill path left no fake guest behind (of this world's: another xdist worker's
    # tests run fake guests of their own meanwhile)
    assert _fake_guests_of(world) == []


def _fake_guests_of(world: Path) -> list[str]:
    """The live fake vng processes whose environment names this world's cache."""
    found = subprocess.run(["pgrep", "-f", str(FAKES / "bin" / "vng")], capture_output=True,
                           text=True).stdout.split()
    mine = f"HARNESS_CACHE={world / 'cache'}".encode()
    out = []
    for pid in found:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # gone in between
            continue
        if mine in environ:
            out.append(pid)
    return out


@pytest.mark.parametrize("scenario", ["boot-silent", "boot-stall"])
def test_a_boot_without_progress_is_ended_early_judged_a_hang_and_not_retried(
        world: Path, monkeypatch: pytest.MonkeyPatch, scenario: str) -> None:
    """A boot silent for BOOT_WATCH's seconds (or reporting a stall) before the runner
    starts is ended then, not at the VM's timeout, and not booted again: a kernel hang is
    the kernel's, with its console's last lines."""
    from harness.base import proc
    from harness.guest import protocol
    from harness.judge import splat

    monkeypatch.setattr(pipeline, "BOOT_ALLOWANCE_S", 600)
    monkeypatch.setattr(pipeline, "BOOT_WATCH", proc.Quiet(
        seconds=2.0, until=protocol.READY, stop=splat.STALLS, grace_s=1.0))
    r = run(world, scenario, scenario=scenario, monkeypatch=monkeypatch)
    assert r.status is Status.BOOT_ERROR and r.retries == ()
    assert not (world / scenario / "guest-2").exists()
    boot = {t.name: t for t in r.tests}["boot"]
    stage = next(s for s in r.stages if s.stage == "boot+tests")
    assert stage.duration_s < 20, "ended by the watch, not by the VM's 600 s timeout"
    if scenario == "boot-silent":
        assert boot.reason == ("boot hang: no output for 2s before the test runner "
                               "started")
        assert [s.kind for s in boot.splats] == ["BOOT_HANG"]
        assert boot.output_tail is not None
        assert boot.output_tail[-1].endswith("fake_initcall: taking the lock")
        assert "fake_initcall: taking the lock" in boot.splats[0].text
    else:
        assert boot.reason.startswith("boot hang: a stall reported: ")
        assert "rcu_sched self-detected stall" in boot.reason
        # the kernel's own report is the splat (with what it printed after it)
        assert [s.kind for s in boot.splats] == ["RCU_STALL"]
        assert boot.output_tail is not None and "still spinning" in boot.output_tail[-1]
    text = terminal.summary([r])
    assert "boot hang" in text and boot.output_tail[-1].strip() in text
    console = (world / scenario / "guest" / "console.log").read_text()
    assert "[harness: killed: " in console


def test_a_signal_in_the_build_keeps_what_the_cell_had_learnt(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.kernel.tree import KernelTree

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt("SIGINT")

    monkeypatch.setattr(KernelTree, "build", interrupted)
    patch = _one_line_patch(world, "fine.patch", "\treturn 43;")
    with pytest.raises(pipeline.CellInterrupted) as stopped:
        run(world, "sigint", patches=(str(patch),), monkeypatch=monkeypatch)
    partial = stopped.value.partial
    assert stopped.value.where == "build" and partial.status is Status.INTERRUPTED
    assert [p.state.value for p in partial.patches] == ["applied"]
    assert partial.config is not None and partial.source.endswith("(clean)")
    assert stage_statuses(partial)[-1] == ("build", "INTERRUPTED")


def test_a_failed_boot_keeps_the_tests_the_harness_skipped(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a hook the fake tree does not define
    needy = own_test(world, "fake_needy", KTAP_PASS, requires=("bpf_rstat_flush",))
    r = run(world, "panic-skip", tests=(needy, own_test(world, "fake_pass", KTAP_PASS)),
            scenario="panic", monkeypatch=monkeypatch)
    assert r.status is Status.BOOT_ERROR
    by = {t.name: t for t in r.tests}
    assert by["fake_needy"].status is Status.SKIP and "bpf_rstat_flush" in by["fake_needy"].reason
    assert by["boot"].status is Status.BOOT_ERROR


def test_an_error_after_the_patches_applied_keeps_their_states(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patch = _one_line_patch(world, "fine2.patch", "\treturn 44;")
    r = run(world, "bad-target", tests=("kselftest:nope",), patches=(str(patch),),
            monkeypatch=monkeypatch)
    assert r.status is Status.SETUP_ERROR
    assert stage_statuses(r)[-1] == ("series", "SETUP_ERROR")
    assert "tools/testing/selftests/nope" in r.error
    assert [p.state.value for p in r.patches] == ["applied"]


def test_a_subdirectory_of_a_repository_is_not_a_kernel_tree(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = Cell(name="subdir", tier=Tier.DEFAULT, kernel=f"git:{world / 'linux' / 'kernel'}",
                configs=(str(FAKES / "fake.config"),),
                tests=(own_test(world, "fake_pass", KTAP_PASS),))
    r = pipeline.run_cell(cell, world / "subdir", accel=Accel.TCG)
    assert r.status is Status.SETUP_ERROR
    assert "is not the top of a git work tree" in r.error and "fix:" in r.error


def test_a_repeated_test_runs_each_attempt_apart_and_one_bad_attempt_fails_it(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every second attempt fails: the attempts are separate processes with separate output
    counter = world / "repeat-counter"
    script = (f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {counter}\n"
              "echo 'TAP version 13'; echo '1..1'\n"
              "if [ $((n % 2)) -eq 0 ]; then echo \"not ok 1 - attempt_$n\"; "
              "else echo \"ok 1 - attempt_$n\"; fi\n")
    r = run(world, "repeat", tests=(own_test(world, "every_other", script, repeat=4),),
            monkeypatch=monkeypatch)
    t = {t.name: t for t in r.tests}["every_other"]
    assert t.status is Status.FLAKY and r.status is Status.FLAKY
    assert t.reason.startswith("flaky: 2 of 4 attempts passed; attempt 2 FAIL, attempt 4 FAIL")
    assert [a.status for a in t.attempts] == [Status.PASS, Status.FAIL] * 2
    # each attempt printed its own KTAP, kept in its own log
    names = [a.ktap.cases[0].name for a in t.attempts if a.ktap is not None]
    assert names == ["attempt_1", "attempt_2", "attempt_3", "attempt_4"]
    assert len({a.log for a in t.attempts}) == 4
    data = json.loads((world / "repeat" / "results.json").read_text())
    saved = next(x for x in data["cells"][0]["tests"] if x["name"] == "every_other")
    assert [a["status"] for a in saved["attempts"]] == ["PASS", "FAIL", "PASS", "FAIL"]
    # the terminal says it too
    assert "flaky: 2 of 4 attempts passed" in terminal.summary([r])


def test_an_image_takes_the_kselftest_h_of_a_tree_of_its_version_or_says_how_to_get_one(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.testkinds import own

    monkeypatch.setenv("FAKE_VNG", "")
    tree_run = run(world, "ksft-tree", monkeypatch=monkeypatch)
    assert tree_run.kselftest_h.startswith("tools/testing/selftests/kselftest.h of ")
    shutil.rmtree(world / "cache" / "kselftest-h")
    with pytest.raises(SelftestError) as none:
        own.stored_kselftest_h("6.99.0-fake")
    assert "no kselftest.h of a 6.99 kernel tree" in str(none.value)
    assert "--boot-only" in none.value.fix
    # a tree cell captures it even when it runs no own test (boot only), for images
    boot = Cell(name="ksft-boot", tier=Tier.DEFAULT, kernel=f"git:{world / 'linux'}",
                configs=(str(FAKES / "fake.config"),), boot_only=True)
    assert pipeline.run_cell(boot, world / "ksft-boot", accel=Accel.TCG).status is Status.PASS
    header = own.stored_kselftest_h("6.99.0-fake")
    assert (header.directory / "kselftest.h").read_text() == (
        world / "linux" / own.KSELFTEST_H).read_text()
    assert header.origin.endswith("(same major version as the image)")
    # the fake bzImage carries no version `file` can read: said, with the fix, on the terminal
    cell = Cell(name="ksft-image", tier=Tier.DEFAULT, kernel=f"image:{tree_run.image}",
                tests=(own_test(world, "fake_pass", KTAP_PASS),))
    r = pipeline.run_cell(cell, world / "ksft-image", accel=Accel.TCG)
    assert r.status is Status.SETUP_ERROR
    assert "the image's kernel version is not known" in terminal.summary([r])
    assert "run the tests on the tree" in terminal.summary([r])


def _marker_patch(world: Path, name: str, marker: str) -> Path:
    """A patch that puts `marker` into the fake kernel's image (a string in kernel/fake.c)."""
    return _one_line_patch(world, name, f"\treturn 42;\n}}\nconst char fake_marker[] = "
                                        f"\"{marker}\";\nint fake_unused(void)\n{{\n\treturn 0;")


def test_baseline_runs_the_base_without_the_series_and_says_what_the_series_changed(
        world: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    from harness import cli

    monkeypatch.setenv("FAKE_VNG", "")
    # skips without the series' marker, passes with it (like the memcg kfunc tests)
    needs = own_test(world, "needs_series", "if grep -q SERIES-MARK \"$FAKE_VNG_KERNEL\"; then "
                     + KTAP_PASS + "else echo 'TAP version 13'; echo '1..1'; "
                     "echo 'ok 1 - feature # SKIP no marker'; fi\n")
    steady = own_test(world, "steady", KTAP_PASS)
    patch = _marker_patch(world, "mark.patch", "SERIES-MARK")
    out = world / "ab"
    argv = ["run", "--kernel", f"git:{world / 'linux'}", "--config", str(FAKES / "fake.config"),
            "--patch", str(patch), "--test", needs, "--test", steady, "--accel", "tcg",
            "--baseline", "--out", str(out)]
    assert cli.main(argv) == 0
    shown = capsys.readouterr().out
    data = json.loads((out / "results.json").read_text())
    assert [c["cell"] for c in data["cells"]] == ["adhoc.base", "adhoc"]
    base, series = data["cells"]
    assert [p["state"] for p in base["patches"]] == [] and series["patches"][0]["state"] == \
        "applied"
    assert {t["name"]: t["status"] for t in base["tests"] if t["phase"] == "test"} == \
        {"needs_series": "SKIP", "steady": "PASS"}
    compared = json.loads((out / "comparison.json").read_text())
    assert compared["regressed"] is False
    assert [(d["name"], d["change"]) for d in compared["differences"] if d["kind"] == "test"] \
        == [("needs_series", "now runs")]
    assert "what the series changed (--baseline)" in shown and "NOW RUNS" in shown
    assert "| now runs | test | needs_series | SKIP | PASS |" in (out / "comparison.md").read_text()

    # a series that breaks a test that passes on the base: exit 1, named
    breaks = own_test(world, "breaks", "if grep -q SERIES-BAD \"$FAKE_VNG_KERNEL\"; then "
                      + KTAP_FAIL + "else " + KTAP_PASS + "fi\n")
    bad = _marker_patch(world, "bad.patch", "SERIES-BAD")
    argv = [a if a != str(patch) else str(bad) for a in argv]
    argv[argv.index(needs)] = breaks
    assert cli.main(argv) == 1
    compared = json.loads((out / "comparison.json").read_text())
    assert compared["regressed"] is True
    assert ("breaks", "regressed") in [(d["name"], d["change"]) for d in compared["differences"]]


def test_baseline_needs_something_to_compare(world: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from harness import cli

    assert cli.main(["run", "--kernel", f"git:{world / 'linux'}", "--test",
                     own_test(world, "x", KTAP_PASS), "--baseline",
                     "--out", str(world / "nothing")]) == 2
    assert "apply no series or patch" in capsys.readouterr().err


def _series_of_commits(world: Path, name: str, edits: list[tuple[str, str]]) -> Path:
    """A series directory made by git format-patch: one commit per (subject, new line)."""
    work = world / f"{name}-work"
    shutil.rmtree(work, ignore_errors=True)
    _git(world, "clone", "-q", str(world / "linux"), str(work))
    for subject, line in edits:
        with (work / "kernel/fake.c").open("a") as f:
            f.write(line + "\n")
        _git(work, "-c", "user.name=T", "-c", "user.email=t@t", "commit", "-qam", subject)
    out = world / name
    shutil.rmtree(out, ignore_errors=True)
    _git(work, "format-patch", "-q", f"-{len(edits)}", "-o", str(out))
    (out / "series").write_text("".join(f"{p.name}\n" for p in sorted(out.glob("*.patch"))))
    return out


def test_bisect_names_the_first_bad_patch_stepping_over_a_skip(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.drivers import bisect, matrix

    monkeypatch.setenv("FAKE_VNG", "")
    d = _series_of_commits(world, "bisect-series", [
        ("fake: add the feature", 'const char m1[] = "FEATURE-IN";'),
        ("fake: break it", 'const char m2[] = "BROKEN-IN";'),
        ("fake: an unrelated change", 'const char m3[] = "UNRELATED";')])
    test_dir = own_test(world, "feature", (
        'k="$FAKE_VNG_KERNEL"; echo "TAP version 13"; echo "1..1"\n'
        'if ! grep -q FEATURE-IN "$k"; then echo "ok 1 - works # SKIP no feature"\n'
        'elif grep -q BROKEN-IN "$k"; then echo "not ok 1 - works"\n'
        'else echo "ok 1 - works"; fi\n'))
    cell = Cell(name="fake", tier=Tier.DEFAULT, kernel=f"git:{world / 'linux'}",
                series=(str(d),), configs=(str(FAKES / "fake.config"),))
    monkeypatch.setattr(matrix, "load", lambda *a, **k: [cell])
    request = bisect.Request(series=str(d), test=test_dir, accel=Accel.TCG)
    o = bisect.run(request, world / "bisect-out")
    assert o.first_bad == 2 and o.exit_code == 0
    assert [(s.prefix, s.status, s.verdict) for s in o.steps] == [
        (3, Status.FAIL, bisect.Verdict.BAD), (1, Status.PASS, bisect.Verdict.GOOD),
        (2, Status.FAIL, bisect.Verdict.BAD)]
    text = bisect.summary(o)
    assert "first bad patch: 2/3 0002-fake-break-it.patch" in text
    assert "failing checks: works" in text and "subject: fake: break it" in text
    # a bad status declared good: the whole series is not bad, nothing to bisect
    o = bisect.run(bisect.Request(series=str(d), test=test_dir, accel=Accel.TCG,
                                  good=frozenset({Status.PASS, Status.FAIL}),
                                  bad=frozenset({Status.CRASHED})), world / "bisect-out2")
    assert o.first_bad is None and "not bad: nothing to bisect" in o.message


def test_git_bisect_run_steps_over_an_unbuildable_commit_and_names_the_bad_one(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real `git bisect run harness run --bisect-exit ...` over a fake tree's history:
    good, unbuildable, good, bad, bad."""
    import sys

    monkeypatch.setenv("FAKE_VNG", "")
    tree = world / "bisect-linux"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(FAKES / "kernel-tree", tree)
    who = ("-c", "user.name=T", "-c", "user.email=t@t")
    _git(tree, "init", "-q", "-b", "main")
    _git(tree, "add", "-A")
    _git(tree, *who, "commit", "-qm", "base")
    fake = tree / "kernel/fake.c"
    commits = {}
    for subject, text in [("good one", "int good1;"), ("unbuildable", "int broken +;"),
                          ("fix the build, still good", ""),
                          ("bad", 'const char b[] = "BAD-MARK";'), ("bad too", "int later;")]:
        lines = [line for line in fake.read_text().splitlines() if "broken" not in line]
        fake.write_text("\n".join([*lines, text]) + "\n")
        _git(tree, *who, "commit", "-qam", subject)
        commits[subject] = _git(tree, "rev-parse", "HEAD").strip()
    test_dir = own_test(world, "bisected", 'echo "TAP version 13"; echo "1..1"\n'
                        'if grep -q BAD-MARK "$FAKE_VNG_KERNEL"; then echo "not ok 1 - t"; '
                        'else echo "ok 1 - t"; fi\n')
    script = world / "bisect-step.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m harness run --bisect-exit "
                      f"--kernel git:{tree} --config {FAKES / 'fake.config'} --test {test_dir} "
                      f"--accel tcg --out {world / 'bisect-step'}\n")
    script.chmod(0o755)
    _git(tree, "bisect", "start", commits["bad too"], _git(tree, "rev-list", "--max-parents=0",
                                                            "HEAD").strip())
    proc = subprocess.run(["git", "-C", str(tree), "bisect", "run", str(script)], text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    log = _git(tree, "bisect", "log")
    _git(tree, "bisect", "reset")
    assert f"{commits['bad']} is the first bad commit" in proc.stdout, proc.stdout + proc.stderr
    assert f"# first bad commit: [{commits['bad']}]" in log, log
    # on the unbuildable commit the step says "skip" (125), not "bad"; on the bad one 1
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    for subject, want in (("unbuildable", 125), ("bad", 1), ("good one", 0)):
        _git(tree, "checkout", "-q", commits[subject])
        assert subprocess.run([str(script)], capture_output=True, timeout=120,
                              env=env).returncode == want, subject
    _git(tree, "checkout", "-q", "main")


def test_bisect_exit_codes_stop_on_the_environment(world: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from harness import cli

    # an --out that is a file: the harness cannot run; a bisection must stop, not blame
    blocker = world / "a-file"
    blocker.write_text("x")
    argv = ["run", "--kernel", f"git:{world / 'linux'}", "--test",
            own_test(world, "y", KTAP_PASS), "--out", str(blocker)]
    assert cli.main(argv) == 2
    assert cli.main([*argv, "--bisect-exit"]) == 128
    capsys.readouterr()


def test_a_thread_from_the_list_applies_its_newest_revision_with_trailers(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--series mbox:FILE through b4, offline: a thread with v1 and v2 of a two-patch
    series and a Reviewed-by in a reply to v2's second patch. v2 is applied, the trailer is
    in its commit, the cover letter is not a patch, one result row per patch with its
    Message-Id; the same thread given to --patch does the same."""
    from tests.helpers.mailthread import REVIEWER, build_thread

    monkeypatch.setenv("FAKE_VNG", "")
    d = _series_of_commits(world, "thread-series", [
        ("fake: one", 'const char t1[] = "ONE";'), ("fake: two", 'const char t2[] = "TWO";')])
    thread = build_thread(sorted(d.glob("*.patch")), world / "thread.mbox")
    test = own_test(world, "thread_pass", KTAP_PASS)
    for name, cell in (
            ("thread", Cell(name="thread", tier=Tier.DEFAULT, kernel=f"git:{world / 'linux'}",
                            series=(f"mbox:{thread}",), configs=(str(FAKES / "fake.config"),),
                            tests=(test,))),
            ("thread-patch", Cell(name="thread-patch", tier=Tier.DEFAULT,
                                  kernel=f"git:{world / 'linux'}", patches=(str(thread),),
                                  configs=(str(FAKES / "fake.config"),), tests=(test,)))):
        r = pipeline.run_cell(cell, world / name, accel=Accel.TCG)
        assert r.status is Status.PASS, r.error
        assert [(p.subject, p.state.value, p.message_id) for p in r.patches] == [
            ("fake: one", "applied", "<harness-test-v2-1@example.org>"),
            ("fake: two", "applied", "<harness-test-v2-2@example.org>")]
    # the worktree of the fake config alone (other tests make worktrees of other configs)
    [worktree] = [w for w in (world / "cache" / "work").glob("git-linux-*")
                  if _git(w, "log", "-1", "--format=%s").startswith("fake: two")]
    body = _git(worktree, "log", "-1", "--format=%B")
    assert body.startswith("fake: two") and REVIEWER in body
    assert REVIEWER not in _git(worktree, "log", "-1", "--format=%B", "HEAD~1")
    results.write_json(world / "thread" / "results.json", RunResult(
        cells=(r,), exit_code=results.exit_code([r])))
    doc = json.loads((world / "thread" / "results.json").read_text())
    assert doc["cells"][0]["patches"][1]["message_id"] == "<harness-test-v2-2@example.org>"


def test_two_shards_merged_equal_one_unsharded_run(world: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """--shard 1/2 and 2/2 of a matrix (two cells sharing a kernel, one other), then
    harness merge: the same cells, statuses and exit code as one run of the whole."""
    from harness import cli

    monkeypatch.setenv("FAKE_VNG", "")
    passing = own_test(world, "shard_pass", KTAP_PASS)
    failing = own_test(world, "shard_fail", KTAP_FAIL)
    config = FAKES / "fake.config"
    m = world / "shard-matrix.toml"
    m.write_text("".join(
        f'[[cell]]\nname = "{name}"\ntier = "ci"\nkernel = "git:{world / "linux"}"\n'
        f'configs = ["{config}"{extra}]\ntests = ["{test}"]\n\n'
        for name, extra, test in (("s-a", "", passing), ("s-b", "", failing),
                                  ("s-c", f', "{config}"', passing))))
    base = ["run", "--matrix", str(m), "--tier", "ci", "--accel", "tcg"]
    whole = cli.main([*base, "--out", str(world / "sh-whole")])
    parts = [cli.main([*base, "--shard", f"{k}/2", "--out", str(world / f"sh-{k}")])
             for k in (1, 2)]
    merged = cli.main(["merge", str(world / "sh-1"), str(world / "sh-2"), "--out",
                       str(world / "sh-merged")])

    def statuses(run: str) -> dict[str, str]:
        doc = json.loads((world / run / "results.json").read_text())
        return {c["cell"]: c["status"] for c in doc["cells"]}

    assert statuses("sh-merged") == statuses("sh-whole") == {
        "s-a": "PASS", "s-b": "FAIL", "s-c": "PASS"}
    assert merged == whole == 1 and sorted(parts) == [0, 1]
    # the cells that share a kernel (s-a, s-b) ran in one shard
    assert sorted(map(sorted, (statuses("sh-1"), statuses("sh-2")))) == [["s-a", "s-b"],
                                                                         ["s-c"]]


def test_retry_failed_tells_a_flaky_test_from_a_failing_one(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--retry-failed 1: each failed test runs again in a fresh boot. One that fails the
    first time and passes after is FLAKY with the share of boots it failed in; one that
    fails every time stays FAIL; one that passed is not run again."""
    monkeypatch.setenv("FAKE_VNG", "")
    monkeypatch.setenv("FAKE_VNG_STATE", str(world / "retry" / "vng-state"))
    counter = world / "intermittent-runs"
    intermittent = own_test(world, "intermittent", (
        f'n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}\n'
        f'if [ "$n" -ge 1 ]; then\n{KTAP_PASS}else exit 1; fi\n'))
    always = own_test(world, "always_fails", "exit 3\n")
    passes = own_test(world, "fake_pass", KTAP_PASS)
    cell = Cell(name="retry", tier=Tier.DEFAULT, kernel=f"git:{world / 'linux'}",
                configs=(str(FAKES / "fake.config"),), tests=(intermittent, always, passes))
    r = pipeline.run_cell(cell, world / "retry", accel=Accel.TCG,
                          options=pipeline.RunOptions(retry_failed=1))
    by = {t.name: t for t in r.tests}
    assert by["intermittent"].status is Status.FLAKY
    assert by["intermittent"].reason.startswith("flaky: failed in 1 of 2 fresh boots")
    assert by["always_fails"].status is Status.FAIL
    assert "failed again in 1 more fresh boot(s): not flaky" in by["always_fails"].reason
    assert by["fake_pass"].status is Status.PASS
    assert counter.read_text().strip() == "2"  # ran in the first boot and in the retry
    assert ("retry-failed", "PASS") in stage_statuses(r)
    assert (world / "retry" / "guest-retry-1" / "always_fails.out").exists()
    assert not (world / "retry" / "guest-retry-1" / "fake_pass.out").exists()
    assert r.status is Status.FAIL
