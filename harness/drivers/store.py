"""`harness cache`: what the cache holds, and its entries pruned, dropped, exported to an
archive or imported from one. The cache itself (what an entry is, eviction, archives) is
kernel/cache.py; this is what each subcommand tells the user."""

from __future__ import annotations

from pathlib import Path

from harness.base import paths
from harness.base.errors import EnvironmentProblem
from harness.kernel import archive, cache
from harness.output import results


def show(max_size: str | None) -> int:
    print(cache.render(cache.entries(), _limit(max_size)))
    return 0


def prune(max_size: str | None, *, dry_run: bool) -> int:
    """Least recently used entries evicted until the cache fits in its limit."""
    limit = _limit(max_size)
    return _evicted(cache.prune(limit, dry_run=dry_run), dry_run=dry_run,
                    limit=f" (limit {cache.human(limit)})")


def drop(names: tuple[str, ...], *, dry_run: bool) -> int:
    if not names:
        raise EnvironmentProblem("harness cache drop needs the names of the entries",
                                 fix="harness cache lists them")
    return _evicted(cache.drop(names, dry_run=dry_run), dry_run=dry_run, limit="")


def _limit(max_size: str | None) -> int:
    return cache.parse_size(max_size) if max_size else cache.max_size()


def _evicted(done: cache.Pruned, *, dry_run: bool, limit: str) -> int:
    verb = "would evict" if dry_run else "evicted"
    for e in done.evicted:
        print(f"{verb} {e.kind.value} {e.name} ({cache.human(e.size)}; {e.used_for or '-'})")
    if done.skipped_reason:
        print(f"nothing evicted: {done.skipped_reason}; try again when it is done")
        return 1
    left = done.total_before - sum(e.size for e in done.evicted)
    print(f"{len(done.evicted)} entries {verb}; the cache holds {cache.human(left)}{limit}")
    return 0


def export(runs: tuple[str, ...], cells: tuple[str, ...], entries: tuple[str, ...],
           output: Path | None) -> int:
    """The stored kernels of runs' cells (and the test builds they used), and named
    entries, into one archive another machine imports."""
    if cells and not runs:
        # a cell's kernel is named by its tree id and .config, known once a run made them
        raise EnvironmentProblem("--cell picks cells of the runs given: there is none",
                                 fix="give the run that ran them: --run results/RUN --cell C")
    if output is None or not (runs or entries):
        raise EnvironmentProblem("harness cache export needs what to export and where",
                                 fix="harness cache export --run results/RUN [--cell C]... "
                                     "[--entry NAME]... -o FILE.tar")
    loaded = [(run, file) for run, _cell, file in (results.load_run(r) for r in runs)]
    names = archive.run_entries(loaded, cells) if loaded else {}
    if entries:
        names.update(archive.named_entries(entries))
    done = archive.export(names, output)
    for name, what in done.entries.items():
        print(f"exported {name} ({what or '-'})")
    print(f"{len(done.entries)} entries, {cache.human(done.size)}: {done.archive}")
    return 0


def import_archive(tar: Path) -> int:
    done = archive.import_archive(tar)
    for name, what in done.added.items():
        print(f"imported {name} ({what or '-'})")
    for name, what in done.present.items():
        print(f"already in the cache: {name} ({what or '-'})")
    print(f"{len(done.added)} entries imported, {len(done.present)} already there, into "
          f"{paths.cache_root()}")
    return 0
