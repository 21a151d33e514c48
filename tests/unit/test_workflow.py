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


VERIFY_RUN = Path(__file__).parent.parent / "golden" / "compare" / "verify-2026-11-24.json"


def test_job_costs_come_from_the_runs_and_the_store_and_say_what_is_missing() -> None:
    """A real run (the ci tier's cells with stored kernels) and build times as the kernel
    store records them: a cell's cold build is the longest of the cells that build its
    kernel the same way (one built incrementally after a sibling took less)."""
    doc = json.loads(VERIFY_RUN.read_text())
    cells = matrix.select(matrix.load(), Tier.FULL)
    by_cell = {c["cell"]: c for c in doc["cells"]}
    builds = {by_cell["6.12"]["image"]: 400.0, by_cell["6.1"]["image"]: 600.0}
    hook = by_cell["6.12-rstat-hook-not-called"]["image"]
    builds[hook] = 30.0  # incremental: the 6.12 worktree had built already
    costs = {c.cell: c for c in workflow.job_costs(cells, [doc], builds)}
    rest = sum(s["duration_s"] for s in by_cell["6.12"]["stages"] if s["stage"] != "build")
    assert costs["6.12"].build_s == 400.0 and costs["6.12"].rest_s == pytest.approx(rest)
    assert costs["6.12-rstat-hook-not-called"].build_s == 400.0
    assert costs["6.1"].build_s == 600.0
    assert costs["6.12-debug"].build_s is None and costs["6.12-debug"].rest_s is None
    assert costs["6.12"].first_s(90) == pytest.approx(90 + 400 + rest)
    assert costs["6.12"].repeat_s(90) == pytest.approx(90 + rest)
    text = workflow.render_minutes(list(costs.values()), 90)
    assert "6.12-debug" in text.splitlines()[-1]  # not counted, and said
    measured = [c for c in costs.values() if c.first_s(90) is not None]
    first = sum(c.first_s(90) or 0 for c in measured) / 60
    assert f"first run {first:.0f} runner-minutes" in text


def test_later_runs_override_earlier_ones_per_cell() -> None:
    doc = json.loads(VERIFY_RUN.read_text())
    later = {"cells": [{**doc["cells"][0], "stages": [{"stage": "boot+tests",
                                                        "duration_s": 600.0}]}]}
    cells = matrix.select(matrix.load(), Tier.CI)
    costs = {c.cell: c for c in workflow.job_costs(cells, [doc, later], {})}
    assert costs[doc["cells"][0]["cell"]].rest_s == 600.0


def test_a_cell_that_stopped_early_is_not_a_measurement() -> None:
    """A setup error (as when a run read a bad provides.toml) or a signal: the cell ran
    only its plan stage, so its job's cost is unknown, not 0; an earlier complete run of
    the cell still counts."""
    doc = json.loads(VERIFY_RUN.read_text())
    first = doc["cells"][0]
    cells = matrix.select(matrix.load(), Tier.CI)
    for status in ("SETUP_ERROR", "BUILD_ERROR", "INTERRUPTED"):
        stopped = {"cells": [{**first, "status": status,
                              "stages": [{"stage": "plan", "duration_s": 0.0}]}]}
        alone = {c.cell: c for c in workflow.job_costs(cells, [stopped], {})}
        assert alone[first["cell"]].rest_s is None, status
        after = {c.cell: c for c in workflow.job_costs(cells, [doc, stopped], {})}
        assert after[first["cell"]].rest_s == pytest.approx(
            sum(s["duration_s"] for s in first["stages"] if s["stage"] != "build"))


def test_ci_minutes_without_runs_says_what_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ci", "minutes"]) == 2
    err = capsys.readouterr().err
    assert "needs the runs that measured the cells" in err
    hint = err.split("harness ci minutes ", 1)[1].split(" (", 1)[0]
    assert cli.build_parser().parse_args(["ci", "minutes", *hint.split()]).runs  # it parses


def test_ci_minutes_prints_the_table(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ci", "minutes", str(VERIFY_RUN), "--tier", "ci"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("cell") and "6.12-hierarchical" in out
    assert "runner-minutes" in out.splitlines()[-1]


def test_ci_minutes_takes_build_times_from_the_kernel_store(
        cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The store's meta.json (as build._store writes it) gives the cold build of the run's
    image; a record without build_seconds is left out, not read as zero."""
    from harness import paths

    doc = json.loads(VERIFY_RUN.read_text())
    by_cell = {c["cell"]: c for c in doc["cells"]}
    store = paths.sub("kernels")
    for cell, meta in (("6.12", {"build_seconds": 600.0}), ("6.1", {"release": "6.1"})):
        entry = store / Path(by_cell[cell]["image"]).parent.name
        entry.mkdir()
        (entry / "meta.json").write_text(json.dumps(meta))
        doc["cells"][doc["cells"].index(by_cell[cell])]["image"] = str(entry / "bzImage")
    run = paths.cache_root() / "run.json"
    run.write_text(json.dumps(doc))
    assert cli.main(["ci", "minutes", str(run), "--tier", "ci"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:-1]}
    assert rows["6.12"].split()[1] == "10.0"
    assert rows["6.1"].split()[1:3] == ["not", "measured"]
