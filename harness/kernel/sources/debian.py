"""`debian:X`: Debian's linux-source-X package, installed with apt if missing, its
tarball imported once per package version."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from harness.base import host, paths, proc
from harness.base.gitcmd import git
from harness.base.model import KernelSpec, PreparedSource, SourceKind
from harness.kernel.sources.base import SourceError, import_tarball, locked

log = logging.getLogger(__name__)


def debian_package_version(package: str) -> str | None:
    res = proc.run(
        ["dpkg-query", "-W", "-f", "${Status}|${Version}", package], timeout=30
    )
    if res.returncode != 0:
        return None
    status, _, version = res.output.strip().partition("|")
    return version if status.endswith(" installed") else None


def _ensure_debian_package(package: str, log_dir: Path) -> str:
    version = debian_package_version(package)
    if version:
        return version
    if os.geteuid() != 0:
        raise SourceError(f"{package} is not installed; fix: sudo {host.apt_install([package])}")
    log.info("installing %s with apt", package)
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    res = proc.run(
        ["apt-get", "install", "-y", "--no-install-recommends", package],
        env=env, timeout=1200, log_path=log_dir / "apt.log",
    )
    if not res.ok:
        # Fresh machines start with empty package lists.
        proc.run(["apt-get", "update"], env=env, timeout=600, log_path=log_dir / "apt.log")
        res = proc.run(
            ["apt-get", "install", "-y", "--no-install-recommends", package],
            env=env, timeout=1200, log_path=log_dir / "apt.log",
        )
    version = debian_package_version(package)
    if not res.ok or not version:
        raise SourceError(
            f"could not install {package} (see {log_dir / 'apt.log'}); "
            f"fix: {host.apt_install([package], update=True)}"
        )
    return version


def _prepare(spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
    package = f"linux-source-{spec.value}"
    version = _ensure_debian_package(package, log_dir)
    tarball = Path(f"/usr/src/{package}.tar.xz")
    if not tarball.exists():
        raise SourceError(f"{tarball} is missing although {package} is installed; "
                          f"fix: {host.apt_install([package], reinstall=True)}")
    # Path-safe: '~' and '+' in Debian versions confuse some kbuild scripts.
    safe_version = re.sub(r"[^A-Za-z0-9._-]", "_", version)
    dest = paths.sub("src") / f"debian-{spec.value}-{safe_version}"
    with locked(f"src-{dest.name}", wait_message=f"importing {package}"):
        if not (dest / ".git" / "harness-imported").exists():
            import_tarball(tarball, dest, message=f"Debian {package} {version}", log_dir=log_dir)
    base = git(dest, "rev-parse", "HEAD", what="git rev-parse").strip()
    return PreparedSource(
        spec=spec, repo=dest, base_commit=base,
        describe=f"Debian {package} {version}", package_version=version,
    )


def _candidate(package: str) -> str:
    """The version apt would install (the package is not installed yet on a fresh runner)."""
    res = proc.run(["apt-cache", "policy", package], timeout=60)
    m = re.search(r"Candidate:\s*(\S+)", res.output)
    return m.group(1) if m and m.group(1) != "(none)" else "unknown"


class Debian:
    kind = SourceKind.DEBIAN
    has_tree = True
    usage = "debian:6.12, debian:6.1 (Debian's linux-source package)"

    def parse(self, value: str) -> KernelSpec:
        return KernelSpec(kind=self.kind, value=value)

    def prepare(self, spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
        return _prepare(spec, log_dir=log_dir)

    def base_name(self, spec: KernelSpec) -> str | None:
        m = re.match(r"(\d+\.\d+)", spec.value)
        return m.group(1) if m else spec.value

    def version(self, spec: KernelSpec) -> str:
        package = f"linux-source-{spec.value}"
        return debian_package_version(package) or _candidate(package)


KIND = Debian()
