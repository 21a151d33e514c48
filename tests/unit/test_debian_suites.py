"""debian: specs against a real apt: a signed archive of our own in tmp_path (a fake
kernel source package, Packages, Release and InRelease signed by a key made for the
test), read through the harness's own apt configuration as sid is."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from harness.base.gitcmd import git
from harness.kernel import sources
from harness.kernel.sources import debian
from tests.helpers import debarchive


@pytest.fixture
def archive(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A signed archive serving linux-source-9.9 9.9.1-1 in suite "fakesid", and a suite
    table that names only it."""
    if shutil.which("dpkg-scanpackages") is None:
        pytest.fail("dpkg-scanpackages is missing: apt-get install -y dpkg-dev")
    home, keyring = tmp_path / "gnupg", tmp_path / "archive.gpg"
    debarchive.signing_key(home, keyring)
    repo, work = tmp_path / "repo", tmp_path / "work"
    (repo / "pool").mkdir(parents=True)
    work.mkdir()
    debarchive.package(repo / "pool", "9.9", "9.9.1-1", work)
    debarchive.publish(repo, "fakesid", debarchive.gnupg_env(home))
    table = debarchive.suite_table(tmp_path / "suites.toml", repo, keyring)
    monkeypatch.setenv(debian.SUITES_ENV, str(table))
    debian._offers.cache_clear()
    return {"repo": repo, "work": work, "home": home}


def test_a_suite_the_host_does_not_list_is_read_through_our_own_apt(
        archive: dict[str, Path], cache: Path) -> None:
    offer = debian.resolve("9.9")
    assert (offer.suite.name, offer.package, offer.version) == (
        "fakesid", "linux-source-9.9", "9.9.1-1")
    assert debian.resolve("fakesid") == offer  # the suite's newest kernel
    conf = cache / "debian" / "fakesid"
    assert (conf / "sources.list").read_text().startswith(
        f"deb [signed-by={conf / 'keyring.gpg'}] file://{archive['repo']} fakesid main")
    # every path apt writes is ours: the system's lists and sources are never named
    opts = " ".join(debian.apt_options(offer.suite))
    assert "/var/lib/apt" not in opts and "/etc/apt" not in opts
    assert f"Dir::State::Lists={conf / 'lists'}" in opts


def test_the_package_is_downloaded_unpacked_and_imported_not_installed(
        archive: dict[str, Path], cache: Path, tmp_path: Path) -> None:
    spec = sources.parse_spec("debian:9.9")
    sources.check(spec)
    prepared = sources.prepare(spec, log_dir=tmp_path)
    assert prepared.package_version == "9.9.1-1"
    assert prepared.describe == "Debian linux-source-9.9 9.9.1-1"
    assert prepared.repo == cache / "src" / "debian-9.9-9.9.1-1"
    assert (prepared.repo / "VERSION-MARK").read_text() == "9.9.1-1\n"
    assert git(prepared.repo, "rev-parse", "HEAD", what="t").strip() == prepared.base_commit
    assert debian.debian_package_version("linux-source-9.9") is None  # nothing installed
    assert not list((cache / "debian").glob(".download-*"))  # the .deb is not kept
    assert sources.base_name(sources.parse_spec("debian:fakesid")) == "9.9"


def test_a_pinned_version_no_suite_serves_fails_at_plan_time_with_what_is_served(
        archive: dict[str, Path]) -> None:
    spec = sources.parse_spec("debian:9.9=9.9.0-1")
    with pytest.raises(sources.SourceError) as err:
        sources.check(spec)
    assert "no Debian suite serves linux-source-9.9 version 9.9.0-1" in str(err.value)
    assert "fakesid: 9.9 (9.9.1-1)" in str(err.value)
    assert err.value.fix == ("pin a version Debian serves (debian:9.9=9.9.1-1) or take the "
                             "newest (debian:9.9)")
    with pytest.raises(sources.SourceError, match=r"use one of debian:9\.9"):
        sources.check(sources.parse_spec("debian:9.8"))
    with pytest.raises(sources.SourceError, match="not a kernel version"):
        sources.parse_spec("debian:nine")


def test_a_package_that_moved_under_its_spec_is_said(
        archive: dict[str, Path], cache: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    spec = sources.parse_spec("debian:9.9")
    first = sources.prepare(spec, log_dir=tmp_path)
    debarchive.package(archive["repo"] / "pool", "9.9", "9.9.2-1", archive["work"])
    debarchive.publish(archive["repo"], "fakesid", debarchive.gnupg_env(archive["home"]))
    debian.refresh(debian.load_suites()[0], force=True)
    with caplog.at_level(logging.WARNING):
        moved = sources.prepare(spec, log_dir=tmp_path)
    assert moved.package_version == "9.9.2-1" and moved.repo != first.repo
    assert ("debian:9.9: Debian's linux-source-9.9 is now 9.9.2-1 (the last run of this "
            "cache built 9.9.1-1)") in caplog.text
    # the old version, pinned, is still served and builds the old tree
    pinned = sources.prepare(sources.parse_spec("debian:9.9=9.9.1-1"), log_dir=tmp_path)
    assert pinned.repo == first.repo


def test_a_pinned_version_imported_here_is_had_when_no_suite_serves_it_any_more(
        archive: dict[str, Path], cache: Path, tmp_path: Path) -> None:
    """A run reproduced where it was made: the import is in the cache, whatever Debian
    serves now; another machine (an empty cache) is told it cannot have it."""
    first = sources.prepare(sources.parse_spec("debian:9.9=9.9.1-1"), log_dir=tmp_path)
    (archive["repo"] / "pool" / "linux-source-9.9_9.9.1-1_all.deb").unlink()
    debarchive.package(archive["repo"] / "pool", "9.9", "9.9.2-1", archive["work"])
    debarchive.publish(archive["repo"], "fakesid", debarchive.gnupg_env(archive["home"]))
    debian.refresh(debian.load_suites()[0], force=True)
    pinned = sources.parse_spec("debian:9.9=9.9.1-1")
    sources.check(pinned)  # no error: imported here
    again = sources.prepare(pinned, log_dir=tmp_path)
    assert (again.repo, again.base_commit, again.package_version, again.package) == (
        first.repo, first.base_commit, "9.9.1-1", "linux-source-9.9")
    shutil.rmtree(cache / "src")
    with pytest.raises(sources.SourceError) as err:
        sources.check(pinned)
    assert "no Debian suite serves linux-source-9.9 version 9.9.1-1" in str(err.value)


def test_apt_is_asked_again_only_when_its_lists_change(
        archive: dict[str, Path], cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = debian.resolve("9.9")
    real = debian.proc.run
    asked: list[list[str]] = []

    def counting(argv: list[str], **kw: object) -> object:
        if argv[0] == "apt-cache":
            asked.append(argv)
        return real(argv, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(debian.proc, "run", counting)
    debian._offers.cache_clear()  # a new run: only the memo on disk is left
    assert debian.resolve("9.9") == first and asked == []
    lists = sorted((cache / "debian" / "fakesid" / "lists").glob("*Packages*"))
    assert lists
    st = lists[0].stat()
    os.utime(lists[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    debian._offers.cache_clear()
    assert debian.resolve("9.9") == first
    assert [a[0] for a in asked] == ["apt-cache", "apt-cache"]  # pkgnames, madison
