"""Kconfig parsing and verification on a real 6.12 .config and real Kconfig excerpts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.base import paths
from harness.kernel import kconfig

GOLDEN = Path(__file__).parent.parent / "golden" / "kconfig"


def real_config() -> dict[str, str]:
    return kconfig.parse_config((GOLDEN / "6.12-base.config").read_text())


def test_parse_config_reads_set_unset_and_values() -> None:
    cfg = real_config()
    assert cfg["CONFIG_BUG"] == "y"
    assert cfg["CONFIG_INET"] == "y"
    assert cfg["CONFIG_IPV6"] == "n"  # "# CONFIG_IPV6 is not set"
    assert cfg["CONFIG_NR_CPUS"] == "8"
    assert cfg["CONFIG_DEBUG_INFO_BTF"] == "y"


def test_base_fragment_survives_in_the_real_config() -> None:
    wanted = kconfig.requested_symbols([Path(__file__).parents[2] / "kconfigs/base.config"])
    assert "CONFIG_BUG" in wanted and wanted["CONFIG_BUG"] == "y"
    assert kconfig.verify(real_config(), wanted, None) == ()


def test_dropped_symbol_names_the_unmet_dependency() -> None:
    cfg = real_config()
    cfg["CONFIG_RUNTIME_TESTING_MENU"] = "n"
    cfg.pop("CONFIG_LKDTM")
    index = kconfig.index_kconfig(GOLDEN / "tree")
    dropped = kconfig.verify(cfg, {"CONFIG_LKDTM": "y", "CONFIG_BUG": "y"}, index)
    assert [d.symbol for d in dropped] == ["CONFIG_LKDTM"]
    assert dropped[0].actual == "n"
    assert "RUNTIME_TESTING_MENU=n" in dropped[0].reason
    assert "lib/Kconfig.debug" in dropped[0].reason


def test_symbol_forced_on_names_who_selects_it() -> None:
    cfg = real_config()
    index = kconfig.index_kconfig(GOLDEN / "tree")
    dropped = kconfig.verify(cfg, {"CONFIG_CPU_FREQ": "n"}, index)
    assert len(dropped) == 1
    assert "selected by SCHED_MC_PRIO=y" in dropped[0].reason


def test_unknown_symbol_is_called_unknown() -> None:
    index = kconfig.index_kconfig(GOLDEN / "tree")
    dropped = kconfig.verify(real_config(), {"CONFIG_LKDTMM": "y"}, index)
    assert "unknown symbol" in dropped[0].reason


def test_help_text_is_not_read_as_kconfig() -> None:
    """RC_CORE's help has a line starting "if you don't need IR": prose, not an if block."""
    index = kconfig.index_kconfig(GOLDEN / "tree")
    assert index["RC_CORE"].depends == ("INPUT",)
    # LIRC sits inside the real `if RC_CORE` block, and only that.
    assert index["LIRC"].depends == ("RC_CORE",)
    why = kconfig.explain_dependency("CONFIG_LIRC", {"CONFIG_INPUT": "n"}, index)
    assert why == "LIRC (drivers/media/rc/Kconfig): unmet depends on RC_CORE (RC_CORE=n)"


def test_tree_fragment_losses_are_reported_not_fatal(tmp_path: Path) -> None:
    """configure() with a lenient (tree) fragment: its dropped options come back, no error."""
    ours = tmp_path / "ours.config"
    ours.write_text("CONFIG_A=y\n")
    theirs = tmp_path / "theirs.config"
    theirs.write_text("CONFIG_B=y\n# CONFIG_C is not set\n")
    later = tmp_path / "later.config"
    later.write_text("CONFIG_D=y\n")
    # theirs also asks for D, but ours comes later: D's request is ours, and strict.
    theirs.write_text(theirs.read_text() + "CONFIG_D=m\n")
    frags = [ours, theirs, later]
    final = {"CONFIG_A": "y", "CONFIG_C": "y"}
    dropped = kconfig.verify(final, kconfig.requested_symbols(frags), None)
    assert {d.symbol for d in dropped} == {"CONFIG_B", "CONFIG_C", "CONFIG_D"}
    fatal, tolerated = kconfig.split_dropped(dropped, kconfig.request_owners(frags), [theirs])
    assert [d.symbol for d in fatal] == ["CONFIG_D"]
    assert {d.symbol for d in tolerated} == {"CONFIG_B", "CONFIG_C"}
    assert kconfig.config_slug(["base", "tree:tools/testing/selftests/bpf/config"]) == \
        "base+bpf_config"


def test_a_line_limited_to_some_kernels_is_requested_only_there() -> None:
    text = ("CONFIG_A=y\n# why\n# harness: kernel < 6.18\nCONFIG_OLD=y\n# CONFIG_OLD2 is not set\n"
            "\nCONFIG_B=y\n# harness: kernel >= 6.2, < 6.18\nCONFIG_MID=y\n")
    old = kconfig.for_kernel(text, (6, 12))
    assert kconfig.parse_config(old) == {"CONFIG_A": "y", "CONFIG_OLD": "y", "CONFIG_OLD2": "n",
                                         "CONFIG_B": "y", "CONFIG_MID": "y"}
    new = kconfig.for_kernel(text, (7, 2))
    # the directive holds up to the next blank line; line numbers stay the fragment's
    assert kconfig.parse_config(new) == {"CONFIG_A": "y", "CONFIG_B": "y"}
    assert new.splitlines()[3] == "# harness: not for 7.2: CONFIG_OLD=y"
    assert len(new.splitlines()) == len(text.splitlines())
    assert kconfig.parse_config(kconfig.for_kernel(text, (6, 1))) == {
        "CONFIG_A": "y", "CONFIG_OLD": "y", "CONFIG_OLD2": "n", "CONFIG_B": "y"}
    assert kconfig.fragment_problems(text) == []
    assert kconfig.fragment_problems("# harness: kernel < 6\nCONFIG_A=y\n") == [
        (1, "'# harness: kernel < 6': not a kernel version bound: 'kernel < 6' (write "
            "'# harness: kernel < 6.18' or '# harness: kernel >= 6.2, < 6.18')")]


def test_base_config_asks_for_the_zswap_pool_only_where_it_exists() -> None:
    base = (Path(__file__).resolve().parents[2] / "kconfigs" / "base.config").read_text()
    assert "CONFIG_ZSWAP_ZPOOL_DEFAULT_ZSMALLOC" in kconfig.parse_config(
        kconfig.for_kernel(base, (6, 12)))
    assert "CONFIG_ZSWAP_ZPOOL_DEFAULT_ZSMALLOC" not in kconfig.parse_config(
        kconfig.for_kernel(base, (7, 2)))


def test_the_release_is_read_from_the_tree(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("# SPDX\nVERSION = 7\nPATCHLEVEL = 2\nSUBLEVEL = 13\n")
    assert kconfig.kernel_release(tmp_path) == (7, 2)
    (tmp_path / "Makefile").write_text("all:\n")
    assert kconfig.kernel_release(tmp_path) is None


def test_the_kconfig_inputs_of_a_patch_that_touches_none_are_its_parents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Remembered per tree: a commit that changes no Kconfig input takes its parent's id
    without listing the tree; one that does, or any commit once the memory is gone, gets
    the id a full listing gives."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    tree = tmp_path / "linux"
    (tree / "mm").mkdir(parents=True)
    (tree / "Kconfig").write_text("config A\n\tbool \"a\"\n")
    (tree / "mm" / "memcontrol.c").write_text("int x;\n")

    def commit(message: str) -> None:
        subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t",
                        "commit", "-q", "-m", message], check=True)

    def listed_anew() -> str:
        (paths.sub("kconfig") / kconfig._INPUTS_MEMO).unlink(missing_ok=True)
        return kconfig.kconfig_inputs(tree)

    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    commit("base")
    base = kconfig.kconfig_inputs(tree)
    (tree / "mm" / "memcontrol.c").write_text("int y;\n")
    commit("a one-line change")
    commands: list[str] = []
    real_git = kconfig.git

    def counted_git(repo: Path, *args: str, **kw: object) -> str:
        commands.append(args[0])
        return real_git(repo, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(kconfig, "git", counted_git)
    assert kconfig.kconfig_inputs(tree) == base and "ls-tree" not in commands
    monkeypatch.setattr(kconfig, "git", real_git)
    assert listed_anew() == base
    (tree / "mm" / "Kconfig").write_text("config B\n\tbool \"b\"\n")
    commit("a new option")
    changed = kconfig.kconfig_inputs(tree)
    assert changed != base and changed == listed_anew()
