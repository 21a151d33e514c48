"""Which of a series' lines the tests ran: gcov's counters (its JSON), mapped onto the
patches with `git blame`.

Pure functions over text: `git blame --line-porcelain` of the series' head (which commit
gave each line of a file) and gcov's JSON (the lines gcov has a counter for, and their
counts, per test). An executable line is one gcov has a counter for; at -O2 the compiler
merges or inlines some lines into others, and those have none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from harness.base.model import FileLine, PatchCoverage

__all__ = ["blamed_lines", "gcov_json_counts", "merge_counts",
           "patch_coverage", "profile_lines"]


_HEADER = re.compile(r"^([0-9a-f]{40}) \d+ (\d+)(?: \d+)?$")


def blamed_lines(porcelain: str, file: str) -> list[tuple[str, FileLine]]:
    """(commit, line) of each line of `git blame --line-porcelain REV -- FILE`, in order."""
    out: list[tuple[str, FileLine]] = []
    commit, number = "", 0
    for text in porcelain.splitlines():
        m = _HEADER.match(text)
        if m is not None:
            commit, number = m.group(1), int(m.group(2))
        elif text.startswith("\t") and commit:
            out.append((commit, FileLine(file=file, line=number, source=text[1:])))
            commit = ""
    return out


def gcov_json_counts(text: str, sources: Iterable[str]) -> dict[str, dict[int, int]]:
    """file -> line -> count of `gcov --json-format --stdout` (one JSON document per line,
    one per .gcda), for the given source files only (a file's own lines, not the headers'
    inlined into it). gcov names a file as the compiler saw it (`../mm/x.c` from an O=
    directory inside the tree): the name is matched by its end."""
    wanted = tuple(sources)
    out: dict[str, dict[int, int]] = {}
    for doc_line in text.splitlines():
        if not doc_line.strip():
            continue
        doc = json.loads(doc_line)
        for f in doc.get("files", []):
            name = str(f.get("file", ""))
            file = next((w for w in wanted if name == w or name.endswith("/" + w)), None)
            if file is None:
                continue
            lines = out.setdefault(file, {})
            for line in f.get("lines", []):
                n = int(line["line_number"])
                lines[n] = lines.get(n, 0) + int(line.get("count", 0))
    return out


def merge_counts(runs: Iterable[Mapping[str, Mapping[int, int]]]) -> dict[str, dict[int, int]]:
    """The counts of several runs (tests) added up; a line any run has a counter for is
    executable."""
    out: dict[str, dict[int, int]] = {}
    for run in runs:
        for name, lines in run.items():
            into = out.setdefault(name, {})
            for n, c in lines.items():
                into[n] = into.get(n, 0) + c
    return out


def patch_coverage(patches: Iterable[tuple[str, str, str]],
                   blamed: Mapping[str, list[tuple[str, FileLine]]],
                   per_test: Mapping[str, Mapping[str, Mapping[int, int]]]
                   ) -> tuple[PatchCoverage, ...]:
    """Per patch (commit, file name, subject) of the series, its lines in the head
    (`blamed`: per file, from `blamed_lines`) that gcov counts in any test, and which ran."""
    total = merge_counts(per_test.values())
    out = []
    for commit, name, subject in patches:
        executable = tuple(x for lines in blamed.values() for c, x in lines
                           if c == commit and x.line in total.get(x.file, {}))
        ran = tuple(x for x in executable if total[x.file][x.line] > 0)
        by_test = tuple((test, sum(1 for x in executable
                                   if counts.get(x.file, {}).get(x.line, 0)))
                        for test, counts in sorted(per_test.items()))
        out.append(PatchCoverage(patch=name, subject=subject, executable=executable, ran=ran,
                                 by_test=by_test))
    return tuple(out)


def profile_lines(c_files: Iterable[str]) -> dict[str, list[str]]:
    """Makefile -> the lines that profile these .c files with gcov (kbuild's
    GCOV_PROFILE_obj.o := y, read only from the Makefile of the object's directory: on
    the make command line it would apply to every object of that name)."""
    out: dict[str, list[str]] = {}
    for path in sorted(set(c_files)):
        if not path.endswith(".c"):
            continue
        directory, _, name = path.rpartition("/")
        makefile = f"{directory}/Makefile" if directory else "Makefile"
        out.setdefault(makefile, []).append(f"GCOV_PROFILE_{name[:-2]}.o := y")
    return out
