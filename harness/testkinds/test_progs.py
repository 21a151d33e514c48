"""`test_progs:TEST`: one test of the kernel's own BPF selftests
(tools/testing/selftests/bpf), test_progs built from the tree against the built kernel.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness import target
from harness.base import atomic, gitcmd, paths, proc, sandbox
from harness.base.model import KernelImage
from harness.guest.protocol import GuestTest
from harness.judge.w1_warnings import error_lines, first_errors
from harness.kernel import build as kbuild
from harness.testkinds.base import BuildContext, SelftestError, TestRef, setup_error

log = logging.getLogger(__name__)

BPF = target.bpf()
PREFIX = "test_progs:"
TEST_PROGS_TIMEOUT_S = 600
TEST_PROGS_BUILD_TIMEOUT_S = 4 * 3600
_BPF_SELFTEST_LINE = re.compile(r"^\s+(CLNG-BPF|GEN-SKEL|TEST-OBJ|EXT-OBJ|LIB|BINARY|CC|LD|"
                                r"GEN|MOD|INSTALL|LINK-BPF|TEST-HDR)\b")


GLOB_CHARS = re.compile(r"[*?]")


def test_progs_sources(bpf_dir: Path, names: tuple[str, ...]) -> tuple[Path, ...]:
    """The prog_tests/*.c files that define the named tests (test_NAME / serial_test_NAME);
    a name with * or ? (cgroup_*) takes every file that defines a test it matches."""
    files = []
    for name in names:
        pattern = "".join({"*": r"\w*", "?": r"\w"}.get(c, re.escape(c)) for c in name)
        rx = re.compile(rf"^void (serial_)?test_({pattern})\(void\)", re.MULTILINE)
        own = bpf_dir / "prog_tests" / f"{name}.c"
        candidates = [own] if own.exists() else []
        candidates += sorted((bpf_dir / "prog_tests").glob("*.c"))
        found = [f for f in candidates if rx.search(f.read_text(errors="replace"))]
        if not found:
            raise setup_error(f"test_progs:{name}: no prog_tests/*.c of this tree defines "
                               f"test_{name}",
                               fix=f"check the name against {bpf_dir / 'prog_tests'}")
        files += found if GLOB_CHARS.search(name) else found[:1]
    return tuple(dict.fromkeys(files))


def build_test_progs(tree: Path, build_dir: Path, kernel: KernelImage,
                     names: tuple[str, ...], *, log_dir: Path,
                     kernel_target: target.Target | None = None) -> Path:
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
    tree_id = gitcmd.git(tree, "rev-parse", "HEAD^{tree}", what="git rev-parse").strip()
    bpf_dir = tree / "tools/testing/selftests/bpf"
    wanted = test_progs_sources(bpf_dir, names)
    key = hashlib.sha256(f"{kernel.boot_image.parent.name}|{tree_id}|"
                         f"{','.join(f.name for f in wanted)}".encode()).hexdigest()[:16]
    out = paths.sub("test_progs") / key
    if (out / ".built").exists():
        log.info("test_progs already built for this kernel (%s)", out)
        paths.touch(out)
        return out
    out.mkdir(parents=True, exist_ok=True)
    blog = log_dir / "build-test_progs.log"
    # `make vmlinux modules` in the kernel's O= directory, and bpf_testmod's BTF, with the
    # target the kernel was built with (its pahole: harness/target/pahole.toml's rule for
    # the tree and its fragments): another would relink vmlinux with other BTF
    tools = kbuild.tools(kernel_target or target.select(
        kernel.arch, kernel.toolchain or target.DEFAULT_TOOLCHAIN))
    for tool in (BPF.clang, BPF.strip, "rsync", BPF.ld):
        proc.require(tool)
    # bpf_testmod.ko (built with test_progs) needs the kernel's Module.symvers and a build
    # directory that matches the tree: bring it up to date (a no-op when it is).
    log.info("test_progs: kernel modules and Module.symvers in %s", build_dir)
    res = proc.run(kbuild.make_argv(tree, build_dir, tools, "vmlinux", "modules"),
                   env=kbuild.make_env(tools), timeout=kbuild.BUILD_TIMEOUT_S, log_path=blog,
                   keep_output=False, sandbox=kbuild.reach(tree, tools))
    if not res.ok:
        proc.check_space(res, "make vmlinux modules for test_progs", blog)
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
            f"VMLINUX_BTF={kernel.vmlinux}", f"CLANG={BPF.clang}", f"LLVM_STRIP={BPF.strip}",
            # The BPF objects whose rule names no ISA (7.2's libarena) get bpf.toml's cpu:
            # clang 19's default lacks what 7.2's uses. The variable is only ever given to
            # clang --target=bpf* (CLANG itself is run for the host too, where -mcpu is an
            # error); every arch of ours is little-endian; 6.12's Makefile has no such name.
            f"BPF_TARGET_ENDIAN=--target=bpfel -mcpu={BPF.cpu}",
            # mainline's permissive build (6.12's Makefile has no such name): a BPF object
            # that does not compile is left out (SKIP-BPF ...) instead of stopping the
            # build; a test asked for that is left out is an error below
            "BPF_STRICT_BUILD=0",
            # bpf_testmod.ko is built in the kernel's O= directory: with its compiler
            *tools.target.kbuild_vars(),
            # and its BTF with the kernel's pahole (HARNESS_PAHOLE: kernel/pahole.py)
            *tools.pahole_tool.make_vars,
            # No LLVM disassembler (JIT dumps in a few tests): the same build on every
            # machine, and no static link of LLVM. Its feature probe only checks a header,
            # so it says "on" wherever some llvm-*-dev is installed; the variable is final.
            "feature-llvm=0", "test_progs"]
    log.info("building test_progs (every BPF program of tools/testing/selftests/bpf; "
             "a cold build takes long on 2 CPUs; log: %s)", blog)
    res = proc.run(argv, timeout=TEST_PROGS_BUILD_TIMEOUT_S, log_path=blog,
                   on_line=on_line, keep_output=False,
                   sandbox=sandbox.for_tree(tree, write=(out,), read=(
                       kernel.vmlinux, *tools.pahole_tool.reads)))
    progress.done()
    if not res.ok:
        proc.check_space(res, "building test_progs", blog)
        text = blog.read_text(errors="replace")
        errors = error_lines(text)
        shown = "\n".join(first_errors(text, 15))
        how = "timed out" if res.timed_out else f"failed (exit {res.returncode})"
        raise SelftestError(f"building test_progs {how} after {res.duration_s:.0f}s; "
                            f"log: {blog}\n{shown}", log=blog,
                            fix=undeclared_kfuncs_fix(errors, _pahole_version(kernel)))
    left_out = skipped(blog.read_text(errors="replace").splitlines())
    lost = sorted(f.name for f in wanted if f"{f.stem}.test.o" in left_out.get("SKIP-TEST", []))
    if lost:
        raise SelftestError(
            f"building test_progs: the tests asked for did not compile: {', '.join(lost)} "
            f"(the tree's permissive build left them out); log: {blog}", log=blog,
            fix="see their errors in the log: the tree's tests and its kernel (or the "
                "compiler) disagree")
    if left_out:
        log.warning("test_progs: the tree's permissive build left out what did not compile "
                    "(none of the tests asked for): %s; log: %s", "; ".join(
                        f"{kind.removeprefix('SKIP-').lower()} {', '.join(names[:6])}"
                        + (f" and {len(names) - 6} more" if len(names) > 6 else "")
                        for kind, names in left_out.items()), blog)
    if progress.count > 100:
        atomic.write_text(stats, str(progress.count))
    log.info("test_progs built in %.0fs", res.duration_s)
    (out / ".built").write_text(f"{res.duration_s:.0f}\n")
    return out


# pahole writes the kernel's kfuncs into its BTF as declarations (decl_tag_kfuncs)
# from 1.27: bpftool's vmlinux.h declares them only then, and the BPF selftests of
# newer trees call kfuncs they do not declare themselves.
KFUNC_DECL_PAHOLE = 127
_UNDECLARED_KFUNC = re.compile(r"call to undeclared function '(bpf_\w+)'")


def _pahole_version(kernel: KernelImage) -> int | None:
    """CONFIG_PAHOLE_VERSION of the kernel's .config (the pahole its BTF was made with)."""
    if kernel.config is None or not kernel.config.exists():
        return None
    m = re.search(r"^CONFIG_PAHOLE_VERSION=(\d+)$", kernel.config.read_text(errors="replace"),
                  re.MULTILINE)
    return int(m.group(1)) if m else None


def undeclared_kfuncs_fix(errors: list[str], pahole: int | None) -> str:
    """The fix when BPF programs call kfuncs vmlinux.h does not declare because the
    kernel's BTF was made by a pahole older than 1.27; "" for any other failure."""
    called = sorted({m.group(1) for ln in errors for m in _UNDECLARED_KFUNC.finditer(ln)})
    if not called or pahole is None or pahole >= KFUNC_DECL_PAHOLE:
        return ""
    return (f"the BPF programs call kfuncs ({', '.join(called[:4])}) that vmlinux.h declares "
            f"only when the kernel's BTF holds their declarations, which pahole writes from "
            f"1.27; this kernel's BTF was made by pahole 1.{pahole % 100}: build the kernel "
            "again with a newer one: HARNESS_PAHOLE=debian:sid (Debian sid's pahole, "
            "unpacked into the cache, nothing installed; a rule in "
            "harness/target/pahole.toml makes it this kernel's for good), or install "
            "pahole >= 1.27 (Debian's dwarves from trixie on)")


_SKIPPED = re.compile(r"^\s+(SKIP-[A-Z]+)\s+(\S+)")


def skipped(lines: list[str]) -> dict[str, list[str]]:
    """What a permissive build (BPF_STRICT_BUILD=0) left out, by kind (SKIP-BPF,
    SKIP-SKEL, SKIP-TEST, ...), each name once, in order."""
    out: dict[str, list[str]] = {}
    for line in lines:
        if (m := _SKIPPED.match(line)) and m[2] not in out.setdefault(m[1], []):
            out[m[1]].append(m[2])
    return out


_SUBTEST_NAME = re.compile(r'\btest__start_subtest\(\s*"([^"\\]+)"\s*\)')


def subtests_of(sources: tuple[Path, ...]) -> tuple[str, ...]:
    """The subtest names the files start with a literal (`test__start_subtest("x")`), in
    order; names made at run time are not seen."""
    return tuple(dict.fromkeys(m.group(1) for f in sources
                               for m in _SUBTEST_NAME.finditer(f.read_text(errors="replace"))))


def check_subtests(ref: TestRef, bpf_dir: Path) -> None:
    """Each subtest name or glob against the names the test's files start (when they
    name any with a literal)."""
    if not ref.checks:
        return
    known = subtests_of(test_progs_sources(bpf_dir, (ref.target,)))
    bad = [c for c in ref.checks if known and not fnmatch.filter(known, c)]
    if bad:
        raise setup_error(f"{ref.name} has no subtest {', '.join(bad)}",
                          fix=f"its subtests: {', '.join(known)}")


def plan_test_progs(ref: TestRef, built: Path) -> GuestTest:
    # -a: the exact test name, or a glob test_progs matches itself (-t would take every
    # test whose name contains it), each subtest asked for as TEST/SUBTEST; quoted: the
    # guest's shell must not expand it.
    wanted = ",".join(f"{ref.target}/{c}" for c in ref.checks) or ref.target
    return GuestTest(
        name=ref.name, timeout_s=TEST_PROGS_TIMEOUT_S, cwd=built,
        command=f'./test_progs -a {shlex.quote(wanted)} '
                f'-J "$HARNESS_OUT/{ref.name}.json"',
        fmt="test_progs", checks=ref.checks, checks_why=ref.checks_why)


def resolve(text: str) -> TestRef:
    """test_progs:TEST (or a glob), or test_progs:TEST/SUBTEST[,SUBTEST...]: only those
    subtests (names or globs)."""
    name = text.removeprefix(PREFIX)
    test, sep, subs = name.partition("/")
    checks = tuple(c for c in subs.split(",") if c)
    if not re.fullmatch(r"[A-Za-z0-9_*?]+", test) or (sep and (
            not checks or not all(re.fullmatch(r"[A-Za-z0-9_*?.:+-]+", c) for c in checks))):
        raise setup_error(f"{text}: not a test_progs test name or glob",
                          fix="test_progs:TEST or a glob, e.g. test_progs:cgroup_iter, "
                              "test_progs:cgroup_*, and /SUBTEST[,SUBTEST...] for some of "
                              "its subtests: test_progs:cgroup_iter/cgroup_iter__pre*")
    if checks and GLOB_CHARS.search(test):
        raise setup_error(f"{text}: subtests of one test: name the test without a glob",
                          fix="test_progs:TEST/SUBTEST")
    return TestRef(kind="test_progs", name=f"{PREFIX}{test}", target=test, checks=checks)


class TestProgs:
    name = "test_progs"
    from_tree = True
    # built for the host: a guest of another arch cannot run it yet
    host_only = True

    def resolve(self, text: str) -> TestRef | None:
        return resolve(text) if text.startswith(PREFIX) else None

    def check_in_tree(self, ref: TestRef, tree: Path) -> None:
        test_progs_sources(tree / "tools/testing/selftests/bpf", (ref.target,))
        check_subtests(ref, tree / "tools/testing/selftests/bpf")

    def build(self, refs: Sequence[TestRef], ctx: BuildContext) -> Mapping[str, Path]:
        """One test_progs binary for every test_progs: test of the cell."""
        assert ctx.tree is not None and ctx.build_dir is not None
        built = build_test_progs(ctx.tree, ctx.build_dir, ctx.kernel,
                                 tuple(r.target for r in refs), log_dir=ctx.log_dir,
                                 kernel_target=ctx.target)
        return {ref.name: built for ref in refs}

    def plan(self, ref: TestRef, built: Path) -> list[GuestTest]:
        return [plan_test_progs(ref, built)]


KIND = TestProgs()
