"""The W=1 warnings of an object before and after a patch (judge/w1.py): on real
gcc and kbuild output (tests/golden/w1/README.md)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from harness.judge import w1_warnings as w1
from harness.judge.w1_warnings import CompileState, ObjectCompile

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
    warnings = w1.extract_warnings(lines)
    assert len(warnings) == 2, lines  # unused variable, no previous prototype
    assert all(w.startswith("../../work/tree/mm/x.c:") for w in warnings)
    norm = [w1.normalise_warning(w, tree, build_dir) for w in warnings]
    assert all(n.startswith("mm/x.c: warning: ") for n in norm), norm
    assert any("[-Wunused-variable]" in n for n in norm)
    assert any("noproto" in n and "[-Wmissing-prototypes]" in n for n in norm)
    # Absolute paths into the tree, and into the build directory, come out the same way.
    absolute = warnings[0].replace("../../work/tree", str(tree))
    assert w1.normalise_warning(absolute, tree, build_dir) == norm[0]
    gen = f"{build_dir}/include/generated/x.h:3:1: warning: w [-Wfoo]"
    assert w1.normalise_warning(gen, tree, build_dir) == \
        "include/generated/x.h: warning: w [-Wfoo]"


def test_moved_code_is_not_new_an_added_function_is(tmp_path: Path) -> None:
    tree, build_dir = tmp_path / "work" / "tree", tmp_path / "build" / "tree"
    before = [w1.normalise_warning(w, tree, build_dir)
              for w in w1.extract_warnings(_gcc_warnings(tmp_path, BEFORE_C))]
    raw_after = w1.extract_warnings(_gcc_warnings(tmp_path, AFTER_C))
    after = [w1.normalise_warning(w, tree, build_dir) for w in raw_after]
    assert len(raw_after) == 3
    assert set(raw_after).isdisjoint(w1.extract_warnings(_gcc_warnings(tmp_path, BEFORE_C)))
    new, gone = w1.warning_delta(tuple(before), tuple(after))
    assert len(new) == 1 and "noproto2" in new[0], new
    assert gone == ()


def test_delta_counts_duplicates() -> None:
    w = "mm/x.c: warning: variable 'r' set but not used [-Wunused-but-set-variable]"
    new, gone = w1.warning_delta((w,), (w, w, w))
    assert new == (w, w) and gone == ()
    new, gone = w1.warning_delta((w, w), ())
    assert new == () and gone == (w, w)


def test_objtool_offsets_are_masked() -> None:
    a = "mm/memcontrol.o: warning: objtool: memcg_stat+0x1a: unreachable instruction"
    b = "mm/memcontrol.o: warning: objtool: memcg_stat+0x2f: unreachable instruction"
    root = Path("/nonexistent")
    assert w1.normalise_warning(a, root, root) == w1.normalise_warning(b, root, root)


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
    mine = w1.object_output(lines, "mm/memcontrol.o")
    assert mine is not None
    assert w1.extract_warnings(mine) == ("../../work/t/mm/memcontrol.c:12:6: warning: ours "
                                         "[-Wbar]",)
    assert w1.object_output(lines, "mm/other.o") is None


W1_GOLDEN = Path(__file__).parent.parent / "golden" / "w1"
REAL_TREE = Path("/root/.cache/harness/work/debian-6.12-6.12.117-1_deb12u1-base")
REAL_BUILD = Path("/root/.cache/harness/build/debian-6.12-6.12.117-1_deb12u1-base")


def _real_w1(name: str) -> tuple[str, ...]:
    lines = (W1_GOLDEN / name).read_text().splitlines()
    mine = w1.object_output(lines, "mm/memcontrol.o")
    assert mine is not None
    return tuple(w1.normalise_warning(w, REAL_TREE, REAL_BUILD)
                 for w in w1.extract_warnings(mine))


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
    new, gone = w1.warning_delta(before, after)
    assert new == after and gone == ()
    # The prepare steps W=1 rebuilt before the object are not part of its output.
    text = (W1_GOLDEN / "memcontrol-warn-patch.log").read_text().splitlines()
    mine = w1.object_output(text, "mm/memcontrol.o")
    assert mine is not None and not any("asm-offsets" in ln for ln in mine)


def _oc(state: CompileState, *warnings: str) -> ObjectCompile:
    return ObjectCompile(source="mm/x.c", prefix=0, state=state, warnings=warnings,
                         normalised=warnings)


def test_compare_states() -> None:
    w = "mm/x.c: warning: w [-Wfoo]"
    new_file = w1.compare(_oc(CompileState.ABSENT), _oc(CompileState.COMPILED, w))
    assert new_file.compared and new_file.new == (w,) and new_file.failed
    assert new_file.note == "new file"
    deleted = w1.compare(_oc(CompileState.COMPILED, w), _oc(CompileState.ABSENT))
    assert deleted.compared and not deleted.failed and deleted.gone == (w,)
    broke = w1.compare(_oc(CompileState.COMPILED), _oc(CompileState.FAILED))
    assert broke.failed and not broke.compared
    was_broken = w1.compare(_oc(CompileState.FAILED), _oc(CompileState.COMPILED, w))
    assert not was_broken.failed and not was_broken.compared
    off = w1.compare(_oc(CompileState.NOT_BUILT), _oc(CompileState.NOT_BUILT))
    assert not off.failed and not off.compared


def test_first_errors_are_the_root_cause() -> None:
    log = ("  CC      mm/a.o\n../../w/mm/a.c:3:1: error: expected ';' before '}' token\n"
           "make[3]: *** [scripts/Makefile.build:229: mm/a.o] Error 1\n  CC      mm/b.o\n")
    assert w1.first_errors(log) == (
        "../../w/mm/a.c:3:1: error: expected ';' before '}' token",
        "make[3]: *** [scripts/Makefile.build:229: mm/a.o] Error 1")
    assert w1.first_errors("a\nb\n", limit=1) == ("b",)


def test_c_sources_skips_what_kbuild_does_not_compile() -> None:
    assert w1.c_sources(("mm/a.c", "include/linux/a.h", "tools/x/y.c", "scripts/z.c",
                            "Documentation/a.rst", "kernel/b.c")) == ("mm/a.c", "kernel/b.c")


# --- the whole check on a miniature tree ------------------------------------------------

