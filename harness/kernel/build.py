"""Out-of-tree kernel build with ccache, progress, and a store of finished kernels.

A kernel is identified by (tree id, .config hash, toolchain): when that key is in the
store, no make runs at all. Otherwise make runs in the persistent O= directory for the
(source, config) pair, under a lock, and the result is copied into the store.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from harness import target
from harness.base import atomic, paths, proc, sandbox
from harness.base.errors import HarnessError
from harness.base.gitcmd import git
from harness.base.model import KernelImage, Status
from harness.judge import w1_warnings
from harness.kernel import pahole as pahole_mod
from harness.kernel.sources import locked
from harness.target import Target

log = logging.getLogger(__name__)

HOST_PAHOLE = pahole_mod.Pahole()

BUILD_TIMEOUT_S = 3 * 3600
# Fixed build identity: otherwise init/version.c and everything that embeds the
# timestamp differ on every build and ccache cannot hit. KBUILD_BUILD_VERSION too: it is
# the "#N" of `uname -v`, which kbuild otherwise counts up at every link of a build
# directory, so that the same tree and .config linked twice gave two images.
_BUILD_ENV = {
    "KBUILD_BUILD_VERSION": "1",
    "KBUILD_BUILD_TIMESTAMP": "Thu Jan  1 00:00:00 UTC 1970",
    "KBUILD_BUILD_USER": "harness",
    "KBUILD_BUILD_HOST": "harness",
}
_OBJ_LINE = re.compile(r"^\s+(CC|AS|LD|AR|HOSTCC|BTF|OBJCOPY|GEN|CHK|UPD|BTFIDS|SORTTAB)\s")


class BuildError(HarnessError):
    status = Status.BUILD_ERROR

    def __init__(self, message: str, log_path: Path, *, fix: str = "") -> None:
        super().__init__(message, fix=fix, log=log_path)
        self.log_path = log_path


@dataclass(frozen=True, kw_only=True)
class Tools:
    """The target a build is for and with, and the versions of the tools that make it."""

    target: Target
    compiler: str  # the first line of the C compiler's --version
    pahole: str  # its --version, and where it came from when not the host's
    ccache: bool
    pahole_tool: pahole_mod.Pahole = HOST_PAHOLE

    @property
    def ident(self) -> str:
        """What a stored kernel's key carries of its tools (the default pair's as it
        always was, so its stored kernels keep their keys)."""
        base = f"{self.compiler}|{self.pahole}"
        return base if self.target.is_default else f"{base}|{self.target.name}"


def tools(tgt: Target | None = None) -> Tools:
    """The tools of a target on this host; the default target when none is given."""
    tgt = tgt or target.default()
    lines = (proc.version_output(tgt.cc) or "").splitlines()
    chosen = pahole_mod.chosen(tgt.pahole)
    version = proc.version_output(chosen.command) or "missing"
    return Tools(
        target=tgt,
        compiler=lines[0] if lines else "missing",
        pahole=f"{version} ({chosen.origin})" if chosen.origin else version,
        ccache=proc.which("ccache") is not None,
        pahole_tool=chosen,
    )


def kernel_key(tree_id: str, config_path: Path, tools: Tools) -> str:
    h = hashlib.sha256()
    h.update(tree_id.encode() + b"\n")
    h.update(config_path.read_bytes())
    h.update(tools.ident.encode())
    return h.hexdigest()[:20]


# ccache's remote storage backends (ccache 4.7, Debian 12's): URL schemes
REMOTE_SCHEMES = ("http", "redis", "file")
REMOTE_FORMS = "http://HOST[:PORT][/PATH], redis://HOST[:PORT] or file:/DIRECTORY"


def ccache_remote() -> str | None:
    """$HARNESS_CCACHE_REMOTE: a ccache remote storage that machines and CI runners share
    (read after the local cache; what is compiled is written to both), or None."""
    url = os.environ.get("HARNESS_CCACHE_REMOTE", "").strip()
    if not url:
        return None
    scheme, colon, _rest = url.partition(":")
    if not colon or scheme not in REMOTE_SCHEMES:
        raise HarnessError(f"HARNESS_CCACHE_REMOTE={url!r} is not a storage ccache can use",
                           fix=f"give {REMOTE_FORMS} (ccache's attributes may follow a |), or "
                               "unset it to use the local cache alone")
    return url


def _make_env(tools: Tools) -> dict[str, str]:
    env = dict(_BUILD_ENV)
    if tools.ccache:
        root = paths.cache_root()
        remote = ccache_remote()
        if remote:
            # a remote that cannot be reached is a miss for ccache, never a failed build
            env["CCACHE_REMOTE_STORAGE"] = remote
        env.update(
            {
                "CCACHE_DIR": str(root / "ccache"),
                # Relative paths in the hash: worktrees at other paths still hit.
                "CCACHE_BASEDIR": str(root),
                "CCACHE_NOHASHDIR": "1",
                "CCACHE_SLOPPINESS": "time_macros,include_file_mtime,include_file_ctime",
                # objtool, resolve_btfids and their libbpf/libsubcmd name each object's
                # absolute path as its dependency target (-Wp,-MT,...), which put the
                # worktree into every key: they missed in each new tree (57 of 59 misses,
                # ~25 s). The target only names the rule in the .d file, and the tools'
                # fixdep drops it, so it may stay out of the hash.
                "CCACHE_IGNOREOPTIONS": "-Wp,-MT,*",
                "CCACHE_MAXSIZE": os.environ.get("CCACHE_MAXSIZE", "20G"),
            }
        )
    return env


def remote_directory() -> Path | None:
    """A file: remote storage's directory (bound writable in the sandbox), else None."""
    remote = ccache_remote()
    if remote is None or not remote.startswith("file:"):
        return None
    where = remote.split("|", 1)[0].removeprefix("file:")
    return Path("/" + where.lstrip("/")) if where.startswith("//") else Path(where)


def reach(tree: Path, tools: Tools) -> sandbox.Reach:
    """What make of a kernel tree may touch in the sandbox: the worktree with its build
    directory, the compiler cache (and a file: remote storage) writable; the tree's own
    git repository read-only (setlocalversion)."""
    caches: list[Path] = []
    if tools.ccache:
        caches.append(paths.sub("ccache"))
        if (remote := remote_directory()) is not None:
            caches.append(remote)
    return sandbox.for_tree(tree, write=tuple(caches), read=tools.pahole_tool.reads)


def make_env(tools: Tools) -> dict[str, str]:
    """make's environment: the fixed build identity, and ccache's settings."""
    env = _make_env(tools)
    remote = env.get("CCACHE_REMOTE_STORAGE", "")
    if remote and not remote.startswith("file:") and sandbox.policy().enabled:
        # an http: or redis: storage needs the network, which the sandbox has not: ccache
        # would try it for every compile. A file: storage is bound into the sandbox.
        del env["CCACHE_REMOTE_STORAGE"]
        _say_remote_unused(remote)
    return env


@functools.cache
def _say_remote_unused(remote: str) -> None:
    log.warning("HARNESS_CCACHE_REMOTE=%s is not used: the sandboxed build has no network "
                "(builds use the local compiler cache; a file: storage works in the "
                "sandbox, --no-sandbox keeps the network)", remote.split("|", 1)[0])


def lock_name(tree: Path) -> str:
    """The lock of the build directory of a worktree (one per worktree)."""
    return f"build-{tree.name}"


def make_argv(tree: Path, build_dir: Path, tools: Tools, *targets: str,
              jobs: int | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    argv = ["make", "-C", str(tree), f"O={build_dir}", f"-j{jobs or os.cpu_count() or 1}",
            # The debug info names sources from the tree's top (comp_dir .harness-build,
            # files ../kernel/...), not from this worktree, so an object ccache compiled
            # in another tree carries exactly the debug info this tree's compile would.
            f"KCFLAGS=-fdebug-prefix-map={tree}/="]
    tgt = tools.target
    argv += target.UNUSED_TOOLS
    if not tgt.native_default:
        argv += tgt.make_vars()
    if tools.ccache:
        argv += [f"CC=ccache {tgt.cc}", f"HOSTCC=ccache {tgt.toolchain.hostcc}"]
    elif not tgt.native_default:
        argv += [f"CC={tgt.cc}", f"HOSTCC={tgt.toolchain.hostcc}"]
    return [*argv, *tools.pahole_tool.make_vars, *extra, *targets]


def read_count(path: Path, default: int) -> int:
    """A step count an earlier build wrote; the default when there is none or it is bad."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return default


# Where a kernel build's time goes. kbuild's quiet output names each command as it starts,
# so the time from one line to the next is the named command's; each command belongs to a
# phase, and a line that names none stays in the phase before it. "compile" is all before
# vmlinux.o (compiling, archiving); "kallsyms" its symbol tables for each link pass;
# "link" the passes that link vmlinux for them and for BTF; "image" the bootable image.
# No phase but "compile" begins before vmlinux.o is linked: since 6.16 x86 compiles
# arch/x86/boot/startup/ into vmlinux, and those lines look like the image's.
BUILD_PHASES = (
    ("vmlinux.o", re.compile(r"^\s+LD\s+vmlinux\.o$")),
    ("kallsyms", re.compile(r"^\s+(KSYMS|NM)\s+\.tmp_vmlinux|^\s+AS\s+\.tmp_vmlinux.*kallsyms")),
    ("link", re.compile(r"^\s+LD\s+\.tmp_vmlinux")),
    ("btf", re.compile(r"^\s+BTF\s+")),
    # 6.17+ links vmlinux.unstripped, then copies vmlinux out of it
    ("vmlinux", re.compile(r"^\s+(LD|BTFIDS|SORTTAB)\s+vmlinux(\.unstripped)?$"
                           r"|^\s+NM\s+System\.map$|^\s+OBJCOPY\s+vmlinux$")),
    ("image", re.compile(r"^\s+\S+\s+arch/\S+/boot/")),
)


class PhaseClock:
    """The phases of one build, timed from make's output lines as they come."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.current = "compile"
        self.since = clock()
        self.spent: dict[str, float] = {}

    def line(self, text: str) -> None:
        phase = next((name for name, pattern in BUILD_PHASES if pattern.match(text)), None)
        if self.current == "compile" and phase != BUILD_PHASES[0][0]:
            return
        if phase is not None and phase != self.current:
            self._close()
            self.current = phase

    def _close(self) -> None:
        now = self.clock()
        self.spent[self.current] = self.spent.get(self.current, 0.0) + now - self.since
        self.since = now

    def parts(self) -> tuple[tuple[str, float], ...]:
        """Each phase that happened and its seconds, in the order first met."""
        self._close()
        return tuple((name, round(s, 2)) for name, s in self.spent.items())


class Progress:
    """A progress line on a terminal (stage, elapsed, steps, percent); periodic log lines if not."""

    def __init__(self, stage: str, expected: int | None) -> None:
        self.stage = stage
        self.expected = expected
        self.count = 0
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty() and not os.environ.get("CI")
        self.last = 0.0

    def line(self, text: str) -> None:
        if not _OBJ_LINE.match(text):
            return
        self.count += 1
        now = time.monotonic()
        if self.tty and now - self.last > 0.5:
            self.last = now
            sys.stderr.write("\r\x1b[K" + self.render())
            sys.stderr.flush()
        elif not self.tty and now - self.last > 120:
            self.last = now
            log.info("%s", self.render())

    def render(self) -> str:
        elapsed = time.monotonic() - self.start
        pct = ""
        if self.expected:
            pct = f" ~{min(99, 100 * self.count // self.expected)}%"
        return f"[{self.stage}] {elapsed:5.0f}s  {self.count} steps{pct}"

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def build(tree: Path, build_dir: Path, *, log_dir: Path, tools: Tools,
          jobs: int | None = None) -> KernelImage:
    """Build (or take from the store) the kernel for the tree's HEAD and build_dir/.config."""
    config = build_dir / ".config"
    tree_id = git(tree, "rev-parse", "HEAD^{tree}", what="git rev-parse").strip()
    key = kernel_key(tree_id, config, tools)
    stored = paths.sub("kernels") / key
    if stored_image(stored).exists() and not _gcov_without_notes(stored):
        log.info("kernel %s already built (%s); not building again", key, stored)
        return _image_from_store(stored, tree, build_dir, cached=True)
    build_log = log_dir / "build.log"
    with locked(lock_name(tree), wait_message=f"building in {build_dir}"):
        stats = build_dir / ".harness-steps"
        expected = read_count(stats, 2600)
        progress = Progress("build", expected)
        phases = PhaseClock()

        def each_line(text: str) -> None:
            progress.line(text)
            phases.line(text)

        # A dirty tree inside the source dir makes out-of-tree builds refuse to start.
        argv = make_argv(tree, build_dir, tools, tools.target.arch.make_target, jobs=jobs)
        result = proc.run(argv, env=make_env(tools), timeout=BUILD_TIMEOUT_S,
                          log_path=build_log, on_line=each_line, keep_output=False,
                          sandbox=reach(tree, tools))
        progress.done()
        if not result.ok:
            raise _build_error(build_log, result)
        if progress.count > 100:
            atomic.write_text(stats, str(progress.count))
        parts = phases.parts()
        log.info("built in %.0fs (%d steps: %s)", result.duration_s, progress.count,
                 ", ".join(f"{name} {s:.1f}s" for name, s in parts))
        _store(build_dir, stored, key=key, tree_id=tree_id, tools=tools,
               seconds=result.duration_s)
    return replace(_image_from_store(stored, tree, build_dir, cached=False),
                   build_parts=parts)


def _build_error(build_log: Path, result: proc.Completed) -> BuildError:
    if result.timed_out:
        return BuildError(f"kernel build timed out after {result.duration_s:.0f}s "
                          f"(log: {build_log})", build_log)
    # no verdict on the tree when a write found no space: the same build passes with room
    proc.check_space(result, "kernel build", build_log)
    shown = "\n".join(w1_warnings.first_errors(build_log.read_text(errors="replace"), 20))
    return BuildError(f"kernel build failed (exit {result.returncode}); log: {build_log}\n"
                      f"{shown}", build_log)


def _store(build_dir: Path, stored: Path, *, key: str, tree_id: str, tools: Tools,
           seconds: float) -> None:
    """Copy the artifacts in, atomically: a half-copied kernel is never seen as built.
    Each is a regular file of the build directory: the build (the tree's code) cannot
    make the harness copy a file it could not read itself."""
    def built(rel: str) -> Path:
        return sandbox.regular_file(build_dir / rel, build_dir)

    with atomic.directory(stored, prefix=".store-") as scratch:
        arch = tools.target.arch
        shutil.copyfile(built(arch.image), scratch / arch.image_name)
        shutil.copyfile(built("vmlinux"), scratch / "vmlinux")
        shutil.copyfile(built(".config"), scratch / "config")
        shutil.copyfile(built("System.map"), scratch / "System.map")
        # A gcov kernel's notes files: its counters are read against these, not against
        # the build directory, which the next build in this tree (a mutant, another
        # revision) rewrites with notes that no longer match this kernel's counters.
        for gcno in _gcno_files(build_dir):
            dest = scratch / GCNO_DIR / gcno.relative_to(build_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(built(str(gcno.relative_to(build_dir))), dest)
        release = built("include/config/kernel.release").read_text().strip()
        meta = {"key": key, "tree_id": tree_id, "release": release,
                "compiler": tools.compiler, "pahole": tools.pahole,
                "arch": arch.name, "toolchain": tools.target.toolchain.name,
                "image": arch.image_name, "build_seconds": round(seconds, 1)}
        (scratch / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


GCNO_DIR = "gcno"  # in a stored gcov kernel: its .gcno files at their objects' paths


def _is_gcov(config: Path) -> bool:
    """Was the kernel of this .config built with CONFIG_GCOV_KERNEL."""
    return config.exists() and re.search(r"^CONFIG_GCOV_KERNEL=y$", config.read_text(
        errors="replace"), re.M) is not None


def _gcno_files(build_dir: Path) -> list[Path]:
    return sorted(build_dir.rglob("*.gcno")) if _is_gcov(build_dir / ".config") else []


def _gcov_without_notes(stored: Path) -> bool:
    """A gcov kernel stored without its notes files: its counters cannot be read, so it is
    built again (the build directory's notes may belong to a later build)."""
    return _is_gcov(stored / "config") and not (stored / GCNO_DIR).is_dir()


def gcno_dir(image: KernelImage) -> Path | None:
    """The notes files stored with a gcov kernel, or None (a kernel stored without them)."""
    stored = image.boot_image.parent / GCNO_DIR
    return stored if stored.is_dir() else None


def stored_image(stored: Path) -> Path:
    """A stored kernel's image: named in its meta.json (bzImage when it predates that)."""
    with contextlib.suppress(OSError, ValueError):
        return stored / str(json.loads((stored / "meta.json").read_text()).get(
            "image", "bzImage"))
    return stored / "bzImage"


def stored_build_seconds() -> dict[str, float]:
    """image path -> how long its build took, for every stored kernel (from the meta.json
    _store wrote); a kernel without a readable record is left out."""
    found: dict[str, float] = {}
    for meta in paths.sub("kernels").glob("*/meta.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            found[str(stored_image(meta.parent))] = float(
                json.loads(meta.read_text())["build_seconds"])
    return found


def _image_from_store(stored: Path, tree: Path, build_dir: Path, *, cached: bool) -> KernelImage:
    meta = json.loads((stored / "meta.json").read_text())
    return KernelImage(
        boot_image=stored_image(stored),
        arch=str(meta.get("arch", target.DEFAULT_ARCH)),
        toolchain=str(meta.get("toolchain", target.DEFAULT_TOOLCHAIN)),
        compiler=str(meta.get("compiler") or meta.get("gcc") or ""),
        pahole=str(meta.get("pahole") or ""),
        vmlinux=stored / "vmlinux",
        config=stored / "config",
        version=str(meta["release"]),
        build_dir=build_dir,
        source_dir=tree,
        cached=cached,
    )


def image_from_file(path: Path) -> KernelImage:
    """`image:PATH`: a prebuilt kernel image (bzImage, vmlinuz, arm64 Image); vmlinux with
    BTF next to it if present. Its arch is what `file` says it is."""
    if not path.is_file():
        raise BuildError(f"kernel image {path} does not exist", path)
    out = proc.run(["file", "-bL", str(path)], timeout=30).output
    m = re.search(r"version (\S+)", out)
    version = m.group(1) if m else "unknown"
    vmlinux = next((c for c in (path.parent / "vmlinux", path.with_name(f"vmlinux-{version}"))
                    if c.exists()), None)
    config = next((c for c in (path.parent / "config", path.parent / f"config-{version}")
                   if c.exists()), None)
    arch = target.arch_of_image(out) or target.DEFAULT_ARCH
    return KernelImage(boot_image=path, arch=arch, toolchain="", vmlinux=vmlinux,
                       config=config, version=version)
