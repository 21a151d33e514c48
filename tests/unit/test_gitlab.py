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
def test_each_kernel_is_built_once_and_each_cell_tested_once(tier: Tier) -> None:
    cells = matrix.select(matrix.load(), tier)
    jobs = _jobs(_load(gitlab.render(cells, tier.value)))
    built = {name: builds("\n".join(job["script"])) for name, job in jobs.items()}
    every = [b.kernel for kernels in built.values() for b in kernels]
    assert len(every) == len(set(every)) and set(every) == {shard.kernel_of(c) for c in cells}
    assert all(name.startswith("build:") for name, kernels in built.items() if kernels)
    by_cell = {c.name: c for c in cells}
    tested = []
    for name, job in jobs.items():
        runs = [a for a in harness_runs("\n".join(job["script"])) if a.cell and not a.build_only]
        if not runs:
            continue
        assert name.startswith("test:") and job["stage"] == "test"
        [need] = job["needs"]
        assert need["artifacts"] is True
        made = {b.out.removeprefix("build/"): b.kernel for b in built[need["job"]]}
        exports = [line for line in jobs[need["job"]]["script"] if "cache export" in line]
        for leg in job["parallel"]["matrix"]:
            tested.append(leg["CELL"])
            assert made[leg["KERNEL"]] == shard.kernel_of(by_cell[leg["CELL"]])
            assert any(line.endswith(f"-o archives/{leg['KERNEL']}.tar") for line in exports)
        assert runs[0].cell == ["$CELL"] and runs[0].accel == "tcg"
    assert sorted(tested) == sorted(by_cell)


def test_cache_inside_the_project_merge_light_junit_report() -> None:
    doc = _load(COMMITTED.read_text())
    assert doc["variables"]["HARNESS_CACHE"] == "$CI_PROJECT_DIR/.cache/harness"
    jobs = _jobs(doc)
    for name, job in jobs.items():
        for cache in job.get("cache", []):
            assert all(p.startswith(".cache/harness/") for p in cache["paths"]), name
    assert all("cache" in job for name, job in jobs.items() if name.startswith("build:"))
    merge = jobs["merge"]
    assert merge["when"] == "always" and merge["variables"] == {"GIT_DEPTH": "0"}
    assert "./bootstrap.sh" not in merge["script"] and merge["image"].startswith("python:")
    assert ".venv/bin/harness merge results/* --tier ci --out merged" in merge["script"]
    assert merge["artifacts"]["reports"]["junit"] == "merged/junit.xml"
    assert {n["job"] for n in merge["needs"]} == {n for n in jobs if n.startswith("test:")}
    assert doc["workflow"]["rules"][1] == {"if": "$CI_COMMIT_BRANCH && $CI_OPEN_MERGE_REQUESTS",
                                           "when": "never"}  # one pipeline per change


def test_tags_and_kvm(capsys: pytest.CaptureFixture[str]) -> None:
    cells = matrix.select(matrix.load(), Tier.CI)
    with pytest.raises(ciplan.CiError, match="--tag"):
        gitlab.render(cells, "ci", ciplan.Settings(accel=Accel.KVM))
    text = gitlab.render(cells, "ci", ciplan.Settings(accel=Accel.KVM, tags=("kvm",)))
    assert "harness ci gitlab --tier ci --accel kvm --tag kvm -o .gitlab-ci.yml" in text
    doc = _load(text)
    _validate(doc)
    for name, job in _jobs(doc).items():
        if name.startswith(("build:", "test:")):
            assert job["tags"] == ["kvm"]
            assert all(a.accel == "kvm" for a in harness_runs("\n".join(job["script"]))
                       if not a.build_only)
        else:
            assert "tags" not in job  # the merge boots nothing: any runner
    assert cli.main(["ci", "gitlab", "--accel", "kvm"]) == 2
    assert "--tag TAG" in capsys.readouterr().err
    assert cli.main(["ci", "gitlab", "--runs-on", "x"]) == 2
