"""`harness check`: checkpatch run on a tree, and the whole check on a miniature tree (real
git, make, gcc, ccache). Its parsers: test_checkpatch.py, test_w1_warnings.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import cli
from harness.drivers import check
from harness.judge.w1_warnings import CompileState

GOLDEN = Path(__file__).parent.parent / "golden" / "checkpatch"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.org",
       "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.org"}


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
