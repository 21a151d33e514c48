"""What a kernel is built for and with: an arch and a toolchain, each described by data;
and what builds BPF programs (bpf.toml).

One TOML file per arch (harness/target/arches/NAME.toml) and per toolchain
(harness/target/toolchains/NAME.toml), as tuxmake keeps its arch and toolchain files and
kunit_tool its QEMU configs: adding one is adding a file. This module reads them (text in,
frozen data out) and derives what the build and the boot need from the pair: the make
variables, the compiler ccache wraps, the name the kernel store and the worktree carry.

An arch file's keys:
  name            the name users give (--arch, `arch =` in the matrix)
  uname           what `uname -m` prints on a machine of this arch (native or cross?)
  kernel_arch     make's ARCH= (x86_64, not x86: what a native build takes from uname)
  bpf_target_arch what BPF programs are compiled for (-D__TARGET_ARCH_..., which
                  bpf_tracing.h reads to find a function's arguments in pt_regs)
  make_target     the make target that builds the bootable image
  image           where that image is, relative to the build directory
  image_magic     what `file` says of such an image (how image:PATH tells its arch)
  qemu            the QEMU binary that boots it (vng picks the same one by --arch)
  console         the guest's console device
  cross_compile   the GNU cross prefix used when the host is another arch
  packages        Debian packages that boot it (QEMU)
  cross_packages  Debian packages that cross-build for it with gcc
  kcidb           the architecture name KCIDB reports
  deb_arch        Debian's name for it (amd64, arm64)
  guest_root      Debian packages of the guest's root (see harness/guest/rootfs.py):
                  every guest boots on a root of its own, never the host's (unless
                  --host-root, for the host's arch)
  guest_root_resolve  (optional, default false) guest_root names the top packages and
                  apt adds their dependencies; false: it lists every package
  config          Kconfig lines this arch needs to boot under vng (applied before the
                  fragments, which may override them)
A toolchain file's keys:
  name      --toolchain / `toolchain =`
  cc        the C compiler kbuild calls (with the cross prefix when `cross` is true)
  hostcc    the compiler of the host tools kbuild builds
  make      extra make variables (LLVM=-19)
  cross     whether a cross build needs the arch's GNU cross prefix
  versions  the commands whose `--version` first line identifies the toolchain in keys
  packages  Debian packages that install it

pahole.toml says which kernels need another pahole than the host's for their BTF (a rule
per need: the fragments and kernels it holds for, the pahole, why); the kernel package
applies it to a Target when it opens a worktree (Target.pahole).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.base.errors import HarnessError
from harness.base.model import Status

_HERE = Path(__file__).resolve().parent
# Tools kbuild probes for on PATH that no kernel of the harness uses, pinned to a name
# nothing answers to: otherwise the .config records whatever rustc the machine has
# (CONFIG_RUSTC_VERSION; a rustup in the home on one machine, none on a CI runner, none in
# the build sandbox, which does not show the home), and the same tree and fragments give
# two .config files, two store keys, and a build that re-runs syncconfig under its key.
UNUSED_TOOLS = ("RUSTC=harness-builds-no-rust", "BINDGEN=harness-builds-no-rust")
ARCH_DIR = _HERE / "arches"
TOOLCHAIN_DIR = _HERE / "toolchains"
DEFAULT_ARCH = "x86_64"
DEFAULT_TOOLCHAIN = "gcc"


class TargetError(HarnessError):
    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class Arch:
    name: str
    uname: str
    kernel_arch: str
    bpf_target_arch: str
    make_target: str
    image: str
    image_magic: str
    qemu: str
    console: str
    cross_compile: str
    packages: tuple[str, ...]
    cross_packages: tuple[str, ...]
    kcidb: str
    deb_arch: str
    guest_root: tuple[str, ...]
    config: str
    guest_root_resolve: bool = False

    @property
    def image_name(self) -> str:
        """The image's file name (bzImage, Image): what the kernel store keeps it as."""
        return Path(self.image).name


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    name: str
    cc: str
    hostcc: str
    make: tuple[str, ...]
    cross: bool
    versions: tuple[str, ...]
    packages: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Target:
    """An arch and a toolchain, as one build is made for and with them."""

    arch: Arch
    toolchain: Toolchain
    host_uname: str
    # the pahole its BTF is made with: "" the host's, else what HARNESS_PAHOLE takes
    # (pahole.toml's rule for the kernel; HARNESS_PAHOLE, when set, wins); not part of the
    # name, the slug or is_default: the tools' versions in the store key carry it
    pahole: str = ""

    @property
    def is_default(self) -> bool:
        """x86_64 with gcc: the pair every name and key had before there was a choice, so
        their kernels, worktrees and keys keep their names."""
        return self.arch.name == DEFAULT_ARCH and self.toolchain.name == DEFAULT_TOOLCHAIN

    @property
    def native_default(self) -> bool:
        """x86_64 with gcc on an x86_64 host: make is told nothing (what it assumes)."""
        return self.is_default and not self.cross

    @property
    def cross(self) -> bool:
        """Built on a host of another arch."""
        return self.arch.uname != self.host_uname

    @property
    def name(self) -> str:
        return f"{self.arch.name}/{self.toolchain.name}"

    @property
    def slug(self) -> str:
        """What a worktree's name carries so that each target builds in its own O=
        directory ("" for the default pair)."""
        return "" if self.is_default else f"@{self.arch.name}-{self.toolchain.name}"

    @property
    def prefix(self) -> str:
        """The GNU cross prefix the compiler needs, "" for a native or a clang build."""
        return self.arch.cross_compile if self.cross and self.toolchain.cross else ""

    @property
    def cc(self) -> str:
        return self.prefix + self.toolchain.cc

    def make_vars(self) -> tuple[str, ...]:
        """make's variables for this pair, beside CC (which the caller may wrap)."""
        out = [f"ARCH={self.arch.kernel_arch}", *self.toolchain.make]
        if self.prefix:
            # clang needs none: kbuild gives it --target from ARCH (scripts/Makefile.clang)
            out.append(f"CROSS_COMPILE={self.prefix}")
        return tuple(out)

    def kbuild_vars(self) -> tuple[str, ...]:
        """Everything a make in this target's O= directory must be told besides ccache,
        so that kbuild sees the compiler its .config was made with ("" for the default
        pair: what make assumes)."""
        if self.native_default:
            return UNUSED_TOOLS
        return (*self.make_vars(), f"CC={self.cc}", f"HOSTCC={self.toolchain.hostcc}",
                *UNUSED_TOOLS)

    def userspace_vars(self) -> tuple[str, ...]:
        """What the kernel's selftests Makefiles need to build for the guest: its arch and
        cross prefix (they build with gcc; the guest runs what they build)."""
        if not self.cross:
            return ()
        return (f"ARCH={self.arch.kernel_arch}", f"CROSS_COMPILE={self.arch.cross_compile}")

    def script_env(self) -> dict[str, str]:
        """What the kernel's scripts (decode_stacktrace.sh) read to pick this pair's
        binutils: CROSS_COMPILE's prefix, or LLVM's version suffix."""
        return dict(v.split("=", 1) for v in self.make_vars()
                    if v.startswith(("CROSS_COMPILE=", "LLVM=")))

    def install_fix(self) -> str:
        """How to install what builds for this pair: the bootstrap with its arch and
        toolchain, and the Debian packages that brings (from their data files)."""
        flags = (f" --arch {self.arch.name}" if self.cross else "") + (
            f" --toolchain {self.toolchain.name}" if self.toolchain.name != DEFAULT_TOOLCHAIN
            else "")
        packages = (*(self.arch.cross_packages if self.prefix else ()),
                    *(self.toolchain.packages if self.toolchain.name != DEFAULT_TOOLCHAIN
                      else ()))
        return (f"./bootstrap.sh --role build{flags}"
                + (f" (Debian's {', '.join(packages)})" if packages else ""))

    def version_commands(self) -> tuple[str, ...]:
        """The commands whose versions identify this pair's build (a cross gcc's own)."""
        return tuple(self.prefix + c if c in ("gcc", "ld", "as") else c
                     for c in self.toolchain.versions)


@dataclass(frozen=True, kw_only=True)
class BpfToolchain:
    """What builds BPF programs (bpf.toml): the compiler, and the strip and linker the
    kernel's BPF selftests and perf's skeletons are built with besides."""

    clang: str
    strip: str
    ld: str
    cpu: str  # the BPF ISA a tree's BPF objects get when its rule names none


def bpf() -> BpfToolchain:
    path = _HERE / "bpf.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TargetError(f"cannot read {path}: {exc}") from None
    _checked(data, "bpf.toml", ("clang", "strip", "ld", "cpu"))
    return BpfToolchain(clang=_str(data, "clang", "bpf.toml"),
                        strip=_str(data, "strip", "bpf.toml"), ld=_str(data, "ld", "bpf.toml"),
                        cpu=_str(data, "cpu", "bpf.toml"))


PAHOLE_NEEDS = _HERE / "pahole.toml"


@dataclass(frozen=True, kw_only=True)
class PaholeNeed:
    """A rule of pahole.toml: kernels built with `configs`, within `kernels`, need `pahole`."""

    configs: tuple[str, ...]
    kernels: str  # version bounds, as a fragment directive writes them
    pahole: str
    why: str


def pahole_needs() -> tuple[PaholeNeed, ...]:
    path = PAHOLE_NEEDS
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TargetError(f"cannot read {path}: {exc}") from None
    _checked(data, "pahole.toml", ("need",))
    rules = data["need"]
    if not isinstance(rules, list):
        raise TargetError(f"pahole.toml: need must be an array of tables ([[need]]), "
                          f"not {rules!r}")
    out = []
    for i, raw in enumerate(rules, 1):
        where = f"pahole.toml need #{i}"
        _checked(raw, where, ("configs", "kernels", "pahole", "why"))
        out.append(PaholeNeed(configs=_strs(raw, "configs", where),
                              kernels=_str(raw, "kernels", where),
                              pahole=_str(raw, "pahole", where), why=_str(raw, "why", where)))
    return tuple(out)


def _names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.toml"))


def known_arches() -> list[str]:
    return _names(ARCH_DIR)


def known_toolchains() -> list[str]:
    return _names(TOOLCHAIN_DIR)


def _read(directory: Path, name: str, what: str) -> dict[str, object]:
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(_names(directory))
        raise TargetError(f"unknown {what} {name!r}; known: {known}",
                          fix=f"pick one of {known}, or describe it in "
                              f"{directory.relative_to(_HERE.parent)}/{name}.toml "
                              "(docs/extending.md)")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TargetError(f"cannot read {path}: {exc}") from None
    if data.get("name") != name:
        raise TargetError(f"{path}: name = {data.get('name')!r}, the file is {name}.toml",
                          fix="name the file after the name it declares")
    return data


def _checked(data: dict[str, object], path: str, keys: tuple[str, ...],
             optional: tuple[str, ...] = ()) -> None:
    missing = [k for k in keys if k not in data]
    unknown = sorted(set(data) - set(keys) - set(optional))
    if missing or unknown:
        raise TargetError(f"{path}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else [])
            + ([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])),
            fix=f"the keys are: {', '.join(keys)} (harness/target/ says what each means)")


def _str(data: dict[str, object], key: str, path: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise TargetError(f"{path}: {key} must be a string, not {value!r}")
    return value


def _strs(data: dict[str, object], key: str, path: str) -> tuple[str, ...]:
    value = data[key]
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise TargetError(f"{path}: {key} must be a list of strings, not {value!r}")
    return tuple(value)


_ARCH_KEYS = ("name", "uname", "kernel_arch", "bpf_target_arch", "make_target", "image",
              "image_magic",
              "qemu", "console", "cross_compile", "packages", "cross_packages", "kcidb",
              "deb_arch", "guest_root", "config")
_TOOLCHAIN_KEYS = ("name", "cc", "hostcc", "make", "cross", "versions", "packages")


def arch(name: str) -> Arch:
    data, path = _read(ARCH_DIR, name, "arch"), f"arches/{name}.toml"
    _checked(data, path, _ARCH_KEYS, optional=("guest_root_resolve",))
    lists = ("packages", "cross_packages", "guest_root")
    text = {k: _str(data, k, path) for k in _ARCH_KEYS if k not in lists}
    resolve = data.get("guest_root_resolve", False)
    if not isinstance(resolve, bool):
        raise TargetError(f"{path}: guest_root_resolve must be true or false, not {resolve!r}")
    return Arch(**text, packages=_strs(data, "packages", path),
                cross_packages=_strs(data, "cross_packages", path),
                guest_root=_strs(data, "guest_root", path), guest_root_resolve=resolve)


def toolchain(name: str) -> Toolchain:
    data, path = _read(TOOLCHAIN_DIR, name, "toolchain"), f"toolchains/{name}.toml"
    _checked(data, path, _TOOLCHAIN_KEYS)
    if not isinstance(data["cross"], bool):
        raise TargetError(f"{path}: cross must be true or false, not {data['cross']!r}")
    return Toolchain(name=name, cc=_str(data, "cc", path), hostcc=_str(data, "hostcc", path),
                     make=_strs(data, "make", path), cross=data["cross"],
                     versions=_strs(data, "versions", path),
                     packages=_strs(data, "packages", path))


def select(arch_name: str = DEFAULT_ARCH, toolchain_name: str = DEFAULT_TOOLCHAIN, *,
           host_uname: str | None = None) -> Target:
    """The pair by name; host_uname defaults to this machine's (`uname -m`)."""
    return Target(arch=arch(arch_name), toolchain=toolchain(toolchain_name),
                  host_uname=host_uname or os.uname().machine)


def arch_of_image(file_says: str) -> str | None:
    """The arch whose images `file` describes so, or None."""
    return next((n for n in known_arches() if arch(n).image_magic in file_says), None)


def label(arch_name: str, toolchain_name: str) -> str:
    """"arch/toolchain" where a name, key or line must tell the pair apart; "" for the
    default pair, so that everything about x86_64/gcc reads as it always did."""
    if (arch_name, toolchain_name) == (DEFAULT_ARCH, DEFAULT_TOOLCHAIN):
        return ""
    return f"{arch_name}/{toolchain_name}"


def host_arch() -> Arch:
    """The arch of this machine (`uname -m`): its kernels boot under KVM, if at all."""
    machine = os.uname().machine
    found = next((a for a in (arch(n) for n in known_arches()) if a.uname == machine), None)
    if found is None:
        raise TargetError(f"no arch file describes this machine ({machine})",
                          fix="describe it in harness/target/arches/ (docs/extending.md)")
    return found


def foreign(arch_name: str) -> bool:
    """A kernel of this arch runs on another CPU than this host's (cross-built, TCG)."""
    return arch(arch_name).uname != os.uname().machine


def default() -> Target:
    """x86_64 with gcc, on this host."""
    return select()
