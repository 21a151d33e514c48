"""The files the host and `runner.sh` exchange, written and read here and nowhere else.

Host -> guest: `plan.tsv`, one line per test (name, timeout, cwd, needs, command).
Guest -> host, in the shared results directory:
- `status.tsv`: `NAME started UPTIME` and `NAME ended UPTIME RC TAINT_BEFORE TAINT_AFTER
  START_UPTIME` per test;
- `guest-info.tsv`: `KEY<TAB>VALUE` lines (uname, cmdline, cpus, memory_kb,
  tainted_at_boot, ready, swap, scratch, tainted_at_end);
- `NAME.out` per test (capped in the guest; a cut is marked with `OUTPUT_CUT`);
- `dmesg.txt` (the kernel log when the runner finished) and `runner-done`;
- markers in the kernel log, which cut it into the parts every line belongs to: before
  `runner-start` the boot, between `test-start NAME` and `test-end NAME` that test,
  between the markers the runner's own set-up, after `runner-done` the shutdown (which
  only the console sees, since `dmesg.txt` is written just after that marker).

Pure functions over text, except `write_plan`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.base.errors import HarnessError
from harness.base.model import GuestSeen, Status

RUNNER = Path(__file__).resolve().parent / "runner.sh"
OUTPUT_CAP_BYTES = 8 * 2**20  # per test: kselftest:cgroup writes ~100 KB, test_progs ~1 MB

_START = re.compile(r"harness: test-start (\S+)\s*$", re.MULTILINE)
_END = re.compile(r"harness: test-end (\S+) rc=")
_RUNNER_START = re.compile(r"harness: runner-start\s*$", re.MULTILINE)
# the runner's first marker as the console shows it: the guest is ready
READY = re.compile(r"harness: runner-start\b")
_RUNNER_DONE = re.compile(r"harness: runner-done\s*$", re.MULTILINE)
OUTPUT_CUT = re.compile(r"^\[harness: output cut: (\d+) bytes over the (\d+)-byte cap were "
                        r"discarded, (\d+) failed result lines among them\]$", re.MULTILINE)


class PlanError(HarnessError):
    """A test cannot be written to the plan (a tab or newline in its name or command)."""

    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class GuestTest:
    """One line of the guest runner's plan."""

    name: str
    timeout_s: int
    cwd: Path
    command: str  # a shell command line, run by sh -c in cwd
    fmt: str = "ktap"
    needs: tuple[str, ...] = ()  # guest set-up done before it runs: "swap", "scratch"
    # its output's end goes into the result and onto the terminal (the user's own command)
    show_output: bool = False
    # only these of its checks (subtests) run (names or globs), and who chose them and why
    checks: tuple[str, ...] = ()
    checks_why: str = ""


def write_plan(tests: list[GuestTest], path: Path) -> None:
    lines = []
    for t in tests:
        for text in (t.name, t.command, str(t.cwd)):
            if "\t" in text or "\n" in text:
                raise PlanError(f"test {t.name}: tabs and newlines are not allowed in its "
                                "name, command or directory")
        lines.append(f"{t.name}\t{t.timeout_s}\t{t.cwd}\t{','.join(t.needs) or '-'}\t"
                     f"{t.command}\n")
    path.write_text("".join(lines))


def runner_argv(guest_dir: Path, plan: Path, cap: int = OUTPUT_CAP_BYTES, *,
                fail_fast: bool = False, gcov: bool = False) -> list[str]:
    return ["/bin/sh", str(RUNNER), str(guest_dir), str(plan), str(cap), "1" if fail_fast
            else "0", "1" if gcov else "0"]


@dataclass(frozen=True, kw_only=True)
class RunnerRecord:
    name: str
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    taint_before: int | None = None
    taint_after: int | None = None


def parse_status(text: str) -> dict[str, RunnerRecord]:
    records: dict[str, RunnerRecord] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        try:
            if len(parts) >= 3 and parts[1] == "started":
                records[parts[0]] = RunnerRecord(name=parts[0], started=float(parts[2]))
            elif len(parts) >= 7 and parts[1] == "ended":
                records[parts[0]] = RunnerRecord(
                    name=parts[0], started=float(parts[6]), ended=float(parts[2]),
                    exit_code=int(parts[3]), taint_before=int(parts[4]),
                    taint_after=int(parts[5]))
        except ValueError:
            continue  # a line cut short when the guest died
    return records


@dataclass(frozen=True, kw_only=True)
class GuestInfo:
    values: dict[str, str] = field(default_factory=dict)

    def taint(self, key: str) -> int | None:
        try:
            return int(self.values[key])
        except (KeyError, ValueError):
            return None

    @property
    def reached_runner(self) -> bool:
        return "ready" in self.values

    @property
    def machine(self) -> GuestSeen | None:
        """What the guest was given: its kernel command line, CPUs and RAM (as it saw
        them); None: it said none of them."""
        cpus, memory_kb = (int(self.values[k]) if self.values.get(k, "").isdigit() else None
                           for k in ("cpus", "memory_kb"))
        seen = GuestSeen(cmdline=self.values.get("cmdline"), cpus=cpus, memory_kb=memory_kb)
        return None if seen == GuestSeen() else seen


def parse_info(text: str) -> GuestInfo:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep:
            values[key] = value.strip()
    return GuestInfo(values=values)


@dataclass(frozen=True, kw_only=True)
class KernelLog:
    """A boot's kernel log cut into the parts the results judge.

    `setup` holds every stretch between tests, in order; `tests` maps a test to the lines
    between its markers. `source` says which file the lines came from.
    """

    boot: str = ""
    tests: dict[str, str] = field(default_factory=dict)
    setup: str = ""
    shutdown: str = ""
    source: str = ""  # the file boot, tests and set-up came from: dmesg.txt or console.log
    runner_done: bool = False  # the runner-done marker was seen: the shutdown is known


def split_kernel_log(dmesg: str, console: str) -> KernelLog:
    """Every line of the boot's kernel log, in exactly one part.

    dmesg.txt is the cleaner record (no serial noise) but ends where the runner dumped
    it and may have lost its start when the ring buffer wrapped; then, or when there is
    none (the guest died), the console is used. The shutdown is always the console's:
    after `runner-done` nothing else saw it.
    """
    # (A runner of before 2026-11-23 wrote no runner-start marker: then a dmesg that
    # starts at the boot and has test markers is still whole.)
    use_console = not (_RUNNER_START.search(dmesg) or
                       ("Linux version" in dmesg[:4096] and _START.search(dmesg)))
    parts = _split(console if use_console else dmesg)
    # The shutdown only the console saw.
    shutdown = parts if use_console else _split(console)
    return KernelLog(boot=parts.boot, tests=parts.tests, setup=parts.setup,
                     shutdown=shutdown.shutdown,
                     source="console.log" if use_console else "dmesg.txt",
                     runner_done=shutdown.runner_done)


def _split(text: str) -> KernelLog:
    boot: list[str] = []
    setup: list[str] = []
    shutdown: list[str] = []
    tests: dict[str, list[str]] = {}
    current = boot
    done = False
    for line in text.splitlines(keepends=True):
        if (m := _START.search(line)) is not None:
            current = tests.setdefault(m.group(1), [])
        elif _END.search(line) or _RUNNER_START.search(line):
            current = setup
        elif _RUNNER_DONE.search(line):
            done = True
            current = shutdown
        else:
            current.append(line)
    return KernelLog(boot="".join(boot), tests={k: "".join(v) for k, v in tests.items()},
                     setup="".join(setup), shutdown="".join(shutdown), runner_done=done)


@dataclass(frozen=True, kw_only=True)
class OutputCut:
    discarded: int  # bytes
    cap: int
    failed_lines: int  # "not ok" lines among the discarded


def without_cut_line(text: str) -> str:
    """The output with the line the cap cut in two dropped: its first half would read as
    another result ("ok 1 the same res")."""
    m = OUTPUT_CUT.search(text)
    if m is None:
        return text
    # The runner writes a newline before the marker: two end a cut on a line boundary.
    kept = text[: m.start()]
    if kept.endswith("\n\n"):
        return kept[:-1] + text[m.start():]
    kept = kept[:-1] if kept.endswith("\n") else kept
    return kept[: kept.rfind("\n") + 1] + text[m.start():]


def output_cut(text: str) -> OutputCut | None:
    """What the runner discarded of this output, if it cut it."""
    m = OUTPUT_CUT.search(text)
    if m is None:
        return None
    return OutputCut(discarded=int(m.group(1)), cap=int(m.group(2)),
                     failed_lines=int(m.group(3)))


LOG_READ_CAP = 32 * 2**20  # of a file the runner or the guest wrote, read whole


def read_bounded(path: Path, cap: int = LOG_READ_CAP) -> str:
    """A guest file whole, or, past `cap` (a kernel printing in a loop fills the console),
    its first and last halves with a line that says what was left out. The boot is at the
    start, the shutdown at the end."""
    size = path.stat().st_size
    if size <= cap:
        return path.read_text(errors="replace")
    with path.open("rb") as f:
        head = f.read(cap // 2)
        f.seek(size - cap // 2)
        tail = f.read()
    return (head.decode(errors="replace")
            + f"\n[harness: {size - cap} bytes of {path.name} not read]\n"
            + tail.decode(errors="replace"))
