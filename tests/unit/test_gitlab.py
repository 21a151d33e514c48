"""The GitLab CI pipeline: generated from matrix.toml, committed, valid against the
gitlab-ci schema that check-jsonschema vendors; the same plan as the GitHub workflow (each
kernel built once, a test job per cell, a light merge); the cache inside the project."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import check_jsonschema
import jsonschema
import pytest
from ruamel.yaml import YAML

from harness import cli
from harness.base.model import Accel
from harness.ci import ciplan, gitlab
from harness.drivers import matrix, shard
from harness.drivers.matrix import Tier
from tests.helpers.cijobs import builds, harness_runs

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / ".gitlab-ci.yml"
SCHEMA = (Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor"
          / "gitlab-ci.json")
KEYWORDS = {"workflow", "stages", "variables", "default"}


def _load(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = YAML(typ="safe").load(text)
    return doc


def _jobs(doc: dict[str, Any]) -> dict[str, Any]:
    return {name: job for name, job in doc.items() if name not in KEYWORDS}


def _validate(doc: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(doc)


def test_the_committed_pipeline_matches_the_matrix() -> None:
    assert COMMITTED.read_text() == gitlab.render(
        matrix.select(matrix.load(), Tier.CI), "ci"), "run: harness ci gitlab -o .gitlab-ci.yml"


def test_it_is_a_valid_gitlab_pipeline() -> None:
    _validate(_load(COMMITTED.read_text()))


def test_a_broken_pipeline_fails_the_schema() -> None:
    doc = _load(COMMITTED.read_text())
    doc["merge"]["when"] = "sometimes"
    with pytest.raises(jsonschema.ValidationError):
        _validate(doc)


@pytest.mark.parametrize("tier", [Tier.CI, Tier.FULL])
def test_one_build_job_per_kernel_and_each_test_job_needs_exactly_its_own(tier: Tier) -> None:
    cells = matrix.select(matrix.load(), tier)
    doc = _load(gitlab.render(cells, tier.value))
    _validate(doc)
    jobs = _jobs(doc)
    built = {name: builds("\n".join(job["script"])) for name, job in jobs.items()}
    building = {name: k for name, k in built.items() if k}
    assert all(name.startswith("build:") and len(k) == 1 for name, k in building.items())
    every = [k[0].kernel for k in building.values()]
    assert len(every) == len(set(every)) == len({shard.kernel_of(c) for c in cells})
    by_cell = {c.name: c for c in cells}
    tested = []
    for name, job in jobs.items():
        assert int(job["timeout"].split()[0]) <= gitlab.HOSTED_LIMIT
        runs = [a for a in harness_runs("\n".join(job["script"])) if a.cell and not a.build_only]
        if not runs:
            continue
        assert name.startswith("test:") and job["stage"] == "test" and job["when"] == "always"
        [need] = job["needs"]  # exactly its kernel's build job: its one artifact
        assert need["artifacts"] is True
        [kernel] = built[need["job"]]
        assert jobs[need["job"]]["artifacts"]["paths"] == [f"{kernel.out}/"]
        assert any(line.endswith(f"-o {kernel.out}/kernel.tar")
                   for line in jobs[need["job"]]["script"])
        [legs] = job["parallel"]["matrix"]
        assert tuple(legs["CELL"]) == kernel.cells
        for leg in legs["CELL"]:
            tested.append(leg)
            assert shard.kernel_of(by_cell[leg]) == kernel.kernel
        assert runs[0].cell == ["$CELL"] and runs[0].accel == "auto"
        assert runs[0].prebuilt == Path(kernel.out)
    assert sorted(tested) == sorted(by_cell)


def test_caches_inside_the_project_pushed_on_the_default_branch_only() -> None:
    doc = _load(COMMITTED.read_text())
    assert doc["variables"] == {"HARNESS_CACHE": "$CI_PROJECT_DIR/.cache/harness",
                                "CCACHE_MAXSIZE": "2G", "HARNESS_CACHE_MAX": "10G"}
    jobs = _jobs(doc)
    for name, job in jobs.items():
        for cache in job.get("cache", []):
            assert all(p.startswith(".cache/harness/") for p in cache["paths"]), name
            assert cache["policy"] == "$HARNESS_CACHE_POLICY"
    assert all("cache" in job for name, job in jobs.items() if name.startswith("build:"))
    policies = {r["if"]: r.get("variables", {}).get("HARNESS_CACHE_POLICY")
                for r in doc["workflow"]["rules"]}
    assert policies == {'$CI_PIPELINE_SOURCE == "merge_request_event"': "pull",
                        "$CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS": None,
                        "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH": "pull-push",
                        "$CI_COMMIT_BRANCH": "pull"}
    [default] = [r for r in doc["workflow"]["rules"] if "CI_DEFAULT_BRANCH" in r["if"]]
    assert default["auto_cancel"] == {"on_new_commit": "none"}  # never interrupted


def test_merge_light_junit_report_roles() -> None:
    doc = _load(COMMITTED.read_text())
    jobs = _jobs(doc)
    merge = jobs["merge"]
    assert merge["when"] == "always" and merge["variables"] == {"GIT_DEPTH": "0"}
    assert merge["script"][0] == "./bootstrap.sh --role merge"
    assert merge["script"][1:] == [
        ".venv/bin/harness merge results/* --tier ci --out merged && code=0 || code=$?",
        ".venv/bin/harness export junit merged -o merged/junit.xml",
        ".venv/bin/harness export --bundle merged -o harness-run.tar.gz", 'exit "$code"']
    assert merge["artifacts"]["reports"]["junit"] == "merged/junit.xml"
    # the run's artifact a reviewer reproduces: harness reproduce harness-run.tar.gz
    assert merge["artifacts"]["paths"] == ["merged/", "harness-run.tar.gz"]
    assert {n["job"] for n in merge["needs"]} == {n for n in jobs if n.startswith("test:")}
    assert jobs["build:6_12"]["script"][0] == "./bootstrap.sh --role build"
    assert jobs["test:6_12"]["script"][0] == "./bootstrap.sh --role test"
    assert doc["workflow"]["rules"][1] == {"if": "$CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS",
                                           "when": "never"}  # one pipeline per change


def test_tags_and_kvm(capsys: pytest.CaptureFixture[str]) -> None:
    cells = matrix.select(matrix.load(), Tier.CI)
    text = gitlab.render(cells, "ci", ciplan.Settings(accel=Accel.KVM, tags=("big",),
                                                      test_tags=("kvm",)))
    assert "harness ci gitlab --tier ci --accel kvm --tag big --test-tag kvm -o " \
        ".gitlab-ci.yml" in text
    doc = _load(text)
    _validate(doc)
    for name, job in _jobs(doc).items():
        if name.startswith("test:"):
            assert job["tags"] == ["kvm"]
            assert all(a.accel == "kvm" for a in harness_runs("\n".join(job["script"])))
        elif name.startswith("build:"):
            assert job["tags"] == ["big"]
        else:
            assert "tags" not in job  # the merge boots nothing: any runner
    assert cli.main(["ci", "gitlab", "--runs-on", "x"]) == 2
    assert "unrecognized arguments: --runs-on" in capsys.readouterr().err
