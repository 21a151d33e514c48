"""perf's cgroup counting: config-option features (sources, then the built .config), the
tree's perf as a test tool (build options, which kind claims a test), and the guest
check's pure parts (perf's CSV, the oracle comparison, the negative control)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.base import paths
from harness.base.model import Feature, FeatureKind, FeatureReport, FeatureState, KernelImage
from harness.kernel import features
from harness.kernel.features import missing_for
from harness.testkinds import perf, resolve
from harness.testkinds.base import SelftestError

from .test_series_sources import git

pytestmark = pytest.mark.usefixtures("cache")

GOLDEN = Path(__file__).parent.parent / "golden"
CONFIG_FEATURES = tuple(f for f in features.KERNEL_FEATURES if f.kind is FeatureKind.CONFIG)

INIT_KCONFIG = """\
config CGROUP_PERF
\tbool "Perf controller"
\tdepends on PERF_EVENTS

config OTHER
\tbool "needs it"
\tdepends on CGROUP_PERF

menuconfig FHANDLE
\tbool "open by fhandle syscalls" if EXPERT

config DYNAMIC_FTRACE_WITH_DIRECT_CALLS
\tdef_bool y
"""


def _tree(path: Path, kconfig: str) -> str:
    path.mkdir()
    git(path, "init", "-q", "-b", "master")
    (path / "init").mkdir()
    (path / "init" / "Kconfig").write_text(kconfig)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return git(path, "rev-parse", "HEAD").strip()


def test_config_options_are_found_where_kconfig_defines_them(tmp_path: Path) -> None:
    repo = tmp_path / "k"
    base = _tree(repo, INIT_KCONFIG)
    assert {f.name for f in CONFIG_FEATURES} == {"CGROUP_PERF", "FHANDLE",
                                                 "DYNAMIC_FTRACE_WITH_DIRECT_CALLS"}
    found = features.source_definitions(repo, base, CONFIG_FEATURES)
    # the definition, not the `depends on` that names it
    assert found == {"CGROUP_PERF": "init/Kconfig:1", "FHANDLE": "init/Kconfig:9",
                     "DYNAMIC_FTRACE_WITH_DIRECT_CALLS": "init/Kconfig:12"}


def test_the_built_config_decides_a_config_option() -> None:
    # what the 6.12 test kernel without the perf fragment has (golden: its real .config)
    base_config = (GOLDEN / "kconfig" / "6.12-base.config").read_text()
    assert "# CONFIG_CGROUP_PERF is not set" in base_config
    in_base = features.from_sources(CONFIG_FEATURES, {"CGROUP_PERF": "init/Kconfig:1226",
                                                      "FHANDLE": "init/Kconfig:1602"}, {})
    off = features.confirm_with_config(in_base, base_config)
    # (the x86 kernel has ftrace's direct calls, which its sources did not say here)
    assert [r.state for r in off] == [FeatureState.ABSENT, FeatureState.ABSENT,
                                      FeatureState.PRESENT]
    assert off[0].note == "CONFIG_CGROUP_PERF is not set in the kernel's .config"
    on = features.confirm_with_config(in_base, base_config + "CONFIG_CGROUP_PERF=y\n"
                                      "CONFIG_FHANDLE=y\n")
    assert [r.state for r in on][:2] == [FeatureState.IN_BASE, FeatureState.IN_BASE]
    assert on[1].note == "CONFIG_FHANDLE=y" and on[1].where == "init/Kconfig:1602"


def test_btf_does_not_judge_a_config_option() -> None:
    reports = features.from_sources(CONFIG_FEATURES, {"CGROUP_PERF": "init/Kconfig:1"}, {})
    confirmed = features.confirm_with_btf(reports, features.KernelBtf(funcs=frozenset()))
    assert confirmed == reports


def test_an_image_without_a_config_has_no_config_option() -> None:
    reports = features.from_btf_only(CONFIG_FEATURES, features.KernelBtf(funcs=frozenset()))
    assert all(r.state is FeatureState.ABSENT for r in reports)
    on = features.confirm_with_config(reports, "CONFIG_CGROUP_PERF=y\n")
    assert on[0].state is FeatureState.PRESENT and on[1].state is FeatureState.ABSENT


def test_perf_cgroup_is_skipped_where_the_config_lacks_cgroup_perf() -> None:
    ref = resolve("perf_cgroup")
    absent = FeatureReport(feature=Feature(name="CGROUP_PERF", kind=FeatureKind.CONFIG),
                           state=FeatureState.ABSENT,
                           note="CONFIG_CGROUP_PERF is not set in the kernel's .config")
    present = FeatureReport(feature=Feature(name="FHANDLE", kind=FeatureKind.CONFIG),
                            state=FeatureState.IN_BASE)
    assert missing_for(ref.requires, (absent, present)) == [
        "CGROUP_PERF (config option: CONFIG_CGROUP_PERF is not set in the kernel's .config)"]


def test_real_build_options_show_bpf_skeletons() -> None:
    # `perf version --build-options` of the perf built from Debian 6.12.117 with
    # PERF_MAKE_VARS (2026-11-26)
    opts = perf.build_options((GOLDEN / "perf" / "build-options-6.12.117.txt").read_text())
    assert opts["bpf_skeletons"] is True and opts["bpf"] is True
    assert opts["libtraceevent"] is False and opts["dwarf"] is False
    assert "numa_num_possible_cpus" in opts


def test_the_perf_kind_claims_tests_that_ask_for_perf_and_only_those() -> None:
    ref = resolve("perf_cgroup")
    assert ref.kind == "perf" and ref.manifest is not None
    assert ref.manifest.tools == ("perf",) and ref.manifest.files == ("perf_cgroup.py",)
    assert ref.requires == ("CGROUP_PERF", "FHANDLE")
    assert resolve("perf_cgroup@bench").kind == "perf"
    moved = resolve("perf_cgroup@moved_while_counted")
    assert moved.kind == "perf" and moved.manifest is not None
    assert moved.manifest.command[-1] == "--move-late"
    assert resolve("memcg_kfuncs").kind == "own"


def test_an_unknown_tool_or_a_missing_file_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "test.toml").write_text('name = "t"\n[build]\ntools = ["bpftrace"]\n'
                                 'files = ["nope.sh"]\n[run]\ncommand = ["./t"]\n')
    with pytest.raises(SelftestError) as exc:
        resolve(str(d))
    assert "tools ['bpftrace']: only perf" in str(exc.value)
    assert "files ['nope.sh']" in str(exc.value)


def test_the_run_directory_pairs_the_test_with_this_perf(tmp_path: Path) -> None:
    built = paths.sub("selftests") / "perf_cgroup-0123"
    built.mkdir()
    (built / "perf_cgroup.py").write_text("#\n")
    binary = paths.sub("perf") / "k1" / "obj" / "perf"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    run_dir = perf._with_perf(built, binary)
    assert run_dir == paths.sub("perf") / "k1" / "tests" / "perf_cgroup-0123"
    assert (run_dir / "perf").resolve() == binary.resolve()
    assert (run_dir / "perf_cgroup.py").read_text() == "#\n"
    [planned] = perf.KIND.plan(resolve("perf_cgroup"), run_dir)
    assert planned.command == f"PERF={run_dir / 'perf'} python3 ./perf_cgroup.py check"
    assert planned.cwd == run_dir


# --- the guest check's pure functions ---

def _guest_module() -> ModuleType:
    path = paths.repo_root() / "selftests" / "perf_cgroup" / "perf_cgroup.py"
    spec = importlib.util.spec_from_file_location("perf_cgroup_guest", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


GUEST = _guest_module()
REL = "perfcg.46"
NAMES = ["busy_long", "busy_short", "switchy", "idle"]
# the oracle of that same run (its KTAP diagnostics, tests/golden/perf/check-6.12.117.ktap)
USAGE_MS = {"busy_long": 3021.4, "busy_short": 1752.6, "switchy": 75392.3, "idle": 0.0}
RUSAGE_CSW = {"busy_long": 441, "busy_short": 444, "switchy": 40205, "idle": 0}


def _counts(mode: str) -> dict[tuple[str, str], float | None]:
    # perf stat -a -x, --for-each-cgroup in the 6.12 TCG guest, both modes counting the
    # same run (tests/golden/perf/README.md)
    text = (GOLDEN / "perf" / f"stat-{mode}-6.12.117.csv").read_text()
    counts: dict[tuple[str, str], float | None] = GUEST.parse_csv(text)
    return counts


def test_perf_csv_per_cgroup_rows_and_not_counted() -> None:
    bpf = _counts("bpf")
    assert bpf[(f"{REL}/busy_long", "task-clock")] == 3041.69
    assert bpf[(f"{REL}/switchy", "context-switches")] == 40196
    # the cgroup nothing ran in: "<not supported>" (bpf) / "<not counted>" (plain)
    assert bpf[(f"{REL}/idle", "cpu-clock")] is None
    assert _counts("plain")[(f"{REL}/idle", "cpu-clock")] is None
    assert len(bpf) == 12


def test_both_modes_of_the_real_run_match_the_oracles() -> None:
    for mode in ("bpf", "plain"):
        assert GUEST.compare(_counts(mode), REL, USAGE_MS, RUSAGE_CSW, NAMES) == []


def test_counts_given_to_the_wrong_cgroups_are_caught() -> None:
    wrong = GUEST.rotated(_counts("bpf"), REL, NAMES)
    assert wrong[(f"{REL}/busy_long", "task-clock")] == 1754.18  # busy_short's
    bad = GUEST.compare(wrong, REL, USAGE_MS, RUSAGE_CSW, NAMES)
    assert any(b.startswith("busy_long task-clock") for b in bad)
    # idle is given busy_long's counts; switchy is given idle's (none): both caught
    assert any(b.startswith("idle ") for b in bad)
    assert any(b.startswith("switchy ") for b in bad)


def test_tolerance_edges() -> None:
    # 10% of the oracle plus 20 ms for clocks: 1000 ms -> [880, 1120]
    ok = {(f"{REL}/a", "task-clock"): 1120.0, (f"{REL}/a", "cpu-clock"): 880.0,
          (f"{REL}/a", "context-switches"): 100.0}
    assert GUEST.compare(ok, REL, {"a": 1000.0}, {"a": 100}, ["a"]) == []
    over = {**ok, (f"{REL}/a", "task-clock"): 1120.5}
    assert GUEST.compare(over, REL, {"a": 1000.0}, {"a": 100}, ["a"]) == [
        "a task-clock: 1120.5 ms, cpu.stat usage 1000.0 ms"]
    # a cgroup that ran but perf did not count is a mismatch, not a pass
    missing = {**ok, (f"{REL}/a", "context-switches"): None}
    assert GUEST.compare(missing, REL, {"a": 1000.0}, {"a": 100}, ["a"]) == [
        "a context-switches: None, workload rusage 100"]


def test_the_summary_does_not_call_config_options_unchecked_btf() -> None:
    from harness.output.terminal import feature_line
    kfunc = FeatureReport(feature=Feature(name="cgroup_rstat_flush", kind=FeatureKind.KFUNC),
                          state=FeatureState.IN_BASE, btf=True)
    config = features.confirm_with_config(
        features.from_sources(CONFIG_FEATURES, {"CGROUP_PERF": "init/Kconfig:1",
                                                "FHANDLE": "fs/Kconfig:1"}, {}),
        "CONFIG_CGROUP_PERF=y\n")
    assert feature_line((kfunc, *config)) == (
        "in base: cgroup_rstat_flush, CGROUP_PERF; absent: FHANDLE, "
        "DYNAMIC_FTRACE_WITH_DIRECT_CALLS (BTF agrees)")
    unread = FeatureReport(feature=kfunc.feature, state=FeatureState.IN_BASE, btf=None)
    assert feature_line((unread, *config)).endswith("(sources only, BTF not checked)")


def test_bpf_counters_need_the_bperf_cgroup_skeleton_and_no_off_in_build_options(
        tmp_path: Path) -> None:
    opts612 = (GOLDEN / "perf" / "build-options-6.12.117.txt").read_text()
    # 6.1's --build-options has no bpf_skeletons line (tests/golden/perf/README.md)
    opts61 = (GOLDEN / "perf" / "build-options-6.1.192.txt").read_text()
    assert "bpf_skeletons" not in perf.build_options(opts61)
    skel = tmp_path / "util" / "bpf_skel" / "bperf_cgroup.skel.h"
    assert not perf.has_bpf_counters(opts612, tmp_path)
    assert not perf.has_bpf_counters(opts61, tmp_path)
    skel.parent.mkdir(parents=True)
    skel.write_text("")
    assert perf.has_bpf_counters(opts612, tmp_path)
    assert perf.has_bpf_counters(opts61, tmp_path)
    off = opts612.replace("bpf_skeletons: [ on  ]", "bpf_skeletons: [ OFF ]")
    assert not perf.has_bpf_counters(off, tmp_path)


FAKE_PERF_MAKEFILE = """\
# a stand-in for tools/perf's build: the binary and the skeleton header the harness reads;
# each recipe counts its runs in the build directory
all: $(O)/perf $(O)/util/bpf_skel/bperf_cgroup.skel.h
$(O)/perf: perf.in
\ttest ! -e $(O)/stale
\techo perf >> $(O)/made
\tcp perf.in $@ && chmod +x $@
$(O)/util/bpf_skel/bperf_cgroup.skel.h: skel.in
\techo skel >> $(O)/made
\tmkdir -p $(@D) && cp skel.in $@
"""


def _fake_perf_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "linux-base"
    (tree / "tools/perf/util/bpf_skel/vmlinux").mkdir(parents=True)
    (tree / "scripts").mkdir()
    (tree / "scripts/x").write_text("x\n")
    (tree / "tools/perf/Makefile").write_text(FAKE_PERF_MAKEFILE)
    (tree / "tools/perf/util/bpf_skel/vmlinux/vmlinux.h").write_text("/* minimal */\n")
    (tree / "tools/perf/skel.in").write_text("/* skel */\n")
    (tree / "tools/perf/perf.in").write_text(
        "#!/bin/sh\necho 'perf version 1'\necho '       bpf_skeletons: [ on  ]  # HAVE_BPF_SKEL'\n")
    git(tree.parent, "init", "-q", str(tree))
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "one")
    return tree


def made(work: Path) -> list[str]:
    """What the fake perf build made in this build directory, each time (any order: -j)."""
    return sorted((work / "obj/made").read_text().split())


def test_perf_is_rebuilt_in_the_worktrees_build_directory_and_kept_per_content(
        tmp_path: Path) -> None:
    tree = _fake_perf_tree(tmp_path)
    kernel = KernelImage(boot_image=tmp_path / "bzImage", vmlinux=None, config=None,
                         version="6.12", arch="x86_64", toolchain="gcc")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs2").mkdir()
    first = perf.build_perf(tree, kernel, log_dir=tmp_path)
    assert "perf version 1" in first.read_text()
    [work] = (paths.cache_root() / perf.BUILD_DIRS).iterdir()
    assert made(work) == ["perf", "skel"]
    # a change in tools/perf: the same build directory, only what changed made again
    (tree / "tools/perf/perf.in").write_text(
        (tree / "tools/perf/perf.in").read_text().replace("version 1", "version 2"))
    git(tree, "commit", "-q", "-am", "two")
    second = perf.build_perf(tree, kernel, log_dir=tmp_path)
    assert second != first and "perf version 2" in second.read_text()
    assert "perf version 1" in first.read_text()  # each content's binary kept
    assert made(work) == ["perf", "perf", "skel"]
    # back to the first content: taken from the cache, nothing made
    git(tree, "checkout", "-q", "HEAD~1")
    assert perf.build_perf(tree, kernel, log_dir=tmp_path) == first
    assert made(work) == ["perf", "perf", "skel"]
    # an incremental build that fails (a stale dependency): built again from nothing
    (work / "obj/stale").write_text("")
    (tree / "tools/perf/perf.in").write_text(
        (tree / "tools/perf/perf.in").read_text().replace("version 1", "version 3"))
    git(tree, "commit", "-q", "-am", "three")
    third = perf.build_perf(tree, kernel, log_dir=tmp_path)
    assert "perf version 3" in third.read_text()
    assert made(work) == ["perf", "skel"]
    # a compile error of the tree's code is not retried: the build directory stays
    (tree / "tools/perf/Makefile").write_text(FAKE_PERF_MAKEFILE.replace(
        "\ttest ! -e $(O)/stale", "\techo 'util/x.c:3:7: error: broken' >&2; false"))
    (tree / "tools/perf/perf.in").write_text(
        (tree / "tools/perf/perf.in").read_text().replace("version 3", "version 4"))
    git(tree, "commit", "-q", "-am", "compile error")
    with pytest.raises(SelftestError, match=r"util/x.c:3:7: error: broken") as err:
        perf.build_perf(tree, kernel, log_dir=tmp_path / "logs")
    assert "build-perf-incremental.log" in str(err.value)
    assert made(work) == ["perf", "skel"]  # not made again from nothing
    # a failure that is no compile error is tried from nothing, and failing there too is
    # the tree's error
    (tree / "tools/perf/Makefile").write_text(
        "all:\n\t@echo \"make: *** No rule to make target 'util/gone.h'\"; false\n")
    git(tree, "commit", "-q", "-am", "four")
    with pytest.raises(SelftestError, match=r"building perf failed.*\n.*No rule to make") as err:
        perf.build_perf(tree, kernel, log_dir=tmp_path / "logs2")
    assert "build-perf.log" in str(err.value)  # the build from nothing's
