"""The matrix file -> cells. Cells are listed explicitly, each with a tier.

Tiers nest: `default` (what `harness run` runs with no options) is inside `ci`, which is
inside `full`. Cells that carry deliberately broken variants or the `debug` config sit
in `ci` or `full`, so they are never picked up by a plain `harness run`.
"""

from __future__ import annotations

import enum
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from . import paths
from .model import CellResult, Status


class Tier(enum.Enum):
    DEFAULT = "default"
    CI = "ci"
    FULL = "full"

    def includes(self, other: Tier) -> bool:
        order = [Tier.DEFAULT, Tier.CI, Tier.FULL]
        return order.index(other) <= order.index(self)


@dataclass(frozen=True, kw_only=True)
class Cell:
    name: str
    tier: Tier
    kernel: str
    series: tuple[str, ...] = ()
    configs: tuple[str, ...] = ("base",)
    tests: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()  # extra patch files (paths relative to the repo)
    # Broken-variant cells: the status every test must produce, and per-test exceptions
    # (test name as reported -> status). A cell with neither is an ordinary cell.
    expect_status: str | None = None
    expect: tuple[tuple[str, str], ...] = ()
    description: str = ""

    def expected_status(self, test: str) -> Status | None:
        for name, status in self.expect:
            if name == test:
                return Status(status)
        return Status(self.expect_status) if self.expect_status else None

    @property
    def has_expectations(self) -> bool:
        return self.expect_status is not None or bool(self.expect)


class MatrixError(Exception):
    pass


def default_path() -> Path:
    return paths.repo_root() / "matrix.toml"


def load(path: Path | None = None) -> list[Cell]:
    path = path or default_path()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixError(f"cannot read matrix {path}: {exc}") from None
    cells = []
    seen = set()
    for i, raw in enumerate(data.get("cell", [])):
        try:
            if not isinstance(raw.get("expect", {}), dict):
                raise ValueError("expect (a table: { TEST = STATUS })")
            cell = Cell(
                name=str(raw["name"]),
                tier=Tier(raw.get("tier", "default")),
                kernel=str(raw["kernel"]),
                series=tuple(raw.get("series", ())),
                configs=tuple(raw.get("configs", ("base",))),
                tests=tuple(raw.get("tests", ())),
                patches=tuple(raw.get("patches", ())),
                expect_status=raw.get("expect_status"),
                expect=tuple(sorted((str(k), str(v))
                                    for k, v in raw.get("expect", {}).items())),
                description=str(raw.get("description", "")),
            )
            for status in [cell.expect_status, *(v for _, v in cell.expect)]:
                if status is not None:
                    Status(status)
        except (KeyError, ValueError) as exc:
            raise MatrixError(f"{path}: cell #{i + 1}: invalid or missing {exc}") from None
        if cell.name in seen:
            raise MatrixError(f"{path}: two cells are named {cell.name!r}")
        seen.add(cell.name)
        cells.append(cell)
    return cells


def select(cells: list[Cell], tier: Tier, names: tuple[str, ...] = ()) -> list[Cell]:
    if names:
        by_name = {c.name: c for c in cells}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise MatrixError(f"no cell named {', '.join(missing)}; cells: "
                              f"{', '.join(by_name)}")
        return [by_name[n] for n in names]
    return [c for c in cells if tier.includes(c.tier)]


def check_expected(cell: Cell, res: CellResult) -> CellResult:
    """A broken-variant cell passes when every test produced exactly its expected status.

    Checked per test, not on the cell's worst status: otherwise one test failing as
    intended would hide another that passed (or crashed) when it should have failed.
    """
    if res.status.is_stage_error:
        return res
    wrong = []
    for t in res.tests:
        want = cell.expected_status(t.name) or Status.PASS
        if t.status is not want:
            wrong.append(f"{t.name}: {t.status.value}, expected {want.value}")
    if not res.tests:
        wrong.append("no test ran")
    if wrong:
        return replace(res, status=Status.FAIL,
                       error="deliberately broken variant did not fail as declared: "
                             + "; ".join(wrong))
    got = ", ".join(sorted({t.status.value for t in res.tests}))
    return replace(res, status=Status.PASS,
                   error="broken variant, each test as expected "
                         f"status ({got})")
