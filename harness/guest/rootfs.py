"""A guest root for an arch other than the host's, made once from Debian's packages.

A native guest runs on the host's own root (vng exports it). An arm64 guest on an x86_64
host cannot: it needs binaries of its arch. The least that runs vng's init (a bash
script), the guest runner (POSIX sh and the usual tools) and the kernel's selftests (the
kselftest runner calls GNU `timeout --foreground`; pthread_cancel needs libgcc_s) is
bash and coreutils with the libraries they link, and a static busybox for everything
else. Their Debian packages (the arch file's
`guest_root`) are fetched with `apt-get download` and unpacked, without running their
maintainer scripts (which would need the guest's CPU); busybox's applets become symlinks,
named by the host's busybox of the same Debian release (the same build, other CPU). The
root is cached by the package versions, under the kernel store's cache.

Our tests reach it as static binaries (testkinds/own.py links them so for another arch),
the kernel's selftests as dynamic ones built with the cross compiler; what needs more of
a distribution (perf, test_progs) needs a fuller root, which this is not.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from harness.base import atomic, host, paths, proc
from harness.base.errors import HarnessError
from harness.base.model import Status
from harness.target import Arch

log = logging.getLogger(__name__)

MAKE_TIMEOUT_S = 600
_DEB = re.compile(r"^(?P<name>[^_]+)_(?P<version>[^_]+)_(?P<arch>[^_.]+)\.deb$")


class RootfsError(HarnessError):
    status = Status.SETUP_ERROR


def _setup_fix(arch: Arch) -> str:
    return host.foreign_setup(arch.deb_arch, host.read().foreign_packages,
                              note="the host's busybox names the applets")


def guest_root(arch: Arch, *, log_dir: Path) -> Path:
    """The arch's guest root directory, made on first use."""
    if not arch.guest_root:
        raise RootfsError(f"{arch.name}: its arch file lists no guest_root packages",
                          fix=f"list them in harness/target/arches/{arch.name}.toml")
    foreign = proc.run(["dpkg", "--print-foreign-architectures"], timeout=30).output.split()
    native = proc.run(["dpkg", "--print-architecture"], timeout=30).output.strip()
    if arch.deb_arch not in (*foreign, native):
        raise RootfsError(f"a guest root for {arch.name} needs Debian's {arch.deb_arch} "
                          "packages, and dpkg does not know that architecture",
                          fix=_setup_fix(arch))
    busybox = proc.which("busybox")
    if busybox is None:
        raise RootfsError("the host has no busybox to name the guest busybox's applets",
                          fix=_setup_fix(arch))
    pkgs = [f"{p}:{arch.deb_arch}" for p in arch.guest_root]
    # the versions apt would download now: the root's key
    policy = proc.check(["apt-cache", "show", "--no-all-versions", *pkgs],
                        what="apt-cache show", timeout=120)
    versions = re.findall(r"^Version: (\S+)$", policy.output, re.M)
    key = hashlib.sha256(" ".join([arch.name, *pkgs, *versions]).encode()).hexdigest()[:16]
    out = paths.sub("rootfs") / f"{arch.name}-{key}"
    if (out / ".made").exists():
        paths.touch(out)
        return out
    blog = log_dir / f"rootfs-{arch.name}.log"
    log.info("making the %s guest root from %s (once)", arch.name, " ".join(pkgs))
    with atomic.directory(out, prefix=f".{arch.name}-") as scratch:
        debs = scratch / "debs"
        debs.mkdir()
        got = proc.run(["apt-get", "download", *pkgs], cwd=debs, timeout=MAKE_TIMEOUT_S,
                       log_path=blog)
        if not got.ok:
            raise RootfsError(f"apt-get download {' '.join(pkgs)} failed: {got.tail(3)}",
                              fix=_setup_fix(arch), log=blog)
        root = scratch / "root"
        root.mkdir()
        for deb in sorted(debs.glob("*.deb")):
            proc.check(["dpkg-deb", "-x", str(deb), str(root)], what=f"dpkg-deb -x {deb.name}",
                       timeout=MAKE_TIMEOUT_S, log_path=blog)
        listing = proc.check([busybox, "--list-full"], what="busybox --list-full", timeout=30)
        _link_applets(root, listing.output.split())
        for d in ("dev", "proc", "sys", "tmp", "run", "root", "etc", "var/tmp", "mnt"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc/group").write_text("root:x:0:\n")
        (root / "etc/hostname").write_text(f"harness-{arch.name}\n")
        for deb in debs.glob("*.deb"):
            deb.unlink()
        debs.rmdir()
        (scratch / ".made").write_text(" ".join(pkgs) + "\n" + " ".join(versions) + "\n")
    return out


def _link_applets(root: Path, applets: list[str]) -> None:
    """bin/sh, usr/bin/awk, ... -> /bin/busybox, where no package put a file of its own
    (bash stays bash)."""
    for applet in applets:
        link = root / applet
        if link.exists() or link.is_symlink() or applet in ("bin/busybox",):
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink("/bin/busybox", link)


def root_of(guest_root_dir: Path) -> Path:
    """The directory vng exports as the guest's root."""
    return guest_root_dir / "root"
