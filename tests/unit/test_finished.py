"""The commands over finished runs (drivers/finished.py): explain on real runs
(tests/golden/compare/README.md) and on one the judge wrote; with what the history says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli
from harness.base.model import Status
from harness.output import history, results
from tests.helpers.runseq import GOLDEN, as_nth, broken_run

typed = results.from_json  # a results.json document as the one reader reads it


def test_explain_tells_why_a_run_failed_on_the_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`harness explain` on the real run of the broken series: its failing checks, the
    patches it applied (the broken one among them), and "new" from the history."""
    monkeypatch.setenv("HARNESS_HISTORY", str(tmp_path / "h.sqlite"))
    with history.opened() as conn:
        history.record(conn, typed(as_nth(broken_run(), 1, "PASS")))
    assert cli.main(["explain", str(GOLDEN / "adhoc-memcg-kfuncs-broken.json")]) == 0
    out = capsys.readouterr().out
    assert "memcg_kfuncs  FAIL" in out
    assert "failing checks: parent_matches_memory_stat, parent_includes_child" in out
    assert "0005-mm-DELIBERATELY-BROKEN-non-hierarchical-node-stats-i.patch" in out
    assert "history: new" in out
    assert cli.main(["explain", str(GOLDEN / "faults.json"), "--json"]) == 0
    told = json.loads(capsys.readouterr().out)
    hang = next(t for t in told["cells"][0]["failing"] if t["test"] == "hang")
    assert hang["status"] == "TIMEOUT" and hang["declared"] is True


def test_explain_says_what_the_failing_check_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A run's failing check said why on the terminal; explain of the same run says it too
    (the result's diagnosis, as the judge wrote it into results.json), where the end of the
    output would not (the run went on with other checks)."""
    from harness.base.model import CellResult, Phase, RunResult
    from harness.base.model import TestResult as Result
    from harness.judge import ktap, verdict

    monkeypatch.setenv("HARNESS_HISTORY", str(tmp_path / "h.sqlite"))
    output = ("TAP version 13\n1..2\n# created 0 times from the sleepable program, "
              "expected 1\nnot ok 1 created_from_sleepable\n"
              + "".join(f"# other check {n}\n" for n in range(20)) + "ok 2 the_rest\n")
    (tmp_path / "cgrp_storage.out").write_text(output)
    judged = verdict.judge(
        [Result(name="boot", phase=Phase.BOOT, status=Status.PASS, duration_s=1.0,
                exit_code=None, ktap=None),
         Result(name="cgrp_storage", status=Status.FAIL, duration_s=1.0, exit_code=1,
                ktap=ktap.parse(output), log=tmp_path / "cgrp_storage.out")],
        kernel_version="6.12.1", expectations=verdict.Expectations(),
        rules=verdict.CellRules())
    cell = CellResult(cell="6.12", kernel="debian:6.12", kernel_version="6.12.1",
                      status=judged.status, patches=(), config=None, stages=(),
                      tests=judged.results, arch="x86_64", toolchain="gcc")
    results.write_json(tmp_path / "results.json", RunResult(cells=(cell,), exit_code=1))
    said = "created_from_sleepable: created 0 times from the sleepable program, expected 1"
    assert json.loads((tmp_path / "results.json").read_text())["cells"][0]["tests"][1][
        "diagnosis"] == said
    assert cli.main(["explain", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"      first failure: {said}\n" in out
    tail = out[out.index("output, last lines:"):]
    assert "created 0 times" not in tail  # the end of the output does not say it
    assert cli.main(["explain", str(tmp_path), "--json"]) == 0
    [failing] = json.loads(capsys.readouterr().out)["cells"][0]["failing"]
    assert failing["diagnosis"] == said


def test_explain_of_a_cell_the_run_lacks_says_which_it_has() -> None:
    from harness.base.errors import EnvironmentProblem
    from harness.drivers import finished

    with pytest.raises(EnvironmentProblem) as exc:
        finished.explain(f"{GOLDEN / 'faults.json'}:nosuch")
    assert "no cell nosuch" in str(exc.value) and "6.12-faults" in exc.value.fix
