"""What a CI system runs for a tier of the matrix: the plan both generators render
(`harness ci github`, harness/ci/workflow.py; `harness ci gitlab`, harness/ci/gitlab.py). Pure:
cells and settings in, a plan out; and a small YAML emitter for both.

Build once, fan out (as kernel-patches/vmtest and libbpf/ci do):
- one build job per build tree: the cells whose kernel is built in the same worktree (the
  same kernel spec and config fragments, which name the worktree). It builds each distinct
  kernel of its cells (`shard.kernel_of`: kernel spec, series, configs, extra patches) once,
  one after the other in that worktree, so the variants with other series or extra patches
  build incrementally, and exports each kernel as an archive (`harness cache export`):
  `harness run --cell C --build-only` of its first cell builds the kernel into the kernel
  store and the cell's tests, and boots nothing;
- one test job per cell, which needs its build job, imports its kernel's archive
  (`harness cache import`) and runs `harness run --cell C`: the kernel is in the store, so
  nothing is built (the source is still imported, the series applied and the .config made:
  the store's key is the tree id and the .config);
- one merge job that joins the cells' runs against the tier (`harness merge --tier T`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness import target
from harness.base.errors import HarnessError
from harness.base.model import Accel, Status
from harness.drivers import shard
from harness.drivers.matrix import Cell
from harness.kernel import kconfig

IMAGE = "debian:12"  # bootstrap.sh is Debian-only
DEFAULT_RUNS_ON = "ubuntu-latest"
DEFAULT_CONTAINER_OPTIONS = "--privileged"
BUILD_DIR = "build"  # where a build job's build-only runs go, one directory per kernel
ARCHIVE_DIR = "archives"  # the kernels' archives, one per kernel
RESULTS_DIR = "results"  # a test job's run: results/<cell>
HARNESS = ".venv/bin/harness"  # bootstrap.sh installs it there


class CiError(HarnessError):
    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What the generated file asks of the CI system: the accelerator the guests use, and
    the runners (GitHub labels, or GitLab tags) and container options of the jobs that
    boot them. Empty `runs_on` and `tags`: the CI system's default runners."""

    accel: Accel = Accel.TCG
    runs_on: tuple[str, ...] = ()
    container_options: str = DEFAULT_CONTAINER_OPTIONS
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.accel is Accel.AUTO:
            # a CI file says what it runs on: auto would pick TCG silently where KVM fails
            raise CiError("--accel auto: a CI file names its accelerator",
                          fix="--accel tcg (any runner), or --accel kvm with the runner "
                              "label (--runs-on) or tag (--tag) of runners that have /dev/kvm")


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """One distinct kernel (what `shard.kernel_of` decides) and the cells that test it."""

    kernel: str
    series: tuple[str, ...]
    configs: tuple[str, ...]
    patches: tuple[str, ...]
    cells: tuple[str, ...]  # in the matrix's order

    @property
    def name(self) -> str:
        """The first cell that tests it: names its build-only run and its archive."""
        return self.cells[0]

    @property
    def run_dir(self) -> str:
        return f"{BUILD_DIR}/{self.name}"

    @property
    def archive(self) -> str:
        return f"{ARCHIVE_DIR}/{self.name}.tar"

    def build_argv(self) -> list[str]:
        """The run that builds it into the kernel store, with its first cell's tests, and
        boots nothing."""
        return [HARNESS, "run", "--cell", self.name, "--build-only", "--out", self.run_dir]

    def export_argv(self) -> list[str]:
        return [HARNESS, "cache", "export", "--run", self.run_dir, "-o", self.archive]


@dataclass(frozen=True, kw_only=True)
class BuildJob:
    """The kernels built in one worktree, in the order their first cells appear."""

    kernel: str
    configs: tuple[str, ...]
    kernels: tuple[Kernel, ...]
    target: str = ""  # "@ARCH-TOOLCHAIN" when not x86_64/gcc (each has a tree of its own)

    @property
    def slug(self) -> str:
        """A job id (GitHub: [A-Za-z0-9_-], starting with a letter) that names the tree."""
        text = re.sub(r"[^A-Za-z0-9_-]+", "_",
                      f"{self.kernel}-{kconfig.config_slug(list(self.configs))}{self.target}")
        if len(text) > 60:  # a job id has at most 100 characters; keep it readable
            text = f"{text[:50]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
        return text

    @property
    def title(self) -> str:
        return f"{self.kernel} ({'+'.join(self.configs)}){self.target.replace('@', ' ')}"

    @property
    def cells(self) -> tuple[str, ...]:
        return tuple(c for k in self.kernels for c in k.cells)

    def key_argv(self) -> list[str]:
        """`harness ci cache-key` for the kernels this job builds (one cell of each)."""
        argv = [HARNESS, "ci", "cache-key"]
        for k in self.kernels:
            argv += ["--cell", k.name]
        return argv


@dataclass(frozen=True, kw_only=True)
class Plan:
    tier: str
    builds: tuple[BuildJob, ...]
    settings: Settings

    @property
    def cells(self) -> tuple[str, ...]:
        return tuple(c for b in self.builds for c in b.cells)

    def test_argv(self, cell: str) -> list[str]:
        return [HARNESS, "run", "--cell", cell, "--accel", self.settings.accel.value,
                "--out", f"{RESULTS_DIR}/{cell}"]


def plan(cells: Sequence[Cell], tier: str, settings: Settings = Settings()) -> Plan:
    """Build jobs by worktree (kernel spec and configs), in the order their first cells
    appear; in each, its distinct kernels in the same order."""
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
    trees: dict[tuple[str, tuple[str, ...], str], dict[tuple[Any, ...], list[Cell]]] = {}
    for c in cells:
        slug = target.select(c.arch, c.toolchain).slug
        trees.setdefault((c.kernel, c.configs, slug), {}).setdefault(
            shard.kernel_of(c), []).append(c)
    builds = []
    for (kernel, configs, slug), kernels in trees.items():
        builds.append(BuildJob(kernel=kernel, configs=configs, target=slug, kernels=tuple(
            Kernel(kernel=g[0].kernel, series=g[0].series, configs=g[0].configs,
                   patches=g[0].patches, cells=tuple(c.name for c in g))
            for g in kernels.values())))
    slugs = [b.slug for b in builds]
    if twice := sorted({s for s in slugs if slugs.count(s) > 1}):
        raise CiError(f"two build trees get the job id {', '.join(twice)}",
                      fix="give their kernels or config fragments names that differ in "
                          "more than punctuation")
    return Plan(tier=tier, builds=tuple(builds), settings=settings)


def command(tier: str, settings: Settings, system: str) -> str:
    """The command that writes a CI system's file again (github, gitlab), with its
    settings: what the file's header says."""
    argv = ["harness", "ci", system, "--tier", tier, "--accel", settings.accel.value]
    if system == "github":
        for label in settings.runs_on:
            argv += ["--runs-on", label]
        if settings.container_options != DEFAULT_CONTAINER_OPTIONS:
            argv += ["--container-options", settings.container_options]
    else:
        for tag in settings.tags:
            argv += ["--tag", tag]
    return sh(argv)


def check_kvm_runners(settings: Settings, *, named: bool, why: str, fix: str) -> None:
    """--accel kvm only with runners named that pass /dev/kvm (`named`: the settings name
    some); else why not and what to give."""
    if settings.accel is Accel.KVM and not named:
        raise CiError(f"--accel kvm needs runners with /dev/kvm, and {why}", fix=fix)


def sh(argv: Sequence[str]) -> str:
    return shlex.join(argv)


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
    return json.dumps(str(doc))
