"""The cache's archives (kernel/archive.py, `harness cache export|import`): a run's kernel and
test builds exported and imported whole, by run or by entry name; archives that would
write outside the cache, or are cut short or foreign, import nothing."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
from pathlib import Path

import pytest

from harness import cli
from harness.kernel import archive as archives
from harness.kernel import cache
from harness.kernel.cache import CacheError
from tests.helpers.cachetree import entry, world


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    return tmp_path


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
    selftest = entry(root, "selftests/memcg_kfuncs-bbbb", 100, now)
    (selftest / "memcg_kfuncs").write_bytes(b"#!/bin/sh\n")
    (selftest / "memcg_kfuncs").chmod(0o755)
    (selftest / "vmlinux.h").symlink_to("memcg_kfuncs")  # a link within its entry
    os.utime(selftest, (now, now))
    entry(root, "kselftests/cgroup-cccc", 10, now)
    entry(root, "kselftest-build/cgroup-cccc", 10, now)
    entry(root, "test_progs/old", 10, now - 99999)  # used long before the run
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
        manifest = json.loads(tar.extractfile(archives.MANIFEST).read())  # type: ignore[union-attr]
    assert names[0] == archives.MANIFEST
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
    done = archives.export(archives.named_entries(("0000*", "test_progs/*")), archive)
    assert set(done.entries) == {"kernels/0000000000000000aaaa", "test_progs/old"}
    assert archive.read_bytes()[:2] == b"\x1f\x8b"  # gzip
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "fresh"))
    assert set(archives.import_archive(archive).added) == set(done.entries)


def test_export_says_what_it_cannot_export(root: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, run = _seeded(root, tmp_path)
    world(root)
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
        info = tarfile.TarInfo(archives.MANIFEST)
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
    with pytest.raises(CacheError, match=re.escape(said)):
        archives.import_archive(archive)
    assert not (root / "kernels").exists() or not list((root / "kernels").iterdir())
    assert not list(root.glob(".import-*"))
    assert not (tmp_path / "etc").exists() and not (root.parent / "x").exists()


def test_a_truncated_or_foreign_archive_imports_nothing(root: Path, tmp_path: Path) -> None:
    good = _archive(tmp_path / "good.tar", GOOD_KERNEL * 1 + [
        _file("kernels/k1/vmlinux", b"v" * 100_000)], ["kernels/k1"])
    cut = tmp_path / "cut.tar"
    cut.write_bytes(good.read_bytes()[:60_000])
    with pytest.raises(CacheError):
        archives.import_archive(cut)
    assert not (root / "kernels" / "k1").exists() and not list(root.glob(".import-*"))
    foreign = tmp_path / "foreign.tar"
    with tarfile.open(foreign, "w") as tar:
        tar.add(str(good), arcname="good.tar")
    with pytest.raises(CacheError, match="not an archive of the harness cache"):
        archives.import_archive(foreign)
    (tmp_path / "text.tar").write_text("not a tar")
    with pytest.raises(CacheError, match="not a readable archive"):
        archives.import_archive(tmp_path / "text.tar")
    assert set(archives.import_archive(good).added) == {"kernels/k1"}


def test_export_keeps_each_entry_whole_and_refuses_links_out(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file hard-linked into two entries goes into each whole (an entry never needs
    another); a symbolic link out of its entry is refused at export, not at import."""
    a = entry(root, "selftests/a-1", 10, time.time())
    b = entry(root, "selftests/b-2", 10, time.time())
    (a / "prog").write_bytes(b"elf")
    os.link(a / "prog", b / "prog")
    archive = tmp_path / "two.tar"
    archives.export(archives.named_entries(("selftests/*",)), archive)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "fresh"))
    assert set(archives.import_archive(archive).added) == {"selftests/a-1", "selftests/b-2"}
    assert (tmp_path / "fresh/selftests/b-2/prog").read_bytes() == b"elf"
    monkeypatch.setenv("HARNESS_CACHE", str(root))
    (a / "out").symlink_to("/etc/passwd")
    with pytest.raises(CacheError, match="outside its entry selftests/a-1"):
        archives.export(archives.named_entries(("selftests/a-1",)), tmp_path / "bad.tar")
    assert not (tmp_path / "bad.tar").exists() and not list(tmp_path.glob(".bad.tar.*"))


