"""`harness reproduce DIR|ARCHIVE`: a run made again from what its results directory carries,
from any clone of the harness, in any directory, then judged against it test by test.

    Request -> the run's cells rebuilt from their carried inputs (`cells`: the carried
               patch files, series and config fragments by the names the run gave them;
               the kernel source pinned: a Debian package at its version, a git tree at
               its commit, a tarball by its digest) -> checked (`preflight`: a source that
               cannot be had here stops it, exit 2, with the fix) -> run (run.run, or the
               run's own harness revision in a temporary worktree: --at-revision) into a
               directory of its own -> reproduction.judge -> one verdict.

Exit 0 the verdicts match, 1 they differ (the results and the inputs that differ are
named), 2 it cannot be reproduced here (the input that cannot be had, and the fix). It
never writes into the directory it reproduces: a bundle is unpacked into a temporary
directory, and the reproduction's results go elsewhere (--out, else results/).
"""

from __future__ import annotations

import logging
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from harness.base import atomic, paths, proc
from harness.base.errors import EnvironmentProblem, HarnessError
from harness.base.gitcmd import git, git_run
from harness.base.model import (
    Accel,
    CarriedFile,
    CellInputs,
    CellResult,
    GuestSpec,
    RunResult,
    SourceKind,
    Status,
)
from harness.drivers import pipeline, run
from harness.drivers.matrix import Cell, Tier
from harness.kernel import kconfig, series, sources
from harness.output import bundle, reproduction, results

log = logging.getLogger("harness")

RUN_TIMEOUT_S = 6 * 3600  # --at-revision: the run of the producer's revision, at most


class ReproduceError(EnvironmentProblem):
    """The run cannot be reproduced here: an input that cannot be had (said with the fix)."""


@dataclass(frozen=True, kw_only=True)
class Request:
    source: Path  # the run's directory, or a bundle of it
    out: Path | None = None  # the reproduction's directory (default results/reproduce-...)
    cells: tuple[str, ...] = ()  # only these cells (default: all)
    tests: tuple[str, ...] = ()  # only these tests (default: the cells' own)
    accel: Accel | None = None  # None: as the run asked
    kernel: str | None = None  # another kernel source: an input that differs, said
    patches: tuple[Path, ...] = ()  # each in place of the carried patch of its file name
    at_revision: bool = False  # the run's harness revision, in a temporary worktree
    argv: tuple[str, ...] = ("reproduce",)


# ---- the cells, from what the directory carries ----


def _carried(run_dir: Path, f: CarriedFile, cell: str) -> Path:
    """A carried copy, there; ReproduceError when the run did not carry it or it is gone."""
    if not f.path:
        raise ReproduceError(f"{cell}: the run did not carry {f.name} (over the size limit)",
                             fix=f"get it from the run's author ({f.origin}), then give it: "
                                 f"--patch FILE for a patch")
    path = run_dir / f.path
    if not path.exists():
        raise ReproduceError(f"{cell}: {f.path} is missing from {run_dir}",
                             fix="the directory is incomplete: get the whole results "
                                 "directory, or its bundle (harness export --bundle RUN)")
    return path.resolve()


def pinned_kernel(inputs: CellInputs, cell: str) -> str:
    """The kernel spec that gets the run's source again: a Debian package at the version
    the run built, a git tree at its commit, the tarball or image of the run's path."""
    src = inputs.source
    spec = sources.parse_spec(inputs.kernel)
    if src is None:
        return inputs.kernel
    if spec.kind is SourceKind.DEBIAN and src.package_version:
        kernel = (src.package or "").removeprefix("linux-source-") or \
            spec.value.partition("=")[0]
        return f"debian:{kernel}={src.package_version}"
    if spec.kind is SourceKind.GIT:
        if src.uncommitted:
            raise ReproduceError(
                f"{cell}: its kernel was {spec.value} with uncommitted changes, which a "
                "run does not carry", fix="commit them and run again; or reproduce on a "
                f"tree of yours: --kernel git:PATH@{(src.commit or 'REV')[:12]} (said as an "
                "input that differs)")
        return f"git:{spec.value}@{src.commit}" if src.commit else inputs.kernel
    return inputs.kernel


def _replacements(given: tuple[Path, ...]) -> dict[str, Path]:
    found = {}
    for p in given:
        if not p.is_file():
            raise ReproduceError(f"--patch {p}: no such file",
                                 fix="give a patch file to use in place of the run's patch "
                                     "of the same name")
        found[p.name] = p.resolve()
    return found


def _series_dir(run_dir: Path, directory: str, names: list[str], swap: dict[str, Path],
                scratch: Path) -> Path:
    """A carried series directory; a copy of it with the swapped patches when any."""
    carried = (run_dir / directory).resolve()
    if not swap.keys() & set(names):
        return carried
    copy = scratch / directory
    shutil.copytree(carried, copy)
    for name in names:
        if name in swap:
            shutil.copyfile(swap[name], copy / name)
    return copy


def asked(text: str, names: tuple[str, ...]) -> bool:
    """Whether a test as a run asked it (NAME, NAME@VARIANT, a directory, kselftest:T)
    is one of `names`."""
    base = text.partition("@")[0]
    return any(n in (text, base, Path(base).name) for n in names)


def _tests(inputs: CellInputs, run_dir: Path, cell: str) -> tuple[tuple[str, str], ...]:
    """Each test asked by its directory -> its carried copy."""
    return tuple((f.name.partition("@")[0], str(_carried(run_dir, f, cell)))
                 for f in inputs.test_dirs)


def cell_of(c: CellResult, run_dir: Path, request: Request, scratch: Path) -> Cell:
    """One cell of the run, as the reproduction makes it: from its carried inputs."""
    i = c.inputs
    if i is None and c.status is Status.SETUP_ERROR:
        first = (c.error.splitlines() or ["a set-up error"])[0]
        raise ReproduceError(
            f"{c.cell}: the run stopped it before its inputs were read ({first})",
            fix="reproduce the other cells (--cell NAME), or correct the run's input and "
                "run it again")
    if i is None:
        raise ReproduceError(
            f"{c.cell}: the run's results record no inputs (a harness from before they "
            "were carried wrote it)",
            fix="run it again with this harness, or rerun its command line (its "
                "results.json `command`) from a clone at its harness_rev")
    if i.not_carried:
        raise ReproduceError(f"{c.cell}: the run did not carry {', '.join(i.not_carried)}",
                             fix="get them from the run's author; a patch: --patch FILE")
    swap = _replacements(request.patches)
    series_dirs, patches = [], []
    for g in i.patches:
        names = [f.name for f in g.patches]
        for f in g.patches:
            _carried(run_dir, f, c.cell)
        if g.series:
            series_dirs.append((g.given, str(_series_dir(run_dir, g.directory, names, swap,
                                                         scratch))))
        else:
            patches += [str(swap.get(f.name) or _carried(run_dir, f, c.cell))
                        for f in g.patches]
    applied = {f.name for g in i.patches for f in g.patches}
    if unknown := sorted(set(swap) - applied):
        raise ReproduceError(f"--patch {', '.join(unknown)}: the run applied no patch of that "
                             f"name in cell {c.cell}",
                             fix="name the file as the patch it takes the place of: "
                                 f"{', '.join(sorted(applied)) or 'the run applied none'}")
    configs = {f.name: str(_carried(run_dir, f, c.cell)) for f in i.configs
               if not kconfig.is_tree_fragment(f.name)}
    return Cell(
        name=c.cell, tier=Tier.DEFAULT, kernel=request.kernel or pinned_kernel(i, c.cell),
        series=tuple(g.given for g in i.patches if g.series), configs=tuple(
            f.name for f in i.configs), tests=i.tests, test_dirs=_tests(i, run_dir, c.cell),
        patches=tuple(patches), expect_status=i.expect_status, expect=i.expect,
        boot_only=i.boot_only, guest=c.guest or GuestSpec(), command=i.command,
        command_cwd=i.command_cwd, command_timeout=i.command_timeout, coverage=i.coverage,
        arch=c.arch, toolchain=c.toolchain, series_dirs=tuple(series_dirs),
        config_files=tuple(configs.items()))


def _tests_of(c: Cell, only: tuple[str, ...]) -> Cell:
    """The cell with only the tests named (--test); the guest command is left out then."""
    if not only:
        return c
    kept = tuple(t for t in c.tests if asked(t, only))
    if not kept:
        raise ReproduceError(f"--test {', '.join(only)}: cell {c.name} ran none of them",
                             fix=f"name its tests: {', '.join(c.tests) or 'it ran none'}")
    return replace(c, tests=kept, command=())


def cells(original: RunResult, run_dir: Path, request: Request, scratch: Path) -> list[Cell]:
    """The run's cells (those named), rebuilt from what the directory carries."""
    names = [c.cell for c in original.cells]
    if unknown := [n for n in request.cells if n not in names]:
        raise ReproduceError(f"the run has no cell {', '.join(unknown)}",
                             fix=f"name one of its cells: {', '.join(names) or 'none'}")
    chosen = [c for c in original.cells if not request.cells or c.cell in request.cells]
    if not chosen:
        raise ReproduceError("the run has no cell to reproduce",
                             fix="give a run that ran at least one cell")
    return [_tests_of(cell_of(c, run_dir, request, scratch), request.tests) for c in chosen]


# ---- before anything runs ----


def _local_source(cell: Cell, original: CellResult | None) -> None:
    """A source the run named by a path on its machine (a git tree at a commit, a tarball,
    an image): there, and the same, or ReproduceError with the spec to give instead."""
    spec = sources.parse_spec(cell.kernel)
    src = original.inputs.source if original and original.inputs else None
    if spec.kind is SourceKind.GIT:
        where = Path(spec.value)
        has = where.is_dir() and spec.rev is not None and git_run(
            where, "cat-file", "-e", f"{spec.rev}^{{commit}}", timeout=60).ok
        if not has:
            raise sources.SourceError(
                f"{where} is not here" if not where.is_dir() else
                f"{where} does not have commit {spec.rev}",
                fix=f"give a clone of that tree that has the commit: --kernel "
                    f"git:PATH@{spec.rev}")
    elif spec.kind in (SourceKind.TARBALL, SourceKind.IMAGE):
        path = Path(spec.value)
        want = src.sha256 if src is not None else None
        if not path.is_file():
            raise sources.SourceError(
                f"{path} is not here (a results directory carries no kernel "
                f"{'image' if spec.kind is SourceKind.IMAGE else 'tarball'})",
                fix=f"give the same file: --kernel {spec.kind.value}:PATH"
                    + (f" (sha256 {want})" if want else ""))


def preflight(built: list[Cell], kernel_given: bool,
              originals: dict[str, CellResult] | None = None) -> None:
    """Each cell's kernel source can be had here (a pinned package version Debian still
    serves, a tree that has the commit, the tarball): all problems told at once, each with
    its fix."""
    problems = []
    for c in built:
        try:
            _local_source(c, (originals or {}).get(c.name))
            sources.check(sources.parse_spec(c.kernel))
        except HarnessError as exc:
            debian = c.kernel.startswith(f"{SourceKind.DEBIAN.value}:")
            other = "" if kernel_given or not debian else (
                f"; or reproduce on what {c.kernel.partition('=')[0]} is here now: "
                f"--kernel {c.kernel.partition('=')[0]} (another source, said as an input "
                "that differs)")
            problems.append(f"{c.name}: the run's kernel source {c.kernel} cannot be had "
                            f"here: {exc.message}\n  fix: {exc.fix}{other}")
    if problems:
        raise ReproduceError("cannot reproduce:\n" + "\n".join(problems),
                             fix="see each cell's fix above")


# ---- where it goes ----


def out_dir(request: Request, source: Path) -> Path:
    """--out, else results/reproduce-<id> here; never inside the run reproduced."""
    inside = source if source.is_dir() else None
    if request.out is not None:
        out = request.out.resolve()
        if inside is not None and out.is_relative_to(inside):
            raise ReproduceError(f"--out {out} is inside the run it reproduces",
                                 fix="give a directory outside it")
        return results.out_dir(out)
    default = paths.results_root(Path.cwd())
    if inside is not None and default.resolve().is_relative_to(inside):
        default = paths.cache_root() / "results"
    return results.out_dir(default / f"reproduce-{results.new_run_id()}")


# ---- the run of the producer's harness revision (--at-revision) ----


@contextmanager
def _worktree(rev: str) -> Iterator[Path]:
    """The producer's revision checked out in a temporary worktree of this clone."""
    repo = paths.repo_root()
    if not rev or rev == "unknown":
        raise ReproduceError("--at-revision: the run does not say its harness revision",
                             fix="reproduce without --at-revision")
    if not git_run(repo, "cat-file", "-e", f"{rev}^{{commit}}", timeout=60).ok:
        raise ReproduceError(
            f"--at-revision: this clone ({repo}) does not have the run's revision {rev[:12]}",
            fix="fetch it (git fetch URL-of-the-run's-repository), or reproduce without "
                "--at-revision: the harness revision that differs is said")
    with tempfile.TemporaryDirectory(prefix="harness-at-revision-") as tmp:
        where = Path(tmp) / "harness"
        git(repo, "worktree", "add", "-q", "--detach", str(where), rev,
            what="git worktree add", timeout=600)
        try:
            yield where
        finally:
            git_run(repo, "worktree", "remove", "--force", str(where), timeout=600)


def revision_argv(cell: Cell, accel: Accel, original: CellResult) -> list[str]:
    """The `harness run` command line of that revision that makes the cell: a matrix
    cell by its name (the revision's matrix is the run's), an ad-hoc cell by its inputs
    (series and fragments by their names, as that revision has them; the rest carried)."""
    i = original.inputs
    if not original.cell.startswith("adhoc"):
        return ["run", "--cell", cell.name, "--accel", accel.value]
    copies = dict(cell.test_dirs)
    plain = replace(cell, tests=tuple(pipeline.test_text(t, copies) for t in cell.tests),
                    test_dirs=(), series=tuple(
        dict(cell.series_dirs).get(s, s) if series.from_the_list(s) or "/" in s else s
        for s in cell.series),
        configs=tuple(dict(cell.config_files).get(c, c) if "/" in c or c.endswith(".config")
                      else c for c in cell.configs))
    argv = pipeline.cell_argv(plain, accel)
    if i is not None and i.strict:
        argv.insert(1, "--strict")
    return argv


def _at_revision(rev: str, built: list[Cell], originals: dict[str, CellResult],
                 accel: Accel, out: Path) -> None:
    """Each cell by `harness run` of the run's own revision; their results joined into
    out/results.json under the run's cell names."""
    done: list[CellResult] = []
    record: RunResult | None = None
    with _worktree(rev) as tree:
        log.info("the run's harness revision %s checked out in %s", rev[:12], tree)
        for cell in built:
            where = out / ".revision" / cell.name
            argv = [sys.executable, "-m", "harness",
                    *revision_argv(cell, accel, originals[cell.name]), "--out", str(where)]
            print(f"$ {shlex.join(argv)}", flush=True)
            proc.run(argv, cwd=tree, env={"PYTHONPATH": str(tree)}, timeout=RUN_TIMEOUT_S,
                     log_path=out / f"{cell.name}.at-revision.log",
                     on_line=lambda line: print(line, flush=True))
            try:
                got, _c, _f = results.load_run(str(where))
            except HarnessError as exc:
                raise ReproduceError(f"{cell.name}: the run at revision {rev[:12]} left no "
                                     f"results: {exc.message}",
                                     fix=f"see {out / f'{cell.name}.at-revision.log'}") from None
            record = record or got
            for c in got.cells:
                done.append(replace(c, cell=cell.name))
                if (where / c.cell).is_dir():
                    shutil.copytree(where / c.cell, out / cell.name, dirs_exist_ok=True)
    assert record is not None
    results.write_json(out / "results.json", replace(
        record, cells=tuple(done), exit_code=results.exit_code(done),
        command=("harness", "reproduce", "--at-revision")))


# ---- the command ----


def command(request: Request) -> int:
    """`harness reproduce`: the run made again, judged; its exit code."""
    source = request.source.expanduser().resolve()
    with ExitStack() as stack:
        run_dir = stack.enter_context(bundle.opened(source))
        original, _cell, _file = results.load_run(str(run_dir))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="harness-reproduce-")))
        built = cells(original, run_dir, request, scratch)
        preflight(built, kernel_given=request.kernel is not None,
                  originals={c.cell: c for c in original.cells})
        first = next(c.inputs for c in original.cells if c.inputs is not None)
        accel = request.accel or Accel(first.accel)
        out = out_dir(request, source)
        print(f"reproducing {source} ({len(built)} cell(s): "
              f"{', '.join(c.name for c in built)}) into {out}", flush=True)
        if request.at_revision:
            _at_revision(original.harness_rev or "", built,
                         {c.cell: c for c in original.cells}, accel, out)
        else:
            options = pipeline.RunOptions(strict=first.strict, repeat=first.repeat,
                                          retry_failed=first.retry_failed)
            run.run(run.Request(selection=run.Selection(), here=Path.cwd(), options=options,
                                accel=accel, out=out, argv=request.argv),
                    cells=tuple(built), what=f"reproducing {source}", out=out)
    reproduced, _cell, _file = results.load_run(str(out))
    judged = reproduction.judge(original, reproduced, cells=tuple(c.name for c in built),
                                tests=request.tests)
    atomic.write_json(out / "reproduction.json",
                      {"source": str(source), **reproduction.to_json(judged)})
    print()
    print(reproduction.render(judged))
    print(f"\nreproduction: {out}  (exit {judged.exit_code})")
    return judged.exit_code

