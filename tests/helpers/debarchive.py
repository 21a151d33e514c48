"""A signed Debian archive of our own (a fake kernel source package, Packages, Release and
InRelease signed by a key made for the test), served from a directory over file://: what
apt reads as it reads Debian's (tests/unit/test_debian_suites.py, test_reproduce.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.helpers.faketree import FAKES


def run(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)


def package(pool: Path, kernel: str, version: str, work: Path, *, fake_c: str = "") -> None:
    """linux-source-KERNEL_VERSION_all.deb holding /usr/src/linux-source-KERNEL.tar.xz of
    the fake kernel tree, as Debian's package holds the real one; `fake_c`: a line added to
    the top of its kernel/fake.c (another kernel under the same package name)."""
    root = work / f"pkg-{version}"
    src = root / "usr" / "src"
    src.mkdir(parents=True)
    top = work / f"linux-source-{kernel}"
    shutil.copytree(FAKES / "kernel-tree", top)
    (top / "VERSION-MARK").write_text(version + "\n")
    if fake_c:  # at the top: a patch to the end of the file still applies
        fake = top / "kernel" / "fake.c"
        fake.write_text(fake_c + "\n" + fake.read_text())
    run("tar", "-cJf", str(src / f"linux-source-{kernel}.tar.xz"), "-C", str(work),
         top.name)
    shutil.rmtree(top)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        f"Package: linux-source-{kernel}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: test <t@t>\nDescription: a fake kernel source\n")
    run("dpkg-deb", "--build", "--root-owner-group", str(root),
         str(pool / f"linux-source-{kernel}_{version}_all.deb"))


def publish(repo: Path, suite: str, gnupg: dict[str, str]) -> None:
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
    run("gpg", "--batch", "--yes", "--clearsign", "-o", str(dist / "InRelease"),
         str(dist / "Release"), env=gnupg)


def gnupg_env(home: Path) -> dict[str, str]:
    return {**os.environ, "GNUPGHOME": str(home)}


def signing_key(home: Path, keyring: Path) -> None:
    """A new signing key in `home`, its public part exported to `keyring`."""
    home.mkdir(mode=0o700)
    run("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
        "--quick-gen-key", "test archive <archive@test>", "ed25519", "sign", "never",
        env=gnupg_env(home))
    run("gpg", "--batch", "--output", str(keyring), "--export", env=gnupg_env(home))


def suite_table(path: Path, repo: Path, keyring: Path, *, suite: str = "fakesid",
                refresh_hours: float = 24) -> Path:
    path.write_text(f'[[suite]]\nname = "{suite}"\nuri = "file://{repo}"\n'
                    f'components = ["main"]\nkeyring = "{keyring}"\n'
                    f"refresh_hours = {refresh_hours}\n")
    return path
