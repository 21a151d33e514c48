"""`kselftest:TARGET[:TEST,...]`: the tree's own tools/testing/selftests/TARGET, built from
the same tree as the kernel and run in the guest through its own runner
(run_kselftest.sh), one result per test of the target. TEST may be a glob (test_*): one
result per test of the target's kselftest-list.txt it matches.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness import target
from harness.base import atomic, gitcmd, paths, proc, sandbox
from harness.base.model import Status
from harness.guest.protocol import GuestTest
from harness.testkinds.base import BuildContext, SelftestError, TestRef, setup_error

# Curated kselftest subsets: the tests that run in a TCG guest in bounded time.
# What still fails there for reasons outside our patches is in expectations.toml.
CURATED = {
    "cgroup": ("test_core", "test_freezer", "test_kill", "test_memcontrol", "test_cpuset"),
}
KSELFTEST_TIMEOUT_S = 240
PREFIX = "kselftest:"
GLOB = re.compile(r"[*?\[]")


def resolve(text: str) -> TestRef:
    """kselftest:TARGET[:TEST,...], or kselftest:TARGET:PROGRAM:NAME[,NAME...]: only those
    tests of a program that takes a test's name (one built on kselftest_harness.h)."""
    _, target, *rest = text.split(":")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*", target) or len(rest) > 2:
        raise setup_error(f"{text!r}: kselftest: needs a target",
                          fix="kselftest:TARGET[:TEST,...], e.g. kselftest:cgroup, or "
                              "kselftest:TARGET:PROGRAM:NAME for some tests of one program")
    only = tuple(rest[0].split(",")) if rest and rest[0] else CURATED.get(target, ())
    names = tuple(n for n in rest[1].split(",") if n) if len(rest) == 2 else ()
    if len(rest) == 2 and (not names or len(only) != 1 or GLOB.search(only[0])):
        raise setup_error(f"{text!r}: the tests of one program, by name",
                          fix="kselftest:TARGET:PROGRAM:NAME[,NAME...]")
    name = f"{PREFIX}{target}:{only[0]}" if names else text
    return TestRef(kind="kselftest", name=name, target=target, only=only, checks=names)


# A program built on kselftest_harness.h runs only the tests named with -t NAME; the
# others (test_memcontrol's table of T(x) entries, say) run every test they have.
_HARNESS_H = re.compile(r'#include\s+["<][./]*kselftest_harness\.h[">]')
_HARNESS_TEST = re.compile(r"^\s*TEST(?:_F|_SIGNAL|_F_SIGNAL|_F_TIMEOUT)?\(\s*(?:\w+\s*,\s*)?"
                           r"(\w+)\s*[,)]", re.MULTILINE)
_TABLE_TEST = re.compile(r"^\s*T\((\w+)\)", re.MULTILINE)


def check_names(ref: TestRef, tree: Path) -> None:
    """`kselftest:TARGET:PROGRAM:NAME`: the program takes test names, and has these."""
    if not ref.checks:
        return
    program = ref.only[0]
    source = tree / "tools/testing/selftests" / ref.target / f"{program}.c"
    text = source.read_text(errors="replace") if source.is_file() else ""
    if not _HARNESS_H.search(text):
        listed = _TABLE_TEST.findall(text)
        raise setup_error(
            f"{ref.name}: {program} takes no test name (it is not built on "
            "kselftest_harness.h: it runs all its tests in one loop)"
            + (f"; its tests: {', '.join(listed)}" if listed else ""),
            fix=f"run it whole: kselftest:{ref.target}:{program}")
    known = _HARNESS_TEST.findall(text)
    if bad := [n for n in ref.checks if known and n not in known]:
        raise setup_error(f"{ref.name} has no test {', '.join(bad)}",
                          fix=f"its tests: {', '.join(dict.fromkeys(known))}")


def check_in_tree(ref: TestRef, tree: Path) -> None:
    root = tree / "tools/testing/selftests"
    if not (root / ref.target / "Makefile").is_file():
        targets = sorted(p.name for p in root.iterdir()
                         if (p / "Makefile").is_file()) if root.is_dir() else []
        close = difflib.get_close_matches(ref.target, targets, n=1)
        hint = f"did you mean kselftest:{close[0]}? " if close else ""
        raise setup_error(f"{ref.name}: this kernel tree has no "
                          f"tools/testing/selftests/{ref.target}",
                          fix=f"{hint}targets here: {', '.join(targets) or 'none'}")
    makefile = (root / ref.target / "Makefile").read_text(errors="replace")
    words = set(re.findall(r"[A-Za-z0-9_.-]+", makefile))
    # a glob (test_*) must match some word of the Makefile; the list the build installs
    # decides what it runs (plan_kselftest)
    missing = [t for t in ref.only if not fnmatch.filter(words, t)]
    if missing:
        raise setup_error(f"{ref.name}: tools/testing/selftests/{ref.target}/Makefile "
                          f"builds no test named {', '.join(missing)}",
                          fix="check the names against that Makefile's TEST_GEN_PROGS "
                              "and TEST_PROGS")


def check_in_tree_names(ref: TestRef, tree: Path) -> None:
    check_in_tree(ref, tree)
    check_names(ref, tree)


def build_kselftest(target_dir: str, tree: Path, build_dir: Path, *, log_dir: Path,
                    built: target.Target | None = None) -> Path:
    """Build and install tools/testing/selftests/<target_dir> from the tree, with its
    runner, for the arch the kernel was built for (`built`; default x86_64/gcc)."""
    built = built or target.default()
    tree_id = gitcmd.git(tree, "rev-parse", "HEAD^{tree}", what="git rev-parse").strip()
    # One directory level per build, whatever the target ("net/forwarding"): the cache
    # evicts kselftests/<name> with kselftest-build/<name>, and the scratch and log names
    # below must not name directories that do not exist.
    slug = target_dir.replace("/", "_")
    # the same tree built for another arch is another build
    name = f"{slug}-{tree_id[:16]}" + ("" if not built.cross else f"-{built.arch.name}")
    out = paths.sub("kselftests") / name
    if (out / "run_kselftest.sh").exists():
        paths.touch(out)
        return out
    klog = log_dir / f"build-kselftest-{slug}.log"
    # the headers of the kernel's own O= directory: make is told its arch and compiler
    proc.check(["make", "-C", str(tree), f"O={build_dir}", "-s", *built.kbuild_vars(),
                "headers"], what="make headers", timeout=900, log_path=klog,
               sandbox=sandbox.for_tree(tree))
    kbuild = paths.sub("kselftest-build") / name
    with atomic.directory(out, prefix=f".{name}-") as scratch:
        proc.check(["make", "-C", str(tree / "tools/testing/selftests"),
                    f"TARGETS={target_dir}", *built.userspace_vars(),
                    f"O={kbuild}", f"KHDR_INCLUDES=-isystem {build_dir}/usr/include",
                    f"INSTALL_PATH={scratch}", "install"],
                   what=f"building kselftest {target_dir}", timeout=1800, log_path=klog,
                   sandbox=sandbox.for_tree(tree, write=(kbuild, scratch)))
    return out


def plan_kselftest(ref: TestRef, installed: Path) -> list[GuestTest]:
    available = set()
    listing = installed / "kselftest-list.txt"
    if listing.exists() or listing.is_symlink():
        sandbox.regular_file(listing, installed)  # the tree's install wrote it
        for line in listing.read_text().splitlines():
            t, _, name = line.partition(":")
            if t == ref.target:
                available.add(name)
    wanted = tuple(dict.fromkeys(
        name for w in ref.only for name in (sorted(fnmatch.filter(available, w))
                                            if GLOB.search(w) and available else [w])
    )) if ref.only else tuple(sorted(available))
    missing = [w for w in ref.only if available and not fnmatch.filter(available, w)]
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
    if ref.checks:
        # the program itself, asked for its tests by name (run_kselftest.sh passes none)
        program = wanted[0]
        return [GuestTest(
            name=f"kselftest-{ref.target}-{program}".replace("/", "_"),
            timeout_s=KSELFTEST_TIMEOUT_S, cwd=installed,
            command=f"rm -rf {scratch} && mkdir -p {scratch} && cp -a . {scratch} && "
                    f"cd {scratch}/{ref.target} && ./{program} "
                    + " ".join(f"-t {shlex.quote(n)}" for n in ref.checks),
            needs=("swap", "scratch"), checks=ref.checks, checks_why=ref.checks_why)]
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



class KselftestTargets:
    name = "kselftest"
    from_tree = True
    host_only = False

    def resolve(self, text: str) -> TestRef | None:
        return resolve(text) if text.startswith(PREFIX) else None

    def check_in_tree(self, ref: TestRef, tree: Path) -> None:
        check_in_tree_names(ref, tree)

    def build(self, refs: Sequence[TestRef], ctx: BuildContext) -> Mapping[str, Path]:
        assert ctx.tree is not None and ctx.build_dir is not None
        built = target.select(ctx.kernel.arch, ctx.kernel.toolchain or target.DEFAULT_TOOLCHAIN)
        return {ref.name: build_kselftest(ref.target, ctx.tree, ctx.build_dir,
                                          log_dir=ctx.log_dir, built=built) for ref in refs}

    def plan(self, ref: TestRef, built: Path) -> list[GuestTest]:
        # Not re-read from the tree: another run may have moved it since.
        return plan_kselftest(ref, built)


KIND = KselftestTargets()
