"""The pahole a kernel's BTF is made with: the host's, or the one `HARNESS_PAHOLE` names.

Kfunc declarations in the kernel's BTF need pahole >= 1.27, and mainline's BPF selftests
call kfuncs that only those declarations make known; Debian 12 has 1.24. `HARNESS_PAHOLE`
is either the path of a pahole (one you built) or `debian:SUITE`: that Debian suite's
pahole and every library it runs with, its C library among them, downloaded through the
harness's own apt configuration of the suite (sources/debian.py), unpacked under
`$HARNESS_CACHE/tools/pahole-SUITE-VERSION/` and run through that C library's own loader.
Nothing is installed and the host's libraries are not touched: a suite's pahole needs a
newer C library than the host's (sid's: glibc 2.38 or later).

The version pahole prints, and where it came from, are part of the tools a stored kernel's
key carries (build.Tools): a kernel made with another pahole is another kernel.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.base import atomic, paths, proc
from harness.base.errors import HarnessError
from harness.kernel.sources import debian
from harness.kernel.sources.base import locked

log = logging.getLogger(__name__)

ENV = "HARNESS_PAHOLE"
PACKAGE = "pahole"
HOST = "pahole"  # the host's, found on PATH
_VERSION = re.compile(r"^v\d+\.\d+")


@dataclass(frozen=True, kw_only=True)
class Pahole:
    """What make runs as pahole (PAHOLE=), and what a sandboxed build must read for it."""

    command: str = HOST
    reads: tuple[Path, ...] = ()
    origin: str = ""  # "" the host's; "debian:sid 1.32-1"; a path

    @property
    def make_vars(self) -> tuple[str, ...]:
        return () if self.command == HOST else (f"PAHOLE={self.command}",)


def chosen(wanted: str = "") -> Pahole:
    """The pahole `HARNESS_PAHOLE` names, else `wanted` (the kernel's rule in
    harness/target/pahole.toml: Target.pahole), else the host's; a suite's made ready."""
    return _chosen(os.environ.get(ENV, "").strip() or wanted)


@functools.cache  # a suite's is looked up (apt) once a run, not at every build step
def _chosen(value: str) -> Pahole:
    if not value:
        return Pahole()
    if value.startswith("debian:"):
        return from_debian(value.removeprefix("debian:"))
    path = Path(value)
    if not path.is_absolute() or not path.is_file() or not os.access(path, os.X_OK):
        raise HarnessError(f"{ENV}={value}: not an executable file given by its absolute path",
                           fix=f"give the path of a pahole, or {ENV}=debian:sid for Debian "
                               "sid's (downloaded into the cache), or unset it for the "
                               "host's")
    return Pahole(command=str(path), reads=(path.parent,), origin=str(path))


def wrapper_text(root: Path, loader: Path, libdirs: list[Path]) -> str:
    """A pahole command that runs the unpacked pahole with the unpacked libraries only."""
    return ("#!/bin/sh\n"
            "# a Debian suite's pahole with that suite's libraries, run through its own\n"
            "# loader (harness/kernel/pahole.py): the host's libraries are not used\n"
            f"exec {shlex.quote(str(loader))} --library-path "
            f"{shlex.quote(':'.join(str(d) for d in libdirs))} "
            f"{shlex.quote(str(root / 'usr/bin/pahole'))} \"$@\"\n")


_PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def parse_recursive_depends(text: str) -> list[str]:
    """The package names `apt-cache depends --recurse` lists (its unindented lines), without
    the virtual ones (<name>) or apt's warnings, in order, once each."""
    names: list[str] = []
    for line in text.splitlines():
        if _PACKAGE_NAME.match(line) and line not in names:
            names.append(line)
    return names


def from_debian(suite_name: str) -> Pahole:
    """The suite's pahole, unpacked into the cache on first use."""
    suites = {s.name: s for s in debian.load_suites()}
    suite = suites.get(suite_name)
    if suite is None or suite.host:
        raise HarnessError(
            f"{ENV}=debian:{suite_name}: " + ("the host's own suite: its pahole is the host's"
                                               if suite else "no such suite"),
            fix=f"name one of {', '.join(n for n, s in suites.items() if not s.host)} "
                f"(harness/kernel/sources/debian.toml), or unset {ENV} for the host's pahole")
    debian.refresh(suite)
    opts = debian.apt_options(suite)
    shown = proc.run(["apt-cache", *opts, "show", "--no-all-versions", PACKAGE], timeout=120)
    found = re.search(r"^Version: (\S+)", shown.output, re.MULTILINE) if shown.ok else None
    if found is None:
        raise HarnessError(f"Debian {suite_name} has no {PACKAGE}: {shown.tail(2)}",
                           fix=f"name another suite in {ENV}")
    version = found.group(1)
    home = paths.sub("tools") / f"pahole-{suite_name}-{version.replace(':', '_')}"
    made = Pahole(command=str(home / "pahole"), reads=(home,),
                  origin=f"debian:{suite_name} {version}")
    if (home / "pahole").is_file():
        return made
    with locked(f"pahole-{suite_name}", wait_message=f"unpacking Debian {suite_name}'s pahole"):
        if (home / "pahole").is_file():
            return made
        _unpack(suite, opts, version, home)
    return made


def _unpack(suite: debian.Suite, opts: list[str], version: str, home: Path) -> None:
    scratch = home.with_name(home.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "debs").mkdir(parents=True)
    alog = scratch / "apt.log"
    log.info("%s=debian:%s: downloading pahole %s and the libraries it runs with into %s",
             ENV, suite.name, version, home)
    deps = proc.run(["apt-cache", *opts, "depends", "--recurse", "--no-recommends",
                     "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces",
                     "--no-enhances", "--no-pre-depends", PACKAGE], timeout=300)
    names = parse_recursive_depends(deps.output) if deps.ok else []
    if PACKAGE not in names:
        raise HarnessError(f"apt could not list what Debian {suite.name}'s pahole needs: "
                           f"{deps.tail(3)}", fix="check the network, then run again")
    got = proc.run(["apt-get", *opts, "-q", "download", *names], cwd=scratch / "debs",
                   timeout=1800, log_path=alog)
    debs = sorted((scratch / "debs").glob("*.deb"))
    if not got.ok or len(debs) < len(names):
        raise HarnessError(f"could not download Debian {suite.name}'s pahole and its "
                           f"libraries ({len(debs)} of {len(names)}): {got.tail(3)}",
                           fix=f"check the network; see {alog}")
    root = scratch / "root"
    for deb in debs:
        proc.check(["dpkg-deb", "-x", str(deb), str(root)], what=f"unpacking {deb.name}",
                   timeout=300, log_path=alog)
    shutil.rmtree(scratch / "debs")
    final_root = home / "root"  # the wrapper names where the tree will be
    loaders = [*sorted(root.glob("usr/lib/*/ld-linux*.so.*")),
               *sorted(root.glob("lib*/ld-linux*.so.*"))]
    libdirs = sorted({p.parent for p in root.rglob("*.so*") if p.parent.name != "gconv"})
    if not loaders or not (root / "usr/bin/pahole").is_file():
        raise HarnessError(f"Debian {suite.name}'s packages hold no pahole or no loader for it",
                           fix=f"unset {ENV}, or report it with {alog}")
    atomic.write_text(scratch / "pahole", wrapper_text(
        final_root, final_root / loaders[0].relative_to(root),
        [final_root / d.relative_to(root) for d in libdirs]))
    (scratch / "pahole").chmod(0o755)
    shutil.rmtree(home, ignore_errors=True)
    scratch.rename(home)
    ran = proc.run([str(home / "pahole"), "--version"], timeout=60)
    if not ran.ok or not _VERSION.match(ran.output.strip()):
        shutil.rmtree(home, ignore_errors=True)
        raise HarnessError(f"Debian {suite.name}'s pahole does not run here: {ran.tail(3)}",
                           fix=f"unset {ENV} (the host's pahole), or give the path of a "
                               "pahole built here")
    log.info("pahole %s (Debian %s %s) in %s", ran.output.strip(), suite.name, version, home)
