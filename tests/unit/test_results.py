"""results.json read back: the one reader (`results.from_json`, `results.load_run`) gives
the types the writer wrote it from, so that reading a real run's results.json and writing
it again gives it back; a damaged file, or one a newer harness wrote, is told with where
and what.

The real files are every recorded run under tests/golden (see their READMEs): what the
harness of that day wrote. Files an older harness wrote lack the keys added since (each
named below, written back with its default); a splat's fingerprint is derived, and an
older harness derived it otherwise."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.base import atomic
from harness.base.model import (
    CellResult,
    GuestSeen,
    GuestSpec,
    Measurement,
    Phase,
    RunResult,
    RunState,
    Status,
)
from harness.base.model import TestResult as Result
from harness.output import results

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
RECORDED = sorted(p for p in GOLDEN.rglob("*.json")
                  if '"schema"' in p.read_text()[:200] and '"cells"' in p.read_text())
# Keys added to results.json after some of the recorded files were written: an older
# file's run is written back with them, at their defaults.
ADDED_SINCE = {
    ".repeat": None,
    ".cells[].arch": "x86_64", ".cells[].toolchain": "gcc", ".cells[].compiler": "",
    ".cells[].kernel_from_store": None, ".cells[].guest": {}, ".cells[].image": "",
    ".cells[].kselftest_h": "", ".cells[].patches[].message_id": "",
}
DERIVED = {".cells[].tests[].splats[].fingerprint"}  # written from the splat, not stored


def differences(was: Any, now: Any, path: str = "") -> list[tuple[str, str, Any]]:
    """(what, where, value): keys the document lost, gained or changed the value of."""
    if isinstance(was, dict) and isinstance(now, dict):
        found = [("lost", f"{path}.{k}", was[k]) for k in was if k not in now]
        found += [("added", f"{path}.{k}", now[k]) for k in now if k not in was]
        return found + [d for k in was if k in now
                        for d in differences(was[k], now[k], f"{path}.{k}")]
    if isinstance(was, list) and isinstance(now, list) and len(was) == len(now):
        return [d for i, (a, b) in enumerate(zip(was, now, strict=True))
                for d in differences(a, b, f"{path}[{i}]")]
    same = was == now and type(was) is type(now)
    return [] if same else [("changed", path, now)]


def test_the_recorded_runs_are_found() -> None:
    names = {p.name for p in RECORDED}
    assert {"recorded-lkdtm-6.12.json", "recorded-arm64-6.12.json", "faults.json",
            "verify-2026-11-24.json", "results-baseline.json"} <= names
    assert len(RECORDED) == 10


@pytest.mark.parametrize("file", RECORDED, ids=[p.name for p in RECORDED])
def test_every_recorded_results_json_is_written_back_as_it_was(file: Path) -> None:
    doc = json.loads(file.read_text())
    run = results.from_json(doc)
    again = results.run_json(run)
    found = [(what, re.sub(r"\[\d+\]", "[]", where), value)
             for what, where, value in differences(doc, again)]
    unexplained = [d for d in found if not (
        (d[0] == "added" and d[1] in ADDED_SINCE and d[2] == ADDED_SINCE[d[1]])
        or (d[0] == "changed" and d[1] in DERIVED))]
    assert unexplained == []
    if not found:  # written by today's writer: the very bytes
        assert json.dumps(again, indent=2) + "\n" == file.read_text()
    # and what it reads is what it wrote
    assert results.from_json(again) == run


def test_the_current_writers_files_come_back_to_the_byte(tmp_path: Path) -> None:
    for name in ("recorded-lkdtm-6.12.json", "recorded-arm64-6.12.json"):
        file = GOLDEN / "recorded-runs" / name
        run, cell, read = results.load_run(str(file))
        assert cell is None and read == file
        results.write_json(tmp_path / "results.json", run)
        assert (tmp_path / "results.json").read_bytes() == file.read_bytes()


def test_the_types_hold_what_the_readers_read() -> None:
    run, _, _ = results.load_run(str(GOLDEN / "recorded-runs" / "recorded-lkdtm-6.12.json"))
    assert run.state is RunState.COMPLETE and run.status is Status.CRASHED
    assert run.exit_code == 1 and run.strict is False and run.repeat is None
    assert run.host is not None and run.host.cpus == 2
    [cell] = run.cells
    assert cell.guest == GuestSpec() and cell.guest_seen is not None
    assert cell.guest_seen.cpus == 2 and cell.guest_seen.memory_kb == 2040728
    boot = cell.tests[0]
    assert boot.phase is Phase.BOOT and boot.guest_seen == GuestSeen(
        cmdline=cell.guest_seen.cmdline, cpus=2, memory_kb=2040728)
    crashed = [t for t in cell.tests if t.status is Status.CRASHED]
    assert crashed and all(t.splats and t.splats[0].decoded for t in crashed)
    assert all(t.log is not None and not t.log.is_absolute() for t in crashed)
    arm = results.load_run(str(GOLDEN / "recorded-runs" / "recorded-arm64-6.12.json"))[0]
    measured = [m for t in arm.cells[0].tests if t.metrics for m in t.metrics.measurements]
    assert measured and all(isinstance(m, Measurement) and m.complete for m in measured)


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / "compare" / "faults.json").read_text())
    doc.update(changes)
    return doc


def test_a_damaged_file_is_told_where_and_what() -> None:
    doc = _doc()
    doc["cells"][0]["tests"][1]["status"] = "BOGUS"
    with pytest.raises(results.ResultsError, match=r'cells\[0\]\.tests\[1\]\.status: "BOGUS" '
                                                   r"is not a Status: PASS, XFAIL"):
        results.from_json(doc)
    doc = _doc()
    doc["cells"][0]["tests"][0]["duration_s"] = "slow"
    with pytest.raises(results.ResultsError,
                       match=r'tests\[0\]\.duration_s: "slow" is not a number'):
        results.from_json(doc)
    doc = _doc()
    del doc["cells"][0]["cell"]
    with pytest.raises(results.ResultsError, match=r"cells\[0\]: a cell without a name"):
        results.from_json(doc)
    for bad, told in ((_doc(cells={}), "no list of cells"), ([], "is not an object"),
                      ({"cells": []}, "no schema version"), (_doc(schema=0), "no such version")):
        with pytest.raises(results.ResultsError, match=told) as err:
            results.from_json(bad)
        assert err.value.fix == "give the results.json a run wrote"


def test_a_newer_harnesss_file_is_told_as_such(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(_doc(schema=results.SCHEMA_VERSION + 1)))
    with pytest.raises(results.ResultsError) as err:
        results.load_run(str(tmp_path))
    assert f"schema {results.SCHEMA_VERSION + 1}: written by a newer harness" in str(err.value)
    assert str(tmp_path / "results.json") in str(err.value) and "update" in err.value.fix


def test_a_run_as_the_pipeline_makes_it_round_trips(tmp_path: Path) -> None:
    """The typed fields a fresh result has (a command's output, metrics, the guest) are
    written in results.json's layout and read back equal."""
    shown = Result(name="cmd-true", status=Status.PASS, duration_s=1.234, exit_code=0,
                       ktap=None, output_tail=("a", "b"), output_lines=40,
                       metrics=results.metrics_of({"summary": "1 thing", "reads": {
                           "x@1": {"median": 3, "unit": "ns", "direction": "lower",
                                   "q1": 2.5, "q3": 3.5}}}),
                       log=tmp_path / "cell" / "guest" / "cmd-true.out")
    boot = Result(name="boot", phase=Phase.BOOT, status=Status.PASS, duration_s=3.0,
                      exit_code=None, ktap=None, guest_seen=GuestSeen(cpus=1))
    cell = CellResult(cell="adhoc", kernel="debian:6.12", kernel_version="6.12.1",
                      status=Status.PASS, patches=(), config=None, stages=(),
                      tests=(boot, shown), guest=GuestSpec(cpus=1, append="x=1"),
                      guest_seen=GuestSeen(cpus=1), arch="x86_64", toolchain="gcc")
    run = RunResult(cells=(cell,), exit_code=0, command=("harness", "run"), strict=False,
                    what="testing")
    results.write_json(tmp_path / "results.json", run)
    data = json.loads((tmp_path / "results.json").read_text())
    t = data["cells"][0]["tests"][1]
    assert t["log"] == "cell/guest/cmd-true.out" and t["duration_s"] == 1.23
    assert t["extra"] == {"output_tail": ["a", "b"], "output_lines": 40, "metrics": {
        "summary": "1 thing", "reads": {"x@1": {"median": 3, "unit": "ns", "direction": "lower",
                                                "q1": 2.5, "q3": 3.5}}}}
    assert data["cells"][0]["tests"][0]["extra"] == {"guest": {"cpus": 1}}
    assert data["cells"][0]["guest"] == {"memory": "2G", "cpus": 1, "append": "x=1",
                                         "cmdline": None, "cpus_online": 1, "memory_kb": None}
    assert list(data) == ["schema", "command", "strict", "repeat", "what", "state", "status",
                          "exit_code", "cells"]
    back = results.load_run(str(tmp_path))[0]
    [m] = back.cells[0].tests[1].metrics.measurements  # type: ignore[union-attr]
    assert (m.path, m.median, m.unit, m.q1) == ("reads/x@1", 3, "ns", 2.5)
    assert back.cells[0].tests[1].output_tail == ("a", "b")
    assert back.cells[0].tests[1].log == Path("cell/guest/cmd-true.out")
    assert back.cells[0].guest == cell.guest and back.cells[0].guest_seen == cell.guest_seen


def test_a_merged_run_keeps_the_merges_layout() -> None:
    doc = copy.deepcopy(_doc())
    merged = {"schema": 2, "run_id": "merge-1", "started": None, "merged_at": "now",
              "merged_from": ["a"], "runs": [], "harness_rev": None, "tools": {},
              "strict": False, "plan": None, "state": "incomplete", "incomplete_runs": [],
              "unreadable_runs": [{"run": "b", "reason": "no results.json in it"}],
              "conflicts": [], "revision_conflict": "", "missing": [], "unexpected": [],
              "status": "PASS", "exit_code": 2, "cells": doc["cells"],
              "command": ["harness", "merge"]}
    run = results.from_json(merged)
    assert run.merge is not None and run.merge.unreadable_runs[0].reason.startswith("no ")
    assert list(results.run_json(run)) == list(merged)


def test_a_file_written_atomically_is_read_back(tmp_path: Path) -> None:
    atomic.write_json(tmp_path / "results.json", _doc())
    run, cell, _ = results.load_run(f"{tmp_path}:6.12-faults")
    assert cell == "6.12-faults" and run.cells[0].cell == "6.12-faults"


def test_the_pahole_a_kernel_was_built_with_is_kept_when_known(tmp_path: Path) -> None:
    file = GOLDEN / "recorded-runs" / "recorded-lkdtm-6.12.json"
    recorded, _, _ = results.load_run(str(file))
    assert recorded.cells[0].pahole == "v1.24"  # the real run's: Debian 12's pahole
    run = dataclasses.replace(recorded, cells=(
        dataclasses.replace(recorded.cells[0], pahole=""), *recorded.cells[1:]))
    assert "pahole" not in results.run_json(run)["cells"][0]  # not known: not written
    cell = dataclasses.replace(run.cells[0], pahole="v1.32 (debian:sid 1.32-1)")
    known = dataclasses.replace(run, cells=(cell, *run.cells[1:]))
    doc = results.run_json(known)
    assert doc["cells"][0]["pahole"] == "v1.32 (debian:sid 1.32-1)"
    assert results.from_json(doc) == known
