"""checkpatch.pl's output read (judge/checkpatch.py), on real checkpatch output
(tests/golden/checkpatch/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.judge import checkpatch

GOLDEN = Path(__file__).parent.parent / "golden" / "checkpatch"


def test_bad_patch_issues_and_counts() -> None:
    report = checkpatch.parse_checkpatch((GOLDEN / "bad-style.txt").read_text())
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
    assert checkpatch.python_failure((GOLDEN / "bad-style.txt").read_text()) == ""


def test_clean_patch_is_clean() -> None:
    report = checkpatch.parse_checkpatch((GOLDEN / "clean.txt").read_text())
    assert report.clean and report.issues == ()
    assert report.lines_checked == 201


def test_not_a_patch_is_one_error() -> None:
    report = checkpatch.parse_checkpatch((GOLDEN / "not-a-patch.txt").read_text())
    assert report.errors == 1
    assert [i.type for i in report.issues] == ["NOT_UNIFIED_DIFF"]


def test_spdxcheck_without_ply_is_detected() -> None:
    text = (GOLDEN / "bad-style-no-ply.txt").read_text()
    broken = checkpatch.python_failure(text)
    assert broken.startswith("Traceback (most recent call last):")
    assert broken.endswith("ModuleNotFoundError: No module named 'ply'")
    # What that costs: the SPDX warning silently disappears.
    report = checkpatch.parse_checkpatch(text)
    assert (report.errors, report.warnings) == (3, 3)
    assert "SPDX_LICENSE_TAG" not in {i.type for i in report.issues}


def test_output_cut_short_is_not_parsed_as_clean() -> None:
    text = (GOLDEN / "bad-style.txt").read_text().split("total:")[0]
    with pytest.raises(ValueError, match="total"):
        checkpatch.parse_checkpatch(text)


