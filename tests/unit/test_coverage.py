"""The coverage mapping: git blame of the series' head onto its patches, gcov's counts
onto the lines (goldens: tests/golden/coverage/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.judge import coverage

GOLDEN = Path(__file__).parent.parent / "golden" / "coverage"
GET_PUT = "b13e309ad30cffa482ecbf91dbb09a9e75da785d"
READERS = "055417223e16088752e60be4d999b2ae88171662"


def blamed() -> list[tuple[str, coverage.FileLine]]:
    return coverage.blamed_lines((GOLDEN / "bpf_memcontrol.blame").read_text(),
                                 "mm/bpf_memcontrol.c")


def test_blame_gives_every_line_its_commit() -> None:
    lines = blamed()
    assert [x.line for _, x in lines] == list(range(1, len(lines) + 1))
    assert {c for c, _ in lines} == {GET_PUT, READERS}  # a new file: only the series' lines
    first = lines[0]
    assert first == (GET_PUT, coverage.FileLine(file="mm/bpf_memcontrol.c", line=1,
                                                source="// SPDX-License-Identifier: GPL-2.0-only"))
    usage = next(x for c, x in lines if "page_counter_read(&memcg->memory)" in x.source)
    assert next(c for c, x in lines if x == usage) == READERS


def test_only_lines_gcov_counts_are_executable_and_credited_per_test() -> None:
    lines = blamed()
    usage = next(x for _, x in lines if "page_counter_read(&memcg->memory)" in x.source)
    tryget = next(x for _, x in lines if "css_tryget(css)" in x.source)
    comment = next(x for _, x in lines if x.source.startswith(" * "))
    f = "mm/bpf_memcontrol.c"
    per_test = {"memcg_kfuncs": {f: {usage.line: 3, tryget.line: 0}},
                "other": {f: {tryget.line: 1}}}
    got = coverage.patch_coverage([(GET_PUT, "0002.patch", "get/put"),
                                   (READERS, "0003.patch", "readers")],
                                  {f: lines}, per_test)
    get_put, readers = got
    assert get_put.executable == (tryget,) and get_put.ran == (tryget,)
    assert readers.executable == (usage,) and readers.ran == (usage,)
    assert comment not in get_put.executable + readers.executable
    assert dict(get_put.by_test) == {"memcg_kfuncs": 0, "other": 1}
    # a line no test ran
    none = coverage.patch_coverage([(GET_PUT, "0002.patch", "get/put")], {f: lines},
                                   {"t": {f: {tryget.line: 0}}})[0]
    assert none.not_run == (tryget,) and none.ran == ()


def test_profile_lines_go_into_each_objects_own_makefile() -> None:
    got = coverage.profile_lines(["mm/bpf_memcontrol.c", "mm/memcontrol.c", "kernel/cgroup/rstat.c",
                                  "include/linux/x.h", "mm/memcontrol.c"])
    assert got == {"kernel/cgroup/Makefile": ["GCOV_PROFILE_rstat.o := y"],
                   "mm/Makefile": ["GCOV_PROFILE_bpf_memcontrol.o := y",
                                   "GCOV_PROFILE_memcontrol.o := y"]}


def test_gcov_json_counts_add_up_documents_and_inlined_copies_of_the_files_asked() -> None:
    docs = [{"files": [{"file": "../mm/x.c", "lines": [
                {"line_number": 3, "count": 2}, {"line_number": 3, "count": 1},
                {"line_number": 4, "count": 0}]},
             {"file": "../include/linux/x.h", "lines": [{"line_number": 9, "count": 5}]}]},
            {"files": [{"file": "mm/x.c", "lines": [{"line_number": 4, "count": 6}]}]}]
    text = "\n".join(json.dumps(d) for d in docs) + "\n"
    assert coverage.gcov_json_counts(text, ["mm/x.c"]) == {"mm/x.c": {3: 3, 4: 6}}
    assert coverage.gcov_json_counts(text, ["mm/y.c"]) == {}
    assert coverage.merge_counts([{"a": {1: 1}}, {"a": {1: 2, 2: 0}}]) == {"a": {1: 3, 2: 0}}


def test_compare_calls_fewer_lines_run_a_regression() -> None:
    from harness.base.model import CellResult, FileLine, PatchCoverage, Status
    from harness.output import compare

    def cell(ran: int, not_run: list[int]) -> CellResult:
        lines = [FileLine(file="mm/x.c", line=n, source="x")
                 for n in [*range(1, ran + 1), *not_run]]
        return CellResult(cell="6.12", kernel="", kernel_version="", status=Status.PASS,
                          patches=(), config=None, stages=(), tests=(), coverage=(
                              PatchCoverage(patch="0002.patch", subject="s",
                                            executable=tuple(lines), ran=tuple(lines[:ran])),),
                          arch="x86_64", toolchain="gcc")

    got = compare.compare_cells(cell(10, []), cell(8, [12, 14]))
    assert [(d.kind, d.name, d.before, d.after, d.change) for d in got] == [
        ("coverage", "0002.patch", "10/10", "8/10", compare.Change.REGRESSED)]
    assert got[0].detail == "not run: mm/x.c:12; mm/x.c:14"
    assert compare.compare_cells(cell(8, [12, 14]), cell(10, []))[0].change is \
        compare.Change.IMPROVED
    assert compare.compare_cells(cell(10, []), cell(10, [])) == []


def test_a_real_runs_counters_on_the_real_patches() -> None:
    """memcg_kfuncs' counters of a real gcov kernel (gcov's JSON, a document per check),
    mapped onto the blame of the tree that kernel was built from: every line of the
    readers ran, the initcall did not (it ran at boot, before the counters were reset for
    the test)."""
    counts = coverage.gcov_json_counts((GOLDEN / "memcg_kfuncs.gcov.jsonl").read_text(),
                                       ["mm/bpf_memcontrol.c"])
    assert set(counts) == {"mm/bpf_memcontrol.c"} and len(counts["mm/bpf_memcontrol.c"]) == 36
    get_put, readers = coverage.patch_coverage(
        [(GET_PUT, "0002.patch", "get/put"), (READERS, "0003.patch", "readers")],
        {"mm/bpf_memcontrol.c": blamed()}, {"memcg_kfuncs": counts})
    assert (len(readers.ran), len(readers.executable)) == (14, 14)
    assert (len(get_put.ran), len(get_put.executable)) == (16, 22)
    assert [x.line for x in get_put.not_run] == [173, 175, 178, 180, 181, 183]
    assert get_put.not_run[0].source == "static int __init bpf_memcontrol_init(void)"
