"""`debian:X.Y`, `debian:X.Y=VERSION`, `debian:SUITE`: Debian's linux-source-X.Y package,
its tarball imported once per package version.

Which suite serves which kernel is data (debian.toml beside this file). The host's own
apt serves what it lists (bookworm: 6.1, 6.12), installed with apt-get as bootstrap.sh
installs 6.12. Any other suite (sid: the newest kernel Debian ships) is read through an
apt configuration of the harness's own under $HARNESS_CACHE/debian/SUITE/: its own
sources.list, package lists and keyring copy, so that the system's sources never change
and nothing but the kernel source package is taken from that suite (`apt-get download`,
then the tarball is unpacked from the .deb into the cache).

A package moves under its name (Debian's 6.1.192-2 became 6.1.192-3): the version is
recorded with every run, a version other than the one this cache last built for the same
spec is said on the terminal, and `debian:X.Y=VERSION` pins one, checked at plan time
against the versions the suites serve.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from harness.base import atomic, host, paths, proc
from harness.base.gitcmd import git
from harness.base.model import KernelSpec, PreparedSource, SourceKind
from harness.kernel.sources.base import SourceError, import_tarball, locked

log = logging.getLogger(__name__)

SUITES_FILE = Path(__file__).with_name("debian.toml")
MIRROR_ENV = "HARNESS_DEBIAN_MIRROR"  # another mirror of Debian's archive for the suites
SUITES_ENV = "HARNESS_DEBIAN_SUITES"  # another suite table (a local archive, a test's)
_KERNEL = re.compile(r"^\d+\.\d+$")
_PACKAGE = re.compile(r"^linux-source-(\d+\.\d+)$")


@dataclass(frozen=True, kw_only=True)
class Suite:
    name: str
    host: bool = False  # the host's own apt
    uri: str = ""
    components: tuple[str, ...] = ("main",)
    keyring: str = ""
    refresh_hours: float = 24.0


@dataclass(frozen=True, kw_only=True)
class Wanted:
    """What a spec asks for: a kernel (X.Y) or a suite's newest, and maybe a version."""

    kernel: str | None  # "7.2"; None: the newest the suite serves
    suite: str | None  # debian:SUITE
    version: str | None  # debian:X.Y=VERSION


@dataclass(frozen=True, kw_only=True)
class Offer:
    """Where a package version comes from."""

    suite: Suite
    package: str
    version: str


def load_suites(path: Path | None = None) -> tuple[Suite, ...]:
    path = path or Path(os.environ.get(SUITES_ENV) or SUITES_FILE)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SourceError(f"{path}: {exc}", fix="correct the suite table") from None
    suites = []
    for row in data.get("suite", []):
        unknown = set(row) - {"name", "host", "uri", "components", "keyring", "refresh_hours"}
        if unknown or "name" not in row or (not row.get("host") and not row.get("uri")):
            raise SourceError(f"{path}: suite {row.get('name', '?')!r}: "
                              f"{'unknown keys ' + str(sorted(unknown)) if unknown else ''}"
                              "a suite needs a name and either host = true or a uri",
                              fix="correct the suite table")
        suites.append(Suite(name=row["name"], host=bool(row.get("host")),
                            uri=os.environ.get(MIRROR_ENV, row.get("uri", "")),
                            components=tuple(row.get("components", ["main"])),
                            keyring=row.get("keyring", ""),
                            refresh_hours=float(row.get("refresh_hours", 24))))
    return tuple(suites)


def parse_wanted(value: str, suite_names: tuple[str, ...]) -> Wanted:
    """"7.2", "7.2=7.2.13-1", "sid" -> what is asked; SourceError for anything else."""
    name, _, version = value.partition("=")
    if _KERNEL.match(name):
        return Wanted(kernel=name, suite=None, version=version or None)
    if name in suite_names and not version:
        return Wanted(kernel=None, suite=name, version=None)
    raise SourceError(
        f"debian:{value}: not a kernel version (X.Y), X.Y=PACKAGE_VERSION or a suite "
        f"({', '.join(suite_names)})",
        fix="use debian:6.12, debian:6.1=6.1.192-3 or debian:sid")


# --- apt, the host's and our own ---------------------------------------------------------

def _apt_dir(suite: Suite) -> Path:
    return paths.sub("debian") / suite.name


def apt_options(suite: Suite) -> list[str]:
    """The apt configuration of a suite that is not the host's: every path apt reads or
    writes for sources, lists and its package cache is ours; the dpkg status stays the
    system's (read only, so apt knows what is installed)."""
    if suite.host:
        return []
    d = _apt_dir(suite)
    opts = {"Dir::Etc::sourcelist": d / "sources.list", "Dir::Etc::sourceparts": "-",
            "Dir::Etc::preferences": d / "preferences", "Dir::Etc::preferencesparts": "-",
            "Dir::State::Lists": d / "lists", "Dir::Cache": d / "cache",
            "APT::Get::List-Cleanup": "0"}
    if os.geteuid() == 0:
        opts["APT::Sandbox::User"] = "root"  # our directories are not _apt's
    return [arg for k, v in opts.items() for arg in ("-o", f"{k}={v}")]


def _write_config(suite: Suite) -> None:
    d = _apt_dir(suite)
    for sub in ("lists/partial", "cache/archives/partial"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    keyring = Path(suite.keyring)
    if not keyring.is_file():
        raise SourceError(f"the keyring {keyring} for Debian's {suite.name} suite is missing",
                          fix=host.apt_install(["debian-archive-keyring"]))
    ours = d / "keyring.gpg"
    if not ours.exists() or ours.read_bytes() != keyring.read_bytes():
        atomic.copy_file(keyring, ours)
    atomic.write_text(d / "sources.list", f"deb [signed-by={ours}] {suite.uri} {suite.name} "
                                          f"{' '.join(suite.components)}\n")
    atomic.write_text(d / "preferences", "")


def _lists_age_h(suite: Suite) -> float:
    stamps = list((_apt_dir(suite) / "lists").glob("*_InRelease"))
    if not stamps:
        return float("inf")
    return (time.time() - max(s.stat().st_mtime for s in stamps)) / 3600


def refresh(suite: Suite, *, force: bool = False) -> None:
    """Read the suite's package lists again when they are old (or asked to). The host's
    are read again only when asked to, as root, and when empty (a fresh machine's)."""
    if suite.host:
        # the host's lists are the system's: read again only when they know no kernel
        # source at all (a fresh machine), never to look for a version they lack
        if force and os.geteuid() == 0 and not _offers(suite):
            proc.run(["apt-get", "-q", "update"], env={"DEBIAN_FRONTEND": "noninteractive"},
                     timeout=600, log_path=paths.sub("debian") / "host-apt.log")
            _offers.cache_clear()
        return
    if not force and _lists_age_h(suite) < suite.refresh_hours:
        return
    with locked(f"debian-{suite.name}", wait_message=f"reading Debian {suite.name}'s lists"):
        _write_config(suite)
        log.info("reading Debian %s's package lists (%s) into %s", suite.name, suite.uri,
                 _apt_dir(suite))
        res = proc.run(["apt-get", *apt_options(suite), "-q", "update"], timeout=600,
                       log_path=_apt_dir(suite) / "apt.log")
        if not res.ok:
            raise SourceError(
                f"could not read Debian {suite.name}'s package lists from {suite.uri}: "
                f"{res.tail(3)}",
                fix=f"check the network and the mirror (set {MIRROR_ENV} for another); "
                    f"see {_apt_dir(suite) / 'apt.log'}")
        _offers.cache_clear()


# What apt answers the host's suite from (apt's and dpkg's defaults): its lists and what
# is installed. Our own suites' lists are under _apt_dir().
HOST_LISTS = Path("/var/lib/apt/lists")
DPKG_STATUS = Path("/var/lib/dpkg/status")


def _lists_stamp(suite: Suite) -> str:
    """Every file apt's answer about the suite's kernel sources comes from, by name, size
    and mtime: the same stamp, the same answer ("" when there is nothing to stamp)."""
    lists = HOST_LISTS if suite.host else _apt_dir(suite) / "lists"
    files = sorted(f for f in lists.glob("*") if f.is_file()) if lists.is_dir() else []
    if suite.host:
        files += [DPKG_STATUS] if DPKG_STATUS.is_file() else []
    if not files:
        return ""
    # A list's mtime is what its repository says (its Release's date, to the second) and a
    # new version of a package can keep the Packages file's size: the InRelease files'
    # bytes, which hash every list, tell two publications within a second apart.
    return json.dumps([[str(f), st.st_size, st.st_mtime_ns,
                        hashlib.sha256(f.read_bytes()).hexdigest()
                        if f.name.endswith("Release") else ""]
                       for f in files for st in (f.stat(),)] + [apt_options(suite)])


@cache
def _offers(suite: Suite) -> dict[str, tuple[str, ...]]:
    """kernel X.Y -> the versions of linux-source-X.Y the suite serves, newest first:
    apt-cache's answer, kept with the stamp of the lists it read (two apt-cache calls
    take seconds; a run asks once per cell)."""
    if not suite.host and _lists_age_h(suite) == float("inf"):
        return {}
    stamp = _lists_stamp(suite)
    memo = paths.sub("debian") / f"offers-{suite.name}.json"
    try:
        kept = json.loads(memo.read_text()) if stamp else None
    except (OSError, ValueError):
        kept = None
    if isinstance(kept, dict) and kept.get("stamp") == stamp:
        return {k: tuple(v) for k, v in kept["offers"].items()}
    out = _ask_apt(suite)
    if stamp:
        atomic.write_json(memo, {"stamp": stamp, "offers": out})
    return out


def _ask_apt(suite: Suite) -> dict[str, tuple[str, ...]]:
    opts = apt_options(suite)
    names = sorted(n for n in set(proc.run(["apt-cache", *opts, "pkgnames", "linux-source-"],
                                           timeout=120).output.split()) if _PACKAGE.match(n))
    found: dict[str, list[str]] = {n: [] for n in names}
    if names:
        madison = proc.run(["apt-cache", *opts, "madison", *names], timeout=120)
        for line in madison.output.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 3 and parts[0] in found and parts[1] not in found[parts[0]]:
                found[parts[0]].append(parts[1])
    out: dict[str, tuple[str, ...]] = {}
    for name, versions in found.items():
        if suite.host and (installed := debian_package_version(name)) \
                and installed not in versions:
            versions.insert(0, installed)
        if versions:
            out[name.removeprefix("linux-source-")] = tuple(versions)
    return out


def _newest(kernels: dict[str, tuple[str, ...]]) -> str | None:
    def key(k: str) -> tuple[int, ...]:
        return tuple(int(p) for p in k.split("."))
    return max(kernels, key=key) if kernels else None


def served() -> dict[str, dict[str, tuple[str, ...]]]:
    """suite -> kernel -> versions, for every suite (its lists read if never read)."""
    out = {}
    for suite in load_suites():
        if not suite.host and _lists_age_h(suite) == float("inf"):
            refresh(suite)
        out[suite.name] = _offers(suite)
    return out


def _served_text(table: dict[str, dict[str, tuple[str, ...]]]) -> str:
    return "; ".join(
        f"{suite}: " + (", ".join(f"{k} ({', '.join(v[:4])}{', ...' if len(v) > 4 else ''})"
                                  for k, v in sorted(kernels.items())) or "none")
        for suite, kernels in table.items())


def resolve(value: str) -> Offer:
    """The suite and package version a `debian:` value names, or a SourceError that lists
    what the suites serve and the spec to use instead."""
    suites = load_suites()
    wanted = parse_wanted(value, tuple(s.name for s in suites))
    for attempt in (1, 2):
        for suite in suites:
            if wanted.suite is not None and suite.name != wanted.suite:
                continue
            refresh(suite, force=attempt == 2)
            kernels = _offers(suite)
            kernel = wanted.kernel or _newest(kernels)
            if kernel is None or kernel not in kernels:
                continue
            versions = kernels[kernel]
            if wanted.version and wanted.version not in versions:
                continue
            version = wanted.version or versions[0]
            return Offer(suite=suite, package=f"linux-source-{kernel}", version=version)
    table = served()
    what = (f"linux-source-{wanted.kernel}" + (f" version {wanted.version}"
                                               if wanted.version else "")
            if wanted.kernel else f"a kernel source in {wanted.suite}")
    alternatives = sorted({f"debian:{k}" for kernels in table.values() for k in kernels})
    fix = (f"use one of {', '.join(alternatives)}" if alternatives
           else "check the network and debian.toml's suites")
    if wanted.version and wanted.kernel:
        pinned = [v for kernels in table.values() for v in kernels.get(wanted.kernel, ())]
        if pinned:
            fix = (f"pin a version Debian serves (debian:{wanted.kernel}={pinned[0]}) or "
                   f"take the newest (debian:{wanted.kernel})")
    raise SourceError(f"no Debian suite serves {what}; they serve: {_served_text(table)}",
                      fix=fix)


# --- the package -> a tarball -> a git repository ------------------------------------------

def debian_package_version(package: str) -> str | None:
    res = proc.run(
        ["dpkg-query", "-W", "-f", "${Status}|${Version}", package], timeout=30
    )
    if res.returncode != 0:
        return None
    status, _, version = res.output.strip().partition("|")
    return version if status.endswith(" installed") else None


def _install_on_host(package: str, log_dir: Path) -> str:
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


def _download(offer: Offer, scratch: Path, log_dir: Path) -> Path:
    """The package's tarball, unpacked from its .deb into `scratch` (nothing installed)."""
    res = proc.run(["apt-get", *apt_options(offer.suite), "-q", "download",
                    f"{offer.package}={offer.version}"],
                   cwd=scratch, timeout=1800, log_path=log_dir / "apt.log")
    debs = list(scratch.glob(f"{offer.package}_*.deb"))
    if not res.ok or not debs:
        raise SourceError(f"could not download {offer.package} {offer.version} from Debian "
                          f"{offer.suite.name}: {res.tail(3)}",
                          fix=f"check the network; see {log_dir / 'apt.log'}")
    inner = f"./usr/src/{offer.package}.tar.xz"
    proc.check(["sh", "-c", 'dpkg-deb --fsys-tarfile "$1" | tar -x -C "$2" "$3"', "sh",
                str(debs[0]), str(scratch), inner],
               what=f"unpacking {debs[0].name}", timeout=1800, log_path=log_dir / "apt.log")
    debs[0].unlink()
    return scratch / inner


def _note_version(spec: KernelSpec, package: str, version: str) -> None:
    """Say when the package under an unpinned spec is not the one this cache last used."""
    seen_file = paths.sub("debian") / "seen.json"
    try:
        seen = json.loads(seen_file.read_text())
    except (OSError, ValueError):
        seen = {}
    before = seen.get(spec.text)
    if before and before != version and "=" not in spec.value:
        log.warning("%s: Debian's %s is now %s (the last run of this cache built %s): "
                    "another kernel under the same spec; %s=%s builds the old one while "
                    "Debian serves it", spec.text, package, version, before, spec.text, before)
    if before != version:
        seen[spec.text] = version
        atomic.write_text(seen_file, json.dumps(seen, indent=1, sort_keys=True) + "\n")


def _import_dir(kernel: str, version: str) -> Path:
    """Where linux-source-KERNEL at VERSION is imported ('~' and '+' in Debian versions
    confuse some kbuild scripts: path-safe)."""
    return paths.sub("src") / f"debian-{kernel}-{re.sub(r'[^A-Za-z0-9._-]', '_', version)}"


def imported(value: str) -> PreparedSource | None:
    """A pinned version this cache imported already: there whether or not a suite still
    serves it (a run reproduced where it was made)."""
    wanted = parse_wanted(value, tuple(s.name for s in load_suites()))
    if not (wanted.kernel and wanted.version):
        return None
    dest = _import_dir(wanted.kernel, wanted.version)
    if not (dest / ".git" / "harness-imported").exists():
        return None
    base = git(dest, "rev-parse", "HEAD", what="git rev-parse").strip()
    package = f"linux-source-{wanted.kernel}"
    return PreparedSource(spec=KernelSpec(kind=SourceKind.DEBIAN, value=value), repo=dest,
                          base_commit=base, describe=f"Debian {package} {wanted.version}",
                          package_version=wanted.version, package=package)


def _prepare(spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
    if (done := imported(spec.value)) is not None:
        return done
    offer = resolve(spec.value)
    version = offer.version
    if offer.suite.host and "=" not in spec.value:
        version = _install_on_host(offer.package, log_dir)
    kernel = offer.package.removeprefix("linux-source-")
    dest = _import_dir(kernel, version)
    describe = f"Debian {offer.package} {version}"
    with locked(f"src-{dest.name}", wait_message=f"importing {offer.package}"):
        if not (dest / ".git" / "harness-imported").exists():
            host_tarball = Path(f"/usr/src/{offer.package}.tar.xz")
            if offer.suite.host and debian_package_version(offer.package) == version:
                if not host_tarball.exists():
                    raise SourceError(f"{host_tarball} is missing although {offer.package} "
                                      "is installed",
                                      fix=host.apt_install([offer.package], reinstall=True))
                import_tarball(host_tarball, dest, message=describe, log_dir=log_dir)
            else:
                scratch = paths.sub("debian") / f".download-{dest.name}"
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
                try:
                    log.info("downloading %s %s from Debian %s", offer.package, version,
                             offer.suite.name)
                    tarball = _download(offer, scratch, log_dir)
                    import_tarball(tarball, dest, message=describe, log_dir=log_dir)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
    _note_version(spec, offer.package, version)
    base = git(dest, "rev-parse", "HEAD", what="git rev-parse").strip()
    return PreparedSource(spec=spec, repo=dest, base_commit=base, describe=describe,
                          package_version=version, package=offer.package)


class Debian:
    kind = SourceKind.DEBIAN
    has_tree = True
    usage = ("debian:6.12, debian:6.1=VERSION, debian:7.2, debian:sid (Debian's "
             "linux-source package; the suites in harness/kernel/sources/debian.toml)")

    def parse(self, value: str) -> KernelSpec:
        parse_wanted(value, tuple(s.name for s in load_suites()))
        return KernelSpec(kind=self.kind, value=value)

    def check(self, spec: KernelSpec) -> None:
        """At plan time: a pinned version or a kernel no suite serves fails here, with what
        they do serve. An unpinned kernel the host's apt installs is not looked up, nor a
        pinned version this cache imported already."""
        wanted = parse_wanted(spec.value, tuple(s.name for s in load_suites()))
        if wanted.kernel and not wanted.version \
                and debian_package_version(f"linux-source-{wanted.kernel}"):
            return
        if imported(spec.value) is not None:  # pinned, and imported here already
            return
        resolve(spec.value)

    def prepare(self, spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
        return _prepare(spec, log_dir=log_dir)

    def base_name(self, spec: KernelSpec) -> str | None:
        m = re.match(r"(\d+\.\d+)", spec.value)
        if m:
            return m.group(1)
        return resolve(spec.value).package.removeprefix("linux-source-")

    def version(self, spec: KernelSpec) -> str:
        wanted = parse_wanted(spec.value, tuple(s.name for s in load_suites()))
        if wanted.version:
            return wanted.version
        if wanted.kernel and (installed := debian_package_version(
                f"linux-source-{wanted.kernel}")):
            return installed
        try:
            return resolve(spec.value).version
        except SourceError:
            return "unknown"


KIND = Debian()
