"""A wrong kernel turns the run red, and the terminal says why: real builds, real boots.

patches/warn-boot-shutdown warns in an __init function and in a reboot notifier, outside
every selftest. Run without --test (and without the memcg series), the same run proves
that the default tests ran, that tests whose kernel features are absent are skipped
before the boot with the probe's reason, and that both warnings are caught, decoded and
attributed to boot and shutdown. The same kernel with panic_on_warn=1 panics at boot.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.drivers import matrix

from .conftest import harness

SERIES = "warn-boot-shutdown"


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def warn_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str, int]:
    out = tmp_path_factory.mktemp("warn") / "run"
    proc = harness("run", "--series", SERIES, "--out", str(out), timeout=1800)
    (out.parent / "harness-output.log").write_text(proc.stdout + "\n--- stderr ---\n"
                                                   + proc.stderr)
    return json.loads((out / "results.json").read_text()), proc.stdout, proc.returncode


def by_name(cell: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in cell["tests"]}


def test_warnings_at_boot_and_shutdown_fail_the_run(warn_run: tuple[Any, str, int]) -> None:
    data, screen, code = warn_run
    assert code == 1, screen[-3000:]
    cell = data["cells"][0]
    assert cell["status"] == "CRASHED"
    assert [p["state"] for p in cell["patches"]] == ["applied"]
    tests = by_name(cell)
    boot, shutdown = tests["boot"], tests["shutdown"]
    assert boot["status"] == "CRASHED" and shutdown["status"] == "CRASHED"
    assert [(s["kind"], s["function"]) for s in boot["splats"]] == [
        ("WARNING", "warn_at_boot_init")]
    assert [(s["kind"], s["function"]) for s in shutdown["splats"]] == [
        ("WARNING", "warn_on_power_off")]
    assert boot["taint"] == "W"
    # decoded with the tree's decode_stacktrace.sh, paths relative to the tree
    assert re.search(r"warn_at_boot_init \(kernel/reboot\.c:\d+\)", boot["splats"][0]["decoded"])
    assert re.search(r"warn_on_power_off \(kernel/reboot\.c:\d+\)",
                     shutdown["splats"][0]["decoded"])
    assert shutdown["log"].endswith("console.log")  # only the console saw it
    assert tests["setup"]["status"] == "PASS"
    # no test is blamed for them
    assert all(not t["splats"] for t in cell["tests"] if t["phase"] == "test")


def test_the_terminal_says_both_with_where_they_happened(
        warn_run: tuple[Any, str, int]) -> None:
    _, screen, _ = warn_run
    text = flat(screen)
    assert "CRASHED" in screen.splitlines()[1]
    assert "kernel WARNING in warn_at_boot_init() during boot" in text
    assert "kernel WARNING in warn_on_power_off() during shutdown" in text
    assert re.search(r"at warn_at_boot_init \(kernel/reboot\.c:\d+\)", text)
    assert re.search(r"at warn_on_power_off \(kernel/reboot\.c:\d+\)", text)
    assert "(exit 1)" in text


def test_without_test_the_default_tests_ran_or_were_skipped_for_a_reason(
        warn_run: tuple[Any, str, int]) -> None:
    data, screen, _ = warn_run
    assert screen.splitlines()[0].startswith(
        "testing debian:6.12 + series warn-boot-shutdown (cell adhoc): the tests of matrix "
        "cell 6.12 (no --test given)")
    cell = data["cells"][0]
    tests = {n: t for n, t in by_name(cell).items() if t["phase"] == "test"}
    default = {c.name: c for c in matrix.load()}["6.12"].tests
    own = [t for t in default if not t.startswith("kselftest:")]
    assert set(own) <= set(tests)
    assert any(n.startswith("kselftest-cgroup-") for n in tests)
    # this kernel lacks the memcg kfuncs (no memcg-kfuncs series): skipped before the boot,
    # with the probe's reason; the rstat tests and the kselftests ran
    for name in ("memcg_kfuncs", "memcg_kfuncs_bench"):
        assert tests[name]["status"] == "SKIP", tests[name]
        assert "kernel lacks bpf_get_mem_cgroup (kfunc), " in tests[name]["reason"]
        assert "log" not in tests[name]  # never booted
    ran = [t for n, t in tests.items() if t["status"] != "SKIP"]
    assert len(ran) >= 6
    for t in ran:
        assert t["status"] in ("PASS", "XFAIL"), (t["name"], t["status"], t["reason"])
    assert "skipped by the harness: the kernel lacks" in flat(screen)


def test_a_panic_at_boot_is_a_boot_error_with_the_panic_decoded(
        tmp_path: Path, warn_run: tuple[Any, str, int]) -> None:
    out = tmp_path / "run"
    proc = harness("run", "--series", SERIES, "--append", "panic_on_warn=1", "--boot-only",
                   "--out", str(out), timeout=900)
    assert proc.returncode == 2, proc.stdout[-3000:]
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["status"] == "BOOT_ERROR"
    assert "panicked during boot" in cell["error"]
    assert cell["retries"] == []  # a panic is not retried: it would panic again
    boot = by_name(cell)["boot"]
    assert boot["status"] == "BOOT_ERROR"
    panic = next(s for s in boot["splats"] if s["kind"] == "PANIC")
    assert "panic_on_warn" in panic["title"]
    assert re.search(r"warn_at_boot_init \(kernel/reboot\.c:\d+\)", panic["decoded"])
    text = flat(proc.stdout)
    assert "BOOT_ERROR" in text and "the kernel panicked during boot" in text
    assert re.search(r"PANIC in warn_at_boot_init\(\)", text)
    assert re.search(r"at warn_at_boot_init \(kernel/reboot\.c:\d+\)", text)
    assert "Traceback" not in proc.stdout + proc.stderr
