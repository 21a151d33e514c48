"""The committed GitLab pipeline (the ci tier), executed by an engine: gitlab-ci-local with
its shell executor and artifact isolation (each job gets only the artifacts of the jobs it
needs), in a scratch clone of this repository whose bootstrap.sh is a stub that records
its role and whose `harness run` is tests/fakes/ci/harness (the kernel build and the boot
replaced by stubs that write real-shaped artifacts: a stored kernel exported by the real
`harness cache export`, imported by the real `harness cache import`); the merge is the
real `harness merge`. One kernel's build fails and one test job dies before uploading."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.helpers import citools

REPO = Path(__file__).resolve().parents[2]
STUB = REPO / "tests" / "fakes" / "ci" / "harness"
FAILING = "6.12"  # its kernel does not build: its four cells (6.12, -faults, -memcg-disabled, ...)
VANISHING = "6.12-memcg-broken"  # its test job dies before writing anything

BOOTSTRAP = """#!/bin/sh
# the gitlab-ci-local test's stand-in: records the role; the harness is the stub
set -eu
echo "$*" >> bootstrap-roles.txt
mkdir -p .venv/bin
cp tests/fakes/ci/harness .venv/bin/harness
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    try:
        tools = citools.ensure()
    except citools.ToolError as exc:
        pytest.fail(str(exc))
    root = tmp_path_factory.mktemp("engine")
    project = root / "project"
    subprocess.run(["git", "clone", "-q", str(REPO), str(project)], check=True)
    shutil.copyfile(REPO / ".gitlab-ci.yml", project / ".gitlab-ci.yml")
    (project / "tests" / "fakes" / "ci").mkdir(parents=True, exist_ok=True)
    shutil.copy2(STUB, project / "tests" / "fakes" / "ci" / "harness")  # executable
    (project / "bootstrap.sh").write_text(BOOTSTRAP)
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "--allow-empty", "-m", "stubs")
    env = {**tools.env(), "STUB_REAL_PYTHON": sys.executable}
    env.pop("HARNESS_CACHE", None)
    caches = root / "caches"
    builds_before = Path("/builds").exists()
    res = subprocess.run(
        [str(tools.node), str(tools.gitlab_ci_local), "--force-shell-executor",
         "--shell-isolation", "--no-color", "--home", str(root / "home"), "--concurrency", "4",
         # the jobs' caches and stub kernels here, not under /builds
         "--variable", f"HARNESS_CACHE={caches}",
         "--variable", f"STUB_REAL_PYTHON={sys.executable}",
         "--variable", f"STUB_FAIL_BUILD={FAILING}", "--variable", f"STUB_VANISH={VANISHING}"],
        cwd=project, env=env, capture_output=True, text=True, timeout=900)
    log = res.stdout + res.stderr
    (root / "gitlab-ci-local.log").write_text(log)
    # what each job left: its exported artifacts (the build directories are reused)
    builds = project / ".gitlab-ci-local" / "artifacts"
    return {"log": log, "code": res.returncode, "project": project, "builds": builds,
            "wrote_builds": Path("/builds").exists() and not builds_before,
            "doc": YAML(typ="safe").load((REPO / ".gitlab-ci.yml").read_text())}


def _job_dirs(run: dict[str, Any]) -> list[Path]:
    return sorted(d for d in run["builds"].iterdir() if d.is_dir())


def _merged(run: dict[str, Any]) -> dict[str, Any]:
    found = [d / "merged" / "results.json" for d in _job_dirs(run)
             if (d / "merged" / "results.json").is_file()]
    assert len(found) == 1, run["log"][-3000:]
    doc: dict[str, Any] = json.loads(found[0].read_text())
    return doc


def test_a_failed_build_turns_exactly_its_cells_red_and_the_merge_runs(
        pipeline_run: dict[str, Any]) -> None:
    doc = _merged(pipeline_run)
    by = {c["cell"]: c["status"] for c in doc["cells"]}
    planned = [c for job in pipeline_run["doc"].values() if isinstance(job, dict)
               for leg in job.get("parallel", {}).get("matrix", []) for c in leg["CELL"]]
    assert sorted(by) == sorted(planned)
    [failing] = [job["parallel"]["matrix"][0]["CELL"] for name, job in
                 pipeline_run["doc"].items() if name == f"test:{FAILING.replace('.', '_')}"]
    assert len(failing) == 4  # every cell of that kernel, and no other, is red
    assert {c: by.pop(c) for c in failing} == dict.fromkeys(failing, "BUILD_ERROR")
    assert by.pop(VANISHING) == "MISSING"  # its job uploaded nothing
    assert set(by.values()) == {"PASS"}  # every other cell's result, in the merged run
    assert doc["exit_code"] == 2 and doc["missing"] == [VANISHING]
    assert any(line.strip().startswith("FAIL") and "merge" in line
               for line in pipeline_run["log"].splitlines())  # the merge's exit code


def test_each_test_job_receives_exactly_its_kernels_artifact(
        pipeline_run: dict[str, Any]) -> None:
    received: dict[str, dict[str, int]] = {}
    for d in _job_dirs(pipeline_run):
        for f in (d / "results").glob("*/*/received.json"):
            received[f.parent.name] = json.loads(f.read_text())
    kernel_of = {c: job["needs"][0]["job"].removeprefix("build:")
                 for job in pipeline_run["doc"].values() if isinstance(job, dict)
                 and job.get("stage") == "test" for c in job["parallel"]["matrix"][0]["CELL"]}
    assert set(received) == set(kernel_of) - {VANISHING}
    for cell, files in received.items():
        kernels = {Path(p).parts[1] for p in files}  # build/<kernel>/...
        assert len(kernels) == 1, (cell, files)
        [kernel] = kernels
        assert kernel.replace(".", "_") == kernel_of[cell]
        tars = [p for p in files if p.endswith("/kernel.tar")]
        if kernel == FAILING:
            assert tars == [] and f"build/{kernel}/{cell}/build.log" in files
            continue
        [tar] = tars
        assert files[tar] > 4096 * len(f"kernel {kernel}\n")  # the stub's image, exported
        [exported] = pipeline_run["builds"].glob(f"build*/{tar}")  # its build job's
        assert exported.stat().st_size == files[tar]
        with tarfile.open(exported) as t:
            names = t.getnames()
        assert f"kernels/stub-{kernel}/bzImage" in names
        assert not [n for n in names if n.startswith("kernels/")
                    and not n.startswith(f"kernels/stub-{kernel}")]


def test_each_job_bootstraps_its_own_role(pipeline_run: dict[str, Any]) -> None:
    """The stub bootstrap prints its arguments as the job's first output line."""
    roles: dict[str, str] = {}
    for line in pipeline_run["log"].splitlines():
        if "$ ./bootstrap.sh" in line:
            job = line.split("$ ./bootstrap.sh")[0].strip()
            roles[job.split(":")[0]] = line.split("$ ./bootstrap.sh")[1].strip()
    assert roles == {"build": "--role build", "test": "--role test", "merge": "--role merge"}


def test_nothing_is_written_under_builds(pipeline_run: dict[str, Any]) -> None:
    """gitlab-ci-local's CI_PROJECT_DIR is /builds/...: the caches go to HARNESS_CACHE."""
    assert pipeline_run["wrote_builds"] is False
    assert (pipeline_run["project"].parent / "caches" / "kernels").is_dir()


@pytest.mark.parametrize("tier", ["default", "ci", "full"])
def test_every_tiers_pipeline_is_a_valid_job_graph_for_the_engine(
        tier: str, tmp_path: Path) -> None:
    """gitlab-ci-local parses each tier's pipeline, validates it against GitLab's schema
    and checks that every job a job needs exists and runs under the same rules."""
    from harness.ci import gitlab
    from harness.drivers import matrix
    from harness.drivers.matrix import Tier

    tools = citools.ensure()
    project = tmp_path / "p"
    project.mkdir()
    cells = matrix.select(matrix.load(), Tier(tier))
    (project / ".gitlab-ci.yml").write_text(gitlab.render(cells, tier))
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "pipeline")
    def engine(*args: str) -> str:
        res = subprocess.run([str(tools.node), str(tools.gitlab_ci_local), *args, "--home",
                              str(tmp_path / "home")], cwd=project, env=tools.env(),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return res.stdout + res.stderr

    assert "All job dependencies are valid" in engine("--validate-dependency-chain")
    listed = _json_list(engine("--list-json"))
    names = {j["name"] for j in listed}
    assert sum(1 for n in names if n.startswith("build:")) == len(_kernels(cells))
    assert sum(1 for n in names if n.startswith("test:")) == len(cells)  # one per cell
    assert "merge" in names


def _json_list(text: str) -> list[dict[str, Any]]:
    """The JSON array --list-json prints after its notes on stderr."""
    start = next(i for i, line in enumerate(text.splitlines(keepends=True))
                 if line.rstrip() == "[")
    text = "".join(text.splitlines(keepends=True)[start:])
    found: list[dict[str, Any]] = json.JSONDecoder().raw_decode(text)[0]
    return found


def _kernels(cells: list[Any]) -> set[Any]:
    from harness.drivers import shard

    return {shard.kernel_of(c) for c in cells}
