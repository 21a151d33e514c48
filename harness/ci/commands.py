"""`harness ci`: what a CI system is given, each subcommand one function.

github and gitlab write the pipeline the matrix makes; cache-key prints the keys of the
build jobs' caches; annotate turns runs' failures into GitHub annotations (and a step
summary); minutes prices the matrix in runner-minutes from runs that measured it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.base.errors import EnvironmentProblem
from harness.ci import ciplan, gitlab, workflow
from harness.drivers import matrix
from harness.drivers.matrix import Tier
from harness.kernel.build import stored_build_seconds
from harness.output import annotate as github_annotations
from harness.output import results


@dataclass(frozen=True, kw_only=True)
class PipelineRequest:
    system: str  # github or gitlab
    tier: Tier
    settings: ciplan.Settings
    output: Path | None = None  # None: standard output


def pipeline(request: PipelineRequest) -> int:
    """The GitHub workflow or GitLab pipeline of the tier's cells, written or printed."""
    cells = matrix.select(matrix.load(), request.tier)
    render = workflow.render if request.system == "github" else gitlab.render
    what = "workflow" if request.system == "github" else "pipeline"
    text = render(cells, request.tier.value, request.settings)
    results.write_or_print(text, request.output, what)
    return 0


def cache_key(cells: tuple[str, ...]) -> int:
    if not cells:
        raise EnvironmentProblem("harness ci cache-key needs --cell",
                                 fix="harness ci cache-key --cell 6.12 [--cell ...]")
    keys = workflow.cache_key(matrix.select(matrix.load(), Tier.FULL, cells))
    print(f"store_key={keys.store}\nccache_prefix={keys.ccache_prefix}")
    return 0


def annotate(runs: tuple[Path, ...], summary: Path | None) -> int:
    """Each run's failures as GitHub annotation lines; with `summary`, a markdown summary
    of each appended to it. With several runs, each line names its run."""
    if not runs:
        raise EnvironmentProblem("harness ci annotate needs the runs",
                                 fix="harness ci annotate results/RUN [--summary FILE]")
    read = [(results.load_run(str(r))[0], _run_label(r)) for r in runs]
    for run, label in read:
        for line in github_annotations.annotation_lines(run,
                                                        label=label if len(read) > 1 else ""):
            print(line)
    if summary is not None:
        with summary.open("a") as out:
            for run, label in read:
                out.write(github_annotations.summary(run, label=label) + "\n")
    return 0


def _run_label(given: Path) -> str:
    """A run's name: its directory's, whether the directory or its results.json is given."""
    return (given.parent if given.name == "results.json" else given).name


def minutes(runs: tuple[Path, ...], tier: Tier, setup_minutes: float) -> int:
    if not runs:
        raise EnvironmentProblem("harness ci minutes needs the runs that measured the cells",
                                 fix="harness ci minutes results/run-A results/run-B "
                                 "--tier full (the runs first, then the options)")
    read = [results.load_run(str(r))[0] for r in runs]
    costs = workflow.job_costs(matrix.select(matrix.load(), tier), read,
                               stored_build_seconds())
    print(workflow.render_minutes(costs, setup_minutes * 60))
    return 0
