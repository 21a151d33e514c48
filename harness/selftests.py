"""Selftests: find them, build them on the host against the built kernel, plan their run.

Two kinds:
- our own, a directory with `test.toml` (`selftests/<name>/` or any path): BPF objects
  compiled with clang for the BPF target against a `vmlinux.h` from the kernel's BTF,
  bpftool skeletons, userspace linked against libbpf; emits KTAP.
- `kselftest:<target>[:test,...]`: the tree's own tools/testing/selftests/<target>, built
  from the same tree and run in the guest through its own runner (run_kselftest.sh).
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import os
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from . import atomic, paths, proc
from . import build as kbuild
from .errors import HarnessError
from .guest.protocol import GuestTest
from .model import KERNEL_PHASES, KernelImage, Status

log = logging.getLogger(__name__)

CLANG = "clang-19"
BPF_CFLAGS = ("-g", "-O2", "-target", "bpf", "-D__TARGET_ARCH_x86", "-Wall", "-Werror")
# Curated kselftest subsets: the tests that run in a TCG guest in bounded time.
# What still fails there for reasons outside our patches is in expectations.toml.
CURATED = {
    "cgroup": ("test_core", "test_freezer", "test_kill", "test_memcontrol", "test_cpuset"),
}
KSELFTEST_TIMEOUT_S = 240


class SelftestError(HarnessError):
    """A selftest cannot be built (BUILD_ERROR) or found (raised with SETUP_ERROR)."""

    status = Status.BUILD_ERROR


@dataclass(frozen=True, kw_only=True)
class Manifest:
    name: str
    directory: Path
    description: str
    bpf: tuple[str, ...]
    userspace: tuple[str, ...]
    command: tuple[str, ...]
    timeout_s: int
    fmt: str
    cflags: tuple[str, ...] = ()
    bpf_cflags: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    # other test directories whose sources this one includes (-I, and part of the cache key)
    include: tuple[Path, ...] = ()
    # kernel features (features.py names) without which the test cannot run: the harness
    # skips it before the boot, with the feature probe's reason
    requires: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TestRef:
    """What --test named: our own test directory, or an in-tree kselftest target."""

    kind: str  # "own" | "kselftest" | "test_progs"
    name: str
    manifest: Manifest | None = None
    target: str = ""
    only: tuple[str, ...] = ()

    @property
    def requires(self) -> tuple[str, ...]:
        return self.manifest.requires if self.manifest is not None else ()


_FORMATS = ("ktap", "test_progs", "exit")
_NEEDS = ("swap", "scratch")


def _setup_error(message: str, fix: str = "") -> SelftestError:
    return SelftestError(message, fix=fix, status=Status.SETUP_ERROR)


def load_manifest(directory: Path, variant: str | None = None) -> Manifest:
    toml_path = directory / "test.toml"
    if not toml_path.exists():
        raise _setup_error(f"{directory} has no test.toml",
                           fix="a test directory describes its build and run there (see "
                               "selftests/cgroup_iter_rstat/test.toml)")
    try:
        data = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise _setup_error(f"{toml_path}: {exc}", fix="correct the TOML syntax") from None
    try:
        build = data.get("build", {})
        run = data["run"]
        name = str(data["name"])
        if variant is not None:
            variants = data.get("variants", {})
            if variant not in variants:
                raise _setup_error(f"{toml_path} has no [variants.{variant}]",
                                   fix=f"use one of: {', '.join(variants) or 'no variants'}")
            run = {**run, **variants[variant]}
            name = f"{name}@{variant}"
        manifest = Manifest(
            name=name,
            directory=directory.resolve(),
            description=str(data.get("description", "")),
            bpf=tuple(build.get("bpf", ())),
            userspace=tuple(build.get("userspace", ())),
            command=tuple(run["command"]),
            timeout_s=int(run.get("timeout", 120)),
            fmt=str(run.get("format", "ktap")),
            cflags=tuple(build.get("cflags", ())),
            needs=tuple(run.get("needs", ())),
            bpf_cflags=tuple(build.get("bpf_cflags", ())),
            include=tuple(_include_dir(toml_path, d) for d in build.get("include", ())),
            requires=tuple(str(r) for r in data.get("requires", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise _setup_error(f"{toml_path}: missing or invalid field {exc}",
                           fix="see selftests/cgroup_iter_rstat/test.toml") from None
    problems = []
    if not re.fullmatch(r"[A-Za-z0-9_.@+-]+", manifest.name) or manifest.name in {
            p.value for p in KERNEL_PHASES}:
        problems.append(f"name {manifest.name!r}: letters, digits and _.@+- only, and not "
                        "boot, setup or shutdown (the kernel's own results)")
    if manifest.fmt not in _FORMATS:
        problems.append(f"format {manifest.fmt!r}: one of {', '.join(_FORMATS)}")
    if bad := [n for n in manifest.needs if n not in _NEEDS]:
        problems.append(f"needs {bad}: only {', '.join(_NEEDS)}")
    if manifest.timeout_s <= 0:
        problems.append(f"timeout {manifest.timeout_s}: seconds, > 0")
    if any("\t" in part or "\n" in part for part in manifest.command):
        problems.append("command: no tabs or newlines (the guest runner's plan is one line "
                        "per test); put a longer script in a file of the test directory")
    if problems:
        raise _setup_error(f"{toml_path}: " + "; ".join(problems))
    return manifest


def _include_dir(toml_path: Path, name: str) -> Path:
    d = (toml_path.parent / name).resolve()
    if not d.is_dir():
        raise _setup_error(f"{toml_path}: [build] include {name!r}: no directory {d}")
    return d


def own_tests() -> list[str]:
    root = paths.repo_root() / "selftests"
    return sorted(p.name for p in root.iterdir() if (p / "test.toml").exists())


def resolve(text: str) -> TestRef:
    """What a --test or matrix `tests` entry names; SETUP_ERROR (with the fix) if nothing.

    Own tests are read completely here (test.toml validated); kselftest: and test_progs:
    names are checked against the kernel tree once it exists (`check_in_tree`).
    """
    if text.startswith("test_progs:"):
        name = text.removeprefix("test_progs:")
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise _setup_error(f"{text}: not a test_progs test name",
                               fix="test_progs:TEST, e.g. test_progs:cgroup_iter")
        return TestRef(kind="test_progs", name=text, target=name)
    if text.startswith("kselftest:"):
        _, target, *rest = text.split(":")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*", target):
            raise _setup_error(f"{text!r}: kselftest: needs a target",
                               fix="kselftest:TARGET[:TEST,...], e.g. kselftest:cgroup")
        only = tuple(rest[0].split(",")) if rest and rest[0] else CURATED.get(target, ())
        return TestRef(kind="kselftest", name=text, target=target, only=only)
    # NAME@VARIANT picks [variants.VARIANT] of test.toml (e.g. a full-length benchmark).
    base, _, variant = text.partition("@")
    candidate = Path(base)
    if candidate.is_dir():
        m = load_manifest(candidate, variant or None)
        return TestRef(kind="own", name=m.name, manifest=m)
    in_repo = paths.repo_root() / "selftests" / base
    if base and in_repo.is_dir():
        m = load_manifest(in_repo, variant or None)
        return TestRef(kind="own", name=m.name, manifest=m)
    known = own_tests()
    close = difflib.get_close_matches(base, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise _setup_error(f"test {text!r} not found: not a directory with test.toml, nor a test "
                       "under selftests/, nor kselftest:TARGET or test_progs:TEST",
                       fix=f"{hint}our tests: {', '.join(known)}")


def check_in_tree(ref: TestRef, tree: Path) -> None:
    """kselftest:/test_progs: names against the kernel tree, before anything is built."""
    if ref.kind == "kselftest":
        root = tree / "tools/testing/selftests"
        if not (root / ref.target / "Makefile").is_file():
            targets = sorted(p.name for p in root.iterdir() if (p / "Makefile").is_file())
            close = difflib.get_close_matches(ref.target, targets, n=1)
            hint = f"did you mean kselftest:{close[0]}? " if close else ""
            raise _setup_error(f"{ref.name}: this kernel tree has no "
                               f"tools/testing/selftests/{ref.target}",
                               fix=f"{hint}targets here: {', '.join(targets)}")
        makefile = (root / ref.target / "Makefile").read_text(errors="replace")
        words = set(re.findall(r"[A-Za-z0-9_.-]+", makefile))
        missing = [t for t in ref.only if t not in words]
        if missing:
            raise _setup_error(f"{ref.name}: tools/testing/selftests/{ref.target}/Makefile "
                               f"builds no test named {', '.join(missing)}",
                               fix="check the names against that Makefile's TEST_GEN_PROGS "
                                   "and TEST_PROGS")
    elif ref.kind == "test_progs":
        test_progs_sources(tree / "tools/testing/selftests/bpf", (ref.target,))


def skeleton_name(bpf_source: str) -> str:
    """cgroup_iter_rstat.bpf.c -> cgroup_iter_rstat_bpf (the C identifier bpftool uses)."""
    stem = bpf_source.removesuffix(".c").replace(".", "_")
    return re.sub(r"[^A-Za-z0-9_]", "_", stem)


def tree_hash(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(directory)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def vmlinux_h(kernel: KernelImage, *, log_dir: Path) -> Path:
    """vmlinux.h from the kernel's BTF, once per kernel."""
    if kernel.vmlinux is None:
        raise SelftestError(f"{kernel.bzimage} has no vmlinux with BTF next to it; BPF tests "
                            "need one (put vmlinux beside the image)")
    key = hashlib.sha256(str(kernel.vmlinux).encode() + str(kernel.vmlinux.stat().st_mtime_ns)
                         .encode()).hexdigest()[:16]
    out = paths.sub("vmlinux-h") / key / "vmlinux.h"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        res = proc.check([proc.require("bpftool"), "btf", "dump", "file", str(kernel.vmlinux),
                          "format", "c"], what="bpftool btf dump", timeout=300,
                         log_path=None)
        atomic.write_text(out, res.output)
    return out


def build_own(manifest: Manifest, kernel: KernelImage, *, log_dir: Path) -> Path:
    """Compile the BPF objects, skeletons and userspace; returns the output directory."""
    header = vmlinux_h(kernel, log_dir=log_dir)
    trees = "|".join(tree_hash(d) for d in (manifest.directory, *manifest.include))
    # The header's content, not the kernel: a kernel whose types did not change (a
    # one-line change in a .c file) does not rebuild the tests (CO-RE relocates them).
    btf_types = hashlib.sha256(header.read_bytes()).hexdigest()
    key = hashlib.sha256(f"{btf_types}|{trees}".encode())
    out = paths.sub("selftests") / f"{manifest.directory.name}-{key.hexdigest()[:16]}"
    if (out / ".built").exists():
        return out
    blog = log_dir / f"build-{manifest.name}.log"
    clang = proc.require(CLANG)
    bpftool = proc.require("bpftool")
    includes = [f"-I{d}" for d in manifest.include]
    with atomic.directory(out, prefix=f".{manifest.name}-") as scratch:
        shutil.copyfile(header, scratch / "vmlinux.h")
        for src in manifest.bpf:
            stem = src.removesuffix(".c")
            obj = scratch / f"{stem}.o"
            proc.check([clang, *BPF_CFLAGS, *manifest.bpf_cflags, f"-I{scratch}",
                        f"-I{manifest.directory}", *includes, "-c", str(manifest.directory / src),
                        "-o", str(obj)], what=f"clang {src}", timeout=300, log_path=blog)
            skel = proc.check([bpftool, "gen", "skeleton", str(obj), "name",
                               skeleton_name(src)], what=f"bpftool gen skeleton {src}",
                              timeout=120, log_path=None)
            (scratch / f"{src.removesuffix('.bpf.c')}.skel.h").write_text(skel.output)
        if manifest.userspace:
            proc.check(["gcc", "-O2", "-g", "-Wall", "-Wextra", *manifest.cflags,
                        f"-I{scratch}", f"-I{manifest.directory}", *includes,
                        *(str(manifest.directory / s) for s in manifest.userspace),
                        "-o", str(scratch / manifest.name.partition("@")[0]),
                        "-lbpf", "-lelf", "-lz", "-lm"],
                       what=f"building {manifest.name}", timeout=300, log_path=blog)
        (scratch / ".built").write_text("ok\n")
    return out


def build_kselftest(target: str, tree: Path, build_dir: Path, *, log_dir: Path) -> Path:
    """Build and install tools/testing/selftests/<target> from the tree, with its runner."""
    tree_id = proc.check(["git", "-C", str(tree), "rev-parse", "HEAD^{tree}"],
                         what="git rev-parse", timeout=60).output.strip()
    out = paths.sub("kselftests") / f"{target}-{tree_id[:16]}"
    if (out / "run_kselftest.sh").exists():
        return out
    klog = log_dir / f"build-kselftest-{target}.log"
    proc.check(["make", "-C", str(tree), f"O={build_dir}", "-s", "headers"],
               what="make headers", timeout=900, log_path=klog)
    kbuild = paths.sub("kselftest-build") / f"{target}-{tree_id[:16]}"
    with atomic.directory(out, prefix=f".{target}-") as scratch:
        proc.check(["make", "-C", str(tree / "tools/testing/selftests"), f"TARGETS={target}",
                    f"O={kbuild}", f"KHDR_INCLUDES=-isystem {build_dir}/usr/include",
                    f"INSTALL_PATH={scratch}", "install"],
                   what=f"building kselftest {target}", timeout=1800, log_path=klog)
    return out


def plan_own(manifest: Manifest, built: Path) -> GuestTest:
    import shlex

    return GuestTest(name=manifest.name, timeout_s=manifest.timeout_s, cwd=built,
                     command=shlex.join(manifest.command), fmt=manifest.fmt, needs=manifest.needs)


def plan_kselftest(ref: TestRef, installed: Path) -> list[GuestTest]:
    available = set()
    listing = installed / "kselftest-list.txt"
    if listing.exists():
        for line in listing.read_text().splitlines():
            t, _, name = line.partition(":")
            if t == ref.target:
                available.add(name)
    wanted = ref.only or tuple(sorted(available))
    missing = [w for w in wanted if available and w not in available]
    if missing:
        raise SelftestError(f"kselftest {ref.target} has no test(s) {', '.join(missing)}; "
                            f"it has: {', '.join(sorted(available))}")
    # The tests write temporary files into their working directory (test_memcontrol's
    # page-cache tests create an O_TMPFILE there and read its holes to fill page cache,
    # which on tmpfs allocates nothing): run them from a copy on the runner's ext2 scratch
    # file system, not from the host's read-only root or virtme-ng's tmpfs-backed /tmp.
    scratch = f"$HARNESS_SCRATCH/kselftest-{ref.target}"
    if not wanted:
        raise SelftestError(f"kselftest {ref.target}: its kselftest-list.txt names no test",
                            fix="check the target's Makefile (TEST_GEN_PROGS, TEST_PROGS)",
                            status=Status.SETUP_ERROR)
    return [
        # a nested target (net/forwarding) must not make a path of the name
        GuestTest(name=f"kselftest-{ref.target}-{t}".replace("/", "_"),
                  timeout_s=KSELFTEST_TIMEOUT_S,
                  cwd=installed,
                  command=f"rm -rf {scratch} && mkdir -p {scratch} && "
                          f"cp -a . {scratch} && cd {scratch} && "
                          f"./run_kselftest.sh -o {KSELFTEST_TIMEOUT_S - 10} "
                          f"-t {ref.target}:{t}",
                  needs=("swap", "scratch"))
        for t in wanted
    ]


# ---- test_progs: the kernel's own BPF selftests (tools/testing/selftests/bpf) ----

TEST_PROGS_TIMEOUT_S = 600
TEST_PROGS_BUILD_TIMEOUT_S = 4 * 3600
_BPF_SELFTEST_LINE = re.compile(r"^\s+(CLNG-BPF|GEN-SKEL|TEST-OBJ|EXT-OBJ|LIB|BINARY|CC|LD|"
                                r"GEN|MOD|INSTALL|LINK-BPF|TEST-HDR)\b")


def test_progs_sources(bpf_dir: Path, names: tuple[str, ...]) -> tuple[Path, ...]:
    """The prog_tests/*.c files that define the named tests (test_NAME / serial_test_NAME)."""
    files = []
    for name in names:
        rx = re.compile(rf"^void (serial_)?test_{re.escape(name)}\(void\)", re.MULTILINE)
        own = bpf_dir / "prog_tests" / f"{name}.c"
        candidates = [own] if own.exists() else []
        candidates += sorted((bpf_dir / "prog_tests").glob("*.c"))
        found = [f for f in candidates if rx.search(f.read_text(errors="replace"))]
        if not found:
            raise _setup_error(f"test_progs:{name}: no prog_tests/*.c of this tree defines "
                               f"test_{name}",
                               fix=f"check the name against {bpf_dir / 'prog_tests'}")
        files.append(found[0])
    return tuple(dict.fromkeys(files))


def build_test_progs(tree: Path, build_dir: Path, kernel: KernelImage,
                     names: tuple[str, ...], *, log_dir: Path) -> Path:
    """Build test_progs of the tree against this kernel, with the named tests; cached.

    test_progs compiles every BPF program of tools/testing/selftests/bpf against the
    kernel's BTF and builds bpf_testmod.ko against its build directory. It also compiles
    every prog_tests/*.c, and one broken test anywhere stops the build (Debian's 6.12.117
    has prog_tests/bpf_attr_size.c without the BPF program its skeleton needs), so it is
    built from a copy of the directory, at the same depth (relative paths and symlinks
    hold), whose prog_tests/ keeps only the requested tests' files; every BPF program
    stays. Cached per (kernel, tree, tests). An interrupted build resumes.
    """
    if kernel.vmlinux is None:
        raise SelftestError("test_progs needs the kernel's vmlinux (BTF)")
    tree_id = proc.check(["git", "-C", str(tree), "rev-parse", "HEAD^{tree}"],
                         what="git rev-parse", timeout=60).output.strip()
    bpf_dir = tree / "tools/testing/selftests/bpf"
    wanted = test_progs_sources(bpf_dir, names)
    key = hashlib.sha256(f"{kernel.bzimage.parent.name}|{tree_id}|"
                         f"{','.join(f.name for f in wanted)}".encode()).hexdigest()[:16]
    out = paths.sub("test_progs") / key
    if (out / ".built").exists():
        log.info("test_progs already built for this kernel (%s)", out)
        return out
    out.mkdir(parents=True, exist_ok=True)
    blog = log_dir / "build-test_progs.log"
    tools = kbuild.toolchain()
    for tool in (CLANG, "llvm-strip-19", "rsync", "ld.lld-19"):
        proc.require(tool)
    # bpf_testmod.ko (built with test_progs) needs the kernel's Module.symvers and a build
    # directory that matches the tree: bring it up to date (a no-op when it is).
    log.info("test_progs: kernel modules and Module.symvers in %s", build_dir)
    res = proc.run(kbuild.make_argv(tree, build_dir, tools, "vmlinux", "modules"),
                   env=kbuild.make_env(tools), timeout=kbuild.BUILD_TIMEOUT_S, log_path=blog,
                   keep_output=False)
    if not res.ok:
        how = f"timed out after {res.duration_s:.0f}s" if res.timed_out else \
            f"failed (exit {res.returncode})"
        raise SelftestError(f"make vmlinux modules for test_progs {how}; log: {blog}")
    stats = paths.sub("test_progs") / ".steps"
    progress = kbuild.Progress("test_progs", kbuild.read_count(stats, 2500))
    progress_line = progress.line

    def on_line(line: str) -> None:
        if _BPF_SELFTEST_LINE.match(line):
            progress_line("  CC " + line)  # counted like a kernel build step

    # Our worktree, not the user's: the copy goes away with the next reset (git clean).
    selection = bpf_dir.parent / f"bpf-harness-{key[:8]}"
    if selection.exists():
        shutil.rmtree(selection)
    shutil.copytree(bpf_dir, selection, symlinks=True,
                    ignore=lambda d, entries: [
                        e for e in entries if Path(d).name == "prog_tests" and (
                            # tests.h is generated from the .c files present: not a stale one
                            e == "tests.h" or
                            (e.endswith(".c") and e not in {f.name for f in wanted}))])
    log.info("test_progs: building with prog_tests %s", ", ".join(f.name for f in wanted))
    argv = ["make", "-C", str(selection),
            f"-j{os.cpu_count() or 1}", f"O={build_dir}", f"OUTPUT={out}",
            f"VMLINUX_BTF={kernel.vmlinux}", f"CLANG={CLANG}", "LLVM_STRIP=llvm-strip-19",
            # No LLVM disassembler (JIT dumps in a few tests): the same build on every
            # machine, and no static link of LLVM. Its feature probe only checks a header,
            # so it says "on" wherever some llvm-*-dev is installed; the variable is final.
            "feature-llvm=0", "test_progs"]
    log.info("building test_progs (every BPF program of tools/testing/selftests/bpf; "
             "a cold build takes long on 2 CPUs; log: %s)", blog)
    res = proc.run(argv, timeout=TEST_PROGS_BUILD_TIMEOUT_S, log_path=blog,
                   on_line=on_line, keep_output=False)
    progress.done()
    if not res.ok:
        lines = blog.read_text(errors="replace").splitlines()
        errors = [ln for ln in lines if re.search(r"error:|Error \d|undefined reference", ln)]
        shown = "\n".join((errors or lines)[-15:])
        how = "timed out" if res.timed_out else f"failed (exit {res.returncode})"
        raise SelftestError(f"building test_progs {how} after {res.duration_s:.0f}s; "
                            f"log: {blog}\n{shown}")
    if progress.count > 100:
        atomic.write_text(stats, str(progress.count))
    log.info("test_progs built in %.0fs", res.duration_s)
    (out / ".built").write_text(f"{res.duration_s:.0f}\n")
    return out


def plan_test_progs(ref: TestRef, built: Path) -> GuestTest:
    # -a: the exact test name (-t would take every test whose name contains it).
    return GuestTest(
        name=ref.name, timeout_s=TEST_PROGS_TIMEOUT_S, cwd=built,
        command=f'./test_progs -a {ref.target} -J "$HARNESS_OUT/{ref.name}.json"',
        fmt="test_progs")
