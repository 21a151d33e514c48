"""`harness ci github`: a GitHub Actions workflow made from matrix.toml (the plan of
harness/ci/ciplan.py); `harness ci cache-key`: the keys its build jobs restore and save the
kernel store and ccache under; `harness ci minutes`: what one job per cell costs.

The workflow (triggers: a push to main or master, a pull request, by hand; one run per
ref at a time, a newer push cancelling the older run; the token may only read the
repository, except in the job that posts the JUnit report):
- a build job per build tree, in a `debian:12` container: ./bootstrap.sh; the cache keys;
  the kernel store restored under its exact key and ccache under a rolling one (restored
  by its prefix: the newest earlier one); each kernel built, with its first cell's tests,
  by `harness run --cell C --build-only` (nothing boots), whose exit code is the step's;
  failures annotated; each kernel exported (`harness cache export`) and uploaded as an
  artifact named with the run attempt; the caches saved on pushes only;
- a test job per cell: ./bootstrap.sh, its kernel's archive downloaded and imported,
  `harness run --cell C` (the kernel comes from the store), whose exit code is the step's;
  then, whatever happened, failures annotated (`harness ci annotate`), a summary in the
  step summary, the run directory uploaded;
- a merge job, Python only (a venv with the harness, no bootstrap): each cell's latest
  attempt merged against the tier (`harness merge --tier T`, MISSING for a cell no job
  uploaded), the merge's exit code the step's, what only the merge knows annotated, the
  JUnit XML written;
- a report job, the only one allowed to write checks and pull requests: the JUnit report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import target
from harness.base import paths
from harness.base.model import CellResult, RunResult, Status
from harness.ci import ciplan
from harness.ci.ciplan import BuildJob, Plan, Settings, sh
from harness.drivers import shard
from harness.drivers.matrix import Cell
from harness.kernel import build, kconfig, series, sources

CACHE_ROOT = "/var/cache/harness"  # HARNESS_CACHE of every job: the same path in each
ANNOTATE_IF = "always() && steps.run.outcome != 'skipped'"
HEADER = ("# Generated from matrix.toml by `{command}`:\n"
          "# do not edit; run it again. tests/unit/test_workflow.py checks that it matches.\n")

# A re-run of failed jobs keeps the runs of the jobs that passed: artifacts of an earlier
# attempt (run-<cell>-<attempt>). Each cell's latest attempt is merged; none at all is a
# run directory that does not exist, which the merge reports (its cells are MISSING).
LATEST_ATTEMPTS = """\
latest=$(for d in runs/run-*-*; do
  if [ -d "$d" ]; then echo "${d##*-} ${d%-*}"; fi
done | sort -k2,2 -k1,1n \\
  | awk '{ last[$2] = $2 "-" $1 } END { for (c in last) print last[c] }' | sort)
set -- $latest
[ $# -gt 0 ] || set -- runs/no-run-was-uploaded
"""


def _check(settings: Settings) -> None:
    ciplan.check_kvm_runners(settings, named=bool(settings.runs_on),
                             why=f"the default {ciplan.DEFAULT_RUNS_ON} is not known to be one",
                             fix="give their label: --runs-on LABEL (repeatable), or "
                                 "--accel tcg")


def _runs_on(settings: Settings) -> str | list[str]:
    labels = list(settings.runs_on) or [ciplan.DEFAULT_RUNS_ON]
    return labels[0] if len(labels) == 1 else labels


def _container(settings: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {"image": ciplan.IMAGE}
    if settings.container_options:
        out["options"] = settings.container_options
    return out


def _needs_attempt(job: BuildJob) -> str:
    """The attempt that uploaded the build job's archives: a re-run of failed test jobs
    keeps the build job (and its outputs) of an earlier attempt."""
    return f"${{{{ needs['build-{job.slug}'].outputs.attempt }}}}"


def build_job(job: BuildJob, settings: Settings) -> dict[str, Any]:
    cache = "${{ env.HARNESS_CACHE }}"
    key = "${{ steps.key.outputs.store_key }}"
    prefix = "${{ steps.key.outputs.ccache_prefix }}"
    steps: list[dict[str, Any]] = [
        {"uses": "actions/checkout@v4"},
        {"name": "bootstrap (Debian packages, the venv, the harness)", "run": "./bootstrap.sh"},
        {"name": "cache keys (the kernels' sources, series, configs, toolchain)", "id": "key",
         "run": sh(job.key_argv()) + ' >> "$GITHUB_OUTPUT"'},
        {"name": "restore the kernel store (exact key)", "id": "store",
         "uses": "actions/cache/restore@v4",
         "with": {"path": f"{cache}/kernels", "key": key}},
        {"name": "restore ccache (the newest under its prefix)",
         "uses": "actions/cache/restore@v4",
         "with": {"path": f"{cache}/ccache",
                  "key": f"{prefix}${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}",
                  "restore-keys": prefix}},
    ]
    for k in job.kernels:
        steps.append({"name": f"build {k.name}'s kernel, boot it once (cells: "
                              f"{', '.join(k.cells)})",
                      "run": sh(k.build_argv())})
    steps += [
        {"name": "annotate failures", "if": "always()",
         "run": f"set -- {ciplan.BUILD_DIR}/*/results.json\n"
                '[ -e "$1" ] || exit 0  # no build wrote results: the failed step says why\n'
                f'{ciplan.HARNESS} ci annotate "$@" --summary "$GITHUB_STEP_SUMMARY"\n'},
        {"name": "export each kernel for its test jobs",
         "run": "".join(sh(k.export_argv()) + "\n" for k in job.kernels)},
    ]
    for k in job.kernels:
        steps.append({"name": f"upload {k.name}'s kernel", "uses": "actions/upload-artifact@v4",
                      "with": {"name": f"kernel-{k.name}-${{{{ github.run_attempt }}}}",
                               "path": k.archive, "retention-days": 3}})
    steps += [
        {"name": "upload the build runs (logs)", "if": "always()",
         "uses": "actions/upload-artifact@v4",
         "with": {"name": f"build-{job.slug}-${{{{ github.run_attempt }}}}",
                  "path": ciplan.BUILD_DIR, "if-no-files-found": "ignore"}},
        {"name": "save the kernel store (pushes only, when its key missed)",
         "if": "github.event_name == 'push' && steps.store.outputs.cache-hit != 'true'",
         "uses": "actions/cache/save@v4",
         "with": {"path": f"{cache}/kernels", "key": key}},
        {"name": "save ccache (pushes only)",
         "if": "!cancelled() && github.event_name == 'push'",
         "uses": "actions/cache/save@v4",
         "with": {"path": f"{cache}/ccache",
                  "key": f"{prefix}${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}"}},
    ]
    return {"name": f"build {job.title}: {len(job.kernels)} kernel(s)",
            "runs-on": _runs_on(settings), "container": _container(settings),
            "timeout-minutes": min(360, 60 + 20 * len(job.kernels)),
            "outputs": {"attempt": "${{ github.run_attempt }}"}, "steps": steps}


def test_job(job: BuildJob, plan: Plan) -> dict[str, Any]:
    cell = "${{ matrix.cell }}"
    run_dir = f"{ciplan.RESULTS_DIR}/{cell}"
    steps: list[dict[str, Any]] = [
        {"uses": "actions/checkout@v4"},
        {"name": "bootstrap (Debian packages, the venv, the harness)", "run": "./bootstrap.sh"},
        {"name": "download the cell's kernel", "uses": "actions/download-artifact@v4",
         "with": {"name": f"kernel-${{{{ matrix.kernel }}}}-{_needs_attempt(job)}",
                  "path": ciplan.ARCHIVE_DIR}},
        {"name": "import it into the kernel store",
         "run": f'{ciplan.HARNESS} cache import '
                f'"{ciplan.ARCHIVE_DIR}/${{{{ matrix.kernel }}}}.tar"'},
        {"name": "run the cell", "id": "run",
         "run": f'{ciplan.HARNESS} run --cell "{cell}" --accel {plan.settings.accel.value} '
                f'--out "{run_dir}"'},
        {"name": "annotate failures, summary", "if": ANNOTATE_IF,
         "run": f'{ciplan.HARNESS} ci annotate "{run_dir}" --summary "$GITHUB_STEP_SUMMARY"'},
        {"name": "upload the run directory", "if": ANNOTATE_IF,
         "uses": "actions/upload-artifact@v4",
         "with": {"name": f"run-{cell}-${{{{ github.run_attempt }}}}", "path": run_dir}},
    ]
    return {"name": f"test {cell}", "needs": f"build-{job.slug}",
            "runs-on": _runs_on(plan.settings), "container": _container(plan.settings),
            "timeout-minutes": 120,
            "strategy": {"fail-fast": False, "matrix": {"include": [
                {"cell": c, "kernel": k.name} for k in job.kernels for c in k.cells]}},
            "steps": steps}


def merge_job(plan: Plan) -> dict[str, Any]:
    ok = "always() && steps.merge.outcome != 'skipped'"
    steps: list[dict[str, Any]] = [
        # the whole history: the harness revision is known (git describe, rev-parse)
        {"uses": "actions/checkout@v4", "with": {"fetch-depth": 0}},
        {"uses": "actions/setup-python@v5", "with": {"python-version": "3.11"}},
        {"name": "install the harness (Python only: merging boots nothing)",
         "run": "python -m venv .venv\n.venv/bin/pip install -q -e .\n"},
        {"name": "download the cells' runs", "uses": "actions/download-artifact@v4",
         "with": {"pattern": "run-*", "path": "runs"}},
        {"name": "merge each cell's latest attempt against the tier", "id": "merge",
         "run": LATEST_ATTEMPTS + f'{ciplan.HARNESS} merge "$@" --tier {plan.tier} '
                                  "--out merged\n"},
        {"name": "annotate what only the merge knows, summary", "if": ok,
         "run": f'{ciplan.HARNESS} ci annotate merged --summary "$GITHUB_STEP_SUMMARY"'},
        {"name": "JUnit XML of the merged run", "if": ok,
         "run": f"{ciplan.HARNESS} export junit merged -o merged/junit.xml"},
        {"name": "upload the merged run", "if": ok, "uses": "actions/upload-artifact@v4",
         "with": {"name": "merged-${{ github.run_attempt }}", "path": "merged"}},
    ]
    return {"name": f"merge the {plan.tier} tier", "needs": [f"test-{b.slug}" for b in plan.builds],
            "if": "!cancelled()", "runs-on": ciplan.DEFAULT_RUNS_ON, "timeout-minutes": 30,
            "steps": steps}


def report_job() -> dict[str, Any]:
    return {"name": "JUnit report", "needs": "merge", "if": "!cancelled()",
            "runs-on": ciplan.DEFAULT_RUNS_ON,
            "permissions": {"contents": "read", "checks": "write", "pull-requests": "write"},
            "steps": [
                {"uses": "actions/download-artifact@v4",
                 "with": {"name": "merged-${{ github.run_attempt }}", "path": "merged"}},
                {"uses": "mikepenz/action-junit-report@v4",
                 "with": {"report_paths": "merged/junit.xml"}}]}


def workflow(plan: Plan) -> dict[str, Any]:
    _check(plan.settings)
    jobs: dict[str, Any] = {}
    for b in plan.builds:
        jobs[f"build-{b.slug}"] = build_job(b, plan.settings)
    for b in plan.builds:
        jobs[f"test-{b.slug}"] = test_job(b, plan)
    jobs["merge"] = merge_job(plan)
    jobs["report"] = report_job()
    return {
        "name": f"harness ({plan.tier} tier)",
        # a pull request's commits run once, as the pull request; branches other than
        # main/master only through one
        "on": {"push": {"branches": ["main", "master"]}, "pull_request": {},
               "workflow_dispatch": {}},
        "concurrency": {"group": "harness-${{ github.ref }}", "cancel-in-progress": True},
        "permissions": {"contents": "read"},
        "env": {"HARNESS_CACHE": CACHE_ROOT},
        "jobs": jobs,
    }


def render(cells: Sequence[Cell], tier: str, settings: Settings | None = None) -> str:
    settings = settings or Settings()
    plan = ciplan.plan(cells, tier, settings)
    return (HEADER.format(command=ciplan.command(tier, settings, "github")
                          + " -o .github/workflows/harness.yml")
            + ciplan.to_yaml(workflow(plan)) + "\n")


def _source_version(kernel: str) -> str:
    """What the kernel's source is: the Debian package version, the git tree id, the
    tarball's digest (each source kind says)."""
    return sources.version_of(sources.parse_spec(kernel))


@dataclass(frozen=True, kw_only=True)
class CacheKeys:
    store: str  # the kernel store of these kernels: exact, nothing else restores it
    ccache_prefix: str  # ccache of their trees: restored by prefix, saved under prefix+run


def kernel_inputs(cell: Cell) -> list[tuple[str, bytes]]:
    """What decides the kernel a cell builds, before any tree exists: the inputs of the
    kernel store's key (build.kernel_key: the tree id and the .config, from the source, the
    series, the patches and the fragments through kconfig.py), named."""
    spec = sources.parse_spec(cell.kernel)
    found: list[tuple[str, bytes]] = [("source", f"{cell.kernel} {_source_version(cell.kernel)}"
                                      .encode())]
    for s in cell.series:
        for p in series.load(s, series.base_name(spec)).patches:
            found.append((f"series {s}: {p.path.name}", p.path.read_bytes()))
    for extra in cell.patches:
        path = Path(extra) if Path(extra).is_absolute() else paths.repo_root() / extra
        found.append((f"patch {extra}", path.read_bytes()))
    for name in cell.configs:
        # a tree's own fragment (tree:PATH) is part of the source version
        found.append((f"config {name}", name.encode() if kconfig.is_tree_fragment(name)
                      else kconfig.checked_fragment(name).read_bytes()))
    return found


def cache_key(cells: Sequence[Cell]) -> CacheKeys:
    """The keys of the kernels these cells build (each distinct kernel once, in any order)
    and of the ccache of their trees. Both carry the toolchain exactly as the kernel store's
    key does (build.tools(): the compiler and pahole of each cell's target) and the harness
    code that turns the inputs into a kernel (kconfig.py, build.py): a change to either is
    another kernel."""
    tools = "\n".join(sorted({build.tools(target.select(c.arch, c.toolchain)).ident
                               for c in cells}))
    code = [Path(str(m.__file__)) for m in (kconfig, build, target)]
    logic = b"".join(p.read_bytes() for p in (
        *code, *sorted(target.ARCH_DIR.glob("*.toml")),
        *sorted(target.TOOLCHAIN_DIR.glob("*.toml"))))
    kernels = {shard.kernel_of(c): c for c in cells}
    store = hashlib.sha256(tools.encode() + b"\0" + logic)
    for k in sorted(kernels):
        for name, data in kernel_inputs(kernels[k]):
            store.update(f"{name}\0{len(data)}\0".encode() + data)
    trees = sorted({f"{c.kernel} {'+'.join(c.configs)}"
                    + (f" {label}" if (label := target.label(c.arch, c.toolchain)) else "")
                    for c in cells})
    ccache = hashlib.sha256("\n".join([tools, *trees]).encode()).hexdigest()[:16]
    return CacheKeys(store=f"harness-kernels-{store.hexdigest()[:24]}",
                     ccache_prefix=f"harness-ccache-{ccache}-")


@dataclass(frozen=True, kw_only=True)
class JobCost:
    cell: str
    kernel: str  # kernel spec and configs: cells with the same one build the same way
    build_s: float | None  # its kernel's build from a cold ccache; None: not measured
    rest_s: float | None  # every other stage (source, series, config, selftests, tests)

    def first_s(self, overhead_s: float) -> float | None:
        """A job on a runner with nothing cached: set-up, the cold build, the rest."""
        if self.build_s is None or self.rest_s is None:
            return None
        return overhead_s + self.build_s + self.rest_s

    def repeat_s(self, overhead_s: float) -> float | None:
        """The same job again with its cache restored: the kernel comes from the store."""
        return None if self.rest_s is None else overhead_s + self.rest_s


def _ran_to_the_end(cell: CellResult) -> bool:
    # MISSING: a merged run's placeholder for a cell no shard holds; nothing was measured
    return not cell.status.is_stage_error and cell.status not in (Status.INTERRUPTED,
                                                                    Status.MISSING)


def job_costs(cells: Sequence[Cell], runs: Sequence[RunResult],
              build_seconds: Mapping[str, float]) -> list[JobCost]:
    """What each cell's job costs, from earlier runs (the latest run holding a cell wins)
    and the build times the kernel store recorded (image path -> seconds). A kernel some
    run built incrementally (a sibling's build directory already there) took less than a
    runner building it alone, so a kernel's cold build is the longest of its group's."""
    measured: dict[str, CellResult] = {}
    for run in runs:
        # A cell stopped by a stage error or a signal did not run its whole job: its
        # durations say nothing of the job's cost (an earlier complete run still counts).
        measured.update({c.cell: c for c in run.cells if _ran_to_the_end(c)})
    group = {c.name: f"{c.kernel} {'+'.join(c.configs)}" for c in cells}
    built: dict[str, float] = {}
    for c in cells:
        seconds = build_seconds.get(measured[c.name].image if c.name in measured else "")
        if seconds is not None:
            built[group[c.name]] = max(built.get(group[c.name], 0.0), seconds)
    costs = []
    for c in cells:
        m = measured.get(c.name)
        rest = None if m is None else sum(s.duration_s for s in m.stages
                                          if s.stage != "build")
        costs.append(JobCost(cell=c.name, kernel=group[c.name], build_s=built.get(group[c.name]),
                             rest_s=rest))
    return costs


def render_minutes(costs: Sequence[JobCost], overhead_s: float) -> str:
    def minutes(s: float | None) -> str:
        return "not measured" if s is None else f"{s / 60:.1f}"

    lines = [f"{'cell':<30} {'kernel build':>12} {'rest':>6} {'first run':>12} "
             f"{'repeat':>12}  (minutes; set-up {overhead_s / 60:.1f} per job)"]
    for c in costs:
        lines.append(f"{c.cell:<30} {minutes(c.build_s):>12} {minutes(c.rest_s):>6} "
                     f"{minutes(c.first_s(overhead_s)):>12} {minutes(c.repeat_s(overhead_s)):>12}")
    first = [c.first_s(overhead_s) for c in costs]
    repeat = [c.repeat_s(overhead_s) for c in costs]
    missing = [c.cell for c in costs if c.first_s(overhead_s) is None]
    lines.append(f"{len(costs)} jobs: first run {sum(x or 0 for x in first) / 60:.0f} "
                 f"runner-minutes, repeat run {sum(x or 0 for x in repeat) / 60:.0f}"
                 + (f"; not counted (no measurement: run them first): {', '.join(missing)}"
                    if missing else ""))
    return "\n".join(lines)
