"""`harness check`: checkpatch parsing on real checkpatch output, W=1 normalisation and delta
on real gcc output, and the whole check on a miniature tree (real git, make, gcc, ccache).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from harness import cli
from harness.drivers import check
from harness.drivers.check import CompileState, ObjectCompile

GOLDEN = Path(__file__).parent.parent / "golden" / "checkpatch"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.org",
       "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.org"}


# --- checkpatch output ------------------------------------------------------------------


def test_bad_patch_issues_and_counts() -> None:
    report = check.parse_checkpatch((GOLDEN / "bad-style.txt").read_text())
    assert (report.errors, report.warnings, report.checks, report.lines_checked) == (3, 4, 5, 26)
    assert not report.clean
    levels = [i.level for i in report.issues]
    assert (levels.count("ERROR"), levels.count("WARNING"), levels.count("CHECK")) == (3, 4, 5)
    first = report.issues[0]
    assert (first.level, first.type, first.message) == ("ERROR", "TRAILING_WHITESPACE",
                                                        "trailing whitespace")
    assert (first.patch_line, first.file, first.file_line) == (23, "mm/memcontrol.c", 103)
    assert first.where == "mm/memcontrol.c:103"
    types = {i.type: i for i in report.issues}
    assert types["MISSING_SIGN_OFF"].level == "ERROR"
    assert types["MISSING_SIGN_OFF"].where == ""  # checkpatch names no line for it
    # "#35: " with no FILE: the location is a line of the patch itself.
    assert types["FILE_PATH_CHANGES"].where == "patch line 35"
    # The SPDX check really ran (spdxcheck.py under /usr/bin/python3 with ply).
    assert types["SPDX_LICENSE_TAG"].file == "mm/memcg_badstyle.c"
    assert "GPL-2.0-bogus" in types["SPDX_LICENSE_TAG"].message
    assert types["LONG_LINE"].message == "line length of 121 exceeds 100 columns"
    assert check.python_failure((GOLDEN / "bad-style.txt").read_text()) == ""


def test_clean_patch_is_clean() -> None:
    report = check.parse_checkpatch((GOLDEN / "clean.txt").read_text())
    assert report.clean and report.issues == ()
    assert report.lines_checked == 201


def test_not_a_patch_is_one_error() -> None:
    report = check.parse_checkpatch((GOLDEN / "not-a-patch.txt").read_text())
    assert report.errors == 1
    assert [i.type for i in report.issues] == ["NOT_UNIFIED_DIFF"]


def test_spdxcheck_without_ply_is_detected() -> None:
    text = (GOLDEN / "bad-style-no-ply.txt").read_text()
    broken = check.python_failure(text)
    assert broken.startswith("Traceback (most recent call last):")
    assert broken.endswith("ModuleNotFoundError: No module named 'ply'")
    # What that costs: the SPDX warning silently disappears.
    report = check.parse_checkpatch(text)
    assert (report.errors, report.warnings) == (3, 3)
    assert "SPDX_LICENSE_TAG" not in {i.type for i in report.issues}


def test_output_cut_short_is_not_parsed_as_clean() -> None:
    text = (GOLDEN / "bad-style.txt").read_text().split("total:")[0]
    with pytest.raises(ValueError, match="total"):
        check.parse_checkpatch(text)


def _fake_checkpatch_tree(tmp_path: Path, output: Path) -> Path:
    """A tree whose checkpatch.pl prints `output` (kept in the tree: checkpatch runs in
    the sandbox, which reads the tree and the patch, nothing else)."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copyfile(output, tree / "scripts" / "output.txt")
    script = tree / "scripts" / "checkpatch.pl"
    script.write_text(f"#!/bin/sh\ncat '{tree / 'scripts' / 'output.txt'}'\nexit 1\n")
    script.chmod(0o755)
    return tree


def test_broken_spdxcheck_is_a_setup_error_with_the_fix(tmp_path: Path) -> None:
    tree = _fake_checkpatch_tree(tmp_path, GOLDEN / "bad-style-no-ply.txt")
    with pytest.raises(check.CheckSetupError) as err:
        check.run_checkpatch(tree, GOLDEN / "bad-style.patch", log_path=tmp_path / "cp.log")
    assert "apt-get install -y python3-ply python3-git" in str(err.value)
    assert "No module named 'ply'" in str(err.value)


def test_run_checkpatch_keeps_output_and_log(tmp_path: Path) -> None:
    tree = _fake_checkpatch_tree(tmp_path, GOLDEN / "bad-style.txt")
    run = check.run_checkpatch(tree, GOLDEN / "bad-style.patch", log_path=tmp_path / "cp.log")
    assert run.exit_code == 1 and run.report.errors == 3
    assert "MISSING_SIGN_OFF" in run.output
    assert "MISSING_SIGN_OFF" in (tmp_path / "cp.log").read_text()


# --- W=1 warnings -----------------------------------------------------------------------

BEFORE_C = """\
int used(int x);

int used(int x)
{
\treturn x;
}

static int helper(void)
{
\tint unused;

\treturn 0;
}

int noproto(void)
{
\treturn helper();
}
"""

# Three lines inserted at the top move every warning; one function without a prototype added.
AFTER_C = "/*\n * moved\n */\n" + BEFORE_C + "\nint noproto2(void)\n{\n\treturn 2;\n}\n"


def _gcc_warnings(tmp_path: Path, text: str) -> list[str]:
    """Real gcc output, compiled the way kbuild + ccache do it: in the build directory, with
    the source given relative to it."""
    tree, build_dir = tmp_path / "work" / "tree", tmp_path / "build" / "tree"
    (tree / "mm").mkdir(parents=True, exist_ok=True)
    build_dir.mkdir(parents=True, exist_ok=True)
    (tree / "mm" / "x.c").write_text(text)
    res = subprocess.run(["gcc", "-Wall", "-Wmissing-prototypes", "-c",
                          "../../work/tree/mm/x.c", "-o", "x.o"],
                         cwd=build_dir, capture_output=True, text=True, check=True)
    return res.stderr.splitlines()


def test_normalise_drops_line_and_column_and_relativises(tmp_path: Path) -> None:
    tree, build_dir = tmp_path / "work" / "tree", tmp_path / "build" / "tree"
    lines = _gcc_warnings(tmp_path, BEFORE_C)
    warnings = check.extract_warnings(lines)
    assert len(warnings) == 2, lines  # unused variable, no previous prototype
    assert all(w.startswith("../../work/tree/mm/x.c:") for w in warnings)
    norm = [check.normalise_warning(w, tree, build_dir) for w in warnings]
    assert all(n.startswith("mm/x.c: warning: ") for n in norm), norm
    assert any("[-Wunused-variable]" in n for n in norm)
    assert any("noproto" in n and "[-Wmissing-prototypes]" in n for n in norm)
    # Absolute paths into the tree, and into the build directory, come out the same way.
    absolute = warnings[0].replace("../../work/tree", str(tree))
    assert check.normalise_warning(absolute, tree, build_dir) == norm[0]
    gen = f"{build_dir}/include/generated/x.h:3:1: warning: w [-Wfoo]"
    assert check.normalise_warning(gen, tree, build_dir) == \
        "include/generated/x.h: warning: w [-Wfoo]"


def test_moved_code_is_not_new_an_added_function_is(tmp_path: Path) -> None:
    tree, build_dir = tmp_path / "work" / "tree", tmp_path / "build" / "tree"
    before = [check.normalise_warning(w, tree, build_dir)
              for w in check.extract_warnings(_gcc_warnings(tmp_path, BEFORE_C))]
    raw_after = check.extract_warnings(_gcc_warnings(tmp_path, AFTER_C))
    after = [check.normalise_warning(w, tree, build_dir) for w in raw_after]
    assert len(raw_after) == 3
    assert set(raw_after).isdisjoint(check.extract_warnings(_gcc_warnings(tmp_path, BEFORE_C)))
    new, gone = check.warning_delta(tuple(before), tuple(after))
    assert len(new) == 1 and "noproto2" in new[0], new
    assert gone == ()


def test_delta_counts_duplicates() -> None:
    w = "mm/x.c: warning: variable 'r' set but not used [-Wunused-but-set-variable]"
    new, gone = check.warning_delta((w,), (w, w, w))
    assert new == (w, w) and gone == ()
    new, gone = check.warning_delta((w, w), ())
    assert new == () and gone == (w, w)


def test_objtool_offsets_are_masked() -> None:
    a = "mm/memcontrol.o: warning: objtool: memcg_stat+0x1a: unreachable instruction"
    b = "mm/memcontrol.o: warning: objtool: memcg_stat+0x2f: unreachable instruction"
    root = Path("/nonexistent")
    assert check.normalise_warning(a, root, root) == check.normalise_warning(b, root, root)


def test_object_output_is_only_what_follows_its_cc_line() -> None:
    # kbuild's quiet format; W=1 also rebuilds prepare steps (asm-offsets) before the object.
    lines = textwrap.dedent("""\
        make: Entering directory '/c/work/t'
          CC      arch/x86/kernel/asm-offsets.s
        ../../work/t/arch/x86/kernel/asm-offsets.c:9:1: warning: not ours [-Wfoo]
          CALL    ../../work/t/scripts/checksyscalls.sh
          CC      mm/memcontrol.o
        ../../work/t/mm/memcontrol.c: In function 'f':
        ../../work/t/mm/memcontrol.c:12:6: warning: ours [-Wbar]
           12 |  int r;
              |      ^
        make: Leaving directory '/c/work/t'
        """).splitlines()
    mine = check.object_output(lines, "mm/memcontrol.o")
    assert mine is not None
    assert check.extract_warnings(mine) == ("../../work/t/mm/memcontrol.c:12:6: warning: ours "
                                            "[-Wbar]",)
    assert check.object_output(lines, "mm/other.o") is None


W1_GOLDEN = Path(__file__).parent.parent / "golden" / "w1"
REAL_TREE = Path("/root/.cache/harness/work/debian-6.12-6.12.117-1_deb12u1-base")
REAL_BUILD = Path("/root/.cache/harness/build/debian-6.12-6.12.117-1_deb12u1-base")


def _real_w1(name: str) -> tuple[str, ...]:
    lines = (W1_GOLDEN / name).read_text().splitlines()
    mine = check.object_output(lines, "mm/memcontrol.o")
    assert mine is not None
    return tuple(check.normalise_warning(w, REAL_TREE, REAL_BUILD)
                 for w in check.extract_warnings(mine))


def test_real_kbuild_w1_output_gives_the_patchs_three_warnings() -> None:
    before = _real_w1("memcontrol-base.log")
    after = _real_w1("memcontrol-warn-patch.log")
    assert before == ()
    q, p = "\u2018", "\u2019"  # gcc's quotes in a UTF-8 locale, as recorded
    assert after == (
        f"mm/memcontrol.c: warning: no previous prototype for {q}memcg_demo{p} "
        "[-Wmissing-prototypes]",
        f"mm/memcontrol.c: warning: variable {q}unused_but_set{p} set but not used "
        "[-Wunused-but-set-variable]",
        f"mm/memcontrol.c: warning: {q}memcg_demo_unused{p} defined but not used "
        "[-Wunused-const-variable=]",
    )
    new, gone = check.warning_delta(before, after)
    assert new == after and gone == ()
    # The prepare steps W=1 rebuilt before the object are not part of its output.
    text = (W1_GOLDEN / "memcontrol-warn-patch.log").read_text().splitlines()
    mine = check.object_output(text, "mm/memcontrol.o")
    assert mine is not None and not any("asm-offsets" in ln for ln in mine)


def _oc(state: CompileState, *warnings: str) -> ObjectCompile:
    return ObjectCompile(source="mm/x.c", prefix=0, state=state, warnings=warnings,
                         normalised=warnings)


def test_compare_states() -> None:
    w = "mm/x.c: warning: w [-Wfoo]"
    new_file = check.compare(_oc(CompileState.ABSENT), _oc(CompileState.COMPILED, w))
    assert new_file.compared and new_file.new == (w,) and new_file.failed
    assert new_file.note == "new file"
    deleted = check.compare(_oc(CompileState.COMPILED, w), _oc(CompileState.ABSENT))
    assert deleted.compared and not deleted.failed and deleted.gone == (w,)
    broke = check.compare(_oc(CompileState.COMPILED), _oc(CompileState.FAILED))
    assert broke.failed and not broke.compared
    was_broken = check.compare(_oc(CompileState.FAILED), _oc(CompileState.COMPILED, w))
    assert not was_broken.failed and not was_broken.compared
    off = check.compare(_oc(CompileState.NOT_BUILT), _oc(CompileState.NOT_BUILT))
    assert not off.failed and not off.compared


def test_first_errors_are_the_root_cause() -> None:
    log = ("  CC      mm/a.o\n../../w/mm/a.c:3:1: error: expected ';' before '}' token\n"
           "make[3]: *** [scripts/Makefile.build:229: mm/a.o] Error 1\n  CC      mm/b.o\n")
    assert check.first_errors(log) == (
        "../../w/mm/a.c:3:1: error: expected ';' before '}' token",
        "make[3]: *** [scripts/Makefile.build:229: mm/a.o] Error 1")
    assert check.first_errors("a\nb\n", limit=1) == ("b",)


def test_c_sources_skips_what_kbuild_does_not_compile() -> None:
    assert check.c_sources(("mm/a.c", "include/linux/a.h", "tools/x/y.c", "scripts/z.c",
                            "Documentation/a.rst", "kernel/b.c")) == ("mm/a.c", "kernel/b.c")


# --- the whole check on a miniature tree ------------------------------------------------

MAKEFILE = """\
VERSION = 6
PATCHLEVEL = 12
# A stand-in for kbuild: just what harness's kconfig, build and W=1 steps call.
O ?= .
CC ?= gcc
SRCS := $(sort $(wildcard mm/*.c))
OBJS := $(patsubst %.c,$(O)/%.o,$(SRCS))
WARN := -Wall $(if $(W),-Wmissing-prototypes)

bzImage: $(OBJS)
\t@mkdir -p $(O)/arch/x86/boot $(O)/include/config
\t@cat $(OBJS) > $(O)/vmlinux
\t@cp $(O)/vmlinux $(O)/arch/x86/boot/bzImage
\t@echo mini > $(O)/System.map
\t@echo 6.12.0-mini > $(O)/include/config/kernel.release

mm/%.o: $(O)/mm/%.o
\t@:

$(O)/mm/%.o: mm/%.c
\t@mkdir -p $(dir $@)
\t@echo "  CC      mm/$*.o"
\t@$(CC) $(WARN) -c $< -o $@

tinyconfig:
\t@mkdir -p $(O)
\t@echo CONFIG_TINY=y > $(O)/.config

olddefconfig:
\t@:

.PHONY: bzImage tinyconfig olddefconfig
"""

MERGE_CONFIG = """\
#!/bin/sh
# Stand-in for scripts/kconfig/merge_config.sh -m -O DIR BASE FRAGMENT...
[ "$1" = -m ] && shift
[ "$1" = -O ] && { out=$2; shift 2; }
cat "$@" > "$out/.config.new" && mv "$out/.config.new" "$out/.config"
"""

CHECKPATCH = """\
#!/bin/sh
# Stand-in for scripts/checkpatch.pl: an added line with trailing whitespace is an ERROR.
for patch; do :; done
if grep -q '^+.*[[:space:]]$' "$patch"; then
\tprintf 'ERROR:TRAILING_WHITESPACE: trailing whitespace\\n#9: FILE: mm/extra.c:7:\\n+x \\n\\n'
\techo 'total: 1 errors, 0 warnings, 0 checks, 9 lines checked'
\texit 1
fi
echo 'total: 0 errors, 0 warnings, 0 checks, 9 lines checked'
"""

CORE_C = "int core(void);\n\nint core(void)\n{\n\treturn 0;\n}\n"
HELPER = "\nint helper(int x)\n{\n\treturn x + 1;\n}\n"
EXTRA_C = "int extra(void);\n\nint extra(void)\n{\n\treturn 2;\n}\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, env=ENV,
                          capture_output=True, text=True).stdout


def mini_tree(path: Path) -> Path:
    for rel, text, mode in (("Makefile", MAKEFILE, 0o644), ("mm/core.c", CORE_C, 0o644),
                            ("scripts/kconfig/merge_config.sh", MERGE_CONFIG, 0o755),
                            ("scripts/checkpatch.pl", CHECKPATCH, 0o755)):
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
        f.chmod(mode)
    git(path, "init", "-q", "-b", "master")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


def make_series(repo: Path, out: Path, edits: list[tuple[str, dict[str, str]]]) -> Path:
    """Commit each edit on a throwaway branch, format-patch them into out/ with a series file."""
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "tmp-series")
    for subject, files in edits:
        for name, text in files.items():
            (repo / name).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
    out.mkdir(parents=True)
    made = git(repo, "format-patch", "-o", str(out), f"{base}..HEAD").split()
    (out / "series").write_text("".join(Path(p).name + "\n" for p in made))
    git(repo, "checkout", "-q", "master")
    git(repo, "branch", "-q", "-D", "tmp-series")
    return out


@pytest.fixture
def mini(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(repo, fragment); the cwd is tmp_path so the fragment resolves by a short name."""
    repo = mini_tree(tmp_path / "linux")
    (tmp_path / "mini.config").write_text("CONFIG_MINI=y\n")
    monkeypatch.chdir(tmp_path)
    return repo, tmp_path / "mini.config"


def three_patches(repo: Path, out: Path) -> Path:
    moved = "/*\n * core\n */\n" + CORE_C + HELPER
    broken = EXTRA_C + "\nint broken(void) \n{\n\treturn\n}\n"
    return make_series(repo, out, [
        ("mm: add a helper without a prototype", {"mm/core.c": CORE_C + HELPER}),
        ("mm: move things, add extra.c", {"mm/core.c": moved, "mm/extra.c": EXTRA_C}),
        ("mm: break the build", {"mm/extra.c": broken}),
    ])


def test_each_patch_is_blamed_for_what_it_broke(mini: tuple[Path, Path], tmp_path: Path) -> None:
    repo, _ = mini
    series_dir = three_patches(repo, tmp_path / "series")
    request = check.CheckRequest(kernel=f"git:{repo}", series=(str(series_dir),),
                                 configs=("mini.config",))
    report = check.run(request, tmp_path / "out")
    assert report.error == ""
    assert report.exit_code == 1
    p1, p2, p3 = report.patches
    # 1: builds, checkpatch clean, one new W=1 warning (no previous prototype).
    assert p1.build is not None and p1.build.built and not p1.build.cached
    assert p1.checkpatch is not None and p1.checkpatch.report.clean
    assert len(p1.new_warnings) == 1 and "helper" in p1.new_warnings[0]
    assert p1.new_warnings[0].startswith("mm/core.c: warning: ")
    assert p1.failures == ("W=1 mm/core.c: 1 new warning(s)",)
    # 2: the warning moved (not new); a new file with no warnings; clean.
    assert p2.ok, p2.failures
    assert [d.source for d in p2.warnings] == ["mm/core.c", "mm/extra.c"]
    assert all(d.compared for d in p2.warnings)
    assert p2.warnings[1].before.state is CompileState.ABSENT
    core = p2.warnings[0]
    assert core.before.warnings != core.after.warnings  # the line numbers did change
    assert core.before.normalised == core.after.normalised
    # 3: checkpatch error, build broken, W=1 compile broken.
    assert p3.checkpatch is not None and p3.checkpatch.report.errors == 1
    assert p3.build is not None and not p3.build.built
    assert any("error:" in ln and "extra.c" in ln for ln in p3.build.error_lines)
    assert p3.warnings[0].failed and p3.warnings[0].after.state is CompileState.FAILED
    assert len(p3.failures) == 3

    check.write_json(tmp_path / "out" / "check.json", report, meta={"command": ["x"]})
    data = json.loads((tmp_path / "out" / "check.json").read_text())
    assert data["status"] == "failed" and data["exit_code"] == 1
    assert [p["ok"] for p in data["patches"]] == [False, True, False]
    assert data["patches"][0]["w1"]["new"] == list(p1.new_warnings)
    assert data["patches"][2]["build"]["log"] == "prefix-3/build.log"
    assert (tmp_path / "out" / data["patches"][0]["checkpatch"]["log"]).exists()
    table = check.summary_table(report)
    assert "W=1 new: mm/core.c: warning:" in table
    assert "2 of 3 patch(es) failed" in table

    # Again: every kernel that built is now in the store; nothing is rebuilt.
    again = check.run(request, tmp_path / "out2")
    assert [p.build.cached for p in again.patches if p.build] == [True, True, False]
    assert [p.ok for p in again.patches] == [False, True, False]


def test_clean_series_through_the_cli_exits_0(mini: tuple[Path, Path], tmp_path: Path) -> None:
    repo, _ = mini
    series_dir = make_series(repo, tmp_path / "clean", [
        ("mm: add extra.c", {"mm/extra.c": EXTRA_C}),
        ("mm: say more", {"mm/core.c": CORE_C.replace("return 0", "return 1")}),
    ])
    out = tmp_path / "out"
    code = cli.main(["check", "--kernel", f"git:{repo}", "--series", str(series_dir),
                     "--config", "mini.config", "--out", str(out)])
    assert code == 0
    data = json.loads((out / "check.json").read_text())
    assert data["status"] == "clean" and data["exit_code"] == 0
    assert [p["name"] for p in data["patches"]] == (series_dir / "series").read_text().split()
    assert all(p["checkpatch"]["clean"] and p["build"]["built"] and p["w1"]["new"] == []
               for p in data["patches"])


def test_loose_patch_conflict_is_a_setup_error(mini: tuple[Path, Path], tmp_path: Path) -> None:
    repo, _ = mini
    series_dir = make_series(repo, tmp_path / "s", [("mm: edit", {"mm/core.c": CORE_C + "\n"})])
    patch = next(series_dir.glob("*.patch"))
    # Applied twice: the second copy cannot apply on top of the first.
    copy = tmp_path / "again.patch"
    copy.write_bytes(patch.read_bytes().replace(b"+\n", b"+int x;\n"))
    report = check.run(check.CheckRequest(kernel=f"git:{repo}", patches=(patch, copy),
                                          configs=("mini.config",)), tmp_path / "out")
    assert report.exit_code == 2
    assert "again.patch" in report.error
    assert [p.state.value for p in report.patches] == ["applied", "conflict"]
    assert all(p.build is None for p in report.patches)  # nothing was built


def test_missing_series_is_a_setup_error(mini: tuple[Path, Path], tmp_path: Path) -> None:
    repo, _ = mini
    report = check.run(check.CheckRequest(kernel=f"git:{repo}", series=("no-such-series",),
                                          configs=("mini.config",)), tmp_path / "out")
    assert report.exit_code == 2 and "no-such-series" in report.error
    report = check.run(check.CheckRequest(kernel=f"git:{repo}", configs=("mini.config",)),
                       tmp_path / "out")
    assert report.exit_code == 2 and "--series NAME or --patch FILE" in report.error


def test_check_takes_a_config_fragment_from_the_tree_as_run_does(
        mini: tuple[Path, Path], tmp_path: Path) -> None:
    repo, _ = mini
    (repo / "kernel/configs").mkdir(parents=True)
    (repo / "kernel/configs/tree.config").write_text("CONFIG_TINY=y\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a fragment of the tree's own")
    series_dir = make_series(repo, tmp_path / "series",
                             [("mm: add extra.c", {"mm/extra.c": EXTRA_C})])
    report = check.run(check.CheckRequest(kernel=f"git:{repo}", series=(str(series_dir),),
                                          configs=("tree:kernel/configs/tree.config",)),
                       tmp_path / "out")
    assert report.error == "" and report.exit_code == 0, check.summary_table(report)
    missing = check.run(check.CheckRequest(kernel=f"git:{repo}", series=(str(series_dir),),
                                           configs=("tree:kernel/configs/nope.config",)),
                        tmp_path / "out2")
    assert missing.exit_code == 2
    assert "this kernel tree has no kernel/configs/nope.config" in missing.error
