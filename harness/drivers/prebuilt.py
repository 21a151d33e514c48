"""A cell's kernel and tests as a build-only run left them, for a run on another machine
that has neither the source nor the tools to build them (a CI test job).

`harness run --cell C --build-only --out build/K` writes, beside each cell's logs,
`prebuilt.json`: what the stages before the boot learnt (the source and its version, the
patches' states, the config checks, the features, the kernel store entry, the kselftest.h
copy) and where each of the cell's tests was built, by cache entry. `harness cache export
--run build/K` carries the kernel and those test builds; on the other machine `harness
cache import` puts them in its cache and `harness run --cell C --prebuilt build/K` boots
them: no source imported, no series applied, nothing configured or built, no compiler.

A record names entries relative to the cache root, so the two machines' HARNESS_CACHE may
differ; a test built outside the cache (a command's directory) is named by its path.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from harness.base import atomic, paths
from harness.base.errors import HarnessError
from harness.base.model import (
    ConfigResult,
    FeatureReport,
    KernelImage,
    PatchResult,
    Status,
)
from harness.drivers.matrix import Cell
from harness.kernel import archive
from harness.output import results

log = logging.getLogger(__name__)

FILE = "prebuilt.json"
ARCHIVE = "kernel.tar"  # in the run's directory: imported when the cache lacks the kernel
SCHEMA = 1
CACHE = "cache:"  # a test build's path, relative to the cache root
T = TypeVar("T")


class PrebuiltError(HarnessError):
    status = Status.SETUP_ERROR


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """One cell's build, as its build-only run made it."""

    cell: str
    identity: tuple[str, ...]  # what builds the kernel: kernel spec, series, configs, ...
    kernel_entry: str  # kernels/<key>, under the cache root
    image_name: str  # bzImage, Image
    version: str
    arch: str
    toolchain: str
    compiler: str
    source: str
    package_version: str | None
    patches: tuple[PatchResult, ...]
    config: ConfigResult | None
    features: tuple[FeatureReport, ...]
    kselftest_entry: str  # kselftest-h/<name> ("": the cell's tests need none)
    kselftest_origin: str
    tests: tuple[tuple[str, str], ...]  # test name -> "cache:REL" or an absolute path
    # the build's sandbox (base/sandbox.py): on, or off and why (--no-sandbox)
    sandbox: bool = True
    sandbox_off: str = ""
    sandbox_tool: str = ""  # bubblewrap's version there


def identity(cell: Cell) -> tuple[str, ...]:
    """What decides a cell's kernel and tests (the cells of a kernel share all but the
    tests): a record made for another definition of the cell is refused."""
    return (cell.kernel, "+".join(cell.series), "+".join(cell.configs),
            "+".join(cell.patches), cell.arch, cell.toolchain, "+".join(cell.tests))


def _relative(path: Path) -> str:
    root = paths.cache_root().resolve()
    try:
        return CACHE + str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def _absolute(text: str) -> Path:
    if text.startswith(CACHE):
        return paths.cache_root() / text.removeprefix(CACHE)
    return Path(text)


def record(cell: Cell, *, image: KernelImage, source: str, package_version: str | None,
           patches: tuple[PatchResult, ...], config: ConfigResult | None,
           features: tuple[FeatureReport, ...], kselftest: tuple[Path, str] | None,
           tests: dict[str, Path],
           sandbox: tuple[bool, str, str] = (True, "", "")) -> Record:
    entry = _relative(image.boot_image.parent).removeprefix(CACHE)
    if not entry.startswith("kernels/"):
        raise PrebuiltError(f"{cell.name}: its kernel {image.boot_image} is not in the kernel "
                            "store: nothing another machine can import")
    return Record(cell=cell.name, identity=identity(cell), kernel_entry=entry,
                  image_name=image.boot_image.name, version=image.version, arch=image.arch,
                  toolchain=image.toolchain, compiler=image.compiler, source=source,
                  package_version=package_version, patches=patches, config=config,
                  features=features,
                  kselftest_entry=_relative(kselftest[0]).removeprefix(CACHE)
                  if kselftest else "",
                  kselftest_origin=kselftest[1] if kselftest else "",
                  tests=tuple(sorted((n, _relative(p)) for n, p in tests.items())),
                  sandbox=sandbox[0], sandbox_off=sandbox[1], sandbox_tool=sandbox[2])


def write(out_dir: Path, rec: Record) -> None:
    atomic.write_json(out_dir / FILE, {"schema": SCHEMA, **_encode(rec)})


class BuildFailed(HarnessError):
    """The build-only run did not build the cell (its kernel, config, series or tests):
    the cell's status is that run's, told again with its error and logs."""


def failed_build(run_dir: Path, cell: Cell, logs: Path) -> BuildFailed | None:
    """The build-only run's stage error for this cell, its logs copied into `logs/build-job`;
    None when that run holds no such error for it."""
    try:
        run = results.load_run(str(run_dir))[0]
    except HarnessError:
        return None
    found = next((c for c in run.cells if c.cell == cell.name), None)
    if found is None or not found.status.is_stage_error:
        return None
    status = found.status
    copied = logs / "build-job"
    for path in sorted((run_dir / cell.name).glob("*.log")):
        copied.mkdir(parents=True, exist_ok=True)
        (copied / path.name).write_bytes(path.read_bytes())
    return BuildFailed(f"{status.value} in the build-only run {run_dir} (its logs: "
                       f"{copied if copied.is_dir() else run_dir / cell.name}): "
                       f"{found.error or 'no error recorded'}",
                       fix="see the build job's log; the cell was not booted", status=status)


def read(run_dir: Path, cell: Cell) -> Record:
    """The record of `cell` in a build-only run's directory; PrebuiltError (SETUP_ERROR)
    saying what is missing and how to get it."""
    file = run_dir / cell.name / FILE
    fix = (f"run `harness run --cell {cell.name} --build-only --out {run_dir}` where the "
           "kernel can be built, then `harness cache export --run` it and import the archive")
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise PrebuiltError(f"{file}: no record of cell {cell.name}'s build there "
                            "(its build-only run did not finish the cell?)", fix=fix) from None
    except (OSError, ValueError) as exc:
        raise PrebuiltError(f"{file}: not readable: {exc}", fix=fix) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise PrebuiltError(f"{file}: not a record of schema {SCHEMA}", fix=fix)
    try:
        rec = _decode(Record, {k: v for k, v in data.items() if k != "schema"})
    except (KeyError, TypeError, ValueError) as exc:
        raise PrebuiltError(f"{file}: malformed: {exc}", fix=fix) from None
    if rec.identity != identity(cell):
        raise PrebuiltError(f"{file} was made for another definition of cell {cell.name} "
                            f"({' | '.join(rec.identity)}; the matrix now says "
                            f"{' | '.join(identity(cell))})",
                            fix="build it again from the same matrix.toml")
    return rec


def image(rec: Record, run_dir: Path) -> KernelImage:
    """The stored kernel the record names, as this machine's cache holds it (imported
    first from the run's archive, `harness cache export --run RUN -o RUN/kernel.tar`, when
    the cache lacks it)."""
    stored = paths.cache_root() / rec.kernel_entry
    boot = stored / rec.image_name
    if not boot.is_file() and (run_dir / ARCHIVE).is_file():
        done = archive.import_archive(run_dir / ARCHIVE)
        log.info("imported %d cache entries from %s", len(done.added), run_dir / ARCHIVE)
    if not boot.is_file():
        raise PrebuiltError(f"kernel {rec.kernel_entry} of cell {rec.cell} is not in the "
                            f"cache {paths.cache_root()}",
                            fix="harness cache import the archive its build job exported "
                                "(harness cache export --run BUILD_RUN)")
    vmlinux = stored / "vmlinux"
    config = stored / "config"
    return KernelImage(boot_image=boot, vmlinux=vmlinux if vmlinux.is_file() else None,
                       config=config if config.is_file() else None, version=rec.version,
                       cached=True, arch=rec.arch, toolchain=rec.toolchain,
                       compiler=rec.compiler)


def tests(rec: Record) -> dict[str, Path]:
    """Each test's build directory; PrebuiltError for one this cache lacks."""
    out = {name: _absolute(where) for name, where in rec.tests}
    if gone := sorted(n for n, p in out.items() if not p.exists()):
        raise PrebuiltError(f"cell {rec.cell}: the build(s) of {', '.join(gone)} are not in "
                            f"the cache {paths.cache_root()}",
                            fix="import the archive exported from the build-only run that "
                                "built them (harness cache export --run BUILD_RUN)")
    return out


def kselftest_dir(rec: Record) -> Path | None:
    if not rec.kselftest_entry:
        return None
    return paths.cache_root() / rec.kselftest_entry


# ---- a frozen dataclass <-> JSON, by its field types ----

def _encode(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (tuple, list)):
        return [_encode(x) for x in obj]
    return obj


def _decode(cls: type[T], data: Any) -> T:
    return typing.cast(T, _value(cls, data))


def _value(kind: Any, data: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if data is None and type(None) in options:
            return None
        return _value(next(o for o in options if o is not type(None)), data)
    if origin is tuple:
        args = typing.get_args(kind)
        if not isinstance(data, list):
            raise TypeError(f"expected a list, not {data!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], x) for x in data)
        return tuple(_value(a, x) for a, x in zip(args, data, strict=True))
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {kind.__name__}, not {data!r}")
        hints = typing.get_type_hints(kind)
        return kind(**{f.name: _value(hints[f.name], data[f.name])
                       for f in dataclasses.fields(kind) if f.name in data})
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(data)
    if kind is Path:
        return Path(str(data))
    if kind in (str, int, float, bool) and not isinstance(data, kind):
        if kind is float and isinstance(data, int):
            return float(data)
        raise TypeError(f"expected {kind.__name__}, not {data!r}")
    return data
