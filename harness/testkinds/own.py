"""Our own selftests: a directory with `test.toml` (`selftests/<name>/` or any path).

BPF objects compiled with clang for the BPF target against a `vmlinux.h` from the kernel's
BTF, bpftool skeletons, userspace linked against libbpf; the guest runs `[run] command`,
which prints KTAP (or test_progs lines, or only an exit code).
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import os
import re
import shlex
import shutil
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from harness import target
from harness.base import atomic, paths, proc, sandbox
from harness.base.gitcmd import git
from harness.base.model import KERNEL_PHASES, KernelImage
from harness.guest.protocol import GuestTest
from harness.judge import checks
from harness.kernel import features
from harness.testkinds.base import (
    BuildContext,
    KselftestHeader,
    Manifest,
    SelftestError,
    TestRef,
    setup_error,
)

log = logging.getLogger(__name__)

CLANG = target.bpf().clang
# -fms-extensions: a vmlinux.h from 6.19+ BTF embeds tagged structs unnamed (the kernel is
# built with -fms-extensions since then), which C rejects otherwise; mainline's BPF
# selftests compile with the same two flags.
BPF_CFLAGS = ("-g", "-O2", "-target", "bpf", "-Wall", "-Werror", "-fms-extensions",
              "-Wno-microsoft-anon-tag")
_FORMATS = ("ktap", "test_progs", "exit")
_NEEDS = ("swap", "scratch")
_TOOLS = ("perf",)


def load_manifest(directory: Path, variant: str | None = None) -> Manifest:
    toml_path = directory / "test.toml"
    if not toml_path.exists():
        raise setup_error(f"{directory} has no test.toml",
                           fix="a test directory describes its build and run there (see "
                               "selftests/cgroup_iter_rstat/test.toml)")
    try:
        data = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise setup_error(f"{toml_path}: {exc}", fix="correct the TOML syntax") from None
    try:
        build = data.get("build", {})
        run = data["run"]
        name = str(data["name"])
        requires = list(data.get("requires", ()))
        if variant is not None:
            variants = data.get("variants", {})
            if variant not in variants:
                raise setup_error(f"{toml_path} has no [variants.{variant}]",
                                   fix=f"use one of: {', '.join(variants) or 'no variants'}")
            # A variant's keys override [run]'s; its `requires` adds to the test's.
            run = {**run, **variants[variant]}
            requires += run.pop("requires", ())
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
            requires=tuple(str(r) for r in requires),
            repeat=int(run.get("repeat", 1)),
            files=tuple(str(f) for f in build.get("files", ())),
            tools=tuple(str(t) for t in build.get("tools", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise setup_error(f"{toml_path}: missing or invalid field {exc}",
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
    if bad := [t for t in manifest.tools if t not in _TOOLS]:
        problems.append(f"tools {bad}: only {', '.join(_TOOLS)}")
    if bad := [f for f in manifest.files if "/" in f or not (manifest.directory / f).is_file()]:
        problems.append(f"files {bad}: files of the test directory")
    if manifest.timeout_s <= 0:
        problems.append(f"timeout {manifest.timeout_s}: seconds, > 0")
    if not 1 <= manifest.repeat <= 1000:
        problems.append(f"repeat {manifest.repeat}: attempts, 1 to 1000")
    if any("\t" in part or "\n" in part for part in manifest.command):
        problems.append("command: no tabs or newlines (the guest runner's plan is one line "
                        "per test); put a longer script in a file of the test directory")
    if problems:
        raise setup_error(f"{toml_path}: " + "; ".join(problems))
    return manifest


def _include_dir(toml_path: Path, name: str) -> Path:
    d = (toml_path.parent / name).resolve()
    if not d.is_dir():
        raise setup_error(f"{toml_path}: [build] include {name!r}: no directory {d}")
    return d


def own_tests() -> list[str]:
    root = paths.repo_root() / "selftests"
    return sorted(p.name for p in root.iterdir() if (p / "test.toml").exists())


def resolve(text: str) -> TestRef:
    """NAME, NAME@VARIANT or a directory with test.toml, each optionally followed by
    `:CHECK[,CHECK...]` (names or globs of its CHECK table: only those run, with what
    they need); SETUP_ERROR (with the fix) if nothing is found, or a check name matches
    none of the test's. The manifest is read and validated completely here."""
    test, sep, wanted = text.partition(":")
    if sep and Path(text).is_dir():  # a directory whose name has a colon
        test, sep, wanted = text, "", ""
    asked = tuple(w for w in wanted.split(",") if w) if sep else ()
    if sep and not asked:
        raise setup_error(f"test {text!r}: no check named after the colon",
                          fix=f"{test}:CHECK[,CHECK...], names or globs (usage_*)")
    # NAME@VARIANT picks [variants.VARIANT] of test.toml (e.g. a full-length benchmark).
    base, _, variant = test.partition("@")
    candidate = Path(base)
    in_repo = paths.repo_root() / "selftests" / base
    if candidate.is_dir() or (base and in_repo.is_dir()):
        m = load_manifest(candidate if candidate.is_dir() else in_repo, variant or None)
        return with_checks(TestRef(kind="own", name=m.name, manifest=m), asked)
    known = own_tests()
    close = difflib.get_close_matches(base, known, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise setup_error(f"test {text!r} not found: not a directory with test.toml, nor a test "
                      "under selftests/, nor kselftest:TARGET or test_progs:TEST",
                      fix=f"{hint}our tests: {', '.join(known)}")


def check_table(manifest: Manifest) -> tuple[checks.Check, ...] | None:
    """The test's CHECK table as its C sources write it; None: not known before it runs
    (filled at run time, or no C program)."""
    texts = [(manifest.directory / s).read_text(errors="replace") for s in manifest.userspace
             if s.endswith(".c") and (manifest.directory / s).is_file()]
    return checks.table_of(texts)


def with_checks(ref: TestRef, asked: tuple[str, ...], why: str = "") -> TestRef:
    """The reference running only these checks (and what they need), each checked
    against the test's CHECK table when its sources say it."""
    if not asked:
        return ref
    assert ref.manifest is not None
    if ref.manifest.fmt != "ktap" or not ref.manifest.userspace:
        raise setup_error(f"test {ref.name}: no CHECK table to pick checks from (it is not "
                          "a C program of selftests/lib's checks)",
                          fix=f"run it whole: --test {ref.name}")
    table = check_table(ref.manifest)
    if table is not None and (bad := checks.unknown(table, asked)):
        raise setup_error(f"test {ref.name} has no check {', '.join(bad)}",
                          fix=f"its checks: {', '.join(c.name for c in table)}")
    return replace(ref, checks=asked, checks_why=why)


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


# What the tree's bpftool is built from: tools/ (bpftool, the libbpf it links, the headers
# and build scripts) and the BPF disassembler it shares with the kernel.
BPFTOOL_SOURCES = ("tools", "kernel/bpf/disasm.c", "kernel/bpf/disasm.h")


def tree_bpftool(tree: Path, *, log_dir: Path) -> Path:
    """bpftool built from the tree under test, as the kernel's own selftests and BPF CI use
    it: its BTF dump knows the BTF that kernel writes, where an older bpftool writes a
    vmlinux.h that clang rejects (Debian 12's bpftool 7.1 on 7.2's BTF). Built once per
    content of its sources in the tree and host compiler; only the binary is kept."""
    listing = git(tree, "ls-tree", "-r", "HEAD", "--", *BPFTOOL_SOURCES,
                  what="git ls-tree", timeout=120)
    cc = (proc.version_output("gcc") or "").splitlines()[:1]
    key = hashlib.sha256(f"{listing}\n{cc}".encode()).hexdigest()[:16]
    out = paths.sub("bpftool") / key
    if (out / "bpftool").exists():
        paths.touch(out)
        return out / "bpftool"
    log.info("building the tree's bpftool (once per its sources) into %s", out)
    with atomic.directory(out, prefix=".bpftool-") as scratch:
        objs = scratch / "objs"
        objs.mkdir()  # 7.2's tools/scripts/Makefile.include wants OUTPUT to exist
        proc.check(["make", "-s", "-C", str(tree / "tools/bpf/bpftool"), f"OUTPUT={objs}/",
                    f"-j{os.cpu_count() or 1}"], what="building the tree's bpftool",
                   timeout=1800, log_path=log_dir / "bpftool-build.log",
                   sandbox=sandbox.for_tree(tree, write=(scratch,)))
        shutil.copy2(sandbox.regular_file(objs / "bpftool", objs), scratch / "bpftool")
        shutil.rmtree(objs)
    return out / "bpftool"


def vmlinux_h(kernel: KernelImage, bpftool: Path | None = None) -> Path:
    """vmlinux.h from the kernel's BTF, once per kernel and bpftool: the tree's bpftool
    when there is one (`tree_bpftool`), the host's for a prebuilt image."""
    if kernel.vmlinux is None:
        raise SelftestError(f"{kernel.boot_image} has no vmlinux with BTF next to it; BPF tests "
                            "need one (put vmlinux beside the image)")
    tool = str(bpftool) if bpftool is not None else proc.require("bpftool")
    # the BTF it is made from (a kernel rebuilt after a change inside a function has its
    # predecessor's); the file when it has no .BTF section to read
    made_from = features.btf_id(kernel.vmlinux) or \
        f"{kernel.vmlinux}{kernel.vmlinux.stat().st_mtime_ns}"
    key = hashlib.sha256(f"{made_from}\n{tool}".encode()).hexdigest()[:16]
    out = paths.sub("vmlinux-h") / key / "vmlinux.h"
    if out.exists():
        paths.touch(out.parent)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        # the tree's bpftool is the tree's code: sandboxed (the host's runs as it is)
        res = proc.check([tool, "btf", "dump", "file", str(kernel.vmlinux), "format", "c"],
                         what=f"{tool} btf dump", timeout=300, log_path=None,
                         sandbox=sandbox.Reach(read=(Path(tool), kernel.vmlinux))
                         if bpftool is not None else None)
        atomic.write_text(out, res.output)
    return out


def build_own(manifest: Manifest, kernel: KernelImage, *, log_dir: Path,
              kselftest: KselftestHeader | None, bpftool: Path | None = None) -> Path:
    """Compile the BPF objects, skeletons and userspace; returns the output directory.
    `bpftool` (the tree's) dumps vmlinux.h; the skeletons are the host's bpftool's, for
    the host's libbpf that the tests link."""
    # A test without BPF programs needs no BTF (nor a vmlinux to read it from).
    header = vmlinux_h(kernel, bpftool) if manifest.bpf else None
    ksft_dirs = (kselftest.directory,) if kselftest is not None else ()
    trees = "|".join(tree_hash(d) for d in (manifest.directory, *manifest.include, *ksft_dirs))
    # The header's content, not the kernel: a kernel whose types did not change (a
    # one-line change in a .c file) does not rebuild the tests (CO-RE relocates them).
    btf_types = hashlib.sha256(header.read_bytes()).hexdigest() if header else "no BPF"
    arch = target.arch(kernel.arch)
    cross = target.foreign(arch.name)
    key = hashlib.sha256(f"{btf_types}|{trees}|{' '.join(BPF_CFLAGS)}".encode())
    if cross:
        key.update(f"|{arch.name}".encode())
    out = paths.sub("selftests") / f"{manifest.directory.name}-{key.hexdigest()[:16]}"
    if (out / ".built").exists():
        paths.touch(out)
        return out
    blog = log_dir / f"build-{manifest.name}.log"
    clang, skeletons = (proc.require(CLANG), proc.require("bpftool")) if manifest.bpf else ("", "")
    includes = [f"-I{d}" for d in (*manifest.include, *ksft_dirs)]
    with atomic.directory(out, prefix=f".{manifest.name}-") as scratch:
        # Our code, but it includes the kernel tree's kselftest.h: compiled in the sandbox
        # (an #include of a file of the host would otherwise print it in the build log).
        reach = sandbox.Reach(write=(scratch,), read=(manifest.directory, *manifest.include,
                                                      *ksft_dirs))
        if header is not None:
            shutil.copyfile(header, scratch / "vmlinux.h")
        for src in manifest.bpf:
            stem = src.removesuffix(".c")
            obj = scratch / f"{stem}.o"
            proc.check([clang, *BPF_CFLAGS, f"-D__TARGET_ARCH_{arch.bpf_target_arch}",
                        *manifest.bpf_cflags, f"-I{scratch}",
                        f"-I{manifest.directory}", *includes, "-c", str(manifest.directory / src),
                        "-o", str(obj)], what=f"clang {src}", timeout=300, log_path=blog,
                       sandbox=reach)
            skel = proc.check([skeletons, "gen", "skeleton", str(obj), "name",
                               skeleton_name(src)], what=f"bpftool gen skeleton {src}",
                              timeout=120, log_path=None, sandbox=reach)
            (scratch / f"{src.removesuffix('.bpf.c')}.skel.h").write_text(skel.output)
        if manifest.userspace:
            # Another arch's guest boots a root of its own without the host's libraries:
            # its tests are linked statically, with the cross compiler, against the
            # arch's -dev packages (Debian's multiarch ones, beside the host's).
            cc = proc.require(f"{arch.cross_compile}gcc") if cross else "gcc"
            static = ["-static"] if cross else []
            proc.check([cc, *static, "-O2", "-g", "-Wall", "-Wextra", *manifest.cflags,
                        f"-I{scratch}", f"-I{manifest.directory}", *includes,
                        *(str(manifest.directory / s) for s in manifest.userspace),
                        "-o", str(scratch / manifest.name.partition("@")[0]),
                        "-lbpf", "-lelf", "-lz", *(["-lzstd"] if cross else []), "-lm"],
                       what=f"building {manifest.name}", timeout=300, log_path=blog,
                       sandbox=reach)
        for name in manifest.files:
            shutil.copy2(manifest.directory / name, scratch / name)
        (scratch / ".built").write_text("ok\n")
    return out


KSELFTEST_H = "tools/testing/selftests/kselftest.h"


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2]).split("-")[0]


def capture_kselftest_h(tree: Path, version: str, source: str) -> KselftestHeader | None:
    """Copy the tree's kselftest.h (under the tree lock: a later checkout moves it) into
    the cache, by content, whatever the cell runs: it is also what an `image:` kernel of
    that version uses. None for a tree without one."""
    header = tree / KSELFTEST_H
    if not header.is_file():
        return None
    # a file of the tree, not a link out of it (a series can add symlinks)
    data = sandbox.regular_file(header, tree).read_bytes()
    name = f"{_major_minor(version)}-{hashlib.sha256(data).hexdigest()[:16]}"
    out = paths.sub("kselftest-h") / name
    if not (out / "kselftest.h").exists():
        out.mkdir(parents=True, exist_ok=True)
        atomic.write_text(out / "origin", f"{KSELFTEST_H} of {source}\n")
        atomic.write_bytes(out / "kselftest.h", data)
    return KselftestHeader(directory=out, origin=f"{KSELFTEST_H} of {source}")


def no_kselftest_h(source: str) -> SelftestError:
    return setup_error(f"{source} has no {KSELFTEST_H}",
                       fix="our selftests print KTAP through the tree's kselftest.h; use a "
                           "kernel tree that has tools/testing/selftests")


def stored_kselftest_h(version: str) -> KselftestHeader:
    """For a prebuilt image: the kselftest.h of a tree of the same major version captured
    earlier (the newest), or SETUP_ERROR saying how to get one."""
    mm = _major_minor(version)
    if not re.fullmatch(r"\d+\.\d+", mm):
        raise setup_error(
            f"the image's kernel version is not known ({version!r}: `file` reads none from "
            "it), so no kselftest.h of a tree of its version can be picked for our selftests",
            fix="use a bzImage whose version `file` can read, or run the tests on the tree "
                "it was built from (debian:/git:)")
    found = sorted((d for d in paths.sub("kselftest-h").glob(f"{mm}-*")
                    if (d / "kselftest.h").is_file() and (d / "origin").is_file()),
                   key=lambda d: (d / "kselftest.h").stat().st_mtime)
    if not found:
        raise setup_error(
            f"no kselftest.h of a {mm} kernel tree in the cache: our selftests print KTAP "
            "through it, and a prebuilt image has no tree",
            fix=f"run one cell on a {mm} tree first (e.g. `harness run --kernel debian:{mm} "
                "--boot-only`); its kselftest.h is kept for images of that version")
    d = found[-1]
    origin = (d / "origin").read_text().strip()
    return KselftestHeader(directory=d, origin=f"{origin} (same major version as the image)")


def plan_own(manifest: Manifest, built: Path, asked: tuple[str, ...] = (),
             why: str = "") -> GuestTest:
    """The guest's command; with checks asked for, $HARNESS_CHECKS tells check.c which."""
    command = shlex.join(manifest.command)
    if asked:
        command = f"export {checks.ENV}={shlex.quote(','.join(asked))}; {command}"
    return GuestTest(name=manifest.name, timeout_s=manifest.timeout_s, cwd=built,
                     command=command, fmt=manifest.fmt, needs=manifest.needs,
                     checks=asked, checks_why=why)



class OwnTests:
    name = "own"
    from_tree = False
    host_only = False

    def resolve(self, text: str) -> TestRef | None:
        return resolve(text)  # the kind of last resort: whatever no prefix claimed

    def check_in_tree(self, ref: TestRef, tree: Path) -> None:
        pass  # not built from the tree

    def build(self, refs: Sequence[TestRef], ctx: BuildContext) -> Mapping[str, Path]:
        out = {}
        for ref in refs:
            assert ref.manifest is not None
            out[ref.name] = build_own(ref.manifest, ctx.kernel, log_dir=ctx.log_dir,
                                      kselftest=ctx.kselftest, bpftool=ctx.bpftool)
        return out

    def plan(self, ref: TestRef, built: Path) -> list[GuestTest]:
        assert ref.manifest is not None
        return [plan_own(ref.manifest, built, ref.checks, ref.checks_why)]


KIND = OwnTests()
