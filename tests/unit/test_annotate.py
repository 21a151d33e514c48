"""`harness ci annotate`: GitHub annotation lines and a step summary from real runs'
results.json (tests/golden/compare: see its README), judged as the JUnit export judges."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.drivers import shard
from harness.output import annotate, results
from tests.helpers.shards import ADHOC_BROKEN, FAULTS, VERIFY

typed = results.from_json  # a results.json document as the one reader reads it


def _doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _parse(line: str) -> tuple[str, str, str]:
    """(level, title, message) of a workflow command, unescaped."""
    assert line.startswith("::")
    head, _, message = line[2:].partition("::")
    level, _, props = head.partition(" ")
    title = props.removeprefix("title=")

    def unescape(text: str) -> str:
        for code, ch in (("%0A", "\n"), ("%0D", "\r"), ("%3A", ":"), ("%2C", ","),
                         ("%25", "%")):
            text = text.replace(code, ch)
        return text

    assert "\n" not in line and "::" not in title
    return level, unescape(title), unescape(message)


def test_a_passing_run_and_declared_failures_are_not_annotated() -> None:
    """faults.json: a WARN and a BUG CRASHED, a hang TIMEOUT, all as the cell declares."""
    assert annotate.annotation_lines(typed(_doc(FAULTS))) == []
    assert annotate.annotation_lines(typed(_doc(VERIFY))) == []


def test_a_failed_test_is_annotated_with_its_failing_checks() -> None:
    """The broken memcg series: memcg_kfuncs FAIL, three of its KTAP subtests failing."""
    lines = [_parse(x) for x in annotate.annotation_lines(typed(_doc(ADHOC_BROKEN)))]
    assert [t for _, t, _ in lines] == [
        "adhoc: memcg_kfuncs/parent_matches_memory_stat FAIL",
        "adhoc: memcg_kfuncs/parent_includes_child FAIL",
        "adhoc: memcg_kfuncs/flush_makes_new_memory_visible FAIL"]
    level, _, message = lines[1]
    assert level == "error" and "P >= C: a local-only fetch?" in message
    assert message.endswith("log: adhoc/guest/memcg_kfuncs.out")


def test_crashes_carry_their_splat_titles_and_timeouts_their_reason() -> None:
    """faults.json without its declarations: each failure is one."""
    doc = _doc(FAULTS)
    for t in doc["cells"][0]["tests"]:
        t.pop("expected_status", None)
    found = {t: m for _, t, m in map(_parse, annotate.annotation_lines(typed(doc)))}
    assert set(found) == {"6.12-faults: lkdtm_warn CRASHED", "6.12-faults: lkdtm_bug CRASHED",
                          "6.12-faults: hang TIMEOUT"}
    assert "WARNING: CPU: 1 PID: 58 at drivers/misc/lkdtm/bugs.c:112 lkdtm_WARNING" in \
        found["6.12-faults: lkdtm_warn CRASHED"]
    assert "kernel BUG at drivers/misc/lkdtm/bugs.c:105!" in found["6.12-faults: lkdtm_bug CRASHED"]
    assert found["6.12-faults: hang TIMEOUT"].startswith("killed by the per-test timeout (8s)")


def test_a_stage_error_is_annotated_with_its_message() -> None:
    doc = _doc(ADHOC_BROKEN)
    cell = doc["cells"][0]
    cell.update(status="BUILD_ERROR", tests=[],
                error="kernel build failed (exit 2); log: adhoc/build.log\nmm/x.c:1: error: y")
    [line] = annotate.annotation_lines(typed(doc))
    assert "\n" not in line and "%0A" in line
    assert _parse(line) == ("error", "adhoc: verdict BUILD_ERROR", cell["error"])


def test_titles_and_messages_are_escaped() -> None:
    assert annotate.command("error", "a:b,c 100%", "x\ny\r%") == \
        "::error title=a%3Ab%2Cc 100%25::x%0Ay%0D%25"


def test_past_ten_failures_the_tenth_line_counts_the_rest() -> None:
    doc = _doc(ADHOC_BROKEN)
    test = doc["cells"][0]["tests"][1]
    doc["cells"][0]["tests"] = [{**copy.deepcopy(test), "name": f"t{i}", "ktap": None}
                                for i in range(15)]
    lines = annotate.annotation_lines(typed(doc))
    assert len(lines) == annotate.MAX_ERRORS
    assert _parse(lines[-1])[1] == "6 more failures"


def test_a_merged_run_is_annotated_with_what_only_the_merge_knows(tmp_path: Path) -> None:
    """Two shards (the broken series' run, the verify run) against a plan that also expects
    6.12-faults: its job left nothing (MISSING); the adhoc cell's own failures were the
    annotations of its job, not the merge's."""
    runs = []
    for name, source in (("a", ADHOC_BROKEN), ("b", VERIFY)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(source.read_text())
        runs.append(tmp_path / name)
    expected = [shard.Planned(name=n) for n in ("adhoc", "6.12", "6.12-faults")]
    merged = results.run_json(shard.merge([*runs, tmp_path / "gone"], expected=expected).run)
    lines = [_parse(x) for x in annotate.annotation_lines(typed(merged))]
    assert [(lvl, t) for lvl, t, _ in lines] == [("error", "6.12-faults MISSING"),
                                                 ("error", "run not merged")]
    assert lines[0][2].startswith(shard.MISSING_REASON)
    assert lines[1][2] == f"{tmp_path / 'gone'}: no such directory"
    text = annotate.summary(typed(merged), label="merged")
    assert "| 6.12-faults | MISSING |" in text and "| adhoc | FAIL |" in text
    assert "- error: run not merged:" in text


def test_the_summary_is_a_table_of_the_cells() -> None:
    text = annotate.summary(typed(_doc(ADHOC_BROKEN)), label="adhoc-run")
    lines = text.splitlines()
    assert lines[0] == "### harness: adhoc-run: FAIL (exit 1)"
    assert lines[2:4] == ["| cell | status | kernel | failed |", "|---|---|---|---|"]
    assert lines[4].startswith("| adhoc | FAIL | 6.12.117+ | memcg_kfuncs/parent_matches")


def test_the_command_prints_and_appends_the_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    run = tmp_path / "adhoc"
    run.mkdir()
    (run / "results.json").write_text(ADHOC_BROKEN.read_text())
    assert cli.main(["ci", "annotate", str(run), "--summary", str(summary)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == annotate.annotation_lines(typed(_doc(ADHOC_BROKEN)))
    assert summary.read_text().startswith("earlier step\n### harness: adhoc: FAIL (exit 1)")
    assert cli.main(["ci", "annotate", str(run), str(FAULTS)]) == 0  # several: which run
    assert _parse(capsys.readouterr().out.splitlines()[0])[1].startswith("adhoc: adhoc: ")
    assert cli.main(["ci", "annotate"]) == 2
    assert cli.main(["ci", "annotate", str(tmp_path / "none")]) == 2
