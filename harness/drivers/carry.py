"""What a cell was made from, copied into its results directory and described
(model.CellInputs), so that `harness reproduce` makes the cell again from the directory
alone, on another machine, from another clone:

    <cell>/inputs/series/<name>/     a --series as applied: a `series` file listing its
                                     patches in order, the patches, its provides.toml,
                                     the mbox as given (mbox:FILE)
    <cell>/inputs/patches/<k>/       the k-th --patch: the file as given and, for an mbox,
                                     its patches and a `series` file listing them
    <cell>/inputs/configs/<name>     each config fragment as it was read
    <cell>/inputs/tests/<k>-<name>/  a test asked by its directory (not one of selftests/)

Every copy is named with its SHA-256 in results.json. Bounded: no kernel image is
carried, a file over MAX_FILE_BYTES or a cell's inputs over MAX_CELL_BYTES are named in
`not_carried` instead of copied.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from harness.base import paths
from harness.base.model import (
    CarriedFile,
    CarriedPatches,
    CellInputs,
    PreparedSource,
    SourceIdentity,
)
from harness.drivers.matrix import Cell
from harness.kernel import kconfig, series

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 16 << 20  # one patch, fragment, mbox or test directory
MAX_CELL_BYTES = 64 << 20  # everything a cell carries
INPUTS = "inputs"


def sha256_of(path: Path) -> str:
    """A file's SHA-256; a directory's over its files' relative paths and contents."""
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
            h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes() + b"\0")
        return h.hexdigest()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def slug(text: str) -> str:
    """A directory-name-safe name: mbox:/x/y.mbox -> mbox-y.mbox."""
    if ":" in text:
        kind, _, rest = text.partition(":")
        text = f"{kind}-{Path(rest).name or rest}"
    else:
        text = Path(text).name or text
    return re.sub(r"[^A-Za-z0-9._@-]+", "_", text).strip("._") or "input"


def _origin(path: Path) -> str:
    """Where the run read a file: patches/... in the harness checkout, else its path."""
    path = path.resolve()
    root = paths.repo_root()
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


class _Copier:
    """Copies into a cell's inputs directory, within the size bounds; says what it could
    not carry."""

    def __init__(self, cell_dir: Path) -> None:
        self.cell_dir = cell_dir
        self.base = cell_dir.parent  # the results directory: paths are relative to it
        self.used = 0
        self.not_carried: list[str] = []

    def copy(self, src: Path, dest: Path, *, name: str) -> CarriedFile:
        digest = sha256_of(src)
        size = _size(src)
        if size > MAX_FILE_BYTES or self.used + size > MAX_CELL_BYTES:
            self.not_carried.append(f"{name} ({size} bytes: over the limit of "
                                    f"{MAX_FILE_BYTES if size > MAX_FILE_BYTES else MAX_CELL_BYTES}"
                                    " bytes)")
            return CarriedFile(name=name, sha256=digest, origin=_origin(src))
        self.used += size
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(src, dest, symlinks=False, ignore_dangling_symlinks=True)
        else:
            shutil.copyfile(src, dest)
        return CarriedFile(name=name, sha256=digest, path=str(dest.relative_to(self.base)),
                           origin=_origin(src))

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.base))


def _series_listing(directory: Path, names: list[str]) -> None:
    (directory / "series").write_text(
        "# the patches as the run applied them, in order (harness reproduce reads this)\n"
        + "".join(f"{n}\n" for n in names))


def _carry_group(copier: _Copier, group: series.PatchGroup, k: int,
                 taken: set[str]) -> CarriedPatches:
    root = copier.cell_dir / INPUTS
    if group.series:
        name = slug(group.given)
        while name in taken:
            name += "_"
        taken.add(name)
        where = root / "series" / name
    else:
        where = root / "patches" / f"{k:02d}"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    patches = tuple(copier.copy(p.path, where / p.name, name=p.name) for p in group.patches)
    extra: list[CarriedFile] = []
    if group.directory is not None and (group.directory / "provides.toml").is_file():
        extra.append(copier.copy(group.directory / "provides.toml", where / "provides.toml",
                                 name="provides.toml"))
    if group.source is not None and (group.series or len(group.patches) != 1
                                     or group.patches[0].path != group.source):
        # a thread as given (mbox:FILE, an mbox --patch): kept beside its patches
        extra.append(copier.copy(group.source, where / f"given-{group.source.name}",
                                 name=group.source.name))
    _series_listing(where, [p.name for p in group.patches])
    return CarriedPatches(given=group.given, series=group.series, directory=copier.rel(where),
                          variant=group.variant, patches=patches, extra=tuple(extra))


def _test_dir(text: str, copies: Mapping[str, str]) -> Path | None:
    """The directory a test is asked by (`--test DIR[@VARIANT]`, or a reproduction's copy
    of it), when it is one and not one of our selftests/ (the harness revision's)."""
    head = text.partition("@")[0]
    base = Path(copies.get(text) or copies.get(head) or head)
    if ":" in head or not base.is_dir():
        return None
    selftests = paths.repo_root() / "selftests"
    return None if base.resolve().is_relative_to(selftests) else base.resolve()


def cell_inputs(cell: Cell, groups: tuple[series.PatchGroup, ...],
                fragments: Mapping[str, Path], cell_dir: Path, *, accel: str, strict: bool,
                repeat: int | None, retry_failed: int) -> CellInputs:
    """Copy what the cell is made from into `cell_dir`/inputs and describe it (the source's
    identity comes later: `identity`, once the source is there)."""
    shutil.rmtree(cell_dir / INPUTS, ignore_errors=True)
    copier = _Copier(cell_dir)
    taken: set[str] = set()
    carried = tuple(_carry_group(copier, g, k, taken) for k, g in enumerate(groups, 1))
    configs: list[CarriedFile] = []
    for k, name in enumerate(cell.configs, 1):
        if kconfig.is_tree_fragment(name):
            configs.append(CarriedFile(name=name, sha256="", origin="the kernel tree"))
            continue
        src = fragments[name]
        suffix = "" if slug(name).endswith(".config") else ".config"
        configs.append(copier.copy(src, cell_dir / INPUTS / "configs" /
                                   f"{k:02d}-{slug(name)}{suffix}", name=name))
    test_dirs = []
    copies = dict(cell.test_dirs)
    for k, text in enumerate(cell.tests, 1):
        if (d := _test_dir(text, copies)) is not None:
            name = Path(text.partition("@")[0]).name
            test_dirs.append(copier.copy(d, cell_dir / INPUTS / "tests" / f"{k:02d}-{name}",
                                         name=text))
    return CellInputs(
        kernel=cell.kernel, patches=carried, configs=tuple(configs), tests=cell.tests,
        test_dirs=tuple(test_dirs), boot_only=cell.boot_only, command=cell.command,
        command_cwd=cell.command_cwd, command_timeout=cell.command_timeout,
        expect_status=cell.expect_status, expect=cell.expect, coverage=cell.coverage,
        accel=accel, strict=strict, repeat=repeat, retry_failed=retry_failed,
        not_carried=tuple(copier.not_carried))


def identity(source: PreparedSource) -> SourceIdentity:
    """A prepared source, as reproduce gets it again: its package version, tarball digest
    or commit, and the commit the patches applied on."""
    return SourceIdentity(spec=source.spec.text, describe=source.describe,
                          base_commit=source.base_commit, package=source.package,
                          package_version=source.package_version, sha256=source.digest,
                          commit=source.commit, uncommitted=source.includes_uncommitted)


def image_identity(spec: str, image: Path) -> SourceIdentity:
    """image:PATH: the file's digest (the image itself is never carried)."""
    return SourceIdentity(spec=spec, describe=f"prebuilt image {image}",
                          sha256=sha256_of(image) if image.is_file() else None)
