"""`harness cache`: entries, least-recently-used eviction down to a limit, never while
another harness command uses the cache, sources only with their last worktree; and a
kernel evicted is built again by the next run (tests/unit/test_pipeline.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import cli
from harness.base import paths
from harness.kernel import cache
from tests.helpers import cachetree


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    return tmp_path


def test_entries_say_kind_size_last_use_and_what_for(root: Path) -> None:
    cachetree.world(root)
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
    cachetree.world(root)
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
    cachetree.world(root)
    now = time.time()
    cachetree.entry(root, "test_progs/aaaa", 4096 * 60, now - 9500)
    cachetree.entry(root, "selftests/memcg_kfuncs-bbbb", 4096 * 5, now - 5)
    cachetree.entry(root, "kselftests/cgroup-cccc", 4096 * 5, now - 9600)
    cachetree.entry(root, "kselftest-build/cgroup-cccc", 4096 * 20, now - 20)
    cachetree.entry(root, "kselftests/net-dddd", 4096 * 5, now - 30)
    cachetree.entry(root, "kselftest-build/net-dddd", 4096 * 20, now - 9700)
    cachetree.entry(root, "kselftest-build/bpf-eeee", 4096 * 20, now - 9800)  # its install failed
    cachetree.entry(root, "perf/ffff", 4096 * 5, now - 40)
    cachetree.entry(root, "vmlinux-h/abcd", 4096 * 5, now - 50)
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


def test_a_command_on_a_full_disk_first_evicts_what_was_used_least_recently(
        root: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """A shared disk can hold far less than the cache's limit leaves: before a command that
    may build takes the cache, entries go (least recently used first) until cache.ROOM is
    free; what was used in the last minutes stays; nothing goes when that would not make
    the room, and that is said."""
    cachetree.world(root)  # kernel "new" used 10 s ago, the others hours ago
    found = cache.entries()
    by = {e.name: e for e in found}
    now = time.time()
    # pure: enough free, nothing; short by one byte, the oldest evictable; short by all
    # that is old, all of it but the kernel used 10 s ago; short by more, nothing
    assert cache.plan_room(found, free=100, room=100, now=now) == []
    assert [e.name for e in cache.plan_room(found, free=99, room=100, now=now)] == ["old"]
    old = sum(e.size for e in found) - by["new"].size
    assert [e.name for e in cache.plan_room(found, free=0, room=old, now=now)] == [
        "old", "git-linux-1-base", "git-linux-1"]
    assert cache.plan_room(found, free=0, room=old + 1, now=now) == []
    # a disk with less free than ROOM, short by the oldest kernel's size: it goes, as the
    # harness's commands start
    monkeypatch.setattr(cache, "ROOM", 2**30)
    monkeypatch.setattr(cache, "free_under", lambda _root: 2**30 - by["old"].size)
    assert cli.main(["cache", "list"]) == 0  # not a command that writes the cache
    assert cli.main(["run", "--prebuilt", str(root / "no-run")]) == 2  # builds nothing
    assert len(cache.entries()) == 4
    capfd.readouterr()
    assert cli.main(["run", "--cell", "no-such-cell"]) == 2  # refused after making room
    assert sorted(e.name for e in cache.entries()) == ["git-linux-1", "git-linux-1-base",
                                                       "new"]
    said = capfd.readouterr().err
    assert f"1023.9M free under {root}, less than the 1.0G a build is given: evicted " \
           "kernel old before run (least recently used, 124K)" in said
    assert "a build may fail for space" not in said
    # evicting would not make the room: nothing goes, and that is said
    monkeypatch.setattr(cache, "free_under", lambda _root: 2**29)
    assert cli.main(["run", "--cell", "no-such-cell"]) == 2
    said = capfd.readouterr().err
    assert f"512.0M free under {root}, less than the 1.0G a build is given (evicting " \
           "all the cache did not use in the last 10 minutes would not make it, so nothing " \
           "was): a build may fail for space" in said
    assert len(cache.entries()) == 3


def test_nothing_is_evicted_while_another_harness_uses_the_cache(root: Path) -> None:
    cachetree.world(root)
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
    cachetree.world(root)
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
    built = cachetree.entry(root, f"kselftests/net_forwarding-{tree_id[:16]}", 10, old)
    (built / "run_kselftest.sh").write_text("#!/bin/sh\n")
    os.utime(built, (old, old))
    got = kselftest.build_kselftest("net/forwarding", tree, tmp_path / "o",
                                    log_dir=tmp_path)
    assert got == built
    entry = {e.name: e for e in cache.entries()}[f"kselftests/{built.name}"]
    assert entry.last_used >= time.time() - 60


def test_a_size_is_measured_again_once_its_entry_was_built_into_or_it_is_old(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run prunes the cache when it ends: a walk of every worktree's files each time
    took seconds of the developer's loop. Sizes are remembered; an entry built into since
    (a build may have grown it) and a size an hour old are measured again, an entry only
    used is not."""
    now = time.time()
    tree = cachetree.entry(root, "work/debian-6.12-base", 4096 * 10, now - 100, "debian:6.12")
    (tree / "mm").mkdir()
    (tree / ".harness-build" / "mm").mkdir(parents=True)
    (tree / ".harness-build" / "vmlinux").write_bytes(b"v")
    kernel = cachetree.entry(root, "kernels/k", 4096 * 10, now - 100, "debian:6.12")
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


def test_a_source_is_measured_again_after_a_fetch_not_after_a_series_applied(
        root: Path) -> None:
    """`git am` of a developer's one-line patch writes a few loose objects into the source
    repository its worktree shares, and may make a new fan-out directory of objects/: that
    walked the whole 2 GB repository again (a second of each run). A new pack (a fetch, a
    gc) is what grows it."""
    now = time.time()
    src = cachetree.entry(root, "src/debian-6.12", 4096 * 10, now - 100, "debian:6.12")
    pack = src / ".git" / "objects" / "pack"
    pack.mkdir(parents=True)
    for d in (src / ".git" / "objects", pack):
        os.utime(d, (now - 100, now - 100))
    size = {e.name: e.size for e in cache.entries()}["debian-6.12"]
    (src / ".git" / "objects" / "ab").mkdir()  # git am: new loose objects
    (src / ".git" / "objects" / "ab" / "cdef").write_bytes(b"x" * 4096)
    assert {e.name: e.size for e in cache.entries()}["debian-6.12"] == size
    (pack / "pack-1.pack").write_bytes(b"x" * 4096 * 20)  # a fetch
    assert {e.name: e.size for e in cache.entries()}["debian-6.12"] >= size + 4096 * 21


def test_prune_after_a_command_counts_nothing_while_a_bound_keeps_it_under_the_limit(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cachetree.world(root)
    used = [10 * 2**30]
    monkeypatch.setattr(cache, "_fs_used", lambda _path: used[0])
    found = cache.entries()  # counted: the bound starts from this total
    total = sum(e.size for e in found)
    counts: list[int] = []
    real_entries = cache.entries

    def counting() -> list[cache.Entry]:
        counts.append(1)
        return real_entries()

    monkeypatch.setattr(cache, "entries", counting)
    done = cache.prune(total + 4096, after_command=True)
    assert done.evicted == () and done.total_before == total and counts == []
    # the file system gained more than the room left: counted, and pruned
    used[0] += 3 * 4096
    done = cache.prune(total - 1, after_command=True)
    assert counts == [1] and [e.name for e in done.evicted] == ["old"]
    # the bound is the total counted then plus the gain since
    after = sum(e.size for e in real_entries())
    used[0] += 2 * 4096
    done = cache.prune(after + 2 * 4096, after_command=True)
    assert counts == [1] and done.total_before == after + 2 * 4096
    # an explicit prune always counts
    cache.prune(after)
    assert counts == [1, 1]
    # a count older than SIZE_TTL_S is no bound
    monkeypatch.setattr(cache.time, "time", lambda: 4e9)
    cache.prune(10**12, after_command=True)
    assert counts == [1, 1, 1]
