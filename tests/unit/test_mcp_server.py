"""`harness mcp`: the tools an agent gets, called in-process through the MCP SDK's own
client against real run directories (tests/golden/compare/README.md) and a real job (a
harness process that parses a recorded KTAP log)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import mcp  # the optional extra, which the test extra installs: its absence fails here
import pytest

from harness import mcp_server
from harness.output import history

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _call(server: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        async with mcp.Client(server) as client:
            out = []
            for name, args in calls:
                result = await client.call_tool(name, args)
                assert not result.is_error, result.content
                out.append(result.structured_content)
            return out
    return asyncio.run(go())


def _run_dir(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    shutil.copy(GOLDEN / "compare" / f"{name}.json", d / "results.json")
    return d


def test_the_tools_an_agent_sees(tmp_path: Path) -> None:
    async def names() -> set[str]:
        async with mcp.Client(mcp_server.build(tmp_path)) as client:
            return {t.name for t in (await client.list_tools()).tools}
    assert asyncio.run(names()) == {"explain", "history", "compare", "write_report", "start",
                                    "status", "wait"}


def test_explain_says_why_a_run_failed(tmp_path: Path) -> None:
    broken = _run_dir(tmp_path, "adhoc-memcg-kfuncs-broken")
    [told] = _call(mcp_server.build(tmp_path), [("explain", {"run": str(broken)})])
    [cell] = told["cells"]
    [memcg] = cell["failing"]
    assert memcg["test"] == "memcg_kfuncs" and memcg["status"] == "FAIL"
    assert "parent_includes_child" in memcg["failing_checks"]
    faults = _run_dir(tmp_path, "faults")
    [told] = _call(mcp_server.build(tmp_path), [("explain", {"run": str(faults)})])
    splats = [s for t in told["cells"][0]["failing"] for s in t["splats"]]
    assert any(s["function"] == "lkdtm_WARNING" for s in splats)
    [missing] = _call(mcp_server.build(tmp_path), [("explain", {"run": str(tmp_path / "x")})])
    assert "no results.json" in missing["error"] and missing["fix"]


def test_compare_history_and_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_HISTORY", str(tmp_path / "h.sqlite"))
    good = _run_dir(tmp_path, "verify-2026-11-24")
    broken = _run_dir(tmp_path, "adhoc-memcg-kfuncs-broken")
    history.record_file(broken / "results.json")
    diff, rec, page = _call(mcp_server.build(tmp_path), [
        ("compare", {"before": f"{good}:6.12", "after": f"{broken}:adhoc"}),
        ("history", {"selector": "memcg_kfuncs"}),
        ("write_report", {"run": str(broken)})])
    assert diff["regressed"] is True
    assert rec["records"][0]["first_failure"] == "r-adhoc-broken"
    assert Path(page["report"]).is_file()


def test_a_long_command_is_a_job_to_poll_and_wait_for(tmp_path: Path) -> None:
    log = GOLDEN / "ktap" / "kselftest_cgroup_runner.tap"
    server = mcp_server.build(tmp_path / "jobs")
    started, = _call(server, [("start", {"command": "parse", "args": [str(log)]})])
    assert started["state"] in ("running", "done")
    waited, = _call(server, [("wait", {"job_id": started["job"], "timeout_s": 60})])
    assert waited["state"] == "done" and waited["exit_code"] in (0, 1)
    doc = json.loads(Path(waited["results"]).read_text())
    assert doc["cells"][0]["tests"][0]["name"] == log.name
    refused, unknown = _call(server, [("start", {"command": "rm", "args": ["-rf", "/"]}),
                                      ("status", {"job_id": "nope"})])
    assert "not a job command" in refused["error"] and "no job nope" in unknown["error"]
