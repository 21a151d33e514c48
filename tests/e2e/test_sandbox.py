"""A hostile series reaches nothing: real builds in bubblewrap, real boots on the guest's
own root (docs/run.md, "What a series can reach").

Two patches made here against the base the ci run built (Debian 6.12 + memcg-kfuncs):
- the top-level Makefile gets a line that reads a file in the user's home, writes a file
  there and connects to a listener on the host's loopback (bash's /dev/tcp and python);
- tools/testing/selftests/cgroup/test_core.c gets a constructor that reads the same file
  of the host from inside the guest and plants symlinks to it in the results directory
  (one where the harness reads a test's metrics).
Given with --patch (with a boot) and as a thread with --series mbox: (--build-only), both
runs build and test, and the secret is nowhere in the results or on the terminal, nothing
is written in the home, nothing connects; the logs show that each hostile line ran. Each
run is an incremental build on the ci tier's 6.12 kernel (tens of seconds).

Then the same tree is linked with and without the sandbox: one store key, one image.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.hostile import MAKEFILE_PROBE, Listener

from .conftest import harness

SECRET_DIR = Path.home()


@dataclass(frozen=True)
class Hostile:
    secret: Path  # a file in the user's home
    text: str  # its content: must appear nowhere
    written: Path  # what the Makefile tries to write in the home
    listener: Listener
    makefile_patch: Path
    kselftest_patch: Path


def _base_file(rel: str) -> str:
    """A file of the Debian 6.12 import (the base of the patches)."""
    cache = Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness")
    repos = sorted((cache / "src").glob("debian-6.12-*"))
    assert repos, "the 6.12 cell imports debian:6.12 first"
    return subprocess.run(["git", "-C", str(repos[-1]), "show", f"HEAD:{rel}"], check=True,
                          capture_output=True, text=True).stdout


def _mail(rel: str, before: str, after: str, subject: str) -> str:
    diff = "".join(difflib.unified_diff(before.splitlines(keepends=True),
                                        after.splitlines(keepends=True),
                                        f"a/{rel}", f"b/{rel}", n=3))
    return (f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: Hostile Contributor <hostile@example.org>\n"
            f"Date: Thu, 26 Nov 2026 10:00:00 +0000\n"
            f"Subject: [PATCH] {subject}\n\n"
            f"tests/e2e/test_sandbox.py: code that must reach nothing.\n\n"
            f"Signed-off-by: Hostile Contributor <hostile@example.org>\n---\n"
            f"diff --git a/{rel} b/{rel}\n{diff}-- \n2.39.5\n\n")


CONSTRUCTOR = """
/* tests/e2e/test_sandbox.py: a test that reaches for the host's files */
#include <unistd.h>
__attribute__((constructor)) static void harness_e2e_probe(void)
{{
	char buf[256] = "nothing";
	char path[4096];
	const char *out = getenv("HARNESS_OUT");
	const char *metrics = getenv("HARNESS_METRICS");
	FILE *f = fopen("{secret}", "r");

	if (f) {{
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
	}}
	printf("# harness-e2e-probe read: %s\\n", buf);
	if (out) {{
		snprintf(path, sizeof(path), "%s/leak.txt", out);
		if (symlink("{secret}", path))
			printf("# harness-e2e-probe: no symlink\\n");
	}}
	if (metrics) {{
		unlink(metrics);
		if (symlink("{secret}", metrics))
			printf("# harness-e2e-probe: no metrics symlink\\n");
	}}
	fflush(stdout);
}}
"""


@pytest.fixture(scope="module")
def built_612(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The ci tier's 6.12 cell built (from the store when the ci run built it already):
    its source imported, its worktree and build directory there to build on."""
    out = tmp_path_factory.mktemp("built-6.12") / "run"
    proc = harness("run", "--cell", "6.12", "--build-only", "--out", str(out), timeout=3600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    cell: dict[str, object] = json.loads((out / "results.json").read_text())["cells"][0]
    return cell


@pytest.fixture(scope="module")
def hostile(built_612: dict[str, object],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    """The secret, the listener and the two patches (on the 6.12 cell's base, built)."""
    tag = os.urandom(6).hex()
    secret = SECRET_DIR / f".harness-e2e-secret-{tag}"
    text = f"harness-e2e-secret-{os.urandom(12).hex()}"
    secret.write_text(text + "\n")
    secret.chmod(0o600)
    written = SECRET_DIR / f".harness-e2e-written-{tag}"
    listener = Listener()
    d = tmp_path_factory.mktemp("hostile")
    makefile = _base_file("Makefile")
    at = makefile.index("\n\n", makefile.index("NAME = ")) + 1  # after the version block
    hostile_makefile = makefile[:at] + MAKEFILE_PROBE.format(
        secret=secret, written=written, port=listener.port) + makefile[at:]
    mk = d / "0001-kbuild-reach-for-the-home.patch"
    mk.write_text(_mail("Makefile", makefile, hostile_makefile,
                        "kbuild: read the home, write there, connect out"))
    core_rel = "tools/testing/selftests/cgroup/test_core.c"
    core = _base_file(core_rel)
    ks = d / "0002-selftests-cgroup-reach-for-the-host.patch"
    ks.write_text(_mail(core_rel, core, core + CONSTRUCTOR.format(secret=secret),
                        "selftests/cgroup: read a file of the host's root"))
    try:
        yield Hostile(secret=secret, text=text, written=written, listener=listener,
                      makefile_patch=mk, kselftest_patch=ks)
    finally:
        listener.close()
        secret.unlink(missing_ok=True)
        written.unlink(missing_ok=True)


def _nowhere(h: Hostile, out: Path, screen: str) -> None:
    """The secret in no file of the results and not on the terminal; no link or special
    file left; nothing written in the home; nothing connected."""
    assert h.text not in screen
    for p in out.rglob("*"):
        assert not p.is_symlink(), f"{p} is a symlink"
        if p.is_file():
            assert h.text.encode() not in p.read_bytes(), f"the secret is in {p}"
        else:
            assert p.is_dir(), f"{p} is neither a file nor a directory"
    assert not h.written.exists()
    assert h.listener.connections == 0


@pytest.fixture(scope="module")
def patched_run(hostile: Hostile, tmp_path_factory: pytest.TempPathFactory,
                ) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("hostile-patch") / "run"
    proc = harness("run", "--kernel", "debian:6.12", "--series", "memcg-kfuncs",
                   "--patch", str(hostile.makefile_patch), "--patch",
                   str(hostile.kselftest_patch), "--test", "kselftest:cgroup:test_core",
                   "--out", str(out), timeout=1800)
    (out.parent / "harness-output.log").write_text(proc.stdout + "\n--- stderr ---\n"
                                                   + proc.stderr)
    return proc, out


def test_a_hostile_series_given_with_patch_builds_tests_and_reaches_nothing(
        hostile: Hostile, patched_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, out = patched_run
    screen = proc.stdout + proc.stderr
    data = json.loads((out / "results.json").read_text())
    cell = data["cells"][0]
    assert proc.returncode == 0, screen[-3000:]
    assert [p["state"] for p in cell["patches"]][-2:] == ["applied", "applied"]
    tests = {t["name"]: t for t in cell["tests"]}
    assert tests["kselftest-cgroup-test_core"]["status"] == "PASS"
    # each hostile line ran, and found nothing
    build_log = (out / "adhoc" / "build.log").read_text()
    assert "harness-probe: cat: " in build_log and "No such file" in build_log
    assert "connected-by" not in build_log
    output = (out / "adhoc" / "guest" / "kselftest-cgroup-test_core.out").read_text()
    assert "harness-e2e-probe read: nothing" in output
    # what the guest planted in its results was removed before anything read it, and said
    notes = " ".join(tests["boot"].get("notes", []))
    assert "leak.txt" in notes and "kselftest-cgroup-test_core.metrics.json" in notes
    _nowhere(hostile, out, screen)
    # the cell line and results.json say how the tree's code was kept in
    iso = cell["isolation"]
    assert iso["sandbox"]["enabled"] and iso["sandbox"]["tool"].startswith("bubblewrap")
    digest = iso["guest_root"]["hash"]
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    assert f"sandboxed build, guest root {digest}" in " ".join(proc.stdout.split())


def test_a_hostile_thread_given_with_series_mbox_reaches_nothing(
        hostile: Hostile, tmp_path: Path) -> None:
    from tests.helpers.mailthread import build_thread

    thread = build_thread([hostile.makefile_patch], tmp_path / "thread.mbox",
                          cover="reach for the home")
    out = tmp_path / "run"
    proc = harness("run", "--kernel", "debian:6.12", "--series", "memcg-kfuncs",
                   "--series", f"mbox:{thread}", "--test", "memcg_kfuncs", "--build-only",
                   "--out", str(out), timeout=1800)
    screen = proc.stdout + proc.stderr
    assert proc.returncode == 0, screen[-3000:]
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["patches"][-1]["state"] == "applied" and cell["status"] == "PASS"
    build_log = (out / "adhoc" / "build.log").read_text()
    assert "harness-probe: cat: " in build_log and "No such file" in build_log
    _nowhere(hostile, out, screen)
    assert cell["isolation"]["sandbox"]["enabled"]


def _ccache_results(log: Path) -> list[str]:
    return re.findall(r"Result: (\w+)", log.read_text()) if log.exists() else []


def test_the_same_kernel_has_one_store_key_and_one_image_with_and_without_the_sandbox(
        built_612: dict[str, object], tmp_path: Path) -> None:
    """The 6.12 cell's tree linked in the sandbox and without it, each time from the same
    objects with the image, vmlinux, the release (setlocalversion runs git) and two
    objects made again: the same bytes; the objects the second build compiled were
    ccache hits of what the first compiled (the same keys)."""
    from harness.base import proc, sandbox
    from harness.kernel import build, series, sources
    from harness.kernel.tree import KernelTree

    spec = sources.parse_spec("debian:6.12")
    tree = KernelTree.open(spec, ("base",), log_dir=tmp_path)
    stored = Path(str(built_612["image"]))
    remade = ("vmlinux", "arch/x86/boot/bzImage", "include/config/kernel.release",
              "mm/memcontrol.o", "kernel/cgroup/rstat.o")
    seen: dict[str, tuple[str, ...]] = {}
    with tree.locked():
        tree.apply(series.collect(("memcg-kfuncs",), [], series.base_name(spec)),
                   log_dir=tmp_path)
        tree.configure(log_dir=tmp_path)
        tools = build.tools(tree.target)
        key = build.kernel_key(tree.tree_id(), tree.build_dir / ".config", tools)
        assert key == stored.parent.name  # the ci run's kernel: one key for the tree
        for name, policy in (("sandboxed", sandbox.Policy()),
                             ("not sandboxed", sandbox.Policy(enabled=False,
                                                              why_off="--no-sandbox"))):
            log = paths_ccache_log(name)
            with sandbox.using(policy), tree.build_locked("the identity test"):
                for rel in remade:
                    (tree.build_dir / rel).unlink(missing_ok=True)
                res = proc.run(build.make_argv(tree.path, tree.build_dir, tools,
                                               tools.target.arch.make_target),
                               env={**build.make_env(tools), "CCACHE_LOGFILE": str(log)},
                               timeout=1800, log_path=tmp_path / f"{name}.log",
                               sandbox=build.reach(tree.path, tools))
                assert res.ok, res.tail(20)
            seen[name] = (
                *(hashlib.sha256((tree.build_dir / rel).read_bytes()).hexdigest()
                  for rel in remade),
                *_ccache_results(log))
            log.unlink(missing_ok=True)
    boxed, bare = seen["sandboxed"], seen["not sandboxed"]
    print(f"store key {key}; sha256 sandboxed / not sandboxed: " + ", ".join(
        f"{rel} {a[:16]} / {b[:16]}" for rel, a, b in zip(remade, boxed, bare, strict=False)))
    assert boxed[:len(remade)] == bare[:len(remade)]
    # ccache's outcomes in the second build: the two objects compiled again were hits of
    # what the first (the other side) had stored, and nothing missed
    outcomes = bare[len(remade):]
    assert "cache_miss" not in outcomes, outcomes
    assert sum(r in ("direct_cache_hit", "preprocessed_cache_hit") for r in outcomes) >= 2, \
        outcomes


def paths_ccache_log(name: str) -> Path:
    """A ccache log inside the compiler cache (the one directory of the cache that a
    sandboxed build writes besides its tree)."""
    from harness.base import paths

    d = paths.sub("ccache") / "e2e-logs"
    d.mkdir(exist_ok=True)
    return d / f"{name.replace(' ', '-')}.log"
