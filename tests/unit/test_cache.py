"""`harness cache`: entries, least-recently-used eviction down to a limit, never while
another harness command uses the cache, sources only with their last worktree; and a
kernel evicted is built again by the next run (tests/unit/test_orchestrator.py)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from harness import cli
from harness.base import paths
from harness.kernel import cache


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    return tmp_path


def _entry(root: Path, rel: str, size: int, used: float, used_for: str = "") -> Path:
    d = root / rel
    d.mkdir(parents=True)
    (d / "blob").write_bytes(b"x" * size)
    if used_for:  # as note_use() writes it, at the time given
        (d / cache.USE_FILE).write_text(json.dumps({"last_used": used, "for": used_for}))
    else:
        os.utime(d, (used, used))
    return d


def _world(root: Path) -> None:
    now = time.time()
    _entry(root, "kernels/old", 4096 * 30, now - 9000, "debian:6.12 + series a")
    _entry(root, "kernels/new", 4096 * 30, now - 10, "debian:6.12 + series b")
    _entry(root, "src/git-linux-1", 4096 * 50, now - 99999)
    _entry(root, "work/git-linux-1-base", 4096 * 40, now - 8000, "git:/home/u/linux")
    _entry(root, "build/git-linux-1-base", 4096 * 40, now - 8000)


def test_entries_say_kind_size_last_use_and_what_for(root: Path) -> None:
    _world(root)
    by = {e.name: e for e in cache.entries()}
    assert {n: e.kind.value for n, e in by.items()} == {
        "old": "kernel", "new": "kernel", "git-linux-1-base": "worktree",
        "git-linux-1": "source"}
    wt = by["git-linux-1-base"]
    assert wt.paths == (root / "work/git-linux-1-base", root / "build/git-linux-1-base")
    assert wt.size >= 2 * 4096 * 40 and wt.used_for == "git:/home/u/linux"
    assert by["old"].used_for == "debian:6.12 + series a"
    before = time.time()
    cache.note_use(root / "kernels/old", "debian:6.1 + config base")
    again = {e.name: e for e in cache.entries()}["old"]
    assert again.used_for == "debian:6.1 + config base" and again.last_used >= before
    screen = cache.render(cache.entries(), cache.parse_size("512K"))
    assert screen.splitlines()[1].split()[:2] == ["kernel", cache.human(by["new"].size)]
    assert "\n4 entries, " in screen and "`harness cache prune` evicts" in screen
    assert "`harness cache prune`" not in cache.render(cache.entries(), cache.parse_size("1G"))


def test_prune_evicts_least_recently_used_and_a_source_only_after_its_worktrees(
        root: Path) -> None:
    _world(root)
    found = cache.entries()
    by = {e.name: e for e in found}
    # just under everything: the oldest evictable goes (the source is older but still has
    # its worktree)
    total = sum(e.size for e in found)
    assert [e.name for e in cache.plan_eviction(found, total - 1)] == ["old"]
    assert [e.name for e in cache.plan_eviction(found, by["new"].size)] == [
        "old", "git-linux-1-base", "git-linux-1"]
    assert cache.plan_eviction(found, total) == []
    done = cache.prune(by["new"].size)
    assert [e.name for e in done.evicted] == ["old", "git-linux-1-base", "git-linux-1"]
    assert [e.name for e in cache.entries()] == ["new"]
    assert not (root / "build/git-linux-1-base").exists()


def test_test_builds_count_toward_the_limit_and_go_least_recently_used_first(
        root: Path) -> None:
    # Once left out: ~1.5G of selftests/, test_progs/, perf/ builds over the 40G limit.
    _world(root)
    now = time.time()
    _entry(root, "test_progs/aaaa", 4096 * 60, now - 9500)
    _entry(root, "selftests/memcg_kfuncs-bbbb", 4096 * 5, now - 5)
    _entry(root, "kselftests/cgroup-cccc", 4096 * 5, now - 9600)
    _entry(root, "kselftest-build/cgroup-cccc", 4096 * 20, now - 20)
    _entry(root, "kselftests/net-dddd", 4096 * 5, now - 30)
    _entry(root, "kselftest-build/net-dddd", 4096 * 20, now - 9700)
    _entry(root, "kselftest-build/bpf-eeee", 4096 * 20, now - 9800)  # its install failed
    _entry(root, "perf/ffff", 4096 * 5, now - 40)
    _entry(root, "vmlinux-h/abcd", 4096 * 5, now - 50)
    (root / "test_progs/.steps").write_text("2500\n")  # a file, not an entry
    by = {e.name: e for e in cache.entries()}
    assert {n for n, e in by.items() if e.kind is cache.Kind.TESTS} == {
        "test_progs/aaaa", "selftests/memcg_kfuncs-bbbb", "kselftests/cgroup-cccc",
        "kselftests/net-dddd", "kselftests/bpf-eeee", "perf/ffff", "vmlinux-h/abcd"}
    ks = by["kselftests/cgroup-cccc"]
    # the install and its O= directory: one entry, as recent as the more recent of the two
    assert ks.paths == (root / "kselftests/cgroup-cccc", root / "kselftest-build/cgroup-cccc")
    assert ks.size >= 4096 * 25 and now - 21 <= ks.last_used <= now - 19
    assert now - 31 <= by["kselftests/net-dddd"].last_used <= now - 29
    assert by["kselftests/bpf-eeee"].paths == (root / "kselftest-build/bpf-eeee",)
    total = sum(e.size for e in by.values())
    assert [e.name for e in cache.plan_eviction(list(by.values()), total - 1)] == [
        "kselftests/bpf-eeee"]
    assert [e.name for e in cache.plan_eviction(list(by.values()), total - 4096 * 21)][
        :2] == ["kselftests/bpf-eeee", "test_progs/aaaa"]
    screen = cache.render(list(by.values()), total)
    listed, rest = screen.split("\nnot evicted: ")
    assert "test_progs/aaaa" in listed and "test_progs build" in listed
    assert not any(d in rest.split(" (ccache")[0] for d in (
        "test_progs", "selftests", "kselftest-build", "kselftests", "perf", "vmlinux-h"))
    # a use (paths.touch) makes it the most recent
    paths.touch(root / "test_progs/aaaa")
    again = {e.name: e for e in cache.entries()}
    assert again["test_progs/aaaa"].last_used >= now - 1
    assert cli.main(["cache", "drop", "kselftests/*"]) == 0
    assert [list((root / d).iterdir()) for d in ("kselftests", "kselftest-build")] == [[], []]
    assert (root / "test_progs/.steps").exists()


def test_nothing_is_evicted_while_another_harness_uses_the_cache(root: Path) -> None:
    _world(root)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from harness.kernel import cache\n"
         "with cache.in_use():\n    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "HARNESS_CACHE": str(root)})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        done = cache.prune(0)
        assert done.evicted == () and "another harness command" in done.skipped_reason
        assert len(cache.entries()) == 4
        assert cli.main(["cache", "drop", "old"]) == 1
        assert len(cache.entries()) == 4
    finally:
        holder.kill()
        holder.wait()
    assert cli.main(["cache", "drop", "old", "git-linux-1-*"]) == 0
    assert sorted(e.name for e in cache.entries()) == ["git-linux-1", "new"]


def test_the_cache_command_lists_prunes_dry_and_refuses_unknown_names(
        root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _world(root)
    assert cli.main(["cache"]) == 0
    assert "4 entries" in capsys.readouterr().out
    assert cli.main(["cache", "prune", "--max-size", "0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would evict kernel old (") and "4 entries would evict" in out
    assert len(cache.entries()) == 4
    assert cli.main(["cache", "drop", "nope-*"]) == 2
    assert "no cache entry is named nope-*" in capsys.readouterr().err
    assert cli.main(["cache", "prune", "--max-size", "lots"]) == 2


@pytest.mark.parametrize("text, size", [("40G", 40 << 30), ("512M", 512 << 20), ("0", 0),
                                        ("1.5T", int(1.5 * (1 << 40))), ("2GiB", 2 << 30)])
def test_sizes(text: str, size: int) -> None:
    assert cache.parse_size(text) == size


def test_a_kselftest_build_found_again_is_touched_under_one_flat_name(
        root: Path, tmp_path: Path) -> None:
    # A reuse must refresh the entry's last use (else the build in use goes first), and a
    # nested target ("net/forwarding") must be one entry, not a kselftests/net directory.
    from harness.testkinds import kselftest
    tree = tmp_path / "tree"
    tree.mkdir()
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    (tree / "Makefile").write_text("all:\n")
    subprocess.run(["git", "-C", str(tree), "add", "Makefile"], check=True)
    subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "t"], check=True)
    tree_id = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD^{tree}"],
                             check=True, capture_output=True, text=True).stdout.strip()
    old = time.time() - 9999
    built = _entry(root, f"kselftests/net_forwarding-{tree_id[:16]}", 10, old)
    (built / "run_kselftest.sh").write_text("#!/bin/sh\n")
    os.utime(built, (old, old))
    got = kselftest.build_kselftest("net/forwarding", tree, tmp_path / "o",
                                    log_dir=tmp_path)
    assert got == built
    entry = {e.name: e for e in cache.entries()}[f"kselftests/{built.name}"]
    assert entry.last_used >= time.time() - 60


# ---- export and import ----

KEY = "873cb4a246443b373eb6"


def _kernel(root: Path, key: str = KEY, release: str = "6.12.117+") -> Path:
    """A stored kernel as build._store leaves it, and its use as the pipeline notes it."""
    d = root / "kernels" / key
    d.mkdir(parents=True)
    for name, data in (("bzImage", b"bz" * 1000), ("vmlinux", b"\x7fELF" + b"v" * 5000),
                       ("config", b"CONFIG_BPF=y\n"), ("System.map", b"ffff T start\n")):
        (d / name).write_bytes(data)
    (d / "meta.json").write_text(json.dumps({"key": key, "release": release,
                                             "build_seconds": 600.0}))
    cache.note_use(d, "debian:6.12 + series memcg-kfuncs + config base")
    return d


def _seeded(root: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A cache with one stored kernel, the test builds a run used, one it did not, and
    the run's results.json (made where the cache was elsewhere: found by the key)."""
    now = time.time()
    kernel = _kernel(root)
    os.utime(kernel / "vmlinux", ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    _kernel(root, "0000000000000000aaaa")  # another kernel: not the run's
    selftest = _entry(root, "selftests/memcg_kfuncs-bbbb", 100, now)
    (selftest / "memcg_kfuncs").write_bytes(b"#!/bin/sh\n")
    (selftest / "memcg_kfuncs").chmod(0o755)
    (selftest / "vmlinux.h").symlink_to("memcg_kfuncs")  # a link within its entry
    os.utime(selftest, (now, now))
    _entry(root, "kselftests/cgroup-cccc", 10, now)
    _entry(root, "kselftest-build/cgroup-cccc", 10, now)
    _entry(root, "test_progs/old", 10, now - 99999)  # used long before the run
    header = root / "kselftest-h" / "6.12-abcd"
    header.mkdir(parents=True)
    (header / "kselftest.h").write_text("/* ktap */\n")
    (header / "origin").write_text("tools/testing/selftests/kselftest.h of Debian 6.12\n")
    run = tmp_path / "run"
    run.mkdir()
    doc = {"schema": 2, "run_id": "run",
           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now - 60)),
           "status": "PASS", "exit_code": 0,
           "cells": [{"cell": "6.12", "status": "PASS",
                      "image": f"/elsewhere/cache/kernels/{KEY}/bzImage"},
                     {"cell": "6.12-broken", "status": "BUILD_ERROR", "image": ""}]}
    (run / "results.json").write_text(json.dumps(doc))
    return kernel, run


RUN_ENTRIES = {f"kernels/{KEY}", "kselftest-h/6.12-abcd", "selftests/memcg_kfuncs-bbbb",
               "kselftests/cgroup-cccc", "kselftest-build/cgroup-cccc"}


def test_export_a_runs_kernel_and_test_builds_then_import_them_whole(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    kernel, run = _seeded(root, tmp_path)
    archive = tmp_path / "out" / "kernels.tar"
    assert cli.main(["cache", "export", "--run", str(run), "--cell", "6.12",
                     "-o", str(archive)]) == 0
    said = capsys.readouterr().out
    assert f"exported kernels/{KEY} (debian:6.12 + series memcg-kfuncs + config base)" in said
    assert said.splitlines()[-1].endswith(f": {archive}")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(cache.MANIFEST).read())  # type: ignore[union-attr]
    assert names[0] == cache.MANIFEST
    assert {e["name"] for e in manifest["entries"]} == RUN_ENTRIES
    assert not any(n.endswith(cache.USE_FILE) for n in names)
    assert not any("aaaa" in n or "test_progs" in n for n in names)
    # a new machine: another cache
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("HARNESS_CACHE", str(fresh))
    assert cli.main(["cache", "import", str(archive)]) == 0
    out = capsys.readouterr().out
    assert f"imported kernels/{KEY} (debian:6.12" in out and "5 entries imported" in out
    got = fresh / "kernels" / KEY
    for name in ("bzImage", "vmlinux", "config", "System.map", "meta.json"):
        assert (got / name).read_bytes() == (kernel / name).read_bytes()
    # vmlinux.h is cached by vmlinux's path and st_mtime_ns: kept to the nanosecond
    assert (got / "vmlinux").stat().st_mtime_ns == 1_700_000_000_123_456_789
    tests = fresh / "selftests" / "memcg_kfuncs-bbbb"
    assert os.access(tests / "memcg_kfuncs", os.X_OK)
    assert os.readlink(tests / "vmlinux.h") == "memcg_kfuncs"
    listed = {e.name: e for e in cache.entries()}
    assert listed[KEY].used_for.startswith("debian:6.12") and \
        listed[KEY].last_used >= time.time() - 60
    assert listed["selftests/memcg_kfuncs-bbbb"].last_used >= time.time() - 60
    assert not list(fresh.glob(".import-*"))
    # again: nothing replaced
    assert cli.main(["cache", "import", str(archive)]) == 0
    assert "0 entries imported, 5 already there" in capsys.readouterr().out


def test_export_by_entry_name_compressed(root: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _seeded(root, tmp_path)
    archive = tmp_path / "seed.tar.gz"
    done = cache.export(cache.named_entries(("0000*", "test_progs/*")), archive)
    assert set(done.entries) == {"kernels/0000000000000000aaaa", "test_progs/old"}
    assert archive.read_bytes()[:2] == b"\x1f\x8b"  # gzip
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "fresh"))
    assert set(cache.import_archive(archive).added) == set(done.entries)


def test_export_says_what_it_cannot_export(root: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, run = _seeded(root, tmp_path)
    _world(root)
    out = str(tmp_path / "x.tar")
    for argv, said in (
            (["--run", str(run)], "cell 6.12-broken of"),  # its build failed: no kernel
            (["--run", str(run), "--cell", "nope"], "no cell nope in the run(s)"),
            (["--cell", "6.12"], "--cell picks cells of the runs given"),
            (["--entry", "git-linux-1-base"], "worktrees and sources are not exported"),
            (["--entry", "nope"], "no cache entry is named nope"),
            ([], "needs what to export")):
        assert cli.main(["cache", "export", *argv, "-o", out]) == 2, argv
        assert said in capsys.readouterr().err, argv
        assert not Path(out).exists()
    assert cli.main(["cache", "export", "--entry", KEY, "-o", str(tmp_path / "x.zip")]) == 2
    assert cli.main(["cache", "list", "--run", str(run)]) == 2


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]],
             entries: list[str]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        manifest = json.dumps({"schema": 1, "entries": [{"name": n} for n in entries]})
        info = tarfile.TarInfo(cache.MANIFEST)
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest.encode()))
        for m, data in members:
            m.size = len(data) if m.isfile() else 0
            tar.addfile(m, io.BytesIO(data) if m.isfile() else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, b""


GOOD_KERNEL = [_file("kernels/k1/bzImage"), _file("kernels/k1/meta.json", b"{}")]


@pytest.mark.parametrize("members, entries, said", [
    ([*GOOD_KERNEL, _file("/etc/passwd")], ["kernels/k1"], "absolute path or goes up"),
    ([*GOOD_KERNEL, _file("kernels/k1/../../x")], ["kernels/k1"], "absolute path or goes up"),
    ([*GOOD_KERNEL, _link("kernels/k1/l", "../k2/bzImage")], ["kernels/k1"],
     "outside its entry"),
    ([*GOOD_KERNEL, _link("kernels/k1/l", "/etc/shadow")], ["kernels/k1"], "outside its entry"),
    ([*GOOD_KERNEL, _link("kernels/k1/h", "selftests/s/x", tarfile.LNKTYPE)], ["kernels/k1"],
     "outside its entry"),
    ([*GOOD_KERNEL, _file("src/debian-6.12/Makefile")], ["kernels/k1"], "in no entry"),
    (GOOD_KERNEL, ["kernels/k1", "work/x"], "not DIR/NAME"),
    (GOOD_KERNEL, ["kernels/k1", "selftests/s"], "listed but not in it"),
    # whole entries or none: the first entry is fine, the second has no kernel in it
    ([*GOOD_KERNEL, _file("kernels/k2/config")], ["kernels/k1", "kernels/k2"],
     "kernel kernels/k2 lacks its image"),
])
def test_an_archive_that_would_write_outside_or_half_is_refused_whole(
        root: Path, tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]],
        entries: list[str], said: str) -> None:
    archive = _archive(tmp_path / "bad.tar", members, entries)
    with pytest.raises(cache.CacheError, match=re.escape(said)):
        cache.import_archive(archive)
    assert not (root / "kernels").exists() or not list((root / "kernels").iterdir())
    assert not list(root.glob(".import-*"))
    assert not (tmp_path / "etc").exists() and not (root.parent / "x").exists()


def test_a_truncated_or_foreign_archive_imports_nothing(root: Path, tmp_path: Path) -> None:
    good = _archive(tmp_path / "good.tar", GOOD_KERNEL * 1 + [
        _file("kernels/k1/vmlinux", b"v" * 100_000)], ["kernels/k1"])
    cut = tmp_path / "cut.tar"
    cut.write_bytes(good.read_bytes()[:60_000])
    with pytest.raises(cache.CacheError):
        cache.import_archive(cut)
    assert not (root / "kernels" / "k1").exists() and not list(root.glob(".import-*"))
    foreign = tmp_path / "foreign.tar"
    with tarfile.open(foreign, "w") as tar:
        tar.add(str(good), arcname="good.tar")
    with pytest.raises(cache.CacheError, match="not an archive of the harness cache"):
        cache.import_archive(foreign)
    (tmp_path / "text.tar").write_text("not a tar")
    with pytest.raises(cache.CacheError, match="not a readable archive"):
        cache.import_archive(tmp_path / "text.tar")
    assert set(cache.import_archive(good).added) == {"kernels/k1"}


def test_export_keeps_each_entry_whole_and_refuses_links_out(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file hard-linked into two entries goes into each whole (an entry never needs
    another); a symbolic link out of its entry is refused at export, not at import."""
    a = _entry(root, "selftests/a-1", 10, time.time())
    b = _entry(root, "selftests/b-2", 10, time.time())
    (a / "prog").write_bytes(b"elf")
    os.link(a / "prog", b / "prog")
    archive = tmp_path / "two.tar"
    cache.export(cache.named_entries(("selftests/*",)), archive)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "fresh"))
    assert set(cache.import_archive(archive).added) == {"selftests/a-1", "selftests/b-2"}
    assert (tmp_path / "fresh/selftests/b-2/prog").read_bytes() == b"elf"
    monkeypatch.setenv("HARNESS_CACHE", str(root))
    (a / "out").symlink_to("/etc/passwd")
    with pytest.raises(cache.CacheError, match="outside its entry selftests/a-1"):
        cache.export(cache.named_entries(("selftests/a-1",)), tmp_path / "bad.tar")
    assert not (tmp_path / "bad.tar").exists() and not list(tmp_path.glob(".bad.tar.*"))


def test_a_size_is_measured_again_once_its_entry_was_built_into_or_it_is_old(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run prunes the cache when it ends: a walk of every worktree's files each time
    took seconds of the developer's loop. Sizes are remembered; an entry built into since
    (a build may have grown it) and a size an hour old are measured again, an entry only
    used is not."""
    now = time.time()
    tree = _entry(root, "work/debian-6.12-base", 4096 * 10, now - 100, "debian:6.12")
    (tree / "mm").mkdir()
    (tree / ".harness-build" / "mm").mkdir(parents=True)
    (tree / ".harness-build" / "vmlinux").write_bytes(b"v")
    kernel = _entry(root, "kernels/k", 4096 * 10, now - 100, "debian:6.12")
    (kernel / "sub").mkdir()
    for d in (tree, kernel, tree / ".harness-build", tree / ".harness-build" / "vmlinux"):
        os.utime(d, (now - 100, now - 100))
    size = {e.name: e.size for e in cache.entries()}
    # an object compiled, the build not yet linked: no build seen
    (tree / ".harness-build" / "mm" / "grown.o").write_bytes(b"x" * 4096 * 20)
    (kernel / "sub" / "grown").write_bytes(b"x" * 4096 * 20)
    assert {e.name: e.size for e in cache.entries()} == size  # remembered
    os.utime(tree / ".harness-build" / "vmlinux")  # a build relinked it, noting no use
    after = {e.name: e.size for e in cache.entries()}
    assert after["debian-6.12-base"] >= size["debian-6.12-base"] + 4096 * 20
    assert after["k"] == size["k"]  # not used or built since: still remembered
    cache.note_use(kernel, "debian:6.12 + series a")  # a use alone writes nothing
    assert {e.name: e.size for e in cache.entries()}["k"] == size["k"]
    (kernel / "sub" / "more").write_bytes(b"x" * 4096 * 20)
    monkeypatch.setattr(cache, "SIZE_TTL_S", 0.0)  # an hour later: measured again
    assert {e.name: e.size for e in cache.entries()}["k"] >= size["k"] + 2 * 4096 * 20
    # an unreadable memory of sizes is no error: everything is measured
    (root / cache.SIZES_FILE).write_text("{not json")
    assert {e.name: e.size for e in cache.entries()}["k"] >= size["k"] + 2 * 4096 * 20
