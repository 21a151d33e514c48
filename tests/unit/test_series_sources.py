"""Series application and git: sources on real git repositories made in tmp_path."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from harness.base.model import PatchState, SourceKind
from harness.kernel import series, sources

ENV = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.org",
       "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.org"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, env=ENV,
                          capture_output=True, text=True).stdout


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "master")
    (path / "mm").mkdir()
    (path / "mm" / "memcontrol.c").write_text("".join(f"line {i}\n" for i in range(1, 41)))
    (path / "README").write_text("kernel\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


def format_patch(repo: Path, out: Path, edit: dict[str, str], subject: str) -> Path:
    """Commit an edit on a throwaway branch, export it with format-patch, drop the branch."""
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "tmp-patch")
    for name, text in edit.items():
        (repo / name).write_text(text)
    git(repo, "commit", "-q", "-am", subject)
    out.mkdir(parents=True, exist_ok=True)
    made = git(repo, "format-patch", "-1", "-o", str(out), "HEAD").strip()
    git(repo, "checkout", "-q", "master")
    git(repo, "branch", "-q", "-D", "tmp-patch")
    assert git(repo, "rev-parse", "HEAD").strip() == base
    return Path(made)


def test_apply_reports_applied_and_already_in_base(tmp_path: Path, cache: Path) -> None:
    repo = make_repo(tmp_path / "k")
    text = (repo / "mm/memcontrol.c").read_text()
    p1 = format_patch(repo, tmp_path / "p", {"mm/memcontrol.c": text.replace("line 5\n",
                                             "line five\n")}, "mm: five")
    p2 = format_patch(repo, tmp_path / "p", {"README": "kernel\nmore\n"}, "doc: more")
    # p2 is already in the base: commit the same change there.
    (repo / "README").write_text("kernel\nmore\n")
    git(repo, "commit", "-q", "-am", "already")
    base = git(repo, "rev-parse", "HEAD").strip()
    res = series.apply(repo, base, [series.Patch(path=p1, series="s"),
                                    series.Patch(path=p2, series="s")], log_dir=tmp_path)
    assert [r.state for r in res] == [PatchState.APPLIED, PatchState.ALREADY_IN_BASE]
    assert res[0].subject == "mm: five"
    assert res[0].files == ("mm/memcontrol.c",)
    assert "line five" in (repo / "mm/memcontrol.c").read_text()
    # the tree's index is split (a run's checkouts and git am write only what changed)
    assert git(repo, "rev-parse", "--shared-index-path").strip()


def test_conflict_names_patch_files_hunks_and_leaves_nothing(tmp_path: Path, cache: Path) -> None:
    repo = make_repo(tmp_path / "k")
    text = (repo / "mm/memcontrol.c").read_text()
    good = format_patch(repo, tmp_path / "p", {"README": "kernel\nok\n"}, "doc: ok")
    bad = format_patch(repo, tmp_path / "p", {"mm/memcontrol.c": text.replace("line 20\n",
                                              "line twenty\n")}, "mm: twenty")
    later = format_patch(repo, tmp_path / "p", {"README": "kernel\nlater\n"}, "doc: later")
    # The base moved under the patch: line 20 changed differently.
    (repo / "mm/memcontrol.c").write_text(text.replace("line 20\n", "line 20 changed\n"))
    git(repo, "commit", "-q", "-am", "upstream moved")
    base = git(repo, "rev-parse", "HEAD").strip()
    with pytest.raises(series.PatchConflictError) as err:
        series.apply(repo, base, [series.Patch(path=p, series="s") for p in (good, bad, later)],
                     log_dir=tmp_path)
    msg = str(err.value)
    assert bad.name in msg
    assert "mm/memcontrol.c" in msg
    states = [r.state for r in err.value.results]
    assert states == [PatchState.APPLIED, PatchState.CONFLICT, PatchState.NOT_TRIED]
    # Nothing half-applied: back at the base, clean, no am in progress.
    assert git(repo, "rev-parse", "HEAD").strip() == base
    assert git(repo, "status", "--porcelain") == ""
    gitdir = Path(git(repo, "rev-parse", "--absolute-git-dir").strip())
    assert not (gitdir / "rebase-apply").exists()


def test_a_series_applied_before_is_checked_out_not_applied_again(
        tmp_path: Path, cache: Path) -> None:
    repo = make_repo(tmp_path / "k")
    text = (repo / "mm/memcontrol.c").read_text()
    p1 = format_patch(repo, tmp_path / "p", {"mm/memcontrol.c": text.replace(
        "line 5\n", "line five\n")}, "mm: five")
    p2 = format_patch(repo, tmp_path / "p", {"README": "kernel\ntwo\n"}, "doc: two")
    p3 = format_patch(repo, tmp_path / "p3", {"README": "kernel\nthree\n"}, "doc: three")
    base = git(repo, "rev-parse", "HEAD").strip()
    first = series.apply(repo, base, [series.Patch(path=p, series="s") for p in (p1, p2)],
                         log_dir=tmp_path / "l1")
    head = git(repo, "rev-parse", "HEAD").strip()
    assert (tmp_path / "l1" / "git-am.log").exists()
    # again, after the tree moved elsewhere: the same commit, and no git am ran
    git(repo, "checkout", "-q", "--detach", base)
    again = series.apply(repo, base, [series.Patch(path=p, series="s") for p in (p1, p2)],
                         log_dir=tmp_path / "l2")
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert not (tmp_path / "l2" / "git-am.log").exists()
    assert again == first
    assert "line five" in (repo / "mm/memcontrol.c").read_text()
    assert (repo / "README").read_text() == "kernel\ntwo\n"
    # the same first patch and another second one: only the second is applied
    other = series.apply(repo, base, [series.Patch(path=p, series="s") for p in (p1, p3)],
                         log_dir=tmp_path / "l3")
    assert [r.state for r in other] == [PatchState.APPLIED, PatchState.APPLIED]
    am_log = (tmp_path / "l3" / "git-am.log").read_text()
    assert p3.name in am_log and p1.name not in am_log
    assert (repo / "README").read_text() == "kernel\nthree\n"
    assert git(repo, "status", "--porcelain") == ""


def test_series_file_and_per_base_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "patches" / "demo"
    d.mkdir(parents=True)
    mail = "From: A <a@example.org>\nSubject: [PATCH] a\n\n---\ndiff --git a/x b/x\n"
    (d / "0001-a.patch").write_text(mail)
    (d / "0001-a-6.1.patch").write_text(mail)
    (d / "series").write_text("# comment\n0001-a.patch\n")
    (d / "series-6.1").write_text("0001-a-6.1.patch\n")
    assert [p.name for p in series.load(str(d), "6.12").patches] == ["0001-a.patch"]
    assert [p.name for p in series.load(str(d), "6.1").patches] == ["0001-a-6.1.patch"]
    (d / "series").write_text("0002-missing.patch\n")
    with pytest.raises(series.SeriesError, match=r"0002-missing\.patch"):
        series.load(str(d), None)


def _fingerprint(path: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under path: size, mtime and content hash."""
    out = {}
    for p in sorted(path.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(path))] = (st.st_size, st.st_mtime_ns,
                                             hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def test_git_source_never_writes_to_the_users_tree(tmp_path: Path, cache: Path) -> None:
    repo = make_repo(tmp_path / "user")
    git(repo, "stash", "list")
    (repo / "mm/memcontrol.c").write_text("uncommitted work\n")  # dirty tracked file
    (repo / "untracked.c").write_text("new\n")
    before = _fingerprint(repo)
    refs_before = git(repo, "for-each-ref")
    spec = sources.parse_spec(f"git:{repo}")
    assert spec.kind is SourceKind.GIT
    prepared = sources.prepare(spec, log_dir=tmp_path / "logs")
    tree = sources.worktree(prepared, "base", log_dir=tmp_path / "logs")
    assert prepared.includes_uncommitted
    assert "uncommitted" in prepared.describe
    assert (tree / "mm/memcontrol.c").read_text() == "uncommitted work\n"
    assert not (tree / "untracked.c").exists()
    # A pinned revision ignores the uncommitted work.
    pinned = sources.prepare(sources.parse_spec(f"git:{repo}@HEAD"), log_dir=tmp_path / "logs")
    assert not pinned.includes_uncommitted
    assert pinned.base_commit == git(repo, "rev-parse", "HEAD").strip()
    assert _fingerprint(repo) == before, "the user's checkout, index or .git changed"
    assert git(repo, "for-each-ref") == refs_before
    assert git(repo, "stash", "list") == ""


def test_bad_specs_say_what_to_do() -> None:
    with pytest.raises(sources.SourceError, match=r"debian:6\.12"):
        sources.parse_spec("6.12")
    with pytest.raises(sources.SourceError, match="unknown kernel spec kind") as err:
        sources.parse_spec("rpm:/x")
    assert "tarball:PATH" in str(err.value)  # every kind, as its module describes it


def _tarball(tmp_path: Path, name: str, top: Path) -> Path:
    import subprocess

    out = tmp_path / name
    subprocess.run(["tar", "-cJf", str(out), "-C", str(top.parent), top.name], check=True)
    return out


def test_a_release_tarball_is_imported_once_and_named_by_its_release(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    tree = tmp_path / "linux-6.99"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fakes" / "kernel-tree", tree)
    tb = _tarball(tmp_path, "linux-6.99.tar.xz", tree)
    spec = sources.parse_spec(f"tarball:{tb}")
    assert spec.value == str(tb) and series.base_name(spec) == "6.99"
    first = sources.prepare(spec, log_dir=tmp_path)
    assert first.describe.startswith("Linux 6.99.0 from linux-6.99.tar.xz (sha256 ")
    assert (first.repo / "Kconfig").read_text() == (tree / "Kconfig").read_text()
    stamp = (first.repo / ".git" / "harness-imported").stat().st_mtime_ns
    again = sources.prepare(spec, log_dir=tmp_path)
    assert again == first and (first.repo / ".git" / "harness-imported").stat(
        ).st_mtime_ns == stamp  # imported once
    # another content is another source, whatever its name
    (tree / "kernel" / "fake.c").write_text("int changed;\n")
    (tmp_path / "o").mkdir()
    changed = _tarball(tmp_path / "o", "linux-6.99.tar.xz", tree)
    other = sources.prepare(sources.parse_spec(f"tarball:{changed}"), log_dir=tmp_path)
    assert other.repo != first.repo
    assert sources.base_name(sources.parse_spec("tarball:/x/linux-6.1.192.tar.gz")) == "6.1"
    assert sources.base_name(sources.parse_spec("tarball:/x/linux-6.13-rc4.tar.gz")) == "6.13"
    assert sources.base_name(sources.parse_spec("tarball:/x/src.tar")) is None


def test_a_tarball_that_is_not_a_kernel_is_refused_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README").write_text("not a kernel\n")
    tb = _tarball(tmp_path, "notes.tar.xz", tmp_path / "notes")
    with pytest.raises(sources.SourceError, match="does not hold a Linux source tree") as err:
        sources.prepare(sources.parse_spec(f"tarball:{tb}"), log_dir=tmp_path)
    assert "fix: pass tarball:PATH of a kernel source release" in str(err.value)
    assert not [p for p in (tmp_path / "cache" / "src").iterdir()]
    with pytest.raises(sources.SourceError, match="does not exist"):
        sources.prepare(sources.parse_spec(f"tarball:{tmp_path / 'none.tar.xz'}"),
                        log_dir=tmp_path)


def test_reset_keeps_the_build_directory_and_drops_what_a_patch_left(tmp_path: Path) -> None:
    """The O= directory lives inside the worktree (paths.build_dir): a reset removes every
    untracked and ignored file a patch or a build copy left, but never the build directory
    (its .config and objects: losing them failed every mutant and rebuilt every kernel)."""
    from harness.base import paths

    repo = make_repo(tmp_path / "tree")
    base = git(repo, "rev-parse", "HEAD").strip()
    build = paths.build_dir(repo)
    (build / "mm").mkdir(parents=True)
    (build / ".config").write_text("CONFIG_MEMCG=y\n")
    (build / "mm" / "memcontrol.o").write_bytes(b"\x7fELF")
    (build / ".gitignore").write_text("*\n")  # as kbuild writes it
    (repo / "left-by-a-patch.c").write_text("int x;\n")
    (repo / "sub").mkdir(exist_ok=True)
    (repo / "sub" / "stray").write_text("x\n")
    series.reset_to(repo, base)
    assert (build / ".config").read_text() == "CONFIG_MEMCG=y\n"
    assert (build / "mm" / "memcontrol.o").exists()
    assert not (repo / "left-by-a-patch.c").exists() and not (repo / "sub" / "stray").exists()
