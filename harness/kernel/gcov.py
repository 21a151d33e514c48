"""`harness run --coverage`: a kernel whose series' C files are compiled with gcov, and the
counters its tests left, read with the host's gcov (its JSON) into line counts.

The kernel side is kbuild's own (Documentation/dev-tools/gcov.rst): CONFIG_GCOV_KERNEL
(kconfigs/gcov.config) and `GCOV_PROFILE_obj.o := y` in the Makefile of each profiled
object's directory, committed on top of the series so that the kernel store keys it
apart. The guest runner resets the counters before each test and copies them after it
(harness/guest/runner.sh).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from harness.base import gitcmd, proc, sandbox
from harness.base.errors import HarnessError
from harness.base.model import FileLine, Status
from harness.judge import coverage

SUBJECT = "harness: profile the series' C files with gcov"
# the commit's dates and author are fixed: the same series gives the same commit, and the
# kernel store finds the kernel built before
_COMMIT_ENV = {"GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
               "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
               "GIT_AUTHOR_NAME": "harness", "GIT_AUTHOR_EMAIL": "harness@localhost",
               "GIT_COMMITTER_NAME": "harness", "GIT_COMMITTER_EMAIL": "harness@localhost"}


class CoverageError(HarnessError):
    status = Status.SETUP_ERROR


PROFILE_LIST = Path(__file__).resolve().parents[2] / "kconfigs" / "gcov-profile.txt"


def profile_list(path: Path = PROFILE_LIST) -> list[str]:
    """The C files profiled besides the series' own (what `--map` records and
    `--affected` then knows): kconfigs/gcov-profile.txt, one path a line."""
    if not path.exists():
        return []
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def series_c_files(tree: Path, base: str, head: str = "HEAD") -> list[str]:
    out = gitcmd.git(tree, "diff", "--name-only", base, head, "--", "*.c",
                     what="git diff --name-only")
    return sorted(line for line in out.splitlines() if line)


def profile(tree: Path, base: str) -> list[str]:
    """Commit, on top of the series, the Makefile lines that profile its C files and those
    of `profile_list()` the tree has; the files profiled. Nothing to profile: no commit."""
    files = sorted({*series_c_files(tree, base),
                    *(f for f in profile_list() if (tree / f).is_file())})
    changed = False
    for makefile, lines in coverage.profile_lines(files).items():
        path = sandbox.tree_file(tree / makefile, tree)  # written here: not a link out
        text = path.read_text() if path.exists() else ""
        have = set(text.splitlines())
        add = [line for line in lines if line not in have]
        if add:
            path.write_text(text.rstrip("\n") + ("\n" if text else "") + "\n".join(add) + "\n")
            changed = True
    if changed:
        env = {**os.environ, **_COMMIT_ENV}
        gitcmd.git(tree, "add", "-A", what="git add", env=env)
        gitcmd.git(tree, "commit", "-q", "-m", SUBJECT, what="git commit", env=env)
    return files


def blame(tree: Path, files: list[str], rev: str = "HEAD"
          ) -> dict[str, list[tuple[str, FileLine]]]:
    """Which commit gave each line of each file (git blame of `rev`)."""
    return {f: coverage.blamed_lines(gitcmd.git(tree, "blame", "--line-porcelain", rev, "--", f,
                                                what=f"git blame {f}"), f)
            for f in files}


def _staged(gcda_dir: Path, build_dir: Path, gcno_dir: Path, scratch: Path) -> list[str]:
    """Each .gcda under `gcda_dir` that the kernel has a .gcno for, copied with it into
    `scratch` at its object path; those paths, relative, in order."""
    found = []
    for gcda in sorted(gcda_dir.rglob("*.gcda")):
        rel = _object_path(gcda.relative_to(gcda_dir), build_dir)
        gcno = gcno_dir / rel.with_suffix(".gcno")
        if not gcno.exists():
            continue
        (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(gcda, scratch / rel)
        shutil.copyfile(gcno, scratch / rel.with_suffix(".gcno"))
        found.append(str(rel))
    return found


def line_counts(gcda_dir: Path, build_dir: Path, *, gcno_dir: Path, sources: list[str],
                gcov: str = "gcov", log_path: Path) -> dict[str, dict[int, int]]:
    """file -> line -> count of one test's counters for these source files: gcov's own
    JSON (`--json-format`, which needs no source) of each .gcda beside a copy of its .gcno
    from the kernel that ran. Not gcovr: its re-parse of gcov's text dropped whole
    functions it could not parse (all of __cgroup_rstat_updated(), run 19,061 times at
    boot), and took 6 s per test where this takes 0.2 s."""
    with tempfile.TemporaryDirectory(prefix="harness-gcov-") as tmp:
        scratch = Path(tmp)
        found = _staged(gcda_dir, build_dir, gcno_dir, scratch)
        if not found:
            return {}
        res = proc.run([gcov, "--json-format", "--stdout", *found], cwd=scratch, timeout=600,
                       log_path=None)
        if res.returncode != 0:
            log_path.write_text(res.output)
            raise CoverageError(f"gcov --json-format failed (exit {res.returncode}); log: "
                                f"{log_path}", fix="is the host's gcov the kernel compiler's?")
        return coverage.gcov_json_counts(res.output, sources)


def _object_path(guest_rel: Path, build_dir: Path) -> Path:
    """mm/x.gcda of `root/.cache/.../TREE/.harness-build/mm/x.gcda`: the part after the
    build directory's name (the guest sees the absolute path the kernel was built at)."""
    parts = guest_rel.parts
    if build_dir.name in parts:
        i = len(parts) - 1 - parts[::-1].index(build_dir.name)
        return Path(*parts[i + 1:])
    raise CoverageError(f"{guest_rel}: not under a build directory named {build_dir.name}",
                        fix="the kernel was not built by this harness: run again")
