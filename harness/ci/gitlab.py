"""`harness ci gitlab`: the plan of harness/ci/ciplan.py as a .gitlab-ci.yml. Pure: cells and
settings in, YAML text out.

Pipelines: one per change (a merge request's commits run as the merge request, a branch
without one as a branch pipeline), an older one interruptible by a newer, except on the
default branch. Stages:
- build: a job per distinct kernel in `debian:12` (the build role: bootstrap.sh --role
  build, with the arch's and toolchain's packages from their data files), on the runners
  with the given tags: `harness run --cell C... --build-only` of the kernel's cells (the
  kernel once, their tests; nothing boots), the kernel and test builds exported into the
  run's directory, which is the job's one artifact (when: always). The kernel store and
  ccache are GitLab caches inside the project directory (GitLab caches only paths there:
  HARNESS_CACHE is $CI_PROJECT_DIR/.cache/harness): the store per kernel, ccache per
  worktree, pulled in every pipeline and pushed only on the default branch
  ($HARNESS_CACHE_POLICY, set by the workflow rules), within limits that fit the runner;
- test: a job per cell (`parallel: matrix`) needing exactly its kernel's build job, so it
  downloads that one artifact, run even when the build failed (when: always): the test
  role (QEMU, no compiler), `harness run --cell C --prebuilt build/K`, which imports the
  kernel and boots it and the tests as built, or says the build's error with its log;
  `--accel auto`: KVM where the runner passes /dev/kvm, else TCG (the reason in
  results.json); its run directory kept as an artifact;
- merge: the merge role (Python only), whatever the tests did: the runs merged against
  the tier (`harness merge --tier T`: a cell no job left is MISSING), the merge's exit
  code the job's, the merged run as JUnit XML (`artifacts:reports:junit`, which GitLab
  shows in the merge request) and as one archive a reviewer downloads and reproduces
  (`harness export --bundle`: `harness reproduce harness-run.tar.gz`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.ci import ciplan
from harness.ci.ciplan import BuildJob, Plan, Settings, sh
from harness.drivers.matrix import Cell

CACHE_DIR = ".cache/harness"  # HARNESS_CACHE, relative to the project directory
HOSTED_LIMIT = 180  # minutes: GitLab.com's hosted runners stop a job there
HEADER = ("# Generated from matrix.toml by `{command}`:\n"
          "# do not edit; run it again. tests/unit/test_gitlab.py checks that it matches.\n")
DEFAULT_BRANCH = "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"


def _machine(tags: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"image": ciplan.IMAGE}
    if tags:
        out["tags"] = list(tags)
    return out


def build_job(job: BuildJob, plan: Plan) -> dict[str, Any]:
    timeout, _said = plan.build_timeout(job, HOSTED_LIMIT)
    return {
        "stage": "build", **_machine(plan.settings.tags), "timeout": f"{timeout} minutes",
        "needs": [],
        "cache": [{"key": f"harness-kernels-{job.slug}", "paths": [f"{CACHE_DIR}/kernels"],
                   "policy": "$HARNESS_CACHE_POLICY"},
                  {"key": f"harness-ccache-{job.tree}", "paths": [f"{CACHE_DIR}/ccache"],
                   "policy": "$HARNESS_CACHE_POLICY"}],
        "script": [sh(job.bootstrap_argv("build")), sh(job.build_argv()),
                   sh(job.export_argv())],
        "artifacts": {"when": "always", "expire_in": "3 days", "paths": [f"{job.run_dir}/"]},
    }


def test_job(job: BuildJob, plan: Plan) -> dict[str, Any]:
    timeout, _said = plan.test_timeout(job, HOSTED_LIMIT)
    line = plan.test_line(job)
    return {
        "stage": "test", **_machine(plan.settings.test_tags or plan.settings.tags),
        "timeout": f"{timeout} minutes",
        # exactly its kernel's build job, whose one artifact is that kernel's run
        "needs": [{"job": f"build:{job.slug}", "artifacts": True}],
        # a kernel that did not build: its cells say so, with the build's error and log
        "when": "always",
        "parallel": {"matrix": [{"CELL": list(job.cells)}]},
        "script": [sh(job.bootstrap_argv("test")), line],
        "artifacts": {"when": "always", "expire_in": "1 week",
                      "paths": [f"{ciplan.RESULTS_DIR}/"]},
    }


def merge_job(plan: Plan) -> dict[str, Any]:
    return {
        "stage": "merge", "image": ciplan.IMAGE, "when": "always", "timeout": "30 minutes",
        "needs": [{"job": f"test:{b.slug}", "artifacts": True} for b in plan.builds],
        # the whole history: the harness revision is known
        "variables": {"GIT_DEPTH": "0"},
        # the merge's exit code is the job's, after the JUnit XML is written (not in an
        # after_script: gitlab-ci-local runs that in a fresh copy of the project)
        "script": ["./bootstrap.sh --role merge",
                   f"{ciplan.HARNESS} merge {ciplan.RESULTS_DIR}/* --tier {plan.tier} "
                   "--out merged && code=0 || code=$?",
                   f"{ciplan.HARNESS} export junit merged -o merged/junit.xml",
                   f"{ciplan.HARNESS} export --bundle merged -o {ciplan.BUNDLE}",
                   'exit "$code"'],
        "artifacts": {"when": "always", "expire_in": "1 month",
                      "paths": ["merged/", ciplan.BUNDLE],
                      "reports": {"junit": "merged/junit.xml"}},
    }


def pipeline(plan: Plan) -> dict[str, Any]:
    pull = {"HARNESS_CACHE_POLICY": "pull"}
    doc: dict[str, Any] = {
        "workflow": {"rules": [
            {"if": '$CI_PIPELINE_SOURCE == "merge_request_event"', "variables": pull},
            {"if": "$CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS", "when": "never"},
            # the default branch's pipelines write the caches and are never interrupted
            {"if": DEFAULT_BRANCH, "variables": {"HARNESS_CACHE_POLICY": "pull-push"},
             "auto_cancel": {"on_new_commit": "none"}},
            {"if": "$CI_COMMIT_BRANCH", "variables": pull}]},
        "stages": ["build", "test", "merge"],
        "variables": {"HARNESS_CACHE": f"$CI_PROJECT_DIR/{CACHE_DIR}",
                      "CCACHE_MAXSIZE": plan.settings.ccache_max,
                      "HARNESS_CACHE_MAX": plan.settings.cache_max},
        "default": {"interruptible": True},
    }
    for b in plan.builds:
        doc[f"build:{b.slug}"] = build_job(b, plan)
    for b in plan.builds:
        doc[f"test:{b.slug}"] = test_job(b, plan)
    doc["merge"] = merge_job(plan)
    return doc


def render(cells: Sequence[Cell], tier: str, settings: Settings | None = None) -> str:
    plan = ciplan.plan(cells, tier, settings or Settings())
    return ciplan.file_text(plan, pipeline(plan), header=HEADER, system="gitlab",
                            path=".gitlab-ci.yml", hosted_limit=HOSTED_LIMIT)
