"""`harness mcp`: the harness as an MCP server over stdio, for agents.

Tools with typed inputs: `explain` (why a run failed: each failing test's cause, failing
checks, splats and the end of its output, and each cell's error with its fix),
`history`, `compare`, `report`, and jobs for the long commands (`start` a run, bisect or
check; `status`; `wait` with a bound): an agent polls or waits a bounded time instead of
holding one call open for the minutes a kernel build takes. A job is a harness process
of its own with its own results directory, so nothing of it lives only in this server.

The `mcp` SDK is an optional extra (`pip install -e .[mcp]`): it brings a web stack with
it, and nothing else of the harness needs it.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.base import proc
from harness.base.errors import EnvironmentProblem, HarnessError
from harness.drivers import finished
from harness.output import compare as comparison
from harness.output import results

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

JOB_COMMANDS = ("run", "bisect", "check", "parse")  # what `start` may run
RESULT_FILES = ("results.json", "bisect.json", "check.json")  # what each writes


JOB_TIMEOUT_S = 6 * 3600  # a job's whole command, as proc.run bounds every process


@dataclass
class Job:
    """A harness command run by proc.run (the one subprocess wrapper: its output to the
    job's log, killed with the server) on a thread of its own."""

    id: str
    argv: list[str]
    out: Path
    log: Path
    started: float = field(default_factory=time.monotonic)
    done: proc.Completed | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        def work() -> None:
            self.done = proc.run([sys.executable, "-m", "harness", *self.argv],
                                 timeout=JOB_TIMEOUT_S, log_path=self.log, keep_output=False)
        self.thread = threading.Thread(target=work, name=f"job-{self.id}", daemon=True)
        self.thread.start()

    def state(self) -> dict[str, Any]:
        running = self.thread is not None and self.thread.is_alive()
        found = next((self.out / name for name in RESULT_FILES
                      if (self.out / name).is_file()), None)
        return {"job": self.id, "command": ["harness", *self.argv], "out": str(self.out),
                "state": "running" if running else "done",
                "exit_code": None if running or self.done is None else self.done.returncode,
                "seconds": round(time.monotonic() - self.started, 1),
                "results": str(found) if found else None, "log": str(self.log)}


def build(jobs_root: Path | None = None) -> MCPServer:
    """The server and its tools (the SDK imported here: it is an optional extra)."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        raise EnvironmentProblem("harness mcp needs the mcp SDK, an optional extra",
                                 fix="pip install -e '.[mcp]' (in the harness's .venv)"
                                 ) from None
    server = MCPServer("harness", instructions=(
        "Kernel patch series -> build -> boot -> selftests. Long commands are jobs: start, "
        "then status or wait. explain says why a run failed."))
    root = jobs_root or Path(tempfile.mkdtemp(prefix="harness-mcp-"))
    jobs: dict[str, Job] = {}

    def job(job_id: str) -> Job:
        if job_id not in jobs:
            raise EnvironmentProblem(f"no job {job_id}", fix="start one: the start tool")
        return jobs[job_id]

    @server.tool(name="explain", description=finished.explain.__doc__)
    def explain_run(run: str) -> dict[str, Any]:
        return _told(lambda: finished.explain_json(finished.explain(run)))

    @server.tool(description="Each test's record over the last runs (pass rate, flips, "
                             "first and last failure): a cell, a test or TEST:SUBTEST.")
    def history(selector: str = "", last: int = 10) -> dict[str, Any]:
        from harness.output import history as recorded

        def read() -> dict[str, Any]:
            with recorded.opened() as db:
                return {"records": recorded.to_json(recorded.records(db, selector, last))}
        return _told(read)

    @server.tool(description="What changed from run A to run B (RUN or RUN:CELL): newly "
                             "failing, fixed, new splats, metrics beyond their spread.")
    def compare(before: str, after: str) -> dict[str, Any]:
        def diff() -> dict[str, Any]:
            a, cell_a, _ = results.load_run(before)
            b, cell_b, _ = results.load_run(after)
            result = comparison.compare(a, b, labels=(before, after), cells=(cell_a, cell_b))
            return {"regressed": result.regressed, **comparison.to_json(result)}
        return _told(diff)

    @server.tool(description="Write a run's static HTML page; returns its path.")
    def write_report(run: str) -> dict[str, Any]:
        def write() -> dict[str, Any]:
            return {"report": str(finished.report_page(run))}
        return _told(write)

    @server.tool(description="Start a harness command as a job (run, bisect, check, "
                             "parse) with its arguments, e.g. command='run', args=['--series',"
                             " 'memcg-kfuncs', '--test', 'memcg_kfuncs']; returns the job.")
    def start(command: str, args: list[str]) -> dict[str, Any]:
        if command not in JOB_COMMANDS:
            return {"error": f"{command}: not a job command",
                    "fix": f"one of {', '.join(JOB_COMMANDS)}"}
        job_id = uuid.uuid4().hex[:12]
        out = root / job_id
        # --out first: what follows a `--` in args is the guest's command
        argv = [command, "--out", str(out), *args]
        jobs[job_id] = Job(id=job_id, argv=argv, out=out, log=root / f"{job_id}.log")
        jobs[job_id].start()
        return jobs[job_id].state()

    @server.tool(description="A job's state: running or done, its exit code, its results.")
    def status(job_id: str) -> dict[str, Any]:
        return _told(lambda: job(job_id).state())

    @server.tool(description="Wait for a job at most timeout_s seconds (bounded: call again "
                             "while it runs); its state.")
    def wait(job_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
        def until() -> dict[str, Any]:
            j = job(job_id)
            if j.thread is not None:
                j.thread.join(timeout=max(0.0, min(timeout_s, 600.0)))
            return j.state()
        return _told(until)

    return server


def _told(work: Any) -> dict[str, Any]:
    """A tool's result, or the harness's error as cause and fix (never a traceback)."""
    try:
        out: dict[str, Any] = work()
        return out
    except HarnessError as exc:
        return {"error": exc.message, "fix": exc.fix}
    except KeyError as exc:
        return {"error": str(exc.args[0]), "fix": "name a cell the run has"}


def serve() -> int:
    build().run(transport="stdio")
    return 0
