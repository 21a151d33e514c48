"""Matrix cells and the per-test expectations of deliberately broken variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.drivers import matrix


def cell(tmp_path: Path, body: str) -> matrix.Cell:
    path = tmp_path / "m.toml"
    path.write_text('[[cell]]\nname = "c"\nkernel = "debian:6.12"\ntier = "ci"\n' + body)
    return matrix.load(path)[0]


def test_unknown_expected_status_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(matrix.MatrixError, match="cell #1"):
        cell(tmp_path, 'expect = { x = "FAILED" }\n')


def test_repo_matrix_broken_cells_stay_out_of_default() -> None:
    cells = matrix.load()
    for c in matrix.select(cells, matrix.Tier.DEFAULT):
        assert not c.has_expectations, c.name
        assert "debug" not in c.configs, c.name


def test_adhoc_cells_without_tests_take_their_base_cells_tests() -> None:
    cells = matrix.load()
    by_name = {c.name: c for c in cells}
    tests, why = matrix.default_tests("debian:6.12", cells)
    assert tests == by_name["6.12"].tests and "matrix cell 6.12" in why
    tests, why = matrix.default_tests("debian:6.1", cells)
    assert tests == by_name["6.1"].tests and "matrix cell 6.1" in why
    # Another base: the default cell's tests, each skipped without its features.
    tests, why = matrix.default_tests("git:/src/linux", cells)
    assert tests == by_name["6.12"].tests and "feature" in why


def test_a_misspelt_key_is_an_error_not_a_cell_without_it(tmp_path: Path) -> None:
    with pytest.raises(matrix.MatrixError, match=r"key\(s\) serie; known"):
        cell(tmp_path, 'serie = ["memcg-kfuncs"]\n')


def test_boot_only_and_append_are_read(tmp_path: Path) -> None:
    c = cell(tmp_path, 'boot_only = true\nappend = "panic_on_warn=1"\n')
    assert c.boot_only and c.guest.append == "panic_on_warn=1"
