"""`harness ci github`: a GitHub Actions workflow made from matrix.toml (the plan of
harness/ci/ciplan.py); `harness ci cache-key`: the keys its build jobs restore and save the
kernel store and ccache under; `harness ci minutes`: what one job per cell costs.

The workflow (triggers: a push to main or master, a pull request, by hand; one run per
workflow, tier and ref at a time, a newer push cancelling an older one except on the
default branch, whose every run goes on and saves the caches; the token only reads the
repository in every job, so a fork's pull request runs it whole):
- a build job per distinct kernel, in a `debian:12` container (privileged: the kernel
  tree's code builds in bubblewrap's namespaces; git installed first, so
  the checkout has its history and results.json its harness revision): the build role
  (`bootstrap.sh --role build`, the arch's and toolchain's packages from their data
  files); the kernel store restored under the kernel's exact key and ccache under a
  rolling one (its prefix: the newest earlier one); `harness run --cell C... --build-only`
  of every cell of the kernel, whose exit code is the step's; failures annotated; the
  kernel and test builds exported into the run's directory, uploaded whatever happened as
  the job's one artifact (build-<kernel>-<attempt>); the caches saved on pushes to the
  default branch only, within limits that fit the runner's disk;
- a test job per cell, needing exactly its kernel's build job, run even when that failed:
  the test role (QEMU, no compiler), only its kernel's artifact downloaded, `harness run
  --cell C --prebuilt build/K` (the kernel imported and booted as built; the build's
  error and log when it was not), whose exit code is the step's; failures annotated, a
  summary, the run directory uploaded. /dev/kvm is passed to its container (not
  --privileged) and `--accel auto` boots with KVM where the runner has it, else TCG, the
  reason in results.json;
- a merge job (the merge role: Python only): each cell's latest attempt merged against
  the tier (`harness merge --tier T`, MISSING for a cell no job uploaded), the merge's
  exit code the step's, what only the merge knows annotated, a table of the cells in the
  step summary, the JUnit XML uploaded, and the merged run as one archive a reviewer
  downloads and reproduces (`harness export --bundle`, artifact bundle-<attempt>:
  `harness reproduce harness-run.tar.gz`). Reporting is annotations and summaries, which need
  no write token: nothing in a pull request's context can write.
Every action is pinned by commit, the tag in a comment (harness/ci/actions.toml).
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import target
from harness.base import host, paths
from harness.base.model import CellResult, RunResult, Status
from harness.ci import ciplan
from harness.ci.ciplan import BuildJob, Commented, Plan, Settings, sh
from harness.drivers import shard
from harness.drivers.matrix import Cell
from harness.kernel import build, kconfig, series, sources

CACHE_ROOT = "/var/cache/harness"  # HARNESS_CACHE of every job: the same path in each
HOSTED_LIMIT = 360  # minutes: GitHub-hosted runners stop a job there
ACTIONS = Path(__file__).resolve().parent / "actions.toml"
ANNOTATE_IF = "always() && steps.run.outcome != 'skipped'"
DEFAULT_BRANCH = "github.ref_name == github.event.repository.default_branch"
ON_DEFAULT_PUSH = f"github.event_name == 'push' && {DEFAULT_BRANCH}"
HEADER = ("# Generated from matrix.toml by `{command}`:\n"
          "# do not edit; run it again. tests/unit/test_workflow.py checks that it matches.\n")
GIT_FIRST = {"name": "git, before the checkout (so it has .git: the harness revision)",
             "run": host.apt_install(["git", "ca-certificates"], recommends=False,
                                     update=True).replace(" && ", "\n") + "\n"}

# A re-run of failed jobs keeps the runs of the jobs that passed: artifacts of an earlier
# attempt (run-<cell>-<attempt>). Each cell's latest attempt is merged; none at all is a
# run directory that does not exist, which the merge reports (its cells are MISSING).
LATEST_ATTEMPTS = """\
latest=$(for d in runs/run-*-*; do
  if [ -d "$d" ]; then echo "${d##*-} ${d%-*}"; fi
done | sort -k2,2 -k1,1n \\
  | awk '{ last[$2] = $2 "-" $1 } END { for (c in last) print last[c] }' | sort)
# shellcheck disable=SC2086 # one word per directory, none with a space
set -- $latest
[ $# -gt 0 ] || set -- runs/no-run-was-uploaded
"""


def pins(path: Path = ACTIONS) -> dict[str, tuple[str, str]]:
    """action -> (commit, tag), from the data file."""
    try:
        data = tomllib.loads(path.read_text())["actions"]
        return {str(name): (str(a["sha"]), str(a["tag"])) for name, a in data.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ciplan.CiError(f"{path}: not readable pins: {exc}",
                             fix='[actions."owner/name"] with sha and tag') from None


def uses(action: str, known: Mapping[str, tuple[str, str]]) -> Commented:
    """owner/name[/path] at its pinned commit, the tag in a comment."""
    repo = "/".join(action.split("/")[:2])
    if repo not in known:
        raise ciplan.CiError(f"no pin for {repo} in {ACTIONS}", fix="add its sha and tag")
    sha, tag = known[repo]
    return Commented(text=f"{action}@{sha}", comment=tag)


def _check(settings: Settings) -> None:
    ciplan.check_kvm_runners(
        settings, named=bool(settings.test_runs_on or settings.runs_on),
        why=f"the default {ciplan.DEFAULT_RUNS_ON} is not promised to have it",
        fix="give the test runners' label: --test-runs-on LABEL (repeatable), or --accel "
            "auto (KVM where it works, else TCG, said in results.json)")


def _runs_on(labels: tuple[str, ...]) -> str | list[str]:
    chosen = list(labels) or [ciplan.DEFAULT_RUNS_ON]
    return chosen[0] if len(chosen) == 1 else chosen


def _needs_attempt(job: BuildJob) -> str:
    """The attempt that uploaded the build job's artifact: a re-run of failed test jobs
    keeps the build job (and its outputs) of an earlier attempt."""
    return f"${{{{ needs['build-{job.slug}'].outputs.attempt }}}}"


def build_job(job: BuildJob, plan: Plan, known: Mapping[str, tuple[str, str]]
              ) -> dict[str, Any]:
    cache = "${{ env.HARNESS_CACHE }}"
    key = "${{ steps.key.outputs.store_key }}"
    prefix = "${{ steps.key.outputs.ccache_prefix }}"
    # the tree's prefix, then this job's own key: the jobs of one tree each save theirs
    # (a cache key is written once), and each restores the newest under the prefix
    rolling = f"{prefix}{job.slug}-${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}"
    timeout, _said = plan.build_timeout(job, HOSTED_LIMIT)
    steps: list[dict[str, Any]] = [
        GIT_FIRST,
        {"uses": uses("actions/checkout", known), "with": {"persist-credentials": False}},
        {"name": "bootstrap: the build role (compilers, kernel build tools; no QEMU)",
         "run": sh(job.bootstrap_argv("build"))},
        {"name": "cache keys (the kernel's source, series, configs, toolchain)", "id": "key",
         "run": sh(job.key_argv()) + ' >> "$GITHUB_OUTPUT"'},
        {"name": "restore the kernel store (exact key)", "id": "store",
         "uses": uses("actions/cache/restore", known),
         "with": {"path": f"{cache}/kernels", "key": key}},
        {"name": "restore ccache (the newest under its prefix)",
         "uses": uses("actions/cache/restore", known),
         "with": {"path": f"{cache}/ccache", "key": rolling, "restore-keys": prefix}},
        {"name": f"build the kernel and the tests of {', '.join(job.cells)}; boot nothing",
         "id": "build", "run": sh(job.build_argv())},
        {"name": "annotate failures", "if": "always() && steps.build.outcome != 'skipped'",
         "run": f'{ciplan.HARNESS} ci annotate {job.run_dir} --summary "$GITHUB_STEP_SUMMARY"'},
        {"name": "export the kernel and test builds into the run's directory",
         "run": sh(job.export_argv())},
        {"name": "upload the run and the kernel: this job's one artifact", "if": "always()",
         "uses": uses("actions/upload-artifact", known),
         "with": {"name": f"build-{job.name}-${{{{ github.run_attempt }}}}",
                  "path": job.run_dir, "retention-days": 3, "if-no-files-found": "ignore"}},
        {"name": "save the kernel store (pushes to the default branch, when its key missed)",
         "if": f"{ON_DEFAULT_PUSH} && steps.store.outputs.cache-hit != 'true'",
         "uses": uses("actions/cache/save", known),
         "with": {"path": f"{cache}/kernels", "key": key}},
        {"name": "save ccache (pushes to the default branch)",
         "if": f"!cancelled() && {ON_DEFAULT_PUSH}",
         "uses": uses("actions/cache/save", known),
         "with": {"path": f"{cache}/ccache", "key": rolling}},
    ]
    return {"name": f"build {job.name}: {job.title}",
            "runs-on": _runs_on(plan.settings.runs_on),
            "container": {"image": ciplan.IMAGE, "options": ciplan.BUILD_CONTAINER_OPTIONS},
            "timeout-minutes": timeout,
            "outputs": {"attempt": "${{ github.run_attempt }}"}, "steps": steps}


def test_job(job: BuildJob, plan: Plan, known: Mapping[str, tuple[str, str]]
             ) -> dict[str, Any]:
    run_dir = f"{ciplan.RESULTS_DIR}/${{CELL}}"
    env = {"CELL": "${{ matrix.cell }}"}
    line = plan.test_line(job)
    timeout, _said = plan.test_timeout(job, HOSTED_LIMIT)
    steps: list[dict[str, Any]] = [
        GIT_FIRST,
        {"uses": uses("actions/checkout", known), "with": {"persist-credentials": False}},
        {"name": "bootstrap: the test role (QEMU and what the guest runs; no compiler)",
         "run": sh(job.bootstrap_argv("test"))},
        {"name": "download its kernel's build (the run, and the kernel unless it failed)",
         "uses": uses("actions/download-artifact", known),
         "with": {"name": f"build-{job.name}-{_needs_attempt(job)}", "path": job.run_dir}},
        {"name": "run the cell on the kernel and tests as built", "id": "run", "env": env,
         "run": line},
        {"name": "annotate failures, summary", "if": ANNOTATE_IF, "env": env,
         "run": f'{ciplan.HARNESS} ci annotate "{run_dir}" --summary "$GITHUB_STEP_SUMMARY"'},
        {"name": "upload the run directory", "if": ANNOTATE_IF,
         "uses": uses("actions/upload-artifact", known),
         "with": {"name": "run-${{ matrix.cell }}-${{ github.run_attempt }}",
                  "path": f"{ciplan.RESULTS_DIR}/${{{{ matrix.cell }}}}"}},
    ]
    container: dict[str, Any] = {"image": ciplan.IMAGE}
    if plan.settings.test_options:
        container["options"] = plan.settings.test_options
    return {"name": "test ${{ matrix.cell }}", "needs": f"build-{job.slug}",
            # a kernel that did not build: its cells say so (its error and log)
            "if": "${{ !cancelled() }}",
            "runs-on": _runs_on(plan.settings.test_runs_on or plan.settings.runs_on),
            "container": container, "timeout-minutes": timeout,
            "strategy": {"fail-fast": False, "matrix": {"cell": list(job.cells)}},
            "steps": steps}


def merge_job(plan: Plan, known: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    ok = "always() && steps.merge.outcome != 'skipped'"
    steps: list[dict[str, Any]] = [
        GIT_FIRST,
        # the whole history: the harness revision is known (git describe, rev-parse)
        {"uses": uses("actions/checkout", known),
         "with": {"fetch-depth": 0, "persist-credentials": False}},
        {"name": "bootstrap: the merge role (Python only: merging boots nothing)",
         "run": "./bootstrap.sh --role merge"},
        {"name": "download the cells' runs", "uses": uses("actions/download-artifact", known),
         "with": {"pattern": "run-*", "path": "runs"}},
        {"name": "merge each cell's latest attempt against the tier", "id": "merge",
         "run": LATEST_ATTEMPTS + f'{ciplan.HARNESS} merge "$@" --tier {plan.tier} '
                                  "--out merged\n"},
        {"name": "annotate what only the merge knows, summary of every cell", "if": ok,
         "run": f'{ciplan.HARNESS} ci annotate merged --summary "$GITHUB_STEP_SUMMARY"'},
        {"name": "JUnit XML of the merged run", "if": ok,
         "run": f"{ciplan.HARNESS} export junit merged -o merged/junit.xml"},
        {"name": "upload the merged run", "if": ok,
         "uses": uses("actions/upload-artifact", known),
         "with": {"name": "merged-${{ github.run_attempt }}", "path": "merged"}},
        {"name": "the merged run as one archive a reviewer reproduces (harness reproduce "
                 "FILE)", "if": ok,
         "run": f"{ciplan.HARNESS} export --bundle merged -o {ciplan.BUNDLE}"},
        {"name": "upload the bundle: the run's artifact", "if": ok,
         "uses": uses("actions/upload-artifact", known),
         "with": {"name": "bundle-${{ github.run_attempt }}", "path": ciplan.BUNDLE}},
    ]
    return {"name": f"merge the {plan.tier} tier",
            "needs": [f"test-{b.slug}" for b in plan.builds],
            "if": "${{ !cancelled() }}", "runs-on": ciplan.DEFAULT_RUNS_ON,
            "container": {"image": ciplan.IMAGE}, "timeout-minutes": 30, "steps": steps}


def workflow(plan: Plan) -> dict[str, Any]:
    _check(plan.settings)
    known = pins()
    jobs: dict[str, Any] = {}
    for b in plan.builds:
        jobs[f"build-{b.slug}"] = build_job(b, plan, known)
    for b in plan.builds:
        jobs[f"test-{b.slug}"] = test_job(b, plan, known)
    jobs["merge"] = merge_job(plan, known)
    return {
        "name": f"harness ({plan.tier} tier)",
        # a pull request's commits run once, as the pull request; branches other than
        # main/master only through one
        "on": {"push": {"branches": ["main", "master"]}, "pull_request": {},
               "workflow_dispatch": {}},
        # per workflow and tier; on the default branch one group per run: never cancelled
        "concurrency": {
            "group": f"harness-{plan.tier}-${{{{ {DEFAULT_BRANCH} && github.run_id "
                     "|| github.ref }}",
            "cancel-in-progress": f"${{{{ !({DEFAULT_BRANCH}) }}}}"},
        "permissions": {"contents": "read"},
        "env": {"HARNESS_CACHE": CACHE_ROOT, "CCACHE_MAXSIZE": plan.settings.ccache_max,
                "HARNESS_CACHE_MAX": plan.settings.cache_max},
        "jobs": jobs,
    }


def render(cells: Sequence[Cell], tier: str, settings: Settings | None = None) -> str:
    plan = ciplan.plan(cells, tier, settings or Settings())
    return ciplan.file_text(plan, workflow(plan), header=HEADER, system="github",
                            path=".github/workflows/harness.yml", hosted_limit=HOSTED_LIMIT)


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
    and of the ccache of their trees. Both carry the toolchain as the kernel store's key
    does (build.tools(): the compiler and pahole of each cell's target) and the harness
    code and data that turn the inputs into a kernel (kconfig.py, build.py, the target
    files, pahole.toml): a change to either is another kernel. Not carried: the version of
    a Debian suite's pahole a pahole.toml rule names (resolving it downloads the suite's
    lists): when that suite's pahole moves, a restored store lacks the kernel and it is
    built again."""
    tools = "\n".join(sorted({build.tools(target.select(c.arch, c.toolchain)).ident
                               for c in cells}))
    code = [Path(str(m.__file__)) for m in (kconfig, build, target)]
    logic = b"".join(p.read_bytes() for p in (
        *code, *sorted(target.ARCH_DIR.glob("*.toml")),
        *sorted(target.TOOLCHAIN_DIR.glob("*.toml")), target.PAHOLE_NEEDS))
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
