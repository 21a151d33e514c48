"""The GitHub Actions workflow: generated from matrix.toml, committed, valid against the
GitHub workflow schema that check-jsonschema vendors, and its cache keys."""

from __future__ import annotations

import json
from pathlib import Path

import check_jsonschema
import jsonschema
import pytest
from ruamel.yaml import YAML

from harness import cli, matrix, workflow
from harness.matrix import Tier

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / ".github" / "workflows" / "harness.yml"
SCHEMA = (Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor"
          / "github-workflows.json")


def test_the_committed_workflow_matches_the_matrix() -> None:
    assert COMMITTED.read_text() == workflow.render(
        matrix.select(matrix.load(), Tier.CI), "ci"), "run: harness ci github -o " + str(
        COMMITTED.relative_to(REPO))


def test_it_is_a_valid_github_workflow_with_a_job_per_cell_and_a_merge() -> None:
    doc = YAML(typ="safe").load(COMMITTED.read_text())
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    cells = [c.name for c in matrix.select(matrix.load(), Tier.CI)]
    assert doc["jobs"]["cell"]["strategy"]["matrix"]["cell"] == cells
    assert doc["jobs"]["cell"]["container"]["image"] == "debian:12"
    runs = [s.get("run", "") for s in doc["jobs"]["cell"]["steps"]]
    assert runs[1] == "./bootstrap.sh" and "harness ci cache-key" in runs[2]
    assert any("harness run --cell" in r for r in runs)
    merge = " ".join(s.get("run", "") for s in doc["jobs"]["merge"]["steps"])
    assert "harness merge runs/*" in merge and "GITHUB_STEP_SUMMARY" in merge
    assert "harness export junit merged -o merged/junit.xml" in merge
    assert doc["jobs"]["merge"]["needs"] == "cell"


def test_a_broken_workflow_fails_the_schema() -> None:
    doc = YAML(typ="safe").load(COMMITTED.read_text())
    doc["jobs"]["cell"]["runs-on"] = 7
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json.loads(SCHEMA.read_text()))


def test_cache_keys_change_with_the_cells_series_and_config(
        capsys: pytest.CaptureFixture[str]) -> None:
    by = {c.name: c for c in matrix.load()}
    keys = {n: workflow.cache_key(by[n]) for n in ("6.12", "6.12-memcg-broken", "6.1")}
    assert len({k for k, _ in keys.values()}) == 3
    for name, (key, prefix) in keys.items():
        assert key.startswith(prefix) and prefix.startswith(f"harness-{name}-gcc")
    assert cli.main(["ci", "cache-key", "--cell", "6.12"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"key={keys['6.12'][0]}", f"prefix={keys['6.12'][1]}"]
