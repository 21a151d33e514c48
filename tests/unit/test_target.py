"""Arch and toolchain as data: the files, what the build and Kconfig are told, and the
names a target gives its tree, its stored kernel and its cell."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import cli, target
from harness.base import proc
from harness.base.model import Accel, GuestSpec
from harness.ci import ciplan
from harness.drivers import matrix, pipeline, shard
from harness.drivers.matrix import Cell, Tier
from harness.kernel import build, kconfig


@pytest.mark.parametrize("name", target.known_arches())
def test_every_arch_file_reads_and_names_an_image_its_make_target_builds(name: str) -> None:
    arch = target.arch(name)
    srcarch = {"x86_64": "x86"}.get(arch.kernel_arch, arch.kernel_arch)
    assert arch.name == name and arch.image.startswith(f"arch/{srcarch}/boot/")
    assert arch.image_name == arch.make_target  # kbuild names the image after its target
    assert arch.qemu.startswith("qemu-system-") and arch.console
    # the lines it adds are Kconfig lines, each as a fragment takes them
    for line in arch.config.splitlines():
        assert not line or line.startswith("#") or line.startswith("CONFIG_"), line


@pytest.mark.parametrize("name", target.known_toolchains())
def test_every_toolchain_file_reads(name: str) -> None:
    tc = target.toolchain(name)
    assert tc.name == name and tc.cc and tc.versions and tc.packages


def test_an_unknown_name_says_which_are_known() -> None:
    with pytest.raises(target.TargetError, match=r"unknown toolchain 'icc'; known: gcc, llvm"):
        target.toolchain("icc")
    with pytest.raises(target.TargetError, match=r"unknown arch 'sparc'; known: .*x86_64"):
        target.arch("sparc")


def test_a_description_with_a_bad_key_is_refused(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "odd.toml").write_text('name = "odd"\ncc = "cc"\nhostcc = "cc"\nmake = []\n'
                                       'cross = "yes"\nversions = ["cc"]\npackages = []\n'
                                       'colour = "blue"\n')
    monkeypatch.setattr(target, "TOOLCHAIN_DIR", tmp_path)
    with pytest.raises(target.TargetError, match=r"unknown key\(s\) colour"):
        target.toolchain("odd")
    (tmp_path / "odd.toml").write_text('name = "odd"\ncc = "cc"\nhostcc = "cc"\nmake = []\n'
                                       'cross = "yes"\nversions = ["cc"]\npackages = []\n')
    with pytest.raises(target.TargetError, match="cross must be true or false"):
        target.toolchain("odd")
    (tmp_path / "other.toml").write_text('name = "odd"\n')
    with pytest.raises(target.TargetError, match=r"name = 'odd', the file is other\.toml"):
        target.toolchain("other")


def test_the_default_pair_keeps_the_names_it_had() -> None:
    """x86_64/gcc: no slug in the worktree name, make told nothing it did not assume, the
    stored kernel's key over the same string as before there was a choice."""
    t = target.select(host_uname="x86_64")
    assert t.native_default and t.slug == "" and t.cc == "gcc"
    # (but for the tools no kernel of ours uses, pinned to nothing in every make)
    assert kconfig.make_vars(t) == list(target.UNUSED_TOOLS)
    argv = build.make_argv(Path("/t"), Path("/t/.harness-build"), build.Tools(
        target=t, compiler="gcc", pahole="p", ccache=True), "bzImage")
    assert not any(a.startswith(("ARCH=", "CROSS_COMPILE=", "LLVM=")) for a in argv)
    assert "RUSTC=harness-builds-no-rust" in argv
    assert "CC=ccache gcc" in argv
    tools = build.Tools(target=t, compiler="gcc (Debian 12.2.0) 12.2.0", pahole="v1.24",
                        ccache=True)
    assert tools.ident == "gcc (Debian 12.2.0) 12.2.0|v1.24"


def test_llvm_builds_with_the_versioned_tools_and_no_cross_prefix() -> None:
    t = target.select("x86_64", "llvm", host_uname="x86_64")
    assert t.make_vars() == ("ARCH=x86_64", "LLVM=-19") and t.cc == "clang-19"
    assert t.slug == "@x86_64-llvm"
    tools = build.Tools(target=t, compiler="Debian clang version 19.1.7", pahole="v1.24",
                        ccache=True)
    argv = build.make_argv(Path("/t"), Path("/t/.harness-build"), tools, "bzImage")
    assert {"LLVM=-19", "CC=ccache clang-19", "HOSTCC=ccache clang-19"} <= set(argv)
    assert argv[-1] == "bzImage" and not any(a.startswith("CROSS_COMPILE=") for a in argv)
    # Kconfig must see clang too (CC_IS_CLANG, PAHOLE_HAS_BTF_TAG, ...)
    assert "CC=clang-19" in kconfig.make_vars(t) and "LLVM=-19" in kconfig.make_vars(t)
    # another toolchain is another stored kernel, whatever its compiler's version line
    assert tools.ident.endswith("|x86_64/llvm")
    without_ccache = build.make_argv(Path("/t"), Path("/b"), build.Tools(
        target=t, compiler="c", pahole="p", ccache=False), "bzImage")
    assert "CC=clang-19" in without_ccache


def test_a_cross_gcc_build_takes_the_arch_prefix_and_its_versions() -> None:
    t = target.select("x86_64", "gcc", host_uname="aarch64")
    assert t.cross and "CROSS_COMPILE=x86_64-linux-gnu-" in t.make_vars()
    assert t.cc == "x86_64-linux-gnu-gcc"
    assert t.version_commands() == ("x86_64-linux-gnu-gcc", "x86_64-linux-gnu-ld",
                                    "x86_64-linux-gnu-as")
    # on another host the default pair is a cross build, and make is told so everywhere
    assert not t.native_default and t.kbuild_vars()[:2] == (
        "ARCH=x86_64", "CROSS_COMPILE=x86_64-linux-gnu-")
    argv = build.make_argv(Path("/t"), Path("/b"), build.Tools(
        target=t, compiler="c", pahole="p", ccache=True), "bzImage")
    assert "ARCH=x86_64" in argv and "CC=ccache x86_64-linux-gnu-gcc" in argv
    # clang needs no cross compiler of its own: kbuild gives it --target from ARCH
    llvm = target.select("x86_64", "llvm", host_uname="aarch64")
    assert llvm.cc == "clang-19" and not any(v.startswith("CROSS_COMPILE=")
                                             for v in llvm.make_vars())


def test_a_missing_cross_compiler_says_the_bootstrap_that_installs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arm = target.select("arm64", "gcc", host_uname="x86_64")
    assert arm.install_fix() == "./bootstrap.sh --role build --arch arm64 (Debian's " \
                                "gcc-aarch64-linux-gnu)"
    assert target.select("arm64", "llvm", host_uname="x86_64").install_fix() == \
        "./bootstrap.sh --role build --arch arm64 --toolchain llvm (Debian's clang-19, " \
        "lld-19, llvm-19)"
    # before Kconfig runs: the compiler its version probe would not find
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(proc.ToolMissingError) as caught:
        kconfig.generate(tmp_path, [], log_dir=tmp_path, target=arm)
    assert str(caught.value) == "'aarch64-linux-gnu-gcc' is not installed\nfix: " + \
        arm.install_fix()


def test_the_arch_lines_are_a_fragment_applied_before_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    frag = kconfig.arch_fragment(target.default())
    text = frag.read_text()
    assert "CONFIG_SERIAL_8250_CONSOLE=y" in text and "CONFIG_UNWINDER_ORC=y" in text
    assert kconfig.arch_fragment(target.default()) == frag  # one file per content
    # our base is arch-neutral: what only x86 needs is in the arch file
    base = (Path(__file__).resolve().parents[2] / "kconfigs" / "base.config").read_text()
    for line in ("CONFIG_SERIAL_8250=y", "CONFIG_ACPI=y", "CONFIG_UNWINDER_ORC=y"):
        assert line not in base


def test_matrix_cells_and_the_command_line_name_the_pair(tmp_path: Path) -> None:
    m = tmp_path / "m.toml"
    m.write_text('[[cell]]\nname = "a"\nkernel = "debian:6.12"\ntoolchain = "llvm"\n')
    [a] = matrix.load(m)
    assert (a.arch, a.toolchain) == ("x86_64", "llvm")
    assert pipeline.cell_argv(a, Accel.TCG)[-4:] == ["--toolchain", "llvm", "--accel", "tcg"]
    assert "x86_64/llvm" in pipeline.describe(a)
    m.write_text('[[cell]]\nname = "a"\nkernel = "debian:6.12"\ntoolchain = "icc"\n')
    with pytest.raises(matrix.MatrixError, match="cell #1: unknown toolchain 'icc'"):
        matrix.load(m)
    args = cli.parse_args(["run", "--kernel", "debian:6.12", "--toolchain", "llvm"])
    [cell], _ = cli.planned(args)
    assert cell.toolchain == "llvm" and cell.arch == "x86_64"
    [picked], _ = cli.planned(cli.parse_args(["run", "--cell", "6.12",
                                                       "--toolchain", "llvm"]))
    assert (picked.name, picked.toolchain) == ("6.12", "llvm")
    for command in ("check", "shell"):
        parsed = cli.parse_args([command, "--toolchain", "llvm"])
        assert parsed.toolchain == "llvm"
    with pytest.raises(SystemExit):
        cli.parse_args(["run", "--toolchain", "icc"])


def test_a_target_is_its_own_kernel_and_its_own_ci_tree() -> None:
    gcc = Cell(name="a", tier=Tier.CI, kernel="debian:6.12", series=("memcg-kfuncs",))
    llvm = Cell(name="b", tier=Tier.CI, kernel="debian:6.12", series=("memcg-kfuncs",),
                toolchain="llvm")
    assert shard.kernel_of(gcc) != shard.kernel_of(llvm)
    plan = ciplan.plan([gcc, llvm], "ci", ciplan.Settings(accel=Accel.TCG))
    assert len(plan.builds) == 2
    assert [b.slug for b in plan.builds] == ["a", "b"]  # a job per kernel, by its first cell
    assert [b.tree for b in plan.builds] == ["debian_6_12-base-x86_64-gcc",
                                             "debian_6_12-base-x86_64-llvm"]  # ccache apart
    assert plan.builds[1].bootstrap_argv("build")[-2:] == ["--toolchain", "llvm"]


def test_every_guest_boots_on_its_own_root_and_sees_only_what_it_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.base.model import KernelImage
    from harness.guest import isolation, rootfs, vm

    root = tmp_path / "rootfs"
    (root / "root").mkdir(parents=True)
    (root / "root" / "sh").write_text("sh")
    (root / ".made").write_text("busybox-static\n1\n")
    monkeypatch.setattr(rootfs, "guest_root", lambda arch, log_dir: root)
    monkeypatch.delenv(rootfs.OWN_ROOT_ENV)
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    for d in ("selftests/a", "selftests/b", "perf/k/obj"):
        (cache / d).mkdir(parents=True)
    (cache / "selftests/a/t").write_text("test a")
    (cache / "perf/k/obj/perf").write_text("perf")
    (cache / "selftests/b/perf").symlink_to(cache / "perf/k/obj/perf")
    (cache / "kernels/k").mkdir(parents=True)  # not asked for: not seen
    (repo / "harness/guest").mkdir(parents=True)
    shared = [repo / "harness/guest", cache / "selftests/a", cache / "selftests/b",
              repo / "harness/guest/x", tmp_path / "mine"]
    (tmp_path / "mine").mkdir()
    out = tmp_path / "out"
    for kernel in (KernelImage(boot_image=tmp_path / "Image", vmlinux=None, config=None,
                               version="6.12", arch="arm64", toolchain="gcc"),
                   KernelImage(boot_image=tmp_path / "bzImage", vmlinux=None, config=None,
                               version="6.12", arch=target.DEFAULT_ARCH, toolchain="gcc")):
        with vm.guest_root(kernel, shared, host_root=False, log_dir=tmp_path) as own:
            assert own is not None and own.root == root / "root"
            assert own.identity.digest == rootfs.identity(root).digest != ""
            # the cache's outputs the guest runs, alone, in a view mounted at the cache's
            # path; the runner's directory and a command's own, each at its path
            (guest, view), *rest = own.rodirs
            assert guest == cache.resolve() and view.is_relative_to(cache / "guest-view")
            assert sorted(p.relative_to(view).as_posix() for p in view.rglob("*")) == [
                "perf", "perf/k", "perf/k/obj", "perf/k/obj/perf", "selftests",
                "selftests/a", "selftests/a/t", "selftests/b", "selftests/b/perf"]
            assert (view / "selftests/a/t").stat().st_ino == (cache / "selftests/a/t").stat(
                ).st_ino  # linked, not copied
            assert rest == [(tmp_path / "mine", tmp_path / "mine"),
                            (repo / "harness/guest", repo / "harness/guest")]
            boot = vm.Boot(kernel=kernel, accel=Accel.TCG, guest=GuestSpec(), rwdirs=(out,))
            argv = vm.vng_argv(boot, command=["true"], own=own)
            joined = " ".join(argv)
            assert f"--root {root / 'root'}" in joined
            assert ("--arch arm64" in joined) is (kernel.arch == "arm64")
            assert f"--rwdir {out}={out}" in joined and f"--rodir {cache}={view}" in joined
            # the guest's directory, as vng takes it with a root of its own
            at = vm.vng_argv(boot, command=["true"], own=own, cwd=out)
            assert at[at.index("--cwd") + 1] == str(root / "root" / out.relative_to("/"))
            own.mount_points([out])
            assert (root / "root" / out.relative_to("/")).is_dir()
        assert not view.exists()  # gone with the boot
    # --host-root: the host's root, as vng exports it, for the host's arch alone
    native = KernelImage(boot_image=tmp_path / "bzImage", vmlinux=None, config=None,
                         version="6.12", arch=target.DEFAULT_ARCH, toolchain="gcc")
    with vm.guest_root(native, shared, host_root=True, log_dir=tmp_path) as own:
        assert own is None
    # KVM runs only the host's arch: no probe, TCG, and a request for KVM is refused
    arm = KernelImage(boot_image=tmp_path / "Image", vmlinux=None, config=None,
                      version="6.12", arch="arm64", toolchain="gcc")
    assert vm.choose_accel(Accel.AUTO, arm.boot_image, arch="arm64")[0] is Accel.TCG
    with pytest.raises(vm.BootError, match="KVM runs only the host's arch"):
        vm.choose_accel(Accel.KVM, arm.boot_image, arch="arm64")
    assert isolation.least([cache / "a", cache / "a/b", cache]) == [cache.resolve()]


def test_busybox_applets_become_links_where_no_package_put_a_file(tmp_path: Path) -> None:
    from harness.guest import rootfs

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/bash").write_text("bash")
    rootfs._link_applets(tmp_path, ["bin/sh", "bin/bash", "usr/bin/env", "bin/busybox"])
    assert (tmp_path / "bin/bash").read_text() == "bash"
    assert str((tmp_path / "bin/sh").readlink()) == "/bin/busybox"
    assert str((tmp_path / "usr/bin/env").readlink()) == "/bin/busybox"
    assert not (tmp_path / "bin/busybox").exists()


def test_a_root_of_an_arch_dpkg_does_not_know_says_how_to_add_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from harness.guest import rootfs

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    odd = replace(target.arch("arm64"), name="odd", deb_arch="no-such-arch")
    with pytest.raises(rootfs.RootfsError, match="dpkg does not know") as err:
        rootfs.guest_root(odd, log_dir=tmp_path)
    assert "dpkg --add-architecture no-such-arch" in str(err.value)


def test_an_image_tells_its_arch_by_what_file_says_of_it() -> None:
    assert target.arch_of_image("Linux kernel x86 boot executable bzImage, version 6.12.117+")\
        == "x86_64"
    assert target.arch_of_image("Linux kernel ARM64 boot executable Image, little-endian, 4K "
                                "pages") == "arm64"
    assert target.arch_of_image("ASCII text") is None


def test_doctor_says_what_another_arch_or_toolchain_needs_without_failing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.base import proc
    from harness.drivers import doctor

    monkeypatch.setattr(proc, "which", lambda tool: None)
    found = {c.name: c for c in doctor.target_checks()}
    llvm = found["toolchain llvm"]
    assert not llvm.ok and llvm.optional and "clang-19" in llvm.detail
    assert llvm.fix == "apt-get install -y clang-19 lld-19 llvm-19"
    arm = found["arch arm64"]
    assert not arm.ok and arm.optional and "aarch64-linux-gnu-gcc" in arm.detail
    assert "dpkg --add-architecture arm64" in arm.fix and "libbpf-dev:arm64" in arm.fix
    assert "-- " in doctor.render([arm]) and "BAD" not in doctor.render([arm])


def test_every_command_the_extending_guide_gives_parses() -> None:
    import re
    import shlex

    text = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    commands = re.findall(r"`(harness [^`]+)`", text)
    assert len(commands) >= 6
    for line in commands:
        argv = shlex.split(line)[1:]
        args = cli.parse_args(argv)  # exits (a test error) on what the parser refuses
        if args.command == "run":
            cli.planned(args)  # and the cells it names exist


def test_what_a_make_in_the_targets_tree_and_its_selftests_are_told() -> None:
    pinned = target.UNUSED_TOOLS
    assert target.default().kbuild_vars() == pinned and target.default().userspace_vars() == ()
    llvm = target.select("x86_64", "llvm", host_uname="x86_64")
    assert llvm.kbuild_vars() == ("ARCH=x86_64", "LLVM=-19", "CC=clang-19", "HOSTCC=clang-19",
                                  *pinned)
    assert llvm.userspace_vars() == ()  # the host's gcc builds what the host's guest runs
    arm = target.select("arm64", "gcc", host_uname="x86_64")
    assert arm.kbuild_vars() == ("ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-",
                                 "CC=aarch64-linux-gnu-gcc", "HOSTCC=gcc", *pinned)
    assert arm.userspace_vars() == ("ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-")


def test_tests_built_only_for_the_host_are_refused_for_another_arch_before_any_build(
        tmp_path: Path) -> None:
    from harness.drivers import pipeline
    from harness.drivers.stages import StageLog

    cell = Cell(name="a", tier=Tier.FULL, kernel="debian:6.12", arch="arm64",
                tests=("test_progs:cgroup_iter", "memcg_kfuncs"))
    with pytest.raises(Exception, match=r"test_progs:cgroup_iter: built for the host's arch"
                                        r" \(x86_64\); an arm64 guest cannot run them yet"):
        pipeline._plan(cell, StageLog("a"))


def test_a_roots_packages_are_what_apts_solver_says_and_its_hash_is_its_content(
        tmp_path: Path) -> None:
    from harness.guest import rootfs

    # `apt-get -s install` against an empty package database (recorded here, 2026-11-28)
    said = ("NOTE: This is only a simulation!\n"
            "Inst gcc-12-base (12.2.0-14+deb12u1 Debian:12.12/stable [amd64])\n"
            "Inst libc6 (2.36-9+deb12u14 Debian-Security:12/stable-security [amd64])\n"
            "Conf libc6 (2.36-9+deb12u14 Debian-Security:12/stable-security [amd64])\n"
            "Inst busybox-static (1:1.35.0-4+deb12u1+b1 Debian:12.12/stable [amd64])\n")
    assert [(m["name"], m["version"]) for m in rootfs._INST.finditer(said)] == [
        ("gcc-12-base", "12.2.0-14+deb12u1"), ("libc6", "2.36-9+deb12u14"),
        ("busybox-static", "1:1.35.0-4+deb12u1+b1")]
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "sh").write_text("#!sh\n")
    (root / "usr").mkdir()
    (root / "bin" / "awk").symlink_to("/usr/bin/mawk")
    first = rootfs._measure(root, 2)
    assert first.size == 5 and first.packages == 2 and len(first.digest) == 16
    (root / "tmp" / "wt41-runs" / "x").mkdir(parents=True)  # a mount point vng needs
    assert rootfs._measure(root, 2) == first
    (root / "bin" / "sh").chmod(0o755)  # a mode is content
    assert rootfs._measure(root, 2).digest != first.digest
    (root / "bin" / "awk").unlink()
    (root / "bin" / "awk").symlink_to("/bin/busybox")  # where a link points too
    assert rootfs._measure(root, 2).digest not in (first.digest,)
