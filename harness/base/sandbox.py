"""The sandbox: where a command whose code comes from a kernel tree or a series runs.

A series from the list, a colleague's branch or a bug reporter's patch is code nobody here
wrote: its Makefiles, Kconfig scripts, `scripts/` helpers and the tools built from the
tree run as the harness's user (root on CI). Every such command goes through `proc.run`
with a `Reach` (what it may write and read), and this module turns it into a bubblewrap
(`bwrap`) command line:

- no network (a network namespace of its own: not even the host's loopback), no other
  process visible (a pid namespace of its own), no capability, a session of its own;
- a root of its own: the system's programs and libraries read-only (/usr and the
  /bin, /lib... links or directories as the host has them), of /etc only what builds read
  (the dynamic linker's cache, the alternatives' links, the time zone; a passwd and group
  of our own), a fresh /dev, /proc and /tmp, and the user's home an empty tmpfs;
- every path the command needs at its own path (ccache and kbuild key on paths, the
  kernel's debug info names them): written only where its `Reach` says (the worktree and
  its build directory, ccache, the step's output directory), read only what it names; the
  worktree's `.git` read-only inside it, so nothing the tree runs can plant a git hook or
  configuration that the harness's own git (which runs outside) would then run;
- an environment made of an allow-list (PATH, the locale, TZ, TERM, ...) and the
  command's own variables: tokens in the harness's environment stay outside.

The harness's own Python and git stay outside. `--no-sandbox` turns it off for a run
(`Policy`, set once by the driver; results.json and the terminal say so); without it a
host where bubblewrap cannot run stops the run with a set-up error that says why and how
to allow it (`require`).

Files a sandboxed command wrote are read back by the harness through `regular_file`,
which refuses symlinks and anything but a regular file: a build cannot make the harness
copy a file it could not read itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shlex
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.base import host as hostdata
from harness.base import paths
from harness.base.errors import HarnessError
from harness.base.model import Status

BWRAP = "bwrap"
# The host's top-level entries the system's programs need: a link (merged /usr) or a
# directory, replicated as the host has them.
TOP = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Of /etc, what compilers, make, perl, python and git read; nothing else (not /etc/shadow,
# not ssh's or the package manager's secrets). Absent entries are skipped.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "alternatives",
       "localtime", "timezone", "nsswitch.conf", "ccache.conf", "os-release",
       "debian_version", "gitconfig", "mtab", "perl", "python3", "python3.11")
# The host environment a sandboxed command sees (besides its own variables): what
# decides how tools behave and print, nothing that may carry a credential.
ENV_ALLOWED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM",
               "SOURCE_DATE_EPOCH")
ENV_PREFIXES = ("LC_", "CCACHE_")
# Extra read-only directories (a toolchain in /opt), colon-separated.
EXTRA_READ_ENV = "HARNESS_SANDBOX_READ"

INSTALL_FIX = hostdata.fix_for("bwrap")
ALLOW_FIX = ("let bubblewrap create namespaces: `sysctl -w kernel.unprivileged_userns_clone=1` "
             "(Debian kernels) or `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` "
             "(Ubuntu 24.04), `sysctl -w user.max_user_namespaces=10000` where it is 0; in a "
             "container run it with --privileged (or --security-opt seccomp=unconfined "
             "--security-opt apparmor=unconfined --cap-add SYS_ADMIN)")
NO_SANDBOX_FIX = ("or pass --no-sandbox to build without it (the series' code then runs with "
                  "all your rights; results.json and the terminal say so)")


class SandboxError(HarnessError):
    """bubblewrap cannot run here, or a sandboxed command left something it must not."""

    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class Reach:
    """What one sandboxed command may touch, each path at its own path inside."""

    write: tuple[Path, ...] = ()  # read-write (made when missing)
    read: tuple[Path, ...] = ()  # read-only (skipped when missing)
    protect: tuple[Path, ...] = ()  # read-only although inside a writable path

    def __add__(self, other: Reach) -> Reach:
        return Reach(write=(*self.write, *other.write), read=(*self.read, *other.read),
                     protect=(*self.protect, *other.protect))


@dataclass(frozen=True, kw_only=True)
class Policy:
    """Whether tree code runs sandboxed in this run; when not, why (what the user said)."""

    enabled: bool = True
    why_off: str = ""

    def describe(self) -> str:
        return "sandboxed build" if self.enabled else f"build NOT sandboxed ({self.why_off})"


_POLICY: ContextVar[Policy | None] = ContextVar("sandbox_policy", default=None)
ON = Policy()


def policy() -> Policy:
    """The current policy: on unless a driver said otherwise (`using`)."""
    return _POLICY.get() or ON


@contextlib.contextmanager
def using(chosen: Policy) -> Iterator[Policy]:
    """The policy of everything run inside the block (a run, a check, a shell)."""
    token = _POLICY.set(chosen)
    try:
        yield chosen
    finally:
        _POLICY.reset(token)


@dataclass(frozen=True, kw_only=True)
class Host:
    """What of the host the command line depends on, measured once (`host()`); tests
    give their own."""

    bwrap: str
    top: Mapping[str, str | None]  # name -> the link's target, or None: a directory
    etc: Mapping[str, str | None]  # name -> the link's target, or None: a file/directory
    home: Path | None
    passwd: Path  # ours, bound at /etc/passwd (and group beside it)
    group: Path
    extra_read: tuple[Path, ...] = ()
    # symlinks met on the way to the paths bound (their path -> target): `links()`
    links: Mapping[str, str] = field(default_factory=dict)


def _entries(base: Path, names: Sequence[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in names:
        p = base / name
        if p.is_symlink():
            found[name] = os.readlink(p)
        elif p.exists():
            found[name] = None
    return found


def _identity_files() -> tuple[Path, Path]:
    """A passwd and group naming root and the harness's user: what `id` and getpwuid
    need, not the host's list of accounts."""
    uid, gid = os.getuid(), os.getgid()
    home = os.environ.get("HOME", "/")
    passwd = "root:x:0:0:root:/root:/bin/sh\n"
    group = "root:x:0:\n"
    if uid != 0:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = f"user{uid}"
        passwd += f"{name}:x:{uid}:{gid}::{home}:/bin/sh\n"
        group += f"{name}:x:{gid}:\n"
    d = paths.sub("sandbox")
    out = []
    for name, text in (("passwd", passwd), ("group", group)):
        p = d / name
        if not p.exists() or p.read_text() != text:
            tmp = d / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.replace(p)
        out.append(p)
    return out[0], out[1]


def host() -> Host:
    """The host's facts, measured once per cache root, home and extra directories."""
    return _host(str(paths.cache_root()), os.environ.get("HOME", ""),
                 os.environ.get(EXTRA_READ_ENV, ""))


@functools.cache
def _host(cache: str, home: str, extra_read: str) -> Host:
    found = _which(BWRAP)
    if found is None:
        raise SandboxError("bubblewrap (bwrap) is not installed: the kernel tree's code "
                           "cannot be sandboxed", fix=f"{INSTALL_FIX}; {NO_SANDBOX_FIX}")
    passwd, group = _identity_files()
    extra = tuple(Path(p) for p in extra_read.split(":") if p)
    return Host(bwrap=found, top=_entries(Path("/"), TOP), etc=_entries(Path("/etc"), ETC),
                home=Path(home) if home and home != "/" else None, passwd=passwd,
                group=group, extra_read=extra)


def forget() -> None:
    """Measure the host and probe bubblewrap again (tests; a host that changed)."""
    _host.cache_clear()
    _probe.cache_clear()


def _which(program: str) -> str | None:
    from shutil import which

    return which(program)


def environment(own: Mapping[str, str] | None, outer: Mapping[str, str]) -> dict[str, str]:
    """The sandboxed command's environment: the allow-listed part of ours, then its own."""
    env = {k: v for k, v in outer.items()
           if k in ENV_ALLOWED or k.startswith(ENV_PREFIXES)}
    env.update(own or {})
    return env


def _through_links(path: Path, links: Mapping[str, str]) -> tuple[dict[str, str], Path]:
    """The symlinks on the way to `path` (as `links` knows the host's) and where it
    really is."""
    found: dict[str, str] = {}
    cur = Path("/")
    for part in path.absolute().parts[1:]:
        cur = cur / part
        target = links.get(str(cur))
        if target is not None:
            found[str(cur)] = target
            cur = (cur.parent / target) if not target.startswith("/") else Path(target)
    return found, cur


def command_line(reach: Reach, argv: Sequence[str], *, env: Mapping[str, str],
                 cwd: Path | None, host: Host) -> list[str]:
    """bwrap's command line that runs argv with this reach (pure: the host is given)."""
    cmd = [host.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
           "--cap-drop", "ALL", "--clearenv"]
    for name in sorted(env):
        cmd += ["--setenv", name, env[name]]
    for name, link in host.top.items():
        cmd += ["--symlink", link, f"/{name}"] if link is not None else \
            ["--ro-bind", f"/{name}", f"/{name}"]
    cmd += ["--dir", "/etc"]
    for name, link in host.etc.items():
        cmd += ["--symlink", link, f"/etc/{name}"] if link is not None else \
            ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    cmd += ["--ro-bind", str(host.passwd), "/etc/passwd",
            "--ro-bind", str(host.group), "/etc/group",
            "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
    if host.home is not None:
        cmd += ["--tmpfs", str(host.home)]
    # Each path at its own path. One reached through a symlink (a cache on another disk)
    # keeps the link, and is bound where it really is: the command's realpath() then
    # ends where it ends outside. Parents before children: a read-only path inside a
    # writable one stays read-only, a writable one inside a read-only one writable.
    binds: list[tuple[Path, str]] = []
    binds += [(p, "--ro-bind-try") for p in (*host.extra_read, *reach.read)]
    binds += [(p, "--bind") for p in reach.write]
    binds += [(p, "--ro-bind-try") for p in reach.protect]
    links: dict[str, str] = {}
    real: list[tuple[Path, str]] = []
    for path, how in binds:
        found, where = _through_links(path, host.links)
        links.update(found)
        real.append((where, how))
    for at, target in links.items():
        cmd += ["--symlink", target, at]
    seen: set[tuple[Path, str]] = set()
    for path, how in sorted(real, key=lambda b: len(b[0].parts)):
        if (path, how) not in seen:
            seen.add((path, how))
            cmd += [how, str(path), str(path)]
    if cwd is not None:
        cmd += ["--chdir", str(cwd)]
    return [*cmd, "--", *argv]


def confine(reach: Reach, argv: Sequence[str], *, env: Mapping[str, str] | None,
            cwd: Path | None) -> tuple[list[str], dict[str, str]] | None:
    """The command line and environment that run argv sandboxed under the current policy;
    None when the policy is off (the command then runs as it is)."""
    if not policy().enabled:
        return None
    require()
    found = host()
    for w in reach.write:
        if not w.exists():
            w.mkdir(parents=True)
    inner = environment(env, os.environ)
    found = replace(found, links=links_on_the_way(
        (*reach.write, *reach.read, *reach.protect, *found.extra_read)))
    return (command_line(reach, argv, env=inner, cwd=cwd, host=found),
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


def links_on_the_way(paths_: Sequence[Path]) -> dict[str, str]:
    """Every symlink met on the way to these paths (below the top-level entries, which
    `Host.top` replicates): its path -> its target."""
    found: dict[str, str] = {}
    for p in paths_:
        cur = Path("/")
        for i, part in enumerate(p.absolute().parts[1:]):
            cur = cur / part
            if not (i == 0 and part in TOP) and cur.is_symlink():
                target = os.readlink(cur)
                found[str(cur)] = target
                cur = (cur.parent / target).resolve()
    return found


@functools.cache
def _probe() -> str:
    """"" when bwrap runs a command in the shape the harness uses; else what it said."""
    from harness.base import proc  # (proc runs sandboxed commands through this module)

    try:
        found = host()
    except SandboxError as exc:
        return exc.message
    argv = command_line(Reach(), ["true"], env={"PATH": "/usr/bin:/bin"}, cwd=None, host=found)
    try:
        done = proc.run(argv, timeout=60)
    except HarnessError as exc:
        return f"{shlex.join(argv[:3])} ... failed: {exc}"
    if not done.ok:
        how = "timed out" if done.timed_out else f"exited {done.returncode}"
        return f"bwrap {how}: {done.output.strip()[:400] or 'no message'}"
    return ""


def problem() -> str:
    """Why bubblewrap cannot sandbox here ("" when it can). Measured once per process."""
    return _probe()


def installed() -> bool:
    return _which(BWRAP) is not None


def require() -> None:
    """A set-up error, with the cause and how to allow it, unless bubblewrap runs here."""
    why = problem()
    if not why:
        return
    raise SandboxError(
        "the kernel tree's code (make, scripts/, tools built from the tree) runs in a "
        f"bubblewrap sandbox, and bubblewrap cannot run here: {why}",
        fix=f"{ALLOW_FIX if installed() else INSTALL_FIX}; {NO_SANDBOX_FIX}")


def version() -> str:
    """bubblewrap's version line ("" when it is not installed)."""
    from harness.base import proc

    return proc.version_line(BWRAP)


def git_dirs(tree: Path) -> tuple[Path, ...]:
    """The repository a worktree's `.git` file names (objects, refs, its worktree's
    index): read-only in the sandbox, so that kbuild's setlocalversion (git) gives the
    release the same "+" it gives outside. A `.git` directory is inside the tree."""
    dot = tree / ".git"
    if not dot.is_file() or dot.is_symlink():
        return ()
    text = dot.read_text(errors="replace").strip()
    if not text.startswith("gitdir: "):
        return ()
    gitdir = Path(text.removeprefix("gitdir: "))
    if not gitdir.is_absolute():
        gitdir = (tree / gitdir).resolve()
    common = gitdir
    with contextlib.suppress(OSError):
        rel = (gitdir / "commondir").read_text().strip()
        common = (gitdir / rel).resolve()
    return (common,) if common != gitdir and gitdir.is_relative_to(common) else (common, gitdir)


def for_tree(tree: Path, *, write: Sequence[Path] = (), read: Sequence[Path] = (),
             tree_writable: bool = True) -> Reach:
    """A command in a kernel worktree: the worktree (writable, or read-only) with its
    `.git` read-only, the repository behind it read-only, and what the step adds."""
    own = (tree,) if tree_writable else ()
    return Reach(write=(*own, *write), read=(*(() if tree_writable else (tree,)),
                                             *git_dirs(tree), *read),
                 protect=(tree / ".git",) if tree_writable else ())


def regular_file(path: Path, root: Path) -> Path:
    """`path`, after checking that it is a regular file under `root` reached through no
    symlink: what a sandboxed command (or a guest) wrote, about to be read or copied by
    the harness. Anything else (a symlink to a file the command could not read, a FIFO
    that would block) is a SandboxError; a missing file is FileNotFoundError."""
    st = os.lstat(path)
    where = path.absolute().parent.resolve()
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode) or \
            not where.is_relative_to(root.resolve()):
        raise SandboxError(
            f"{path} is not a regular file inside {root} (a symlink or a special file, "
            "left by the kernel tree's code): not read",
            fix="look at what the series changes there; the harness never follows links "
                "out of a build or results directory", status=Status.BUILD_ERROR)
    return path


def tree_file(path: Path, tree: Path) -> Path:
    """`path`, a file of the tree the harness itself is about to read or write (outside the
    sandbox: mutate's mutants, gcov's Makefile lines), checked as `regular_file` checks
    a build's output; a file still to be made: its directory inside the tree. A series
    can commit symlinks: one must not make the harness read or write a file of the host."""
    if path.exists() or path.is_symlink():
        return regular_file(path, tree)
    if not path.absolute().parent.resolve().is_relative_to(tree.resolve()):
        raise SandboxError(f"{path}: its directory leads out of {tree} (a symlink the "
                           "series made): not written", fix="look at what the series "
                           "changes there", status=Status.BUILD_ERROR)
    return path
