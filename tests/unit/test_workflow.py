"""The GitHub Actions workflow: generated from matrix.toml, committed, valid against the
GitHub workflow schema that check-jsonschema vendors; each kernel built once and fanned out
to the cells' test jobs; honest steps; its cache keys; and what one job per cell costs."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import check_jsonschema
import jsonschema
import pytest
from ruamel.yaml import YAML

from harness import cli
from harness.base.model import Accel
from harness.ci import ciplan, workflow
from harness.drivers import matrix, shard
from harness.drivers.matrix import Tier
from harness.kernel import build
from harness.output import results
from tests.helpers.cijobs import builds, harness_runs

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / ".github" / "workflows" / "harness.yml"
SCHEMA = (Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor"
          / "github-workflows.json")


def _load(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = YAML(typ="safe").load(text)
    return doc


def _script(job: dict[str, Any]) -> str:
    return "\n".join(s.get("run", "") for s in job["steps"])


def test_the_committed_workflow_matches_the_matrix() -> None:
    assert COMMITTED.read_text() == workflow.render(
        matrix.select(matrix.load(), Tier.CI), "ci"), "run: harness ci github -o " + str(
        COMMITTED.relative_to(REPO))


def test_it_is_a_valid_github_workflow() -> None:
    jsonschema.validate(_load(COMMITTED.read_text()), json.loads(SCHEMA.read_text()))


def test_a_broken_workflow_fails_the_schema() -> None:
    doc = _load(COMMITTED.read_text())
    doc["jobs"]["merge"]["runs-on"] = 7
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json.loads(SCHEMA.read_text()))


def _sha_pinned(uses: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", uses))


@pytest.mark.parametrize("tier", [Tier.CI, Tier.FULL])
def test_one_build_job_per_kernel_and_each_test_job_needs_exactly_its_own(tier: Tier) -> None:
    """Build jobs = the tier's distinct kernels, each built once with the tests of every
    cell of it; every cell in the test job that needs exactly the build job of its kernel
    and downloads only that job's artifact; timeouts within GitHub's hosted limit."""
    cells = matrix.select(matrix.load(), tier)
    doc = _load(workflow.render(cells, tier.value))
    jobs = doc["jobs"]
    built = {job_id: builds(_script(job)) for job_id, job in jobs.items()}
    building = {job_id: kernels for job_id, kernels in built.items() if kernels}
    assert all(job_id.startswith("build-") and len(k) == 1 for job_id, k in building.items())
    every = [k[0].kernel for k in building.values()]
    assert len(every) == len(set(every)) == len({shard.kernel_of(c) for c in cells})
    by_cell = {c.name: c for c in cells}
    tested = []
    for job_id, job in jobs.items():
        assert job["timeout-minutes"] <= workflow.HOSTED_LIMIT
        runs = [a for a in harness_runs(_script(job)) if a.cell and not a.build_only]
        if not runs:
            continue
        assert job_id.startswith("test-") and not built[job_id]
        [run] = runs
        [kernel] = built[job["needs"]]
        assert run.prebuilt == Path(kernel.out) and run.cell == ["$CELL"]
        downloads = [s["with"]["name"] for s in job["steps"]
                     if s.get("uses", "").startswith("actions/download-artifact")]
        assert downloads == [f"build-{kernel.out.removeprefix('build/')}-${{{{ needs['"
                             f"{job['needs']}'].outputs.attempt }}}}"]
        legs = job["strategy"]["matrix"]["cell"]
        assert tuple(legs) == kernel.cells
        for leg in legs:
            tested.append(leg)
            assert kernel.kernel == shard.kernel_of(by_cell[leg])
    assert sorted(tested) == sorted(by_cell)


def test_steps_are_honest_about_exit_codes() -> None:
    """The harness's exit code is the step's: a line that runs the harness is that command
    alone (no `|| echo code=$?`, no pipe, no list), and a step that runs the harness or
    merges runs only when the steps before it passed; what must happen anyway
    (annotations, summaries, uploads) is a step of its own that runs always."""
    jobs = _load(COMMITTED.read_text())["jobs"]
    for job in jobs.values():
        for step in job["steps"]:
            run = step.get("run", "")
            for line in run.splitlines():
                if "bin/harness " in line:
                    assert not any(ch in line for ch in "|&;"), line
            if "harness run" in run or "harness merge" in run:
                assert "if" not in step, step
            if "harness ci annotate" in run:
                assert step["if"].startswith("always()")
    test = jobs["test-6_12"]
    assert test["if"] == "${{ !cancelled() }}"  # a failed build: its cells say why
    [annotate] = [s for s in test["steps"] if "harness ci annotate" in s.get("run", "")]
    assert '--summary "$GITHUB_STEP_SUMMARY"' in annotate["run"]
    assert annotate["if"] == "always() && steps.run.outcome != 'skipped'"


def test_supply_chain_pins_git_first_kvm_device_and_no_write_token() -> None:
    doc = _load(COMMITTED.read_text())
    text = COMMITTED.read_text()
    pins = workflow.pins()
    for job in doc["jobs"].values():
        steps = job["steps"]
        assert "apt-get install" in steps[0]["run"] and " git " in steps[0]["run"]
        assert steps[1]["uses"].startswith("actions/checkout@")
        assert steps[1]["with"]["persist-credentials"] is False
        assert "permissions" not in job  # the workflow's: contents: read, nothing else
        for step in steps:
            if "uses" in step:
                assert _sha_pinned(step["uses"]), step["uses"]
                repo = "/".join(step["uses"].split("@")[0].split("/")[:2])
                sha, tag = pins[repo]
                assert f'{step["uses"].split("@")[0]}@{sha}"  # {tag}' in text
        options = job.get("container", {}).get("options", "")
        # privileges only where the kernel tree's code builds in bubblewrap's namespaces
        assert ("--privileged" in options) is job["name"].startswith("build "), job["name"]
    assert doc["permissions"] == {"contents": "read"}
    assert doc["jobs"]["test-6_12"]["container"]["options"] == "--device /dev/kvm"
    assert doc["jobs"]["build-6_12"]["container"]["options"] == "--privileged"


def test_concurrency_per_tier_never_cancels_the_default_branch() -> None:
    doc = _load(COMMITTED.read_text())
    group = doc["concurrency"]["group"]
    assert group.startswith("harness-ci-") and "github.run_id" in group
    assert doc["concurrency"]["cancel-in-progress"] == \
        "${{ !(github.ref_name == github.event.repository.default_branch) }}"
    full = _load(workflow.render(matrix.select(matrix.load(), Tier.FULL), "full"))
    assert full["concurrency"]["group"].startswith("harness-full-")
    assert doc["on"]["push"] == {"branches": ["main", "master"]} and "pull_request" in doc["on"]
    for job in doc["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/upload-artifact"):
                assert "${{ github.run_attempt }}" in step["with"]["name"]


def test_caches_honour_harness_cache_are_sized_and_saved_on_default_pushes_only() -> None:
    doc = _load(COMMITTED.read_text())
    assert doc["env"] == {"HARNESS_CACHE": workflow.CACHE_ROOT, "CCACHE_MAXSIZE": "2G",
                          "HARNESS_CACHE_MAX": "10G"}
    steps = doc["jobs"]["build-6_12"]["steps"]
    caches = [s for s in steps if s.get("uses", "").startswith("actions/cache/")]
    assert {s["with"]["path"] for s in caches} == {"${{ env.HARNESS_CACHE }}/kernels",
                                                   "${{ env.HARNESS_CACHE }}/ccache"}
    saves = [s for s in caches if s["uses"].startswith("actions/cache/save")]
    assert len(saves) == 2
    assert all(workflow.ON_DEFAULT_PUSH in s["if"] for s in saves)
    [ccache] = [s for s in caches if s["uses"].startswith("actions/cache/restore")
                and s["with"]["path"].endswith("ccache")]
    prefix = "${{ steps.key.outputs.ccache_prefix }}"
    assert ccache["with"]["restore-keys"] == prefix
    assert ccache["with"]["key"] == prefix + "6_12-${{ github.run_id }}-${{ github.run_attempt }}"
    keys = [s["with"]["key"] for job_id, job in doc["jobs"].items() if job_id.startswith("build-")
            for s in job["steps"] if s.get("uses", "").startswith("actions/cache/save")
            and s["with"]["path"].endswith("ccache")]
    # each build job (one per distinct kernel of the tier) saves a key of its own
    builds = [job_id for job_id in doc["jobs"] if job_id.startswith("build-")]
    assert len(keys) == len(set(keys)) == len(builds) >= 6
    small = ciplan.Settings(disk_gb=30)
    assert (small.ccache_max, small.cache_max) == ("5G", "23G")
    with pytest.raises(ciplan.CiError, match="--runner-disk 4"):
        ciplan.Settings(disk_gb=4)


def test_roles_and_arch_packages_in_the_jobs() -> None:
    doc = _load(workflow.render(matrix.select(matrix.load(), Tier.FULL), "full"))
    jobs = doc["jobs"]
    assert _step(jobs["build-6_12"], "bootstrap") == "./bootstrap.sh --role build"
    assert _step(jobs["test-6_12"], "bootstrap") == "./bootstrap.sh --role test"
    assert _step(jobs["merge"], "bootstrap") == "./bootstrap.sh --role merge"
    assert _step(jobs["build-6_12-arm64-llvm"], "bootstrap") == \
        "./bootstrap.sh --role build --arch arm64 --toolchain llvm"
    assert _step(jobs["test-6_12-arm64-llvm"], "bootstrap") == \
        "./bootstrap.sh --role test --arch arm64"
    assert _step(jobs["build-6_12-llvm"], "bootstrap") == \
        "./bootstrap.sh --role build --toolchain llvm"


def _step(job: dict[str, Any], name: str) -> str:
    [run] = [s["run"] for s in job["steps"] if s.get("name", "").startswith(name)]
    return str(run)


def test_the_merge_job_is_light_and_uses_the_plan() -> None:
    merge = _load(COMMITTED.read_text())["jobs"]["merge"]
    script = _script(merge)
    assert "--role merge" in script and "harness merge \"$@\" --tier ci" in script
    assert merge["steps"][1]["with"] == {"fetch-depth": 0, "persist-credentials": False}
    assert merge["if"] == "${{ !cancelled() }}"


def test_the_merged_run_is_uploaded_as_one_bundle_a_reviewer_reproduces() -> None:
    merge = _load(COMMITTED.read_text())["jobs"]["merge"]
    [bundle] = [s for s in merge["steps"] if "export --bundle" in s.get("run", "")]
    assert bundle["run"] == ".venv/bin/harness export --bundle merged -o harness-run.tar.gz"
    [upload] = [s for s in merge["steps"] if s.get("with", {}).get("path") ==
                "harness-run.tar.gz"]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["name"] == "bundle-${{ github.run_attempt }}"
    assert bundle["if"] == upload["if"] == "always() && steps.merge.outcome != 'skipped'"


def _latest(tmp_path: Path, dirs: list[str]) -> list[str]:
    for d in dirs:
        (tmp_path / "runs" / d).mkdir(parents=True)
    out = subprocess.run(["bash", "-e", "-c", workflow.LATEST_ATTEMPTS + 'printf "%s\\n" "$@"'],
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_the_merge_takes_each_cells_latest_attempt(tmp_path: Path) -> None:
    """A re-run of failed jobs: run-6.12-1 passed in attempt 1 and stays; 6.1 failed twice
    and passed at attempt 10; 6.12-faults (a name that starts like 6.12's) is its own."""
    assert _latest(tmp_path, ["run-6.12-1", "run-6.12-faults-1", "run-6.12-faults-2",
                              "run-6.1-2", "run-6.1-10", "run-6.1-9"]) == [
        "runs/run-6.1-10", "runs/run-6.12-1", "runs/run-6.12-faults-2"]


def test_no_run_at_all_is_said_by_the_merge(tmp_path: Path) -> None:
    assert _latest(tmp_path, []) == ["runs/no-run-was-uploaded"]


def test_settings_runners_container_and_kvm(capsys: pytest.CaptureFixture[str]) -> None:
    cells = matrix.select(matrix.load(), Tier.CI)
    with pytest.raises(ciplan.CiError, match="--test-runs-on"):
        workflow.render(cells, "ci", ciplan.Settings(accel=Accel.KVM))
    kvm = ciplan.Settings(accel=Accel.KVM, runs_on=("big",), test_runs_on=("self-hosted", "kvm"),
                          container_options="--device /dev/kvm --group-add 993")
    text = workflow.render(cells, "ci", kvm)
    assert text.startswith("# Generated from matrix.toml by `harness ci github --tier ci "
                           "--accel kvm --runs-on big --test-runs-on self-hosted "
                           "--test-runs-on kvm --container-options '--device /dev/kvm "
                           "--group-add 993'")
    doc = _load(text)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    for job_id, job in doc["jobs"].items():
        if job_id.startswith("test-"):
            assert job["runs-on"] == ["self-hosted", "kvm"]
            assert job["container"]["options"] == "--device /dev/kvm --group-add 993"
            assert all(a.accel == "kvm" for a in harness_runs(_script(job)))
        elif job_id.startswith("build-"):
            assert job["runs-on"] == "big"
            assert job["container"]["options"] == "--privileged"  # bubblewrap's namespaces
    tcg = _load(workflow.render(cells, "ci", ciplan.Settings(accel=Accel.TCG)))
    assert "options" not in tcg["jobs"]["test-6_12"]["container"]  # no device needed
    assert cli.main(["ci", "github", "--accel", "kvm"]) == 2
    assert "--test-runs-on LABEL" in capsys.readouterr().err
    # each subcommand takes its own options: gitlab's and cache-key's are refused here
    assert cli.main(["ci", "github", "--tag", "kvm"]) == 2
    assert "harness ci github: error: unrecognized arguments: --tag" in capsys.readouterr().err
    assert cli.main(["ci", "github", "--cell", "6.12"]) == 2
    assert "unrecognized arguments: --cell" in capsys.readouterr().err


def test_the_header_says_each_timeout_and_where_it_comes_from() -> None:
    text = COMMITTED.read_text()
    assert "# Timeouts (minutes): (set-up 3 + measured) x 2" in text
    assert "#   build 6.12: 40 (kernel 12.1 measured + 3 more cell(s) x 1.5)" in text
    doc = _load(text)
    assert doc["jobs"]["build-6_12"]["timeout-minutes"] == 40
    full = _load(workflow.render(matrix.select(matrix.load(), Tier.FULL), "full"))
    assert full["jobs"]["build-6_1"]["timeout-minutes"] == 35  # (3 + 12.7) x 2 -> 35
    assert "# Caches: ccache at most 2G, the harness cache 10G" in text


def test_cache_keys_follow_the_kernels_not_the_cells(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cells of one kernel: one key; another patch: another store key, the same ccache
    (the same tree); another tree: another ccache; any order of the cells: the same keys."""
    by = {c.name: c for c in matrix.load()}
    one = workflow.cache_key([by["6.12"]])
    assert workflow.cache_key([by["6.12-faults"], by["6.12"]]) == one
    wrong = workflow.cache_key([by["6.12"], by["6.12-wrong-offline-memcg-null"]])
    assert wrong == workflow.cache_key([by["6.12-wrong-offline-memcg-null"], by["6.12"]])
    assert wrong.store != one.store and wrong.ccache_prefix == one.ccache_prefix
    other = workflow.cache_key([by["6.1"]])
    assert other.store != one.store and other.ccache_prefix != one.ccache_prefix
    assert one.store.startswith("harness-kernels-")
    assert one.ccache_prefix.startswith("harness-ccache-") and one.ccache_prefix.endswith("-")
    assert cli.main(["ci", "cache-key", "--cell", "6.12"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"store_key={one.store}",
                                                    f"ccache_prefix={one.ccache_prefix}"]
    # the toolchain as the kernel store's key reads it (build.toolchain)
    tools = build.tools()
    monkeypatch.setattr(build, "tools", lambda tgt=None: build.Tools(
        target=tools.target, compiler=tools.compiler + " (another)", pahole=tools.pahole,
        ccache=tools.ccache))
    newer = workflow.cache_key([by["6.12"]])
    assert newer.store != one.store and newer.ccache_prefix != one.ccache_prefix


def test_the_key_reads_each_input_of_the_kernel() -> None:
    by = {c.name: c for c in matrix.load()}
    cell = by["6.12-wrong-offline-memcg-null"]
    inputs = dict(workflow.kernel_inputs(cell))
    patch = cell.patches[0]
    assert inputs[f"patch {patch}"] == (REPO / patch).read_bytes()
    assert inputs["config base"] == (REPO / "kconfigs" / "base.config").read_bytes()
    assert any(name.startswith("series memcg-kfuncs: ") for name in inputs)
    assert inputs["source"].startswith(b"debian:6.12 ")
    test_progs = dict(workflow.kernel_inputs(by["6.12-test_progs"]))
    assert test_progs["config tree:tools/testing/selftests/bpf/config"] == \
        b"tree:tools/testing/selftests/bpf/config"  # the tree's own: in the source version


VERIFY_RUN = Path(__file__).parent.parent / "golden" / "compare" / "verify-2026-11-24.json"
typed = results.from_json  # a results.json document as the one reader reads it


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
    costs = {c.cell: c for c in workflow.job_costs(cells, [typed(doc)], builds)}
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
    later = {"schema": 2, "cells": [{**doc["cells"][0], "stages": [
        {"stage": "boot+tests", "status": "PASS", "duration_s": 600.0}]}]}
    cells = matrix.select(matrix.load(), Tier.CI)
    costs = {c.cell: c for c in workflow.job_costs(cells, [typed(doc), typed(later)], {})}
    assert costs[doc["cells"][0]["cell"]].rest_s == 600.0


def test_a_cell_that_stopped_early_is_not_a_measurement() -> None:
    """A setup error (as when a run read a bad provides.toml) or a signal: the cell ran
    only its plan stage, so its job's cost is unknown, not 0; an earlier complete run of
    the cell still counts."""
    doc = json.loads(VERIFY_RUN.read_text())
    first = doc["cells"][0]
    cells = matrix.select(matrix.load(), Tier.CI)
    for status in ("SETUP_ERROR", "BUILD_ERROR", "INTERRUPTED"):
        stopped = typed({"schema": 2, "cells": [{**first, "status": status, "stages": [
            {"stage": "plan", "status": status, "duration_s": 0.0}]}]})
        alone = {c.cell: c for c in workflow.job_costs(cells, [stopped], {})}
        assert alone[first["cell"]].rest_s is None, status
        after = {c.cell: c for c in workflow.job_costs(cells, [typed(doc), stopped], {})}
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
    from harness.base import paths

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
    assert cli.main(["ci", "minutes", str(run), "--tier", "full"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:-1]}
    assert rows["6.12"].split()[1] == "10.0"
    assert rows["6.1"].split()[1:3] == ["not", "measured"]


def test_the_lint_step_passes_the_committed_workflow_and_fails_an_unpinned_one(
        tmp_path: Path) -> None:
    """tox's lint step (tests/helpers/citools.py): actionlint, shellcheck on the run: blocks and
    zizmor --offline with no high finding. A tag instead of a commit is a high finding; an
    unquoted expansion is shellcheck's."""
    from tests.helpers import citools

    tiers = []
    for tier in Tier:  # every tier's workflow, as `harness ci github --tier T` writes it
        tiers.append(tmp_path / f"{tier.value}.yml")
        tiers[-1].write_text(workflow.render(matrix.select(matrix.load(), tier), tier.value))
    assert citools.lint_workflows([COMMITTED, *tiers]) == 0
    bad = tmp_path / "bad.yml"
    text = COMMITTED.read_text()
    pinned = text.split('uses: "actions/checkout@', 1)[1].split('"', 1)[0]
    bad.write_text(text.replace(f"actions/checkout@{pinned}", "actions/checkout@v4"))
    assert citools.lint_workflows([bad]) != 0
    quoted = '--summary \\"$GITHUB_STEP_SUMMARY\\"'  # as the YAML escapes it
    assert quoted in text
    bad.write_text(text.replace(quoted, "--summary $GITHUB_STEP_SUMMARY"))
    assert citools.lint_workflows([bad]) != 0
