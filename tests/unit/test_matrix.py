"""Matrix cells and the per-test expectations of deliberately broken variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import matrix
from harness.model import CellResult, Status
from harness.model import TestResult as Result


def result(*tests: tuple[str, Status], status: Status | None = None) -> CellResult:
    ts = tuple(Result(name=n, status=s, duration_s=1.0, exit_code=None, ktap=None)
               for n, s in tests)
    worst = status or max((t.status for t in ts), key=list(Status).index, default=Status.PASS)
    return CellResult(cell="c", kernel="debian:6.12", kernel_version="6.12", status=worst,
                      patches=(), config=None, stages=(), tests=ts)


def cell(tmp_path: Path, body: str) -> matrix.Cell:
    path = tmp_path / "m.toml"
    path.write_text('[[cell]]\nname = "c"\nkernel = "debian:6.12"\ntier = "ci"\n' + body)
    return matrix.load(path)[0]


def test_every_test_must_give_its_expected_status(tmp_path: Path) -> None:
    c = cell(tmp_path, 'expect_status = "CRASHED"\nexpect = { hang = "TIMEOUT" }\n')
    good = matrix.check_expected(c, result(("warn", Status.CRASHED), ("hang", Status.TIMEOUT)))
    assert good.status is Status.PASS
    assert "CRASHED" in good.error and "TIMEOUT" in good.error
    # The worst status is still CRASHED, but hang did not time out: that is caught.
    bad = matrix.check_expected(c, result(("warn", Status.CRASHED), ("hang", Status.PASS)))
    assert bad.status is Status.FAIL
    assert "hang: PASS, expected TIMEOUT" in bad.error


def test_one_broken_test_cannot_hide_another_that_passed(tmp_path: Path) -> None:
    c = cell(tmp_path, 'expect_status = "FAIL"\n')
    res = matrix.check_expected(c, result(("a", Status.FAIL), ("b", Status.PASS)))
    assert res.status is Status.FAIL
    assert "b: PASS, expected FAIL" in res.error


def test_tests_not_named_must_pass(tmp_path: Path) -> None:
    c = cell(tmp_path, 'expect = { "hierarchical_stats@broken_propagation" = "FAIL" }\n')
    ok = matrix.check_expected(c, result(("hierarchical_stats@broken_propagation", Status.FAIL),
                                         ("memcg_kfuncs", Status.PASS)))
    assert ok.status is Status.PASS
    bad = matrix.check_expected(c, result(("memcg_kfuncs", Status.FAIL)))
    assert bad.status is Status.FAIL


def test_stage_errors_and_empty_runs_are_not_expected_failures(tmp_path: Path) -> None:
    c = cell(tmp_path, 'expect_status = "FAIL"\n')
    assert matrix.check_expected(c, result(status=Status.BUILD_ERROR)).status \
        is Status.BUILD_ERROR
    assert matrix.check_expected(c, result(status=Status.FAIL)).status is Status.FAIL


def test_unknown_expected_status_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(matrix.MatrixError, match="cell #1"):
        cell(tmp_path, 'expect = { x = "FAILED" }\n')


def test_repo_matrix_broken_cells_stay_out_of_default() -> None:
    cells = matrix.load()
    for c in matrix.select(cells, matrix.Tier.DEFAULT):
        assert not c.has_expectations, c.name
        assert "debug" not in c.configs, c.name
