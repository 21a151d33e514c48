"""Own tests that run the kernel tree's own `perf` (tools/perf), built from the tree
under test: a `test.toml` with `[build] tools = ["perf"]`.

perf is built once per (tools/ and scripts/ of the tree, build options, compilers) into
the cache, with BPF skeletons (what `perf stat --bpf-counters` needs): a perf whose
build silently dropped them (6.12's Makefile.config turns BUILD_BPF_SKEL off with only a
warning when clang, libbpf or libelf is missing) is a build error here, not a test that
then fails for the wrong reason. The test runs with `$PERF` set to that binary; the
guest sees the host's cache read-only at the same path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness import target
from harness.base import atomic, gitcmd, host, paths, proc, sandbox
from harness.base.model import KernelImage
from harness.guest.protocol import GuestTest
from harness.judge.w1_warnings import first_errors
from harness.testkinds import own
from harness.testkinds.base import BuildContext, SelftestError, TestRef, setup_error

log = logging.getLogger(__name__)

BPF = target.bpf()
KIND_NAME = "perf"
PERF_BUILD_TIMEOUT_S = 3600
# What `perf stat --bpf-counters` needs and nothing else: every optional library off, so
# the build is the same on every machine and needs only what bootstrap.sh installs
# (gcc, make, flex, bison, libelf, zlib, the BPF toolchain). NO_LIBLLVM (6.12) keeps
# perf from linking all of LLVM for its disassembler; unknown NO_* names are ignored.
PERF_MAKE_VARS = (
    "BUILD_BPF_SKEL=1", f"CLANG={BPF.clang}", f"LLVM_STRIP={BPF.strip}",
    "NO_LIBTRACEEVENT=1", "NO_JEVENTS=1", "NO_CAPSTONE=1", "NO_SHELLCHECK=1",
    "NO_LIBPYTHON=1", "NO_LIBPERL=1", "NO_DWARF=1", "NO_LIBUNWIND=1",
    "NO_LIBDW_DWARF_UNWIND=1", "NO_SLANG=1", "NO_LIBNUMA=1", "NO_LIBAUDIT=1",
    "NO_LIBCRYPTO=1", "NO_LIBCAP=1", "NO_LIBBABELTRACE=1", "NO_LZMA=1", "NO_LIBZSTD=1",
    "NO_SDT=1", "NO_JVMTI=1", "NO_LIBPFM4=1", "NO_LIBDEBUGINFOD=1", "NO_DEMANGLE=1",
    "NO_LIBLLVM=1",
    # LeakSanitizer's runtime linked into perf alone (not the bpftool its build makes
    # and runs; the guest root has liblsan0): perf_cgroup counts what perf leaks per read
    # of its BPF counters. A runtime only: it needs no instrumented code. gcc 12's static
    # liblsan aborts in its own start-up here, so it is the shared one.
    "EXTRA_PERFLIBS=-fsanitize=leak",
)
# every run of the LeakSanitizer perf on the host: no report at its exit, which would
# change its exit status; perf_cgroup asks for one where it wants it
_NO_LEAK_CHECK = {"LSAN_OPTIONS": "detect_leaks=0"}
# 6.12 ships a minimal vmlinux.h for the skeletons; older trees (6.1) generate it from a
# kernel's BTF, which must then be this kernel's (its perf_event_cgrp_id, ...).
_MINIMAL_VMLINUX_H = "tools/perf/util/bpf_skel/vmlinux/vmlinux.h"
_OPTION = re.compile(r"^\s*([\w-]+): \[\s*(on|OFF)\s*\]", re.MULTILINE)


def build_options(text: str) -> dict[str, bool]:
    """`perf version --build-options` -> feature name -> built in."""
    return {m.group(1): m.group(2) == "on" for m in _OPTION.finditer(text)}


def has_bpf_counters(build_options_text: str, obj: Path) -> bool:
    """Whether this perf build has the BPF skeletons `perf stat --bpf-counters` needs:
    `perf version --build-options` says so from 6.2 on (bpf_skeletons); 6.1's does not
    list them, so the skeleton bperf-cgroup is built from must be there as well."""
    listed = build_options(build_options_text).get("bpf_skeletons")
    return listed is not False and (obj / "util/bpf_skel/bperf_cgroup.skel.h").is_file()


def build_perf(tree: Path, kernel: KernelImage, *, log_dir: Path) -> Path:
    """tools/perf of the tree, built with BPF skeletons; the binary's path. Cached per
    content of tools/ and scripts/; built in the worktree's own perf build directory (per
    build options), so another content of tools/ (a mutant of perf's code, an edit)
    recompiles what it changed: 4-6 s where a build from nothing takes 38 s here."""
    for tool in ("make", "gcc", "flex", "bison", BPF.clang, BPF.strip):
        proc.require(tool)
    ids = [gitcmd.git(tree, "rev-parse", f"HEAD:{d}", what="git rev-parse").strip()
           for d in ("tools", "scripts")]
    extra: list[str] = []
    options = [*PERF_MAKE_VARS, proc.version_line("gcc"), proc.version_line(BPF.clang)]
    if not (tree / _MINIMAL_VMLINUX_H).is_file():
        if kernel.vmlinux is None:
            raise SelftestError("this tree's perf generates its BPF skeletons' vmlinux.h "
                                "from a kernel's BTF, and the kernel has no vmlinux")
        extra.append(f"VMLINUX_BTF={kernel.vmlinux}")
        options.append(kernel.boot_image.parent.name)
    key = hashlib.sha256("\n".join([*ids, *options]).encode()).hexdigest()[:16]
    out = paths.sub("perf") / key
    binary = out / "obj" / "perf"
    if (out / ".built").exists():
        log.info("perf already built from this tree (%s)", out)
        paths.touch(out)
        return binary
    # what make cannot see change (options, compilers, the kernel whose BTF 6.1's
    # vmlinux.h is made from) is in the build directory's name
    work = paths.sub(BUILD_DIRS) / (
        f"{tree.name}-" + hashlib.sha256("\n".join(options).encode()).hexdigest()[:12])
    incremental = (work / "obj").exists()
    blog = log_dir / ("build-perf-incremental.log" if incremental else "build-perf.log")
    res = _make_perf(tree, work, extra, blog, kernel)
    if not res.ok and incremental and not tree_errors(blog.read_text(errors="replace")):
        # an incremental build that a removed file or a stale dependency broke (no error
        # of the compiler or linker on the tree's code): once more from nothing, whose
        # failure is the tree's
        log.warning("perf's incremental build failed (log: %s); building it again from "
                    "nothing", blog)
        shutil.rmtree(work / "obj")
        blog = log_dir / "build-perf.log"
        res = _make_perf(tree, work, extra, blog, kernel)
    if not res.ok:
        proc.check_space(res, "building perf", blog)
        how = "timed out" if res.timed_out else f"failed (exit {res.returncode})"
        raise SelftestError(f"building perf {how} after {res.duration_s:.0f}s; log: {blog}\n"
                            + "\n".join(first_errors(blog.read_text(errors="replace"), 15)))
    # the tree's perf, run: sandboxed like its build
    opts = proc.run([str(work / "obj" / "perf"), "version", "--build-options"], timeout=60,
                    env=_NO_LEAK_CHECK, sandbox=sandbox.Reach(read=(work,)))
    if not has_bpf_counters(opts.output, work / "obj"):
        # 6.12: "Makefile.config:NNN: Warning: Disabled BPF skeletons as ..."
        warnings = [ln for ln in blog.read_text(errors="replace").splitlines()
                    if "BPF skeletons" in ln]
        raise SelftestError(
            "perf was built without BPF skeletons (perf stat --bpf-counters needs them); "
            f"log: {blog}\n" + "\n".join(warnings[-5:] or opts.output.splitlines()[-5:]),
            fix=host.fix_for("perf's BPF skeletons"))
    if (out / ".built").exists():
        # the same content built meanwhile from another worktree: kept, its tests'
        # run directories with it (a guest may be using them)
        return binary
    with atomic.directory(out, prefix=f".{key}-") as scratch:
        (scratch / "obj").mkdir()
        shutil.copy2(sandbox.regular_file(work / "obj" / "perf", work), scratch / "obj" / "perf")
        (scratch / "build-options.txt").write_text(opts.output)
        (scratch / ".built").write_text(f"{res.duration_s:.0f}\n")
    log.info("perf built in %.0fs with BPF skeletons (%s)", res.duration_s, binary)
    return binary


# the compiler's or the linker's word on the tree's code: file:line[:col]: [fatal ]error:
_TREE_ERROR = re.compile(r"^[^\s:]+:\d+:(?:\d+:)? (?:fatal )?error: |undefined reference to ")


def tree_errors(log_text: str) -> list[str]:
    """The lines of a build log where the compiler or the linker refused the tree's code
    (a failure no build from nothing would mend)."""
    return [ln for ln in log_text.splitlines() if _TREE_ERROR.search(ln)]


BUILD_DIRS = "perf-build"  # in the cache (cache.TEST_BUILDS): a worktree's, per options


def _make_perf(tree: Path, work: Path, extra: Sequence[str], blog: Path,
               kernel: KernelImage) -> proc.Completed:
    (work / "obj").mkdir(parents=True, exist_ok=True)
    paths.touch(work)
    argv = ["make", "-C", str(tree / "tools/perf"), f"O={work / 'obj'}",
            f"-j{os.cpu_count() or 1}", *PERF_MAKE_VARS, *extra]
    log.info("building perf from %s in %s (log: %s)", tree, work, blog)
    btf = (kernel.vmlinux,) if extra and kernel.vmlinux is not None else ()
    return proc.run(argv, timeout=PERF_BUILD_TIMEOUT_S, log_path=blog, keep_output=False,
                    env=_NO_LEAK_CHECK, sandbox=sandbox.for_tree(tree, write=(work,), read=btf))


class PerfTests:
    """Claims our own tests whose manifest asks for the tree's perf; built under the tree
    lock (perf is built from the tree) and run like any own test, with $PERF."""

    name = KIND_NAME
    from_tree = True
    # the tree's perf, built for the host: a guest of another arch cannot run it yet
    host_only = True

    def resolve(self, text: str) -> TestRef | None:
        ref = own.resolve(text)
        if ref.manifest is None or "perf" not in ref.manifest.tools:
            return None
        return TestRef(kind=KIND_NAME, name=ref.name, manifest=ref.manifest)

    def check_in_tree(self, ref: TestRef, tree: Path) -> None:
        if not (tree / "tools/perf/Makefile.perf").is_file():
            raise setup_error(f"{ref.name} runs the tree's perf, and this tree has no "
                                  "tools/perf", fix="use a kernel tree with tools/perf")

    def build(self, refs: Sequence[TestRef], ctx: BuildContext) -> Mapping[str, Path]:
        assert ctx.tree is not None
        binary = build_perf(ctx.tree, ctx.kernel, log_dir=ctx.log_dir)
        out = {}
        for ref in refs:
            assert ref.manifest is not None
            built = own.build_own(ref.manifest, ctx.kernel, log_dir=ctx.log_dir,
                                  kselftest=ctx.kselftest, bpftool=ctx.bpftool)
            out[ref.name] = _with_perf(built, binary)
        return out

    def plan(self, ref: TestRef, built: Path) -> list[GuestTest]:
        assert ref.manifest is not None
        test = own.plan_own(ref.manifest, built)
        return [GuestTest(name=test.name, timeout_s=test.timeout_s, cwd=test.cwd,
                          command=f"PERF={shlex.quote(str(built / 'perf'))} {test.command}",
                          fmt=test.fmt, needs=test.needs)]


def _with_perf(built: Path, binary: Path) -> Path:
    """The test's build output and this perf (as ./perf), in a directory of their own:
    the same test runs with another tree's perf from another directory."""
    run_dir = binary.parent.parent / "tests" / built.name
    if not (run_dir / ".built").exists():
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        with atomic.directory(run_dir, prefix=f".{built.name}-") as scratch:
            shutil.copytree(built, scratch, dirs_exist_ok=True, symlinks=True)
            (scratch / "perf").symlink_to(binary)
    return run_dir


KIND = PerfTests()
