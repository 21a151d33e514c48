"""What a CI system runs for a tier of the matrix: the plan both generators render
(`harness ci github`, harness/ci/workflow.py; `harness ci gitlab`, harness/ci/gitlab.py). Pure:
cells and settings in, a plan out; and a small YAML emitter for both.

Build once, fan out, one kernel per build job (as BPF CI and kernel-patches/vmtest do):
- one build job per distinct kernel (`shard.kernel_of`: kernel spec, series, configs,
  extra patches, arch, toolchain: the kernel store's key). It installs the build role
  (`bootstrap.sh --role build`, and the arch's and toolchain's packages from their data
  files), runs `harness run --cell C... --build-only` for every cell of that kernel (the
  kernel once, each cell's tests; nothing boots) and exports the kernel and the test
  builds as one archive (`harness cache export`), its only artifact besides the run;
- one test job per cell, which needs exactly its kernel's build job and downloads only
  its artifact, and runs `harness run --cell C --prebuilt build/K`, which imports the
  archive and boots the kernel and tests as built: no source, no compiler (the test
  role). A kernel that did not build makes its own cells' test jobs report that error,
  with its log (drivers/prebuilt.py);
- one merge job that joins the cells' runs against the tier (`harness merge --tier T`).

Timeouts come from measured times (harness/ci/timings.toml) with a margin, within the
hosted runners' limits; the cache limits from the runner's free disk.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import target
from harness.base.errors import HarnessError
from harness.base.model import Accel, Status
from harness.drivers import prebuilt, shard
from harness.drivers.matrix import Cell

IMAGE = "debian:12"  # bootstrap.sh is Debian-only
DEFAULT_RUNS_ON = "ubuntu-latest"
KVM_CONTAINER_OPTIONS = "--device /dev/kvm"  # the test jobs' default: KVM, no privileges
# The build jobs': the kernel tree's code builds in bubblewrap (base/sandbox.py), whose
# namespaces and mounts a default container's seccomp and AppArmor profiles refuse.
BUILD_CONTAINER_OPTIONS = "--privileged"
BUILD_DIR = "build"  # a build job's build-only run, and the kernel's archive in it
RESULTS_DIR = "results"  # a test job's run: results/<cell>
HARNESS = ".venv/bin/harness"  # bootstrap.sh installs it there
BUNDLE = "harness-run.tar.gz"  # the merged run as one archive (harness export --bundle)
TIMINGS = Path(__file__).resolve().parent / "timings.toml"
DEFAULT_DISK_GB = 14  # free disk on a GitHub-hosted Linux runner (docs/ci.md)


class CiError(HarnessError):
    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What the generated file asks of the CI system: the accelerator the guests use, the
    runners (GitHub labels or GitLab tags; of the test jobs apart: test_runs_on,
    test_tags) and the test jobs' container options, and the runners' free disk, which
    sizes the caches. Empty labels and tags: the CI system's default runners."""

    accel: Accel = Accel.AUTO
    runs_on: tuple[str, ...] = ()
    test_runs_on: tuple[str, ...] = ()
    container_options: str | None = None  # the test jobs'; None: by accel (see below)
    tags: tuple[str, ...] = ()
    test_tags: tuple[str, ...] = ()
    disk_gb: int = DEFAULT_DISK_GB

    def __post_init__(self) -> None:
        if self.disk_gb < 8:
            raise CiError(f"--runner-disk {self.disk_gb}: a build job needs about 8 GB (the "
                          "source, its worktree and build directory, the caches)",
                          fix="give the runners' free disk in GB, at least 8")

    @property
    def test_options(self) -> str:
        """The test jobs' container options: /dev/kvm passed (not --privileged) unless
        TCG is asked for."""
        if self.container_options is not None:
            return self.container_options
        return "" if self.accel is Accel.TCG else KVM_CONTAINER_OPTIONS

    @property
    def ccache_max(self) -> str:
        """ccache's limit: a fifth of the disk, at most 5G (one kernel's objects take
        about 1G compressed)."""
        return f"{min(5, max(1, self.disk_gb // 5))}G"

    @property
    def cache_max(self) -> str:
        """HARNESS_CACHE_MAX: the rest of the disk less ccache and 2G of room."""
        return f"{self.disk_gb - int(self.ccache_max[:-1]) - 2}G"


@dataclass(frozen=True, kw_only=True)
class Timings:
    """Measured minutes (timings.toml) and how a timeout is made of them."""

    margin: float
    setup: float
    per_extra_cell: float
    build: dict[str, float]
    test: dict[str, float]

    def build_minutes(self, job: BuildJob) -> tuple[float, str]:
        measured = self.build.get(job.timing_key)
        base = measured if measured is not None else self.build["default"]
        extra = self.per_extra_cell * (len(job.cells) - 1)
        said = (f"kernel {base:g} " + ("measured" if measured is not None else "(not measured: "
                                        "the default)")
                + (f" + {len(job.cells) - 1} more cell(s) x {self.per_extra_cell:g}"
                   if extra else ""))
        return base + extra, said

    def test_minutes(self, cell: str) -> tuple[float, str]:
        measured = self.test.get(cell)
        if measured is None:
            return self.test["default"], f"tests {self.test['default']:g} (not measured)"
        return measured, f"tests {measured:g} measured"

    def timeout(self, minutes: float, limit: int) -> int:
        """(set-up + minutes) x margin, rounded up to 5, at least 15, at most `limit`."""
        return min(limit, max(15, 5 * math.ceil((self.setup + minutes) * self.margin / 5)))


def timings(path: Path = TIMINGS) -> Timings:
    try:
        data = tomllib.loads(path.read_text())
        return Timings(margin=float(data["margin"]), setup=float(data["setup"]),
                       per_extra_cell=float(data["per_extra_cell"]),
                       build={str(k): float(v) for k, v in data["build"].items()},
                       test={str(k): float(v) for k, v in data["test"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CiError(f"{path}: not readable timings: {exc}",
                      fix="margin, setup, per_extra_cell, [build] and [test] (with a "
                          "default each), in minutes") from None


@dataclass(frozen=True, kw_only=True)
class BuildJob:
    """One distinct kernel and the cells that test it (in the matrix's order)."""

    kernel: str
    series: tuple[str, ...]
    configs: tuple[str, ...]
    patches: tuple[str, ...]
    arch: str
    toolchain: str
    cells: tuple[str, ...]

    @property
    def name(self) -> str:
        """The first cell that tests it: names its run, its archive and its jobs."""
        return self.cells[0]

    @property
    def slug(self) -> str:
        """Its jobs' id: [A-Za-z0-9_-] (GitHub's job ids), from the name."""
        return re.sub(r"[^A-Za-z0-9_-]", "_", self.name)

    @property
    def run_dir(self) -> str:
        return f"{BUILD_DIR}/{self.name}"

    @property
    def archive(self) -> str:
        """The kernel and the cells' test builds, in the run's directory: the job's one
        artifact is that directory, which `harness run --prebuilt` imports from."""
        return f"{self.run_dir}/{prebuilt.ARCHIVE}"

    @property
    def title(self) -> str:
        pair = target.label(self.arch, self.toolchain)
        extras = [f"series {'+'.join(self.series)}" if self.series else "",
                  f"{len(self.patches)} patch(es)" if self.patches else "",
                  f"config {'+'.join(self.configs)}", pair]
        return f"{self.kernel} " + ", ".join(e for e in extras if e)

    def bootstrap_argv(self, role: str) -> list[str]:
        """bootstrap.sh for this job's role, with the arch's and toolchain's own packages
        (read from their data files) when they are not x86_64/gcc."""
        argv = ["./bootstrap.sh", "--role", role]
        if self.arch != target.DEFAULT_ARCH:
            argv += ["--arch", self.arch]
        if role == "build" and self.toolchain != target.DEFAULT_TOOLCHAIN:
            argv += ["--toolchain", self.toolchain]
        return argv

    def build_argv(self) -> list[str]:
        """Every cell of the kernel, built: the kernel once (the store has it from the
        first on), each cell's tests; nothing boots."""
        argv = [HARNESS, "run"]
        for c in self.cells:
            argv += ["--cell", c]
        return [*argv, "--build-only", "--out", self.run_dir]

    def export_argv(self) -> list[str]:
        return [HARNESS, "cache", "export", "--run", self.run_dir, "-o", self.archive]

    def key_argv(self) -> list[str]:
        """`harness ci cache-key` of this kernel (one cell of it names it)."""
        return [HARNESS, "ci", "cache-key", "--cell", self.name]

    @property
    def timing_key(self) -> str:
        """What its cold build time is measured by: the kernel spec, configs and target
        (a patch or another series on the same tree builds as long)."""
        pair = target.label(self.arch, self.toolchain)
        return f"{self.kernel} {'+'.join(self.configs)}" + (f" {pair}" if pair else "")

    @property
    def tree(self) -> str:
        """The worktree its build uses (kernel spec, configs, target): what its ccache is
        shared by."""
        text = f"{self.kernel}-{'+'.join(self.configs)}-{self.arch}-{self.toolchain}"
        slug = re.sub(r"[^A-Za-z0-9_-]+", "_", text)
        return slug if len(slug) <= 60 else \
            f"{slug[:50]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


@dataclass(frozen=True, kw_only=True)
class Plan:
    tier: str
    builds: tuple[BuildJob, ...]
    settings: Settings
    timings: Timings

    @property
    def cells(self) -> tuple[str, ...]:
        return tuple(c for b in self.builds for c in b.cells)

    def test_line(self, job: BuildJob, variable: str = "CELL") -> str:
        """The test job's `harness run`, its cell the value of a shell variable (a matrix
        leg's), quoted."""
        cell = f'"${variable}"'
        return (f"{HARNESS} run --cell {cell} --prebuilt {shlex.quote(job.run_dir)} "
                f"--accel {self.settings.accel.value} --out {RESULTS_DIR}/{cell}")

    def build_timeout(self, job: BuildJob, limit: int) -> tuple[int, str]:
        minutes, said = self.timings.build_minutes(job)
        return self.timings.timeout(minutes, limit), said

    def test_timeout(self, job: BuildJob, limit: int) -> tuple[int, str]:
        """The longest of its cells'."""
        found = [self.timings.test_minutes(c) for c in job.cells]
        minutes, said = max(found)
        return self.timings.timeout(minutes, limit), said

    def timeout_lines(self, limit: int, build_word: str = "build",
                      test_word: str = "test") -> list[str]:
        """What the header says of each job's timeout and where it comes from."""
        t = self.timings
        lines = [f"Timeouts (minutes): (set-up {t.setup:g} + measured) x {t.margin:g}, "
                 f"rounded up to 5, at least 15, at most {limit} (the hosted runners' "
                 "limit); harness/ci/timings.toml has the measurements."]
        for b in self.builds:
            build, said = self.build_timeout(b, limit)
            test, test_said = self.test_timeout(b, limit)
            lines.append(f"  {build_word} {b.name}: {build} ({said}); "
                         f"{test_word} {b.name}: {test} ({test_said})")
        return lines


def plan(cells: Sequence[Cell], tier: str, settings: Settings = Settings(),
         measured: Timings | None = None) -> Plan:
    """A build job per distinct kernel, in the order their first cells appear."""
    if not cells:
        raise CiError(f"the {tier} tier has no cells", fix="harness matrix --tier full")
    if bad := [c.name for c in cells if not re.fullmatch(r"[A-Za-z0-9._+-]+", c.name)]:
        # names go into shell words, artifact names and job names unquoted by the CI system
        raise CiError(f"cell name(s) {', '.join(bad)}: a CI job needs [A-Za-z0-9._+-]",
                      fix="rename them in matrix.toml")
    if images := [c.name for c in cells if c.kernel.startswith("image:")]:
        raise CiError(f"cell(s) {', '.join(images)} boot a prebuilt image:PATH, a file of "
                      "this machine that a CI runner does not have",
                      fix="give CI cells debian: or git: kernels")
    kernels: dict[tuple[Any, ...], list[Cell]] = {}
    for c in cells:
        target.select(c.arch, c.toolchain)  # an unknown arch or toolchain: said now
        kernels.setdefault(shard.kernel_of(c), []).append(c)
    builds = tuple(BuildJob(kernel=g[0].kernel, series=g[0].series, configs=g[0].configs,
                            patches=g[0].patches, arch=g[0].arch, toolchain=g[0].toolchain,
                            cells=tuple(c.name for c in g)) for g in kernels.values())
    slugs = [b.slug for b in builds]
    if twice := sorted({s for s in slugs if slugs.count(s) > 1}):
        raise CiError(f"two kernels get the job id {', '.join(twice)}",
                      fix="give their first cells names that differ in more than "
                          "punctuation")
    return Plan(tier=tier, builds=builds, settings=settings,
                timings=measured or timings())


def command(tier: str, settings: Settings, what: str) -> str:
    """The command that writes a CI system's file again (github, gitlab), with its
    settings: what the file's header says."""
    argv = ["harness", "ci", what, "--tier", tier, "--accel", settings.accel.value]
    if what == "github":
        for label in settings.runs_on:
            argv += ["--runs-on", label]
        for label in settings.test_runs_on:
            argv += ["--test-runs-on", label]
        if settings.container_options is not None:
            argv += ["--container-options", settings.container_options]
    else:
        for tag in settings.tags:
            argv += ["--tag", tag]
        for tag in settings.test_tags:
            argv += ["--test-tag", tag]
    if settings.disk_gb != DEFAULT_DISK_GB:
        argv += ["--runner-disk", str(settings.disk_gb)]
    return sh(argv)


def file_text(plan: Plan, doc: Any, *, header: str, system: str, path: str,
              hosted_limit: int) -> str:
    """A generated CI file: the header naming the command that writes it again, the jobs'
    timeouts and the cache limits as comments, then the document."""
    settings = plan.settings
    limits = (f"# Caches: ccache at most {settings.ccache_max}, the harness cache "
              f"{settings.cache_max} (runners with {settings.disk_gb} GB free: "
              "--runner-disk).\n")
    return (header.format(command=command(plan.tier, settings, system) + f" -o {path}")
            + "".join(f"# {line}\n" for line in plan.timeout_lines(hosted_limit)) + limits
            + to_yaml(doc) + "\n")


def check_kvm_runners(settings: Settings, *, named: bool, why: str, fix: str) -> None:
    """--accel kvm only with runners named that pass /dev/kvm (`named`: the settings name
    some); else why not and what to give."""
    if settings.accel is Accel.KVM and not named:
        raise CiError(f"--accel kvm needs runners with /dev/kvm, and {why}", fix=fix)


def sh(argv: Sequence[str]) -> str:
    return shlex.join(argv)


@dataclass(frozen=True, kw_only=True)
class Commented:
    """A string with a comment after it on its line (`uses: "a@SHA"  # v4.3.0`)."""

    text: str
    comment: str


def to_yaml(doc: Any, indent: int = 0) -> str:
    """A small YAML emitter: strings double-quoted (JSON escapes are YAML's), block
    scalars for the multi-line ones."""
    pad = "  " * indent
    if isinstance(doc, dict):
        if not doc:
            return "{}"
        out = []
        for k, v in doc.items():
            key = json.dumps(str(k)) if not re.fullmatch(r"[A-Za-z_][\w-]*", str(k)) else k
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{key}:\n{to_yaml(v, indent + 1)}")
            elif isinstance(v, str) and "\n" in v:
                body = "\n".join(f"{pad}  {line}" if line else "" for line in v.splitlines())
                out.append(f"{pad}{key}: |\n{body}")
            else:
                out.append(f"{pad}{key}: {to_yaml(v)}")
        return "\n".join(out)
    if isinstance(doc, list):
        if not doc:
            return "[]"
        out = []
        for v in doc:
            text = to_yaml(v, indent + 1)
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}- {text.lstrip()}")
            else:
                out.append(f"{pad}- {text}")
        return "\n".join(out)
    if isinstance(doc, bool):
        return "true" if doc else "false"
    if isinstance(doc, (int, float)):
        return str(doc)
    if isinstance(doc, Commented):
        return f"{json.dumps(doc.text)}  # {doc.comment}"
    return json.dumps(str(doc))
