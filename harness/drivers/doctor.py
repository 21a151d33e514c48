"""`harness doctor`: every tool the pipeline needs, disk space, and whether KVM really boots."""

from __future__ import annotations

import os
import re
import shutil
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from harness import target
from harness.base import host, paths, proc, sandbox
from harness.base.errors import HarnessError
from harness.guest import vm
from harness.kernel import build, pahole
from harness.testkinds import test_progs

MIN_FREE_GB = 15  # a 6.12 source import + worktree + O= build with BTF, plus the store


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    # only some cells need it (another arch or toolchain): shown, never fails the check
    optional: bool = False


def tool_versions() -> dict[str, str]:
    """Versions recorded in results.json (each remembered by what the program is:
    proc.version_output)."""
    out = {t: proc.version_line(t) or "missing" for t in host.read().recorded_versions}
    # HARNESS_PAHOLE: the kernels are built with that one (a kernel that a rule of
    # harness/target/pahole.toml gives another records it in its cell: results' "pahole")
    chosen = pahole.chosen()
    if "pahole" in out and chosen.origin:
        out["pahole"] = f"{proc.version_line(chosen.command) or 'missing'} ({chosen.origin})"
    return out


def checks(*, probe_kvm: bool = True) -> list[Check]:
    required = host.checked("required")
    out = []
    for tool in [n for n in required if not n.path]:
        version = proc.version_line(tool.name)
        out.append(Check(name=tool.name, ok=bool(version), detail=version or "not found",
                         fix="" if version else tool.fix))
    # only for test_progs:NAME tests (the kernel's own BPF selftests): one fix for all
    test_progs = host.checked("test_progs")
    fix = host.apt_install([p for n in test_progs for p in n.packages])
    for tool in test_progs:
        path = proc.which(tool.name)
        out.append(Check(name=f"{tool.name} (test_progs)", ok=path is not None,
                         detail=path or "not found", fix="" if path else fix))
    out += [Check(name=n.name, ok=Path(n.path).exists(), detail=n.path, fix=n.fix)
            for n in required if n.path]
    out.append(pahole_check())
    out.append(sandbox_check())
    out += target_checks()
    out += remote_cache_checks()
    root = paths.cache_root()
    free_gb = shutil.disk_usage(root).free / 2**30
    out.append(Check(name="disk", ok=free_gb >= MIN_FREE_GB,
                     detail=f"{free_gb:.0f} GiB free under {root}",
                     fix=f"free at least {MIN_FREE_GB} GiB, or set HARNESS_CACHE to a bigger disk"))
    native = target.host_arch()
    kernels = sorted(paths.sub("kernels").glob(f"*/{native.image_name}"),
                     key=lambda p: p.stat().st_mtime)
    if not probe_kvm:
        pass
    elif not Path("/dev/kvm").exists():
        out.append(Check(name="kvm", ok=True, detail="/dev/kvm absent: guests run under TCG"))
    elif not kernels or proc.which(native.qemu) is None:
        out.append(Check(name="kvm", ok=True,
                         detail="/dev/kvm exists; not probed yet (needs a built kernel and "
                                "QEMU; the first `harness run` probes it)"))
    else:
        verdict = vm.probe_kvm(kernels[-1])
        note = " (remembered)" if verdict.cached else ""
        out.append(Check(name="kvm", ok=True,
                         detail=("usable: " if verdict.kvm_works else "NOT usable, TCG will be "
                                 "used: ") + verdict.reason + note))
    return out


def pahole_check() -> Check:
    """The pahole kernels are built with (HARNESS_PAHOLE's, else the host's): one older than
    1.27 makes BTF without kfunc declarations, which mainline's test_progs need; optional."""
    try:
        chosen = pahole.chosen()
    except HarnessError as exc:
        return Check(name="pahole (BTF)", ok=False, detail=exc.message, fix=exc.fix)
    line = proc.version_line(chosen.command)
    found = re.match(r"v(\d+)\.(\d+)", line)
    # as CONFIG_PAHOLE_VERSION counts: 1.27 is 127
    new = found is not None and \
        int(found[1]) * 100 + int(found[2]) >= test_progs.KFUNC_DECL_PAHOLE
    return Check(name="pahole (BTF)", ok=new, optional=True,
                 detail=(line or "not found") + (f" ({chosen.origin})" if chosen.origin else "")
                 + ("" if new else ": kernels' BTF gets no kfunc declarations (1.27 on), "
                    "which mainline's test_progs need (harness/target/pahole.toml gives "
                    "the kernels it names another pahole)"),
                 fix="" if new else f"{pahole.ENV}=debian:sid (Debian sid's pahole, unpacked "
                                    "into the cache, nothing installed)")


def sandbox_check() -> Check:
    """bubblewrap runs a command the way the harness runs the kernel tree's code (no
    network, a root of its own), or what stops it and the fix."""
    why = sandbox.problem()
    if not why:
        return Check(name="sandbox", ok=True,
                     detail=f"{sandbox.version()}: the kernel tree's code runs with no "
                            "network, no home, writing only its build directories")
    return Check(name="sandbox", ok=False, detail=why,
                 fix=f"{sandbox.ALLOW_FIX if sandbox.installed() else sandbox.INSTALL_FIX}; "
                     "or run "
                     "with --no-sandbox (the series' code then runs with all your rights)")


def remote_cache_checks() -> list[Check]:
    """$HARNESS_CCACHE_REMOTE, when set: a URL ccache takes, and a server that answers
    (a TCP connection; for file:, a directory). Unreachable is not fatal: ccache then
    compiles, but nothing is shared."""
    if not os.environ.get("HARNESS_CCACHE_REMOTE", "").strip():
        return []
    name = "ccache remote"
    try:
        url = build.ccache_remote()
    except HarnessError as exc:
        return [Check(name=name, ok=False, detail=exc.message, fix=exc.fix)]
    assert url is not None
    where = url.split("|", 1)[0]
    parsed = urllib.parse.urlsplit(where)
    if parsed.scheme == "file":
        directory = Path(parsed.path)
        ok = directory.is_dir() and os.access(directory, os.W_OK)
        return [Check(name=name, ok=ok, detail=f"{where}: " + (
            "a writable directory" if ok else "not a writable directory"),
            fix="" if ok else f"mkdir -p {directory}, or fix HARNESS_CCACHE_REMOTE")]
    port = parsed.port or {"http": 80, "redis": 6379}[parsed.scheme]
    try:
        with socket.create_connection((parsed.hostname or "localhost", port), timeout=3):
            pass
    except OSError as exc:
        return [Check(name=name, ok=False, detail=f"{where}: {exc}",
                      fix="start the server, or unset HARNESS_CCACHE_REMOTE (builds work "
                          "without it, from the local cache alone)")]
    return [Check(name=name, ok=True, detail=f"{where}: answers" + (
        "; not used by sandboxed builds (no network there: a file: storage is)"
        if sandbox.policy().enabled else ""))]


def target_checks() -> list[Check]:
    """What each other toolchain and arch (harness/target/: toolchains/, arches/) needs on
    this host, from their files: needed only by the cells that ask for them."""
    out = []
    for name in target.known_toolchains():
        if name == target.DEFAULT_TOOLCHAIN:
            continue
        tc = target.toolchain(name)
        missing = [c for c in tc.versions if proc.which(c) is None]
        out.append(Check(name=f"toolchain {name}", ok=not missing, optional=True,
                         detail=f"missing {', '.join(missing)}" if missing else
                         f"{', '.join(tc.versions)} found (--toolchain {name})",
                         fix=host.apt_install(tc.packages)))
    for name in target.known_arches():
        arch = target.arch(name)
        if arch.uname == os.uname().machine:
            continue
        tools = [f"{arch.cross_compile}gcc", arch.qemu, "busybox"]
        missing = [t for t in tools if proc.which(t) is None]
        foreign = proc.run(["dpkg", "--print-foreign-architectures"], timeout=30).output.split()
        dev = Path(f"/usr/lib/{arch.cross_compile.rstrip('-')}/libbpf.a")
        if arch.deb_arch not in foreign:
            missing.append(f"dpkg architecture {arch.deb_arch}")
        elif not dev.exists():
            missing.append(f"{dev} (our tests link it statically)")
        out.append(Check(
            name=f"arch {name}", ok=not missing, optional=True,
            detail=f"missing {', '.join(missing)}" if missing else
            f"cross gcc, {arch.qemu} and {arch.deb_arch} libraries found (--arch {name})",
            fix=host.foreign_setup(arch.deb_arch, [
                *arch.cross_packages, *arch.packages, *host.read().foreign_packages,
                *(f"{p}:{arch.deb_arch}" for p in host.read().foreign_libraries)])))
    return out


def render(results: list[Check]) -> str:
    lines = []
    for c in results:
        mark = "ok " if c.ok else "-- " if c.optional else "BAD"
        lines.append(f"[{mark}] {c.name:<20} {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"      fix: {c.fix}")
    return "\n".join(lines)
