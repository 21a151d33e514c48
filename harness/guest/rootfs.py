"""A guest root of its own, made once from Debian's packages: the guest never sees the host's.

The tests in a guest are the series' and the tree's code (`kselftest:*`, `test_progs`,
perf) running as root: on the host's root (what vng exports by default) they would read
every file QEMU can. So every guest boots on a root made here, and sees beside it only
the directories it must write and, read-only, the build outputs it runs (vm.py).

What a root holds is its arch file's `guest_root` (harness/target/arches/): the packages
the harness's guest side needs, fetched with `apt-get download` and unpacked without
running their maintainer scripts (which would need the guest's CPU, or root on the
host). With `guest_root_resolve = true` (x86_64) the list is the top of it: apt's own
solver, run against an empty package database, adds every dependency, so the root is
complete for bash, coreutils (timeout, stdbuf), perl-base (the kselftest runner's
prefix.pl), util-linux, mount and e2fsprogs (swap, the loop device and ext2 scratch
file system runner.sh sets up), procps, kmod, iproute2 and ping (what the bpf and mm
targets call), and libbpf, libelf and zlib (our tests and the tree's test_progs and
perf, linked on the host against the same Debian release). arm64 lists its few packages
whole and its tests are static. busybox's applets fill in every program no package
provides, named by the host's busybox of the same Debian release; what a maintainer
script would make is made here: the links (awk -> mawk) and, for the host's arch, the
dynamic linker's cache (ld.so.cache: without it every program the guest starts searches
each library directory over 9p).

A root is cached by its package versions (apt's answer itself cached per state of its
package lists: its solver takes seconds), under the cache (rootfs/<arch>-<key>/), and
identified by a hash of its content (`identity`), which results.json records and the
terminal shows on the cell line.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from harness.base import atomic, host, paths, proc
from harness.base.errors import HarnessError
from harness.base.model import Status
from harness.target import Arch

log = logging.getLogger(__name__)

MAKE_TIMEOUT_S = 900
# A root of the user's own for guests of the host's arch (a directory holding a root file
# system: debootstrap's, an image unpacked): used instead of the one made here, and
# identified by its content hash the same way.
OWN_ROOT_ENV = "HARNESS_GUEST_ROOT"
_INST = re.compile(r"^Inst (?P<name>\S+) \((?P<version>\S+) ", re.M)
# links a package's maintainer script makes (update-alternatives), made here instead
_ALTERNATIVES = {"usr/bin/awk": "/usr/bin/mawk", "usr/bin/nawk": "/usr/bin/mawk"}
# How a resolved root is made, in its key: a change to the making makes a new root.
# 2: the dynamic linker's cache (ld.so.cache) made in it.
RECIPE = 2
CONTENT_FILE = "content.sha256"  # beside root/: the content hash, its size, its packages


class RootfsError(HarnessError):
    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class Identity:
    """What a guest root is: a hash of its content, its size, how many packages made it."""

    digest: str  # 16 hex digits of sha256 over every path, mode, link target and content
    size: int  # bytes of its files
    packages: int


def _setup_fix(arch: Arch) -> str:
    note = "the host's busybox names the applets; `apt-get download` needs a Debian mirror"
    if arch.uname == os.uname().machine:
        return host.apt_install(host.read().foreign_packages, note=note, update=True)
    return host.foreign_setup(arch.deb_arch, host.read().foreign_packages, note=note)


def guest_root(arch: Arch, *, log_dir: Path) -> Path:
    """The arch's guest root directory (holding root/), made on first use."""
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
    pkgs = [p if arch.deb_arch == native else f"{p}:{arch.deb_arch}" for p in arch.guest_root]
    key, wanted = _versions(arch, pkgs, log_dir=log_dir)
    out = paths.sub("rootfs") / f"{arch.name}-{key}"
    if (out / ".made").exists():
        paths.touch(out)
        return out
    _make(out, arch, wanted, busybox=busybox, log_path=log_dir / f"rootfs-{arch.name}.log")
    return out


APT_LISTS = Path("/var/lib/apt/lists")


def _apt_state() -> str:
    """What apt's answers depend on: its package lists (names, sizes, times) and dpkg's
    architectures. Unchanged until the next `apt-get update`."""
    h = hashlib.sha256()
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(APT_LISTS), key=lambda e: e.name):
            if entry.is_file():
                st = entry.stat()
                h.update(f"{entry.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    with contextlib.suppress(OSError):
        h.update(Path("/var/lib/dpkg/arch").read_bytes())
    return h.hexdigest()


def _versions(arch: Arch, pkgs: list[str], *,
              log_dir: Path) -> tuple[str, list[tuple[str, str]]]:
    """The root's key and its packages with the versions apt would download now: asked
    of apt once per state of its package lists (its solver takes seconds), then read from
    the cache."""
    ask = hashlib.sha256(" ".join([arch.name, str(arch.guest_root_resolve), *pkgs,
                                   _apt_state()]).encode()).hexdigest()[:16]
    answer = paths.sub("rootfs") / f".apt-{ask}"
    with contextlib.suppress(OSError, ValueError):
        key, *rows = answer.read_text().splitlines()
        return key, [(n, v) for n, v in (r.split(" ", 1) for r in rows)]
    if arch.guest_root_resolve:
        wanted = resolve(pkgs, log_dir=log_dir)
        key = hashlib.sha256(" ".join([arch.name, f"recipe {RECIPE}",
                                       *(f"{n}={v}" for n, v in wanted)])
                             .encode()).hexdigest()[:16]
    else:
        # the versions apt would download now: the root's key
        policy = proc.check(["apt-cache", "show", "--no-all-versions", *pkgs],
                            what="apt-cache show", timeout=120)
        versions = re.findall(r"^Version: (\S+)$", policy.output, re.M)
        key = hashlib.sha256(" ".join([arch.name, *pkgs, *versions]).encode()).hexdigest()[:16]
        wanted = list(zip(pkgs, versions, strict=False))
    atomic.write_text(answer, "\n".join([key, *(f"{n} {v}" for n, v in wanted)]) + "\n")
    return key, wanted


def resolve(pkgs: list[str], *, log_dir: Path) -> list[tuple[str, str]]:
    """Every package these need, with the version apt would take: apt's solver against an
    empty package database (nothing counts as installed), so it names them all."""
    empty = paths.sub("rootfs") / ".empty-status"
    if not empty.exists():
        atomic.write_text(empty, "")
    res = proc.run(["apt-get", "-s", "-q", "-o", f"Dir::State::status={empty}",
                    "install", "--no-install-recommends", *pkgs], timeout=300,
                   env={"DEBIAN_FRONTEND": "noninteractive"},
                   log_path=log_dir / "rootfs-resolve.log")
    found = [(m["name"], m["version"]) for m in _INST.finditer(res.output)]
    if not res.ok or not found:
        raise RootfsError(f"apt could not resolve the guest root's packages "
                          f"({' '.join(pkgs)}): {res.tail(5)}",
                          fix="apt-get update (the package lists may be missing or old)",
                          log=log_dir / "rootfs-resolve.log")
    return found


def _make(out: Path, arch: Arch, wanted: list[tuple[str, str]], *, busybox: str,
          log_path: Path) -> None:
    log.info("making the %s guest root from %d Debian packages (once)", arch.name, len(wanted))
    with atomic.directory(out, prefix=f".{arch.name}-") as scratch:
        debs = scratch / "debs"
        debs.mkdir()
        named = [f"{n}={v}" if arch.guest_root_resolve else n for n, v in wanted]
        got = proc.run(["apt-get", "download", *named], cwd=debs, timeout=MAKE_TIMEOUT_S,
                       log_path=log_path)
        if not got.ok:
            raise RootfsError(f"apt-get download of the {arch.name} guest root's packages "
                              f"failed: {got.tail(3)}", fix=_setup_fix(arch), log=log_path)
        root = scratch / "root"
        root.mkdir()
        for deb in sorted(debs.glob("*.deb")):
            proc.check(["dpkg-deb", "-x", str(deb), str(root)], what=f"dpkg-deb -x {deb.name}",
                       timeout=MAKE_TIMEOUT_S, log_path=log_path)
        for link, target in _ALTERNATIVES.items():
            if (root / target.lstrip("/")).exists() and not (root / link).exists():
                os.symlink(target, root / link)
        listing = proc.check([busybox, "--list-full"], what="busybox --list-full", timeout=30)
        _link_applets(root, listing.output.split())
        if arch.uname == os.uname().machine:
            _ld_cache(root, log_path)
        for d in ("dev", "proc", "sys", "tmp", "run", "root", "etc", "var/tmp", "mnt"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "tmp").chmod(0o1777)
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc/group").write_text("root:x:0:\n")
        (root / "etc/hostname").write_text(f"harness-{arch.name}\n")
        (root / "etc/fstab").touch()  # vng binds its own over it
        for deb in debs.glob("*.deb"):
            deb.unlink()
        debs.rmdir()
        ident = _measure(root, len(wanted))
        (scratch / CONTENT_FILE).write_text(f"{ident.digest} {ident.size} {ident.packages}\n")
        (scratch / ".made").write_text(" ".join(n for n, _ in wanted) + "\n"
                                       + " ".join(v for _, v in wanted) + "\n")


def _ld_cache(root: Path, log_path: Path) -> None:
    """The dynamic linker's cache (/etc/ld.so.cache), which libc-bin's maintainer script
    would make: without it each program the guest starts searches every library
    directory over 9p, and the runner starts hundreds. Made by the root's own ldconfig
    with the root as /: chroot as root, else in bubblewrap's namespaces."""
    ldconfig = "/sbin/ldconfig"
    if not (root / ldconfig.lstrip("/")).exists():
        return
    if os.geteuid() == 0:
        done = proc.run(["chroot", str(root), ldconfig], timeout=300, log_path=log_path)
    else:
        done = proc.run(["bwrap", "--bind", str(root), "/", "--proc", "/proc", "--dev",
                         "/dev", "--unshare-all", ldconfig], timeout=300, log_path=log_path)
    if not done.ok:
        log.warning("no ld.so.cache in the guest root (%s): its programs start slower",
                    done.tail(2))


def _link_applets(root: Path, applets: list[str]) -> None:
    """bin/sh, usr/bin/awk, ... -> /bin/busybox, where no package put a file of its own
    (bash stays bash)."""
    for applet in applets:
        link = root / applet
        if link.exists() or link.is_symlink() or applet in ("bin/busybox",):
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink("/bin/busybox", link)


def _measure(root: Path, packages: int) -> Identity:
    """The content hash of a root: every path in order, its type and mode, a link's target,
    a file's bytes (the mount points vng needs, made later, are empty directories and
    left out)."""
    h = hashlib.sha256()
    size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames
                                        if os.path.islink(os.path.join(dirpath, d))]):
            p = Path(dirpath, name)
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                h.update(f"L {rel} {os.readlink(p)}\n".encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(f"F {rel} {stat.S_IMODE(st.st_mode):o} {st.st_size}\n".encode())
                with p.open("rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                size += st.st_size
    return Identity(digest=h.hexdigest()[:16], size=size, packages=packages)


def identity(guest_root_dir: Path) -> Identity:
    """A made root's identity (measured now, once, for a root made before it was kept)."""
    kept = guest_root_dir / CONTENT_FILE
    try:
        digest, size, packages = kept.read_text().split()
        return Identity(digest=digest, size=int(size), packages=int(packages))
    except (OSError, ValueError):
        pass
    made = (guest_root_dir / ".made").read_text().splitlines()
    ident = _measure(root_of(guest_root_dir), len(made[0].split()) if made else 0)
    atomic.write_text(kept, f"{ident.digest} {ident.size} {ident.packages}\n")
    return ident


@dataclass(frozen=True, kw_only=True)
class Made:
    """A guest root ready to boot: the directory vng exports, and what it is."""

    root: Path
    identity: Identity


def made(arch: Arch, *, log_dir: Path) -> Made:
    """The arch's guest root, made on first use; for the host's arch, $HARNESS_GUEST_ROOT
    when the user names a root of their own."""
    mine = os.environ.get(OWN_ROOT_ENV, "").strip()
    if mine and arch.uname == os.uname().machine:
        root = Path(mine)
        if not (root / "bin").exists():
            raise RootfsError(f"{OWN_ROOT_ENV}={mine} holds no root file system (no bin/)",
                              fix=f"name a directory that holds one (debootstrap's), or unset "
                                  f"{OWN_ROOT_ENV} to use the root the harness makes")
        return Made(root=root, identity=_measure(root, 0))
    directory = guest_root(arch, log_dir=log_dir)
    return Made(root=root_of(directory), identity=identity(directory))


def root_of(guest_root_dir: Path) -> Path:
    """The directory vng exports as the guest's root."""
    return guest_root_dir / "root"
