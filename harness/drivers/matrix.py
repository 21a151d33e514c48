"""The matrix file -> cells. Cells are listed explicitly, each with a tier.

Tiers nest: `default` (what `harness run` runs with no options) is inside `ci`, which is
inside `full`. Cells that carry deliberately broken variants or the `debug` config sit
in `ci` or `full`, so they are never picked up by a plain `harness run`.
"""

from __future__ import annotations

import enum
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import target
from harness.base import paths
from harness.base.errors import HarnessError
from harness.base.model import GuestSpec, Status


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
    boot_only: bool = False  # no tests: judged by its boot and shutdown alone
    guest: GuestSpec = field(default_factory=GuestSpec)  # size, extra kernel command line
    # `harness run -- CMD ARGS`: run in the guest after the tests, from this directory
    command: tuple[str, ...] = ()
    command_cwd: str = "/"
    command_timeout: int = 600
    # gcov for the series' C files; which of their lines the tests ran (with the gcov config)
    coverage: bool = False
    # --map (with coverage): each check run alone, which kernel functions it reached kept
    # as the map --affected reads
    record_map: bool = False
    # --affected: only the checks the map says reach what the change (its last patch, or
    # your tree's uncommitted changes) touched
    affected: bool = False
    # what the kernel is built for and with (harness/target/arches/, harness/target/toolchains/)
    arch: str = target.DEFAULT_ARCH
    toolchain: str = target.DEFAULT_TOOLCHAIN
    # a reproduction (harness reproduce) reads what a results directory carries: a series
    # from its carried directory, a config fragment from its carried file, each by the name
    # the run gave it (so worktrees, history and results name them as the run did)
    series_dirs: tuple[tuple[str, str], ...] = ()
    config_files: tuple[tuple[str, str], ...] = ()
    test_dirs: tuple[tuple[str, str], ...] = ()  # a test asked by its directory: its copy

    @property
    def expect_map(self) -> Mapping[str, Status]:
        return {name: Status(status) for name, status in self.expect}

    @property
    def has_expectations(self) -> bool:
        return self.expect_status is not None or bool(self.expect)


class MatrixError(HarnessError):
    status = Status.SETUP_ERROR


_KEYS = frozenset({"name", "tier", "kernel", "series", "configs", "tests", "patches", "coverage",
                   "expect_status", "expect", "description", "boot_only", "append",
                   "memory", "cpus", "arch", "toolchain"})
MEMORY = re.compile(r"[1-9][0-9]*[MG]")
MAX_CPUS = 64


def check_guest_size(guest: GuestSpec) -> None:
    """--memory/--cpus (or the matrix's memory/cpus) as vng takes them, or why not."""
    memory, cpus = guest.memory, guest.cpus
    if not MEMORY.fullmatch(memory):
        raise MatrixError(f"memory {memory!r}: a size in MiB or GiB such as 1536M or 2G")
    size_m = int(memory[:-1]) * (1024 if memory.endswith("G") else 1)
    if not 256 <= size_m <= 64 * 1024:
        raise MatrixError(f"memory {memory}: between 256M and 64G (the guest needs 256M to "
                          "boot; the host has to hold it)")
    if not 1 <= cpus <= MAX_CPUS:
        raise MatrixError(f"cpus {cpus}: between 1 and {MAX_CPUS}")


def default_path() -> Path:
    return paths.repo_root() / "matrix.toml"


def with_coverage(cell: Cell) -> Cell:
    """The cell with gcov: its series' C files profiled (kconfigs/gcov.config)."""
    configs = cell.configs if "gcov" in cell.configs else (*cell.configs, "gcov")
    return replace(cell, coverage=True, configs=configs)


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
            if unknown := sorted(set(raw) - _KEYS):
                # a typo (`serie = [...]`) would run the cell without what it names
                raise ValueError(f"key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}")
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
                boot_only=bool(raw.get("boot_only", False)),
                guest=GuestSpec(memory=str(raw.get("memory", GuestSpec.memory)),
                                cpus=int(raw.get("cpus", GuestSpec.cpus)),
                                append=str(raw.get("append", ""))),
                arch=str(raw.get("arch", Cell.arch)),
                toolchain=str(raw.get("toolchain", Cell.toolchain)),
            )
            target.select(cell.arch, cell.toolchain)  # both known
            if raw.get("coverage", False):
                cell = with_coverage(cell)
            check_guest_size(cell.guest)
            for status in [cell.expect_status, *(v for _, v in cell.expect)]:
                if status is not None:
                    Status(status)
        except (KeyError, ValueError) as exc:
            raise MatrixError(f"{path}: cell #{i + 1}: invalid or missing {exc}") from None
        except (MatrixError, target.TargetError) as exc:
            raise MatrixError(f"{path}: cell #{i + 1}: {exc}") from None
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


def default_tests(kernel: str, cells: list[Cell]) -> tuple[tuple[str, ...], str]:
    """The tests an ad-hoc cell runs when none were named, and where they come from.

    A Debian base runs the tests of the matrix cell named after it (debian:6.12 -> cell
    "6.12", debian:6.1 -> "6.1"); any other base the default cell's, each of which is
    skipped before the boot if the kernel lacks a feature it requires.
    """
    by_name = {c.name: c for c in cells}
    if kernel.startswith("debian:") and kernel.removeprefix("debian:") in by_name:
        cell = by_name[kernel.removeprefix("debian:")]
        return cell.tests, f"the tests of matrix cell {cell.name}"
    default = next((c for c in cells if c.tier is Tier.DEFAULT), None)
    if default is None:
        return (), "no default-tier cell in the matrix"
    return default.tests, (f"the tests of the default cell {default.name}, each skipped if "
                           "the kernel lacks a feature it requires")


def listing(every: list[Cell], tier: Tier) -> str:
    """`harness matrix`: one line per cell of the tier (name, tier, kernel, series, configs,
    target when not the default, tests, expectations), and how many were left out."""
    shown = select(every, tier)
    lines = []
    for c in shown:
        expect = ""
        if c.has_expectations:
            parts = [f"all={c.expect_status}"] if c.expect_status else []
            expect = " expect=" + ",".join(parts + [f"{t}={s}" for t, s in c.expect])
        built = f" arch={c.arch} toolchain={c.toolchain}" \
            if target.label(c.arch, c.toolchain) else ""
        lines.append(f"{c.name:<28} {c.tier.value:<8} {c.kernel:<14} "
                     f"series={','.join(c.series) or '-'} configs={','.join(c.configs)}"
                     f"{built} tests={','.join(c.tests)}{expect}")
    if len(shown) < len(every):
        lines.append(f"({len(shown)} of {len(every)} cells: the {tier.value} tier; --tier full "
                     "lists them all)")
    return "\n".join(lines)
