"""debian: specs against a real apt: a signed archive of our own in tmp_path (a fake
kernel source package, Packages, Release and InRelease signed by a key made for the
test), read through the harness's own apt configuration as sid is."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.base.gitcmd import git
from harness.kernel import sources
from harness.kernel.sources import debian
from tests.helpers.faketree import FAKES


def _run(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)


def _package(pool: Path, kernel: str, version: str, work: Path) -> None:
    """linux-source-KERNEL_VERSION_all.deb holding /usr/src/linux-source-KERNEL.tar.xz of
    the fake kernel tree, as Debian's package holds the real one."""
    root = work / f"pkg-{version}"
    src = root / "usr" / "src"
    src.mkdir(parents=True)
    top = work / f"linux-source-{kernel}"
    shutil.copytree(FAKES / "kernel-tree", top)
    (top / "VERSION-MARK").write_text(version + "\n")
    _run("tar", "-cJf", str(src / f"linux-source-{kernel}.tar.xz"), "-C", str(work),
         top.name)
    shutil.rmtree(top)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        f"Package: linux-source-{kernel}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: test <t@t>\nDescription: a fake kernel source\n")
    _run("dpkg-deb", "--build", "--root-owner-group", str(root),
         str(pool / f"linux-source-{kernel}_{version}_all.deb"))


def _publish(repo: Path, suite: str, gnupg: dict[str, str]) -> None:
    """Packages, Release (with its hashes) and InRelease, signed."""
    binary = repo / "dists" / suite / "main" / "binary-amd64"
    binary.mkdir(parents=True, exist_ok=True)
    packages = subprocess.run(["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"],
                              cwd=repo, check=True, capture_output=True, text=True).stdout
    (binary / "Packages").write_text(packages)
    rel = "main/binary-amd64/Packages"
    data = packages.encode()
    release = (f"Suite: {suite}\nCodename: {suite}\nArchitectures: amd64\nComponents: main\n"
               f"Date: Sat, 28 Nov 2026 00:00:00 UTC\nSHA256:\n"
               f" {hashlib.sha256(data).hexdigest()} {len(data)} {rel}\n")
    dist = repo / "dists" / suite
    (dist / "Release").write_text(release)
    (dist / "InRelease").unlink(missing_ok=True)
    _run("gpg", "--batch", "--yes", "--clearsign", "-o", str(dist / "InRelease"),
         str(dist / "Release"), env=gnupg)


@pytest.fixture
def archive(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A signed archive serving linux-source-9.9 9.9.1-1 in suite "fakesid", and a suite
    table that names only it."""
    if shutil.which("dpkg-scanpackages") is None:
        pytest.fail("dpkg-scanpackages is missing: apt-get install -y dpkg-dev")
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    gnupg = {**os.environ, "GNUPGHOME": str(home)}
    _run("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
         "--quick-gen-key", "test archive <archive@test>", "ed25519", "sign", "never",
         env=gnupg)
    keyring = tmp_path / "archive.gpg"
    _run("gpg", "--batch", "--output", str(keyring), "--export", env=gnupg)
    repo, work = tmp_path / "repo", tmp_path / "work"
    (repo / "pool").mkdir(parents=True)
    work.mkdir()
    _package(repo / "pool", "9.9", "9.9.1-1", work)
    _publish(repo, "fakesid", gnupg)
    table = tmp_path / "suites.toml"
    table.write_text(f'[[suite]]\nname = "fakesid"\nuri = "file://{repo}"\n'
                     f'components = ["main"]\nkeyring = "{keyring}"\nrefresh_hours = 24\n')
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
    _package(archive["repo"] / "pool", "9.9", "9.9.2-1", archive["work"])
    _publish(archive["repo"], "fakesid", {**os.environ, "GNUPGHOME": str(archive["home"])})
    debian.refresh(debian.load_suites()[0], force=True)
    with caplog.at_level(logging.WARNING):
        moved = sources.prepare(spec, log_dir=tmp_path)
    assert moved.package_version == "9.9.2-1" and moved.repo != first.repo
    assert ("debian:9.9: Debian's linux-source-9.9 is now 9.9.2-1 (the last run of this "
            "cache built 9.9.1-1)") in caplog.text
    # the old version, pinned, is still served and builds the old tree
    pinned = sources.prepare(sources.parse_spec("debian:9.9=9.9.1-1"), log_dir=tmp_path)
    assert pinned.repo == first.repo
