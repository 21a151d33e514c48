"""HARNESS_PAHOLE: the pahole a kernel's BTF is made with, and what changes with it (make's
PAHOLE=, the sandbox's reads, the stored kernel's key); a Debian suite's pahole run through
its own loader, here with a fake loader and pahole at the process boundary."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import target
from harness.base.errors import HarnessError
from harness.kernel import build, kconfig, pahole


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_unset_is_the_hosts_pahole_and_make_is_told_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pahole.ENV, raising=False)
    chosen = pahole.chosen()
    assert chosen == pahole.Pahole() and chosen.make_vars == () and chosen.reads == ()
    argv = build.make_argv(Path("/t"), Path("/b"), build.Tools(
        target=target.select(host_uname="x86_64"), compiler="gcc", pahole="v1.24",
        ccache=True), "bzImage")
    assert not any(a.startswith("PAHOLE=") for a in argv)


def test_a_path_is_run_by_make_read_in_the_sandbox_and_keyed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _script(tmp_path / "bin" / "pahole-new", "echo v1.32")
    monkeypatch.setenv(pahole.ENV, str(fake))
    tools = build.tools(target.select(host_uname="x86_64"))
    assert tools.pahole == f"v1.32 ({fake})"
    argv = build.make_argv(Path("/t"), Path("/b"), tools, "bzImage")
    assert f"PAHOLE={fake}" in argv and argv[-1] == "bzImage"
    assert fake.parent in build.reach(tmp_path / "tree", tools).read
    # another pahole is another stored kernel
    host = build.Tools(target=tools.target, compiler=tools.compiler, pahole="v1.32",
                       ccache=tools.ccache)
    assert tools.ident != host.ident


@pytest.mark.parametrize("value, said", [
    ("pahole", "absolute path"),
    ("/nonexistent/pahole", "absolute path"),
    ("debian:bookworm", "the host's own suite"),
    ("debian:nosuch", "no such suite"),
])
def test_a_value_it_cannot_use_is_an_error_with_the_fix(
        value: str, said: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pahole.ENV, value)
    with pytest.raises(HarnessError) as err:
        pahole.chosen()
    assert said in err.value.message and err.value.fix
    assert "debian:sid" in err.value.fix or "unset" in err.value.fix


def test_the_recursive_depends_are_the_packages_not_the_virtual_ones() -> None:
    # apt-cache depends --recurse --no-recommends ... pahole, as apt 2.6 prints it
    text = ("W: Unable to read /etc/apt/-/ - DirectoryExists (2: No such file or directory)\n"
            "pahole\n  Depends: libdwarves1\n  Depends: libc6\n  Depends: libelf1t64\n"
            "libdwarves1\n  Depends: libbpf1\n  Depends: libc6\n"
            "libc6\n  Depends: libgcc-s1\n"
            "libelf1t64\n  Depends: libc6\n  Depends: zlib1g\n"
            "<libelf1>\n"
            "libbpf1\nlibgcc-s1\n  Depends: libc6\nzlib1g\n")
    assert pahole.parse_recursive_depends(text) == [
        "pahole", "libdwarves1", "libc6", "libelf1t64", "libbpf1", "libgcc-s1", "zlib1g"]


def test_the_wrapper_runs_pahole_through_the_unpacked_loader_with_the_unpacked_libraries(
        tmp_path: Path) -> None:
    root = tmp_path / "root with space"
    # a loader that says what it was asked to run
    loader = _script(root / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                     'printf "%s\\n" "$@"')
    _script(root / "usr/bin/pahole", "exit 0")
    wrapper = _script(tmp_path / "pahole", "")
    wrapper.write_text(pahole.wrapper_text(root, loader, [loader.parent, root / "lib"]))
    out = subprocess.run([str(wrapper), "-J", "--btf_features=decl_tag_kfuncs", "a b"],
                         text=True, capture_output=True, check=True).stdout.splitlines()
    assert out == ["--library-path", f"{loader.parent}:{root / 'lib'}",
                   str(root / "usr/bin/pahole"), "-J", "--btf_features=decl_tag_kfuncs",
                   "a b"]


@pytest.mark.parametrize("version, ok", [("v1.24", False), ("v1.27", True), ("v1.32", True)])
def test_doctor_says_whether_the_btf_gets_kfunc_declarations(
        version: str, ok: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.drivers import doctor

    monkeypatch.setenv(pahole.ENV, str(_script(tmp_path / version / "pahole", f"echo {version}")))
    check = doctor.pahole_check()
    assert check.ok is ok and check.optional and version in check.detail
    assert ("HARNESS_PAHOLE=debian:sid" in check.fix) is not ok


def test_kconfig_is_told_the_same_pahole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CONFIG_PAHOLE_VERSION is the build's pahole's, not the host's."""
    from harness.kernel import kconfig

    t = target.select(host_uname="x86_64")
    monkeypatch.delenv(pahole.ENV, raising=False)
    assert not any(v.startswith("PAHOLE=") for v in kconfig.make_vars(t))
    fake = _script(tmp_path / "pahole", "echo v1.32")
    monkeypatch.setenv(pahole.ENV, str(fake))
    assert f"PAHOLE={fake}" in kconfig.make_vars(t)


def _tree(path: Path, version: int, patchlevel: int) -> Path:
    path.mkdir(parents=True)
    (path / "Makefile").write_text(f"# SPDX\nVERSION = {version}\nPATCHLEVEL = {patchlevel}\n"
                                   "SUBLEVEL = 13\nEXTRAVERSION =\n")
    return path


def test_the_committed_rule_gives_test_progs_of_new_kernels_sids_pahole() -> None:
    [need] = [n for n in target.pahole_needs() if "test_progs" in n.configs]
    assert need.pahole == "debian:sid" and "1.27" in need.why
    assert kconfig.within(need.kernels, (7, 2)) and not kconfig.within(need.kernels, (6, 12))


def test_a_rule_holds_for_its_kernels_and_fragments_and_the_variable_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(pahole.ENV, raising=False)
    monkeypatch.setattr(target, "pahole_needs", lambda: (target.PaholeNeed(
        configs=("test_progs",), kernels=">= 6.13", pahole=str(tmp_path / "new"),
        why="kfunc declarations"),))
    fake = _script(tmp_path / "new", "echo v1.32")
    host = target.select(host_uname="x86_64")
    new, old = _tree(tmp_path / "t72", 7, 2), _tree(tmp_path / "t612", 6, 12)
    with caplog.at_level("INFO"):
        got = kconfig.with_needed_pahole(host, new, ("base", "test_progs"))
    assert got.pahole == str(fake) and got.name == host.name and got.slug == host.slug
    assert "kfunc declarations" in caplog.text and "pahole.toml" in caplog.text
    # not its fragments, not its kernels: the host's
    assert kconfig.with_needed_pahole(host, new, ("base",)).pahole == ""
    assert kconfig.with_needed_pahole(host, old, ("base", "test_progs")).pahole == ""
    # the build and Kconfig are told it, and the store key carries it
    assert f"PAHOLE={fake}" in kconfig.make_vars(got)
    tools = build.tools(got)
    assert tools.pahole == f"v1.32 ({fake})" and tools.pahole_tool.reads == (tmp_path,)
    # HARNESS_PAHOLE, when set, wins over the rule (and the terminal says so)
    other = _script(tmp_path / "other" / "pahole", "echo v1.30")
    monkeypatch.setenv(pahole.ENV, str(other))
    caplog.clear()
    with caplog.at_level("INFO"):
        again = kconfig.with_needed_pahole(host, new, ("base", "test_progs"))
    assert build.tools(again).pahole == f"v1.30 ({other})"
    assert f"{pahole.ENV}={other} given, which wins" in caplog.text


def test_bounds_that_do_not_parse_are_an_error_with_the_fix() -> None:
    with pytest.raises(kconfig.ConfigError) as err:
        kconfig.within("since 6.13", (7, 2))
    assert ">= 6.13" in err.value.fix


def test_the_rule_reads_the_version_of_the_commit_built_not_of_the_worktree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worktree shared by revisions may be left at another: 7.2 committed, 6.12 on disk."""
    monkeypatch.delenv(pahole.ENV, raising=False)
    fake = _script(tmp_path / "new", "echo v1.32")
    monkeypatch.setattr(target, "pahole_needs", lambda: (target.PaholeNeed(
        configs=("test_progs",), kernels=">= 6.13", pahole=str(fake), why="w"),))
    tree = _tree(tmp_path / "t", 7, 2)
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "Makefile"], check=True)
    subprocess.run([*git, "commit", "-qm", "7.2"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, text=True,
                            capture_output=True).stdout.strip()
    (tree / "Makefile").write_text("VERSION = 6\nPATCHLEVEL = 12\n")
    host = target.select(host_uname="x86_64")
    assert kconfig.with_needed_pahole(host, tree, ("test_progs",)).pahole == ""
    assert kconfig.with_needed_pahole(host, tree, ("test_progs",), commit).pahole == str(fake)
