"""What the harness needs on the host and what installs each, from host.toml beside this
module: the programs it runs (and headers, and what checkpatch needs), the Debian packages
of each, and the one way an install hint is written (`apt_install`, `foreign_setup`).

Data in, frozen data out; nothing here runs or installs anything. The kernel's toolchains
and arches (and their packages) are harness/target/'s data.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "host.toml"


@dataclass(frozen=True, kw_only=True)
class Need:
    """One thing the harness needs on the host (host.toml's [need.NAME])."""

    name: str  # the program, or what the header or modules are for
    packages: tuple[str, ...] = ()  # the Debian packages that install it
    how: str = ""  # another way, when no package installs it
    note: str = ""  # said after the command
    recommends: bool = True  # apt's recommended packages too
    doctor: str = ""  # `harness doctor` checks it in this group ("required", "test_progs")
    path: str = ""  # a header: the file that is there when it is installed

    @property
    def fix(self) -> str:
        """How to install it."""
        return self.how or apt_install(self.packages, recommends=self.recommends,
                                       note=self.note)


@dataclass(frozen=True, kw_only=True)
class Host:
    needs: tuple[Need, ...]
    recorded_versions: tuple[str, ...]  # the programs whose versions a run records
    foreign_packages: tuple[str, ...]  # for a guest of another arch: the host's
    foreign_libraries: tuple[str, ...]  # ... and its arch's, linked into our tests


@functools.cache
def read() -> Host:
    data = tomllib.loads(DATA.read_text())
    needs = tuple(Need(name=name, packages=tuple(n.get("packages", ())), how=n.get("how", ""),
                       note=n.get("note", ""), recommends=n.get("recommends", True),
                       doctor=n.get("doctor", ""), path=n.get("path", ""))
                  for name, n in data["need"].items())
    return Host(needs=needs, recorded_versions=tuple(data["recorded_versions"]),
                foreign_packages=tuple(data["foreign"]["packages"]),
                foreign_libraries=tuple(data["foreign"]["libraries"]))


def need(name: str) -> Need | None:
    return next((n for n in read().needs if n.name == name), None)


def fix_for(program: str) -> str:
    """How to install a program the harness runs (one it does not know: said plainly)."""
    found = need(program)
    return found.fix if found is not None else f"install {program}"


def checked(group: str) -> tuple[Need, ...]:
    """What `harness doctor` checks in this group, in host.toml's order."""
    return tuple(n for n in read().needs if n.doctor == group)


def apt_install(packages: Sequence[str], *, recommends: bool = True, note: str = "",
                update: bool = False, reinstall: bool = False) -> str:
    """The command that installs Debian packages: the one way the harness says it."""
    how = "--reinstall" if reinstall else "-y" + ("" if recommends else
                                                   " --no-install-recommends")
    command = f"apt-get install {how} {' '.join(packages)}"
    return (("apt-get update && " if update else "") + command
            + (f" ({note})" if note else ""))


def foreign_setup(deb_arch: str, packages: Sequence[str], *, note: str = "") -> str:
    """Packages installed for a guest of another arch: its dpkg architecture added first
    (PACKAGE:ARCH names one of that arch)."""
    return (f"dpkg --add-architecture {deb_arch} && "
            + apt_install(packages, note=note, update=True))
