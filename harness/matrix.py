"""The matrix file -> cells. Cells are listed explicitly, each with a tier.

Tiers nest: `default` (what `harness run` runs with no options) is inside `ci`, which is
inside `full`. Cells that carry deliberately broken variants or the `debug` config sit
in `ci` or `full`, so they are never picked up by a plain `harness run`.
"""

from __future__ import annotations

import enum
import tomllib
from dataclasses import dataclass
from pathlib import Path

from . import paths


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
    expect_status: str | None = None  # for broken-variant cells: the status they must produce
    description: str = ""


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
            cell = Cell(
                name=str(raw["name"]),
                tier=Tier(raw.get("tier", "default")),
                kernel=str(raw["kernel"]),
                series=tuple(raw.get("series", ())),
                configs=tuple(raw.get("configs", ("base",))),
                tests=tuple(raw.get("tests", ())),
                patches=tuple(raw.get("patches", ())),
                expect_status=raw.get("expect_status"),
                description=str(raw.get("description", "")),
            )
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
