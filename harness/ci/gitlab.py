"""`harness ci gitlab`: the plan of harness/ci/ciplan.py as a .gitlab-ci.yml. Pure: cells and
settings in, YAML text out.

Pipelines: one per change (a merge request's commits run as the merge request, a branch
without one as a branch pipeline), an older one interruptible by a newer. Stages:
- build: a job per build tree in `debian:12`, on the runners with the given tags (for
  `--accel kvm`, runners whose Docker executor passes /dev/kvm): ./bootstrap.sh, each
  kernel built by `harness run --cell C --build-only` (nothing boots) and exported with
  `harness cache export`; the archives and the runs kept as artifacts. The kernel store and
  ccache are a GitLab cache of the job, inside the project directory (GitLab caches only
  paths there: HARNESS_CACHE is $CI_PROJECT_DIR/.cache/harness): one key per job, written
  by each run, so ccache rolls and the store, keyed by content, keeps what still matches
  (GitLab keeps protected and unprotected branches' caches apart);
- test: a job per cell (`parallel: matrix`), which needs its build job's artifacts, imports
  its kernel and runs `harness run --cell C`; its run directory kept as an artifact;
- merge: Python only (a venv with the harness, no bootstrap), whatever the tests did: the
  runs merged against the tier (`harness merge --tier T`: a cell no job left is MISSING),
  the merge's exit code the job's, the merged run as JUnit XML (`artifacts:reports:junit`,
  which GitLab shows in the merge request).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.ci import ciplan
from harness.ci.ciplan import BuildJob, Plan, Settings, sh
from harness.drivers.matrix import Cell

CACHE_DIR = ".cache/harness"  # HARNESS_CACHE, relative to the project directory
HEADER = ("# Generated from matrix.toml by `{command}`:\n"
          "# do not edit; run it again. tests/unit/test_gitlab.py checks that it matches.\n")


def _check(settings: Settings) -> None:
    ciplan.check_kvm_runners(settings, named=bool(settings.tags),
                             why="untagged jobs run on any runner",
                             fix="give the tag of runners that pass /dev/kvm to their "
                                 "containers: --tag TAG (repeatable), or --accel tcg")


def _machine(settings: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {"image": ciplan.IMAGE}
    if settings.tags:
        out["tags"] = list(settings.tags)
    return out


def build_job(job: BuildJob, settings: Settings) -> dict[str, Any]:
    return {
        "stage": "build", **_machine(settings),
        "timeout": f"{min(6, 1 + len(job.kernels) // 3)}h",
        "cache": [{"key": f"harness-build-{job.slug}",
                   "paths": [f"{CACHE_DIR}/kernels", f"{CACHE_DIR}/ccache"]}],
        "script": ["./bootstrap.sh",
                   *(sh(k.build_argv()) for k in job.kernels),
                   *(sh(k.export_argv()) for k in job.kernels)],
        "artifacts": {"when": "always", "expire_in": "3 days",
                      "paths": [f"{ciplan.ARCHIVE_DIR}/", f"{ciplan.BUILD_DIR}/"]},
    }


def test_job(job: BuildJob, plan: Plan) -> dict[str, Any]:
    return {
        "stage": "test", **_machine(plan.settings), "timeout": "2h",
        "needs": [{"job": f"build:{job.slug}", "artifacts": True}],
        "parallel": {"matrix": [{"CELL": c, "KERNEL": k.name}
                                for k in job.kernels for c in k.cells]},
        "script": ["./bootstrap.sh",
                   f'{ciplan.HARNESS} cache import "{ciplan.ARCHIVE_DIR}/$KERNEL.tar"',
                   f'{ciplan.HARNESS} run --cell "$CELL" --accel {plan.settings.accel.value} '
                   f'--out "{ciplan.RESULTS_DIR}/$CELL"'],
        "artifacts": {"when": "always", "expire_in": "1 week",
                      "paths": [f"{ciplan.RESULTS_DIR}/"]},
    }


def merge_job(plan: Plan) -> dict[str, Any]:
    return {
        "stage": "merge", "image": "python:3.11", "when": "always",
        "needs": [{"job": f"test:{b.slug}", "artifacts": True} for b in plan.builds],
        # the whole history: the harness revision is known
        "variables": {"GIT_DEPTH": "0"},
        "script": ["python -m venv .venv", ".venv/bin/pip install -q -e .",
                   f"{ciplan.HARNESS} merge {ciplan.RESULTS_DIR}/* --tier {plan.tier} "
                   "--out merged"],
        # after_script runs after a failing script too; its exit code is not the job's
        "after_script": [f"{ciplan.HARNESS} export junit merged -o merged/junit.xml"],
        "artifacts": {"when": "always", "expire_in": "1 month", "paths": ["merged/"],
                      "reports": {"junit": "merged/junit.xml"}},
    }


def pipeline(plan: Plan) -> dict[str, Any]:
    _check(plan.settings)
    doc: dict[str, Any] = {
        "workflow": {"rules": [
            {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'},
            {"if": "$CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS", "when": "never"},
            {"if": "$CI_COMMIT_BRANCH"}]},
        "stages": ["build", "test", "merge"],
        "variables": {"HARNESS_CACHE": f"$CI_PROJECT_DIR/{CACHE_DIR}"},
        "default": {"interruptible": True},
    }
    for b in plan.builds:
        doc[f"build:{b.slug}"] = build_job(b, plan.settings)
    for b in plan.builds:
        doc[f"test:{b.slug}"] = test_job(b, plan)
    doc["merge"] = merge_job(plan)
    return doc


def render(cells: Sequence[Cell], tier: str, settings: Settings | None = None) -> str:
    settings = settings or Settings()
    plan = ciplan.plan(cells, tier, settings)
    return (HEADER.format(command=ciplan.command(tier, settings, "gitlab") + " -o .gitlab-ci.yml")
            + ciplan.to_yaml(pipeline(plan)) + "\n")
