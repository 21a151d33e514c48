#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""perf stat --for-each-cgroup: one shared set of per-CPU events counted per cgroup by a
BPF program at cgroup switches (--bpf-counters) against one event per cgroup per CPU,
both checked against the kernel's own cgroup accounting.

Runs in the guest as root, with the perf built from the kernel tree under test ($PERF or
--perf). Prints KTAP; measurements go to $HARNESS_METRICS.

  check   fresh cgroups with known work (two busy loops of different lengths, a
          context-switch-heavy pipe ping-pong, one cgroup that never runs, a parent
          whose only work is its child's busy loop); both perf
          modes count the SAME run at once (each `perf stat -a` started before the
          workloads and stopped after them: the cgroups are new and hold only the
          workloads, so nothing outside the window is counted). Oracles: each cgroup's
          cpu.stat usage_usec (for task-clock and cpu-clock) and the workloads' own
          rusage from wait4() (CPU time; nvcsw+nivcsw for context-switches). A negative
          control feeds the same checker the BPF counts with the cgroups rotated (counts
          attributed to the wrong cgroup): it must find a mismatch. Then a busy loop
          pinned to CPU 1 counted on that CPU alone (-C 1: a CPU list not from 0), and
          what perf leaks per read of its BPF counters (perf is built with
          LeakSanitizer: two runs of different lengths, leaked objects per stack).
  bench   at each size N: N cgroups, the ping-pong in one of them; the workload alone,
          under per-cgroup events and under the shared BPF events: perf's file
          descriptors, perf's own CPU time, the workload's slowdown.

Under TCG there is no hardware PMU: only software events are used here (cycles,
instructions and cache events cannot be measured in this guest).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

CG = "/sys/fs/cgroup"
# --cgroup-v1: perf_event on a cgroup v1 hierarchy of its own, mounted here (perf_event is
# implicit on cgroup2, so it can be bound to v1 while cgroup2's cgroups exist)
V1 = "/run/perf_cgroup_v1"
EVENTS = ("task-clock", "cpu-clock", "context-switches")
CLOCKS = ("task-clock", "cpu-clock")

# Tolerances, fixed before measuring. A clock count (ms) must agree with the oracle within
# CLOCK_REL of the oracle plus CLOCK_ABS_MS (perf's cgroup time and the scheduler's
# sum_exec_runtime are both sched_clock based; the absolute part covers a task's first
# and last slice around the cgroup move and exit). Context switches within CSW_REL plus
# CSW_ABS (the move into the cgroup and the exit each switch once or twice).
CLOCK_REL, CLOCK_ABS_MS = 0.10, 20.0
CSW_REL, CSW_ABS = 0.10, 50

# The known work: (kind, amount). busy: a CPU loop of that many seconds of wall time;
# pipe: `perf bench sched pipe` of that many round trips (two tasks, each blocking on
# a pipe: two context switches per round trip at least); idle: nothing ever runs.
# parent: a cgroup with no task of its own, counted with its child (busy in nest/kid):
# both perf modes count a cgroup's descendants, so its counts are its subtree's
# (cpu.stat's usage is hierarchical too; its rusage oracles are its children's sums).
WORK = {
    "busy_long": ("busy", 2.0),
    "busy_short": ("busy", 0.6),
    "switchy": ("pipe", 5000),
    "idle": ("idle", 0),
    "nest": ("parent", 0),
    "nest/kid": ("busy", 1.0),
}
NO_TASK = ("idle", "parent")
# cpu_list_not_from_0_counted: a busy loop pinned to CPU PINNED_CPU, counted there only
# (perf stat -C PINNED_CPU): the counters' position 0 is CPU 1
PINNED_CPU, PINNED_S = 1, 0.6


def ktap_header(plan: int) -> None:
    print("KTAP version 1")
    print(f"1..{plan}", flush=True)


SKIP = "SKIP "  # a passing result whose reason starts so is a skip


def ktap_result(results: list[tuple[str, bool, str]]) -> int:
    for i, (name, ok, why) in enumerate(results, 1):
        if ok and why.startswith(SKIP):
            print(f"ok {i} {name} # SKIP {why[len(SKIP):]}")
            continue
        if why:
            for line in why.splitlines():
                print(f"# {name}: {line}")
        print(f"{'ok' if ok else 'not ok'} {i} {name}")
    failed = sum(1 for _, ok, _ in results if not ok)
    skipped = sum(1 for _, ok, why in results if ok and why.startswith(SKIP))
    print(f"# Totals: pass:{len(results) - failed - skipped} fail:{failed} skip:{skipped}",
          flush=True)
    return 1 if failed else 0


def metrics_write(data: dict[str, object]) -> None:
    path = os.environ.get("HARNESS_METRICS")
    if not path:
        return
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.rename(path + ".tmp", path)


def diag(msg: str) -> None:
    print(f"# {msg}", flush=True)


# --- cgroups ---

def mkcg(path: str) -> None:
    os.makedirs(path, exist_ok=True)


def rmcg_tree(path: str) -> None:
    if not os.path.isdir(path):
        return
    for entry in sorted(os.listdir(path)):
        sub = os.path.join(path, entry)
        if os.path.isdir(sub):
            rmcg_tree(sub)
    os.rmdir(path)


def enable_perf_event_css() -> None:
    """perf_event is an implicit controller on cgroup2 (implicit_on_dfl): every cgroup
    should get its css. But the root's subtree_ss_mask, which implicit controllers join,
    is only computed when the root's cgroup.subtree_control is written (cgroup_init binds
    the controllers to the default root without propagating): on a guest where nothing
    wrote it since boot (no systemd), a new cgroup has no perf_event css. Then a cgroup
    event fails with ENOENT (perf: "<not supported>") and, worse, the cgroup-switch event
    BPF counters hang on never fires (every task maps to the root's perf cgroup), so
    their counts go to whatever runs at read time. Seen in the 6.12 TCG guest. Enabling
    any controller at the root computes the mask; pids costs least."""
    path = f"{CG}/cgroup.subtree_control"
    with open(path) as f:
        enabled = f.read().split()
    if enabled:
        return
    with open(f"{CG}/cgroup.controllers") as f:
        available = f.read().split()
    for ctrl in ("pids", "memory", "cpu"):
        if ctrl in available:
            with open(path, "w") as f:
                f.write(f"+{ctrl}")
            diag(f"the root's cgroup.subtree_control was empty: wrote +{ctrl} so that new "
                 "cgroups get a perf_event css")
            return
    raise RuntimeError(f"no controller to enable at the root ({available})")


def usage_usec(path: str) -> int:
    with open(os.path.join(path, "cpu.stat")) as f:
        for line in f:
            k, v = line.split()
            if k == "usage_usec":
                return int(v)
    raise RuntimeError(f"{path}/cpu.stat has no usage_usec")


# --- workloads ---

def workload_argv(perf: str, kind: str, amount: float, cgroups: str = "") -> list[str]:
    if kind == "busy":
        return [sys.executable, "-c",
                "import time\ne=time.monotonic()+%f\nwhile time.monotonic()<e: pass" % amount]
    if kind == "pipe":
        return [perf, "bench", "sched", "pipe", "-l", str(int(amount))]
    if kind == "pipe2":  # sender and receiver each in its own cgroup: every switch is a
        # cgroup switch
        return [perf, "bench", "sched", "pipe", "-l", str(int(amount)), "-G", cgroups]
    raise ValueError(kind)


@dataclass
class Ran:
    wall_s: float
    cpu_ms: float  # utime + stime of the workload and its reaped children
    csw: int  # voluntary + involuntary context switches of the same


def run_in_cgroups(perf: str, jobs: dict[str, tuple[str, float]], root: str,
                   start: Callable[[], None] | None = None, *,
                   move_late: bool = False, cpu: int | None = None,
                   pipe_cgroups: str = "", v1_root: str = "") -> dict[str, Ran]:
    """Put every non-idle job in its cgroup, held before its exec, call start() (perf
    starts counting), then let them all go and wait for them.

    The tasks are in their cgroups before counting starts, as a long-running container's
    are: perf's BPF counters credit a CPU's time since the last cgroup switch to the
    cgroup of the task that is current at the next one, and moving a running task into a
    cgroup is no switch (cgroup attach raises no PERF_COUNT_SW_CGROUP_SWITCHES). A task
    that moves itself in while counted (`echo $$ > cgroup.procs; exec ...`) takes all
    the time its CPU spent in the old cgroup since the last switch: measured here, a
    busy loop started that way was credited ~600 ms more than it ran (README).
    move_late: the workloads move themselves in after start() (that case, on purpose).
    cpu: pin the workloads (and what they fork) to that CPU.
    v1_root: each job also enters its cgroup of that name there (perf_event on v1)."""
    gate_r, gate_w = os.pipe()
    started: dict[int, str] = {}
    try:
        for name, (kind, amount) in jobs.items():
            if kind in NO_TASK:
                continue
            argv = workload_argv(perf, kind, amount, pipe_cgroups)
            pid = os.fork()
            if pid == 0:  # the workload: into its cgroup, wait for the gate, exec
                try:
                    if cpu is not None:
                        os.sched_setaffinity(0, {cpu})
                    if move_late:
                        go = os.read(gate_r, 1)
                    for top in (root, v1_root):
                        if top:
                            with open(os.path.join(top, name, "cgroup.procs"), "w") as f:
                                f.write("0")
                    if not move_late:
                        go = os.read(gate_r, 1)
                    if go == b"x":
                        null = os.open("/dev/null", os.O_RDWR)
                        for fd in (0, 1, 2):
                            os.dup2(null, fd)
                        os.execv(argv[0], argv)
                finally:
                    os._exit(127)
            started[pid] = name
        if start is not None:
            start()
        t0 = time.monotonic()
        os.write(gate_w, b"x" * len(started))
    except BaseException:
        for pid in started:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    finally:
        os.close(gate_r)
        os.close(gate_w)
    out: dict[str, Ran] = {}
    # each by its pid: a wait for any child could reap a perf running next to them
    for pid, name in started.items():
        _, status, ru = os.wait4(pid, 0)
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            raise RuntimeError(f"workload {name} ended with status {status:#x}")
        out[name] = Ran(wall_s=time.monotonic() - t0,
                        cpu_ms=(ru.ru_utime + ru.ru_stime) * 1000.0,
                        csw=ru.ru_nvcsw + ru.ru_nivcsw)
    return out


# --- perf ---

class PerfStat:
    """`perf stat -a --for-each-cgroup ...` without a workload: counts from start until
    SIGINT, then writes its CSV to `out`."""

    def __init__(self, perf: str, cgroups: list[str], events: tuple[str, ...], out: str,
                 *, bpf: bool, cpus: str = "") -> None:
        self.out = out
        argv = [perf, "stat", *(["-C", cpus] if cpus else ["-a"]), "-x,", "-o", out,
                "-e", ",".join(events), "--for-each-cgroup", ",".join(cgroups)]
        if bpf:
            argv.append("--bpf-counters")
        self.argv = argv
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        self.fds = 0
        self.perf_fds = 0
        self.ready_s = 0.0

    def wait_ready(self, want_perf_fds: int, timeout: float = 120.0) -> None:
        """Until perf holds at least want_perf_fds perf-event fds (its counters are open;
        it enables them right after), then a settle of 0.5 s."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.p.poll() is not None:
                raise RuntimeError(f"{' '.join(self.argv)} exited early ({self.p.returncode}): "
                                   f"{self.p.stderr.read().decode(errors='replace')[-2000:]}")
            fds, pfds = count_fds(self.p.pid)
            if pfds >= want_perf_fds:
                time.sleep(0.5)
                self.fds, self.perf_fds = count_fds(self.p.pid)
                self.ready_s = time.monotonic() - self.t0
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"perf did not open {want_perf_fds} perf events within {timeout}s "
                           f"(has {count_fds(self.p.pid)})")

    def stop(self) -> tuple[float, str]:
        """SIGINT, wait; perf's own CPU time (ms) and its stderr."""
        self.p.send_signal(signal.SIGINT)
        _, status, ru = os.wait4(self.p.pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        # perf stat ends a count on SIGINT by raising it again once it printed
        self.p.returncode = 0 if rc == -signal.SIGINT else rc
        err = self.p.stderr.read().decode(errors="replace") if self.p.stderr else ""
        return (ru.ru_utime + ru.ru_stime) * 1000.0, err


def kill_all(perfs: list[PerfStat]) -> None:
    for ps in perfs:
        if ps.p.poll() is None:
            ps.p.kill()
            ps.p.wait()


def count_fds(pid: int) -> tuple[int, int]:
    """(all fds, perf-event fds) of a process."""
    d = f"/proc/{pid}/fd"
    total = perf = 0
    try:
        for fd in os.listdir(d):
            total += 1
            try:
                if os.readlink(f"{d}/{fd}") == "anon_inode:[perf_event]":
                    perf += 1
            except OSError:
                pass
    except OSError:
        pass
    return total, perf


def parse_csv(text: str) -> dict[tuple[str, str], float | None]:
    """(cgroup, event) -> value (None: <not counted> / <not supported>)."""
    out: dict[tuple[str, str], float | None] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        f = line.split(",")
        if len(f) < 4:
            continue
        value, event, cgroup = f[0], f[2], f[3]
        try:
            out[(cgroup, event)] = float(value)
        except ValueError:
            out[(cgroup, event)] = None
    return out


def ncpus() -> int:
    return os.cpu_count() or 1


# --- check ---

def within(count: float | None, oracle: float, rel: float, abs_: float) -> bool:
    return count is not None and abs(count - oracle) <= rel * oracle + abs_


def compare(counts: dict[tuple[str, str], float | None], prefix: str,
            oracle_usage_ms: dict[str, float], oracle_csw: dict[str, int],
            names: list[str]) -> list[str]:
    """Mismatches of one mode's counts against the oracles; [] when all agree."""
    bad = []
    for n in names:
        cg = f"{prefix}/{n}"
        for ev in CLOCKS:
            c = counts.get((cg, ev))
            o = oracle_usage_ms[n]
            if o == 0 and c is None:
                continue  # never ran: perf prints <not counted>
            if not within(c, o, CLOCK_REL, CLOCK_ABS_MS):
                bad.append(f"{n} {ev}: {c} ms, cpu.stat usage {o:.1f} ms")
        c = counts.get((cg, "context-switches"))
        o2 = oracle_csw[n]
        if o2 == 0 and c is None:
            continue
        if not within(c, o2, CSW_REL, CSW_ABS):
            bad.append(f"{n} context-switches: {c}, workload rusage {o2}")
    return bad


def rotated(counts: dict[tuple[str, str], float | None], prefix: str,
            names: list[str]) -> dict[tuple[str, str], float | None]:
    """The counts with each cgroup's row given to the next cgroup: wrong attribution."""
    out = {}
    for i, n in enumerate(names):
        src = names[(i + 1) % len(names)]
        for ev in EVENTS:
            out[(f"{prefix}/{n}", ev)] = counts.get((f"{prefix}/{src}", ev))
    return out


CHECK_NAMES = ("workloads_ran_as_given", "both_perf_modes_counted",
               "plain_counts_match_cgroup_accounting", "bpf_counts_match_cgroup_accounting",
               "bpf_counts_match_per_cgroup_events", "negative_control_wrong_cgroup_is_caught",
               "bpf_reads_leak_nothing", "cpu_list_not_from_0_counted")
CHECKS = len(CHECK_NAMES)


def mount_v1() -> None:
    """perf_event on a cgroup v1 hierarchy of its own at V1: perf then finds it there
    (a v1 mount with the controller comes before cgroup2 in its search) and its BPF
    counters take their v1 path (use_cgroup_v2 0: the v1 ancestors' ids)."""
    os.makedirs(V1, exist_ok=True)
    subprocess.run(["mount", "-t", "cgroup", "-o", "perf_event", "perf_event", V1], check=True,
                   capture_output=True)
    diag(f"perf_event bound to a cgroup v1 hierarchy at {V1}")


def perf_event_hierarchy() -> int:
    """/proc/cgroups' hierarchy of perf_event (0: cgroup2's), -1 when not listed."""
    with open("/proc/cgroups") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 2 and fields[0] == "perf_event":
                return int(fields[1])
    return -1


def umount_v1() -> None:
    """The v1 hierarchy gone and perf_event back on cgroup2 for the tests after this one:
    a v1 root outlives its unmount while removed cgroups are still being released."""
    subprocess.run(["umount", V1], check=False, capture_output=True)
    with contextlib.suppress(OSError):
        os.rmdir(V1)
    end = time.monotonic() + 10
    while perf_event_hierarchy() > 0 and time.monotonic() < end:
        time.sleep(0.2)
    if perf_event_hierarchy() > 0:
        diag("perf_event is still bound to a v1 hierarchy 10 s after its unmount: "
             "cgroup2 cgroup events of later tests in this boot may fail")


# --- leaks ---

# perf is built with LeakSanitizer (the harness's perf build): every perf run here says
# nothing at its exit (LSAN_OPTIONS detect_leaks=0) but two of bpf_reads_leak_nothing,
# which count what perf leaked, per allocation stack, after LEAK_SHORT_S and LEAK_LONG_S
# of `perf stat --bpf-counters -I LEAK_INTERVAL_MS`: a stack whose leaked objects grow
# with the reads (at least half a leak per read more) leaks per read. What perf leaks
# once per run (its own, in any mode) is the same in both and is not counted.
LEAK_INTERVAL_MS, LEAK_SHORT_S, LEAK_LONG_S = 100, 0.5, 2.5
_FRAME = re.compile(r"^\s+#\d+ 0x[0-9a-f]+ .*\(([^()]+)\+(0x[0-9a-f]+)\)")
_LEAK = re.compile(r"^Direct leak of \d+ byte\(s\) in (\d+) object\(s\) allocated from:")


def lsan_linked(perf: str) -> bool:
    """LeakSanitizer's runtime in perf: its shared library needed, or linked in."""
    with open(perf, "rb") as f:
        data = f.read()
    return b"liblsan.so" in data or b"__lsan_do_leak_check" in data


def lsan_leaks(text: str) -> dict[tuple[str, ...], int]:
    """LeakSanitizer's report (symbolize=0) -> directly leaked objects per allocation
    stack (module+offset per frame: the same binary gives the same stack in two runs)."""
    leaks: dict[tuple[str, ...], int] = {}
    objs = 0
    frames: list[str] = []
    for line in [*text.splitlines(), ""]:
        m = _FRAME.match(line)
        if m and objs:
            frames.append(f"{os.path.basename(m.group(1))}+{m.group(2)}")
            continue
        if objs and frames:
            key = tuple(frames)
            leaks[key] = leaks.get(key, 0) + objs
        objs, frames = 0, []
        m = _LEAK.match(line)
        if m:
            objs = int(m.group(1))
    return leaks


def leaked_while_reading(perf: str, cgroups: list[str], seconds: float,
                         tmp: str) -> tuple[int, dict[tuple[str, ...], int]]:
    """`perf stat --bpf-counters -I` for `seconds`: the reads it printed, and what it
    leaked at its exit (objects per stack)."""
    # a directory of its own: $HARNESS_OUT is every test's of the boot (the variants')
    tmp = tempfile.mkdtemp(prefix=f"lsan.{seconds}.", dir=tmp)
    log = f"{tmp}/lsan"
    out = f"{tmp}/stat.csv"
    env = dict(os.environ, LSAN_OPTIONS=f"detect_leaks=1:exitcode=0:symbolize=0:log_path={log}")
    argv = [perf, "stat", "-a", "-x,", "-o", out, "-e", "task-clock", "--bpf-counters",
            "--for-each-cgroup", ",".join(cgroups), "-I", str(LEAK_INTERVAL_MS), "--",
            "sleep", str(seconds)]
    res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, timeout=120, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {res.returncode}: "
                           f"{res.stderr.decode(errors='replace')[-1000:]}")
    with open(out) as f:
        reads = len({ln.split(",")[0] for ln in f if ln.strip() and not ln.startswith("#")})
    leaks: dict[tuple[str, ...], int] = {}
    for name in os.listdir(tmp):
        if name.startswith("lsan."):
            with open(os.path.join(tmp, name)) as f:
                for k, v in lsan_leaks(f.read()).items():
                    leaks[k] = leaks.get(k, 0) + v
    return reads, leaks


def bpf_reads_leak_nothing(perf: str, cgroups: list[str], tmp: str) -> tuple[bool, str]:
    if not lsan_linked(perf):
        return True, SKIP + "this perf is not built with LeakSanitizer"
    short_reads, short = leaked_while_reading(perf, cgroups, LEAK_SHORT_S, tmp)
    long_reads, long_ = leaked_while_reading(perf, cgroups, LEAK_LONG_S, tmp)
    more = long_reads - short_reads
    diag(f"leaks: {short_reads} reads: {sum(short.values())} objects leaked in {len(short)} "
         f"stacks; {long_reads} reads: {sum(long_.values())} in {len(long_)}")
    if more < 10:
        return False, f"{short_reads} and {long_reads} reads: too few more to tell"
    grown = [(long_[k] - short.get(k, 0), k) for k in long_
             if long_[k] - short.get(k, 0) >= more / 2]
    return not grown, "\n".join(
        f"{n} more objects leaked for {more} more reads, allocated from {' '.join(k[:6])}"
        for n, k in grown)


def counted_on_cpu_list(perf: str, root: str, rel: str, v1_root: str,
                        tmp: str) -> tuple[bool, str]:
    """A busy loop in cgroup `pinned`, pinned to CPU PINNED_CPU and counted on that CPU
    only (-C), in both modes: a counter indexed by its position in the CPU list, not by
    the CPU's number, reads another CPU's value."""
    if ncpus() <= PINNED_CPU:
        return True, SKIP + f"{ncpus()} CPU(s): no CPU {PINNED_CPU} to count alone"
    for top in (root, v1_root):
        if top:
            mkcg(f"{top}/pinned")
    cg = [f"{rel}/pinned"]
    perfs: list[PerfStat] = []

    def start() -> None:
        for mode in ("plain", "bpf"):
            perfs.append(PerfStat(perf, cg, EVENTS, f"{tmp}/pinned.{mode}.csv",
                                  bpf=mode == "bpf", cpus=str(PINNED_CPU)))
            perfs[-1].wait_ready(len(EVENTS) + (mode == "bpf"))

    bad = []
    try:
        ran = run_in_cgroups(perf, {"pinned": ("busy", PINNED_S)}, root, start,
                             cpu=PINNED_CPU, v1_root=v1_root)
        time.sleep(0.3)
        stopped = [ps.stop()[1] for ps in perfs]
        usage = {"pinned": usage_usec(f"{root}/pinned") / 1000.0}
        for ps, mode, err in zip(perfs, ("plain", "bpf"), stopped, strict=True):
            with open(ps.out) as f:
                text = f.read()
            diag(f"-C {PINNED_CPU} ({mode}), exit {ps.p.returncode}: "
                 + "; ".join(ln for ln in text.splitlines() if ln and not ln.startswith("#")))
            if ps.p.returncode != 0:
                bad.append(f"{mode}: perf exit {ps.p.returncode}: {err.strip()[-300:]}")
            bad += [f"{mode}: {b}" for b in compare(parse_csv(text), rel, usage,
                                                   {"pinned": ran["pinned"].csw}, ["pinned"])]
    finally:
        kill_all(perfs)
    return not bad, "\n".join(bad)


def check(perf: str, tmp: str, *, move_late: bool = False, v1: bool = False) -> int:
    """KTAP for every check: one that could not count (perf exited before it counted,
    a cgroup could not be made) fails each check, saying why, in KTAP too."""
    ktap_header(CHECKS)
    try:
        return counted_checks(perf, tmp, move_late=move_late, v1=v1)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return ktap_result([(n, False, f"nothing counted: {exc}") for n in CHECK_NAMES])


def counted_checks(perf: str, tmp: str, *, move_late: bool, v1: bool) -> int:
    results: list[tuple[str, bool, str]] = []
    enable_perf_event_css()
    rel = f"perfcg.{os.getpid()}"
    root = f"{CG}/{rel}"
    names = list(WORK)
    v1_root = ""
    if v1:
        mount_v1()
        v1_root = f"{V1}/{rel}"
    try:
        for n in names:
            mkcg(f"{root}/{n}")
            if v1_root:
                mkcg(f"{v1_root}/{n}")
    except OSError:
        for top in (root, v1_root):
            with contextlib.suppress(OSError):
                if top:
                    rmcg_tree(top)
        if v1:
            umount_v1()
        raise
    cgroups = [f"{rel}/{n}" for n in names]
    metrics: dict[str, object] = {"events": list(EVENTS), "work": {
        n: {"kind": k, "amount": a} for n, (k, a) in WORK.items()},
        "tolerance": {"clock_rel": CLOCK_REL, "clock_abs_ms": CLOCK_ABS_MS,
                      "csw_rel": CSW_REL, "csw_abs": CSW_ABS}}
    perfs: list[PerfStat] = []

    def start() -> None:
        perfs.append(PerfStat(perf, cgroups, EVENTS, f"{tmp}/plain.csv", bpf=False))
        perfs[-1].wait_ready(len(cgroups) * len(EVENTS) * ncpus())
        perfs.append(PerfStat(perf, cgroups, EVENTS, f"{tmp}/bpf.csv", bpf=True))
        # bperf: one copy of each event per CPU plus the cgroup-switch trigger per CPU
        perfs[-1].wait_ready((len(EVENTS) + 1) * ncpus())

    try:
        try:
            ran = run_in_cgroups(perf, WORK, root, start, move_late=move_late,
                                 v1_root=v1_root)
        except BaseException:
            kill_all(perfs)
            raise
        plain, shared = perfs
        time.sleep(0.3)
        shared_cpu, shared_err = shared.stop()
        plain_cpu, plain_err = plain.stop()
        usage_ms = {n: usage_usec(f"{root}/{n}") / 1000.0 for n in names}
        try:
            no_leak = bpf_reads_leak_nothing(perf, cgroups, tmp)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            no_leak = (False, str(exc))
        try:
            on_cpu_list = counted_on_cpu_list(perf, root, rel, v1_root, tmp)
        except (OSError, RuntimeError) as exc:
            on_cpu_list = (False, str(exc))
    finally:
        # perf is gone (or never started); the workloads were waited for
        for top in (root, v1_root):
            try:
                if top:
                    rmcg_tree(top)
            except OSError as exc:
                diag(f"cannot remove {top}: {exc}")
        if v1:
            umount_v1()
    texts = {}
    for mode, path, rc, err in (("bpf", f"{tmp}/bpf.csv", shared.p.returncode, shared_err),
                                ("plain", f"{tmp}/plain.csv", plain.p.returncode, plain_err)):
        texts[mode] = open(path).read() if os.path.exists(path) else ""
        diag(f"perf stat ({mode}) exit {rc}; output:")
        for line in texts[mode].splitlines():
            if line.strip():
                diag(f"  {line}")
        for line in err.strip().splitlines()[-5:]:
            diag(f"  stderr: {line}")
    counts = {m: parse_csv(t) for m, t in texts.items()}
    # a cgroup's oracles are its subtree's: its own workload's and its descendants'
    csw = {n: sum(r.csw for m, r in ran.items() if m == n or m.startswith(n + "/"))
           for n in names}
    rusage_ms = {n: sum(r.cpu_ms for m, r in ran.items() if m == n or m.startswith(n + "/"))
                 for n in names}
    table = {}
    for n in names:
        row = {"cpu.stat_usage_ms": usage_ms[n], "rusage_cpu_ms": rusage_ms[n],
               "rusage_csw": csw[n], "wall_s": ran[n].wall_s if n in ran else 0.0}
        for m in ("bpf", "plain"):
            for ev in EVENTS:
                row[f"{m}:{ev}"] = counts[m].get((f"{rel}/{n}", ev))
        table[n] = row
        diag(f"{n}: " + ", ".join(f"{k}={v if not isinstance(v, float) else round(v, 1)}"
                                  for k, v in row.items()))
    metrics["cgroups"] = table
    metrics["perf_cpu_ms"] = {"bpf": shared_cpu, "plain": plain_cpu}
    metrics["perf_fds"] = {"bpf": shared.fds, "plain": plain.fds}

    # the workloads really ran what they were given (else the comparison means little)
    sane = []
    for n, (kind, amount) in WORK.items():
        if kind == "busy" and usage_ms[n] < 0.3 * amount * 1000:
            sane.append(f"{n}: usage {usage_ms[n]:.0f} ms for a {amount}s loop")
        if kind == "pipe" and csw[n] < 2 * amount:
            sane.append(f"{n}: {csw[n]} context switches for {amount} round trips")
        if kind == "idle" and usage_ms[n] != 0:
            sane.append(f"{n}: usage {usage_ms[n]} ms but nothing ran there")
        if kind == "parent" and not (usage_ms[n] > 0 and rusage_ms[n] > 0):
            sane.append(f"{n}: usage {usage_ms[n]} ms, its children's rusage "
                        f"{rusage_ms[n]:.0f} ms: expected both above 0")
    results.append(("workloads_ran_as_given", not sane, "\n".join(sane)))
    results.append(("both_perf_modes_counted", shared.p.returncode == 0 and plain.p.returncode == 0
                    and bool(counts["bpf"]) and bool(counts["plain"]),
                    f"exit bpf {shared.p.returncode}, plain {plain.p.returncode}"))
    for mode in ("plain", "bpf"):
        bad = compare(counts[mode], rel, usage_ms, csw, names)
        results.append((f"{mode}_counts_match_cgroup_accounting", not bad, "\n".join(bad)))
    # bpf against plain, event by event (the same run)
    bad = []
    for n in names:
        for ev in EVENTS:
            b, p = counts["bpf"].get((f"{rel}/{n}", ev)), counts["plain"].get((f"{rel}/{n}", ev))
            if b is None and p is None:
                continue
            rel_tol, abs_tol = (CLOCK_REL, CLOCK_ABS_MS) if ev in CLOCKS else (CSW_REL, CSW_ABS)
            if p is None or not within(b, p, rel_tol, abs_tol):
                bad.append(f"{n} {ev}: bpf {b}, plain {p}")
    results.append(("bpf_counts_match_per_cgroup_events", not bad, "\n".join(bad)))
    # negative control: the same checker must reject the BPF counts given to the wrong
    # cgroups
    wrong = compare(rotated(counts["bpf"], rel, names), rel, usage_ms, csw, names)
    results.append(("negative_control_wrong_cgroup_is_caught", bool(wrong),
                    "" if wrong else "the checker accepted counts attributed to the wrong "
                                     "cgroups: the workloads are too alike to tell apart"))
    metrics["negative_control_mismatches"] = len(wrong)
    results.append(("bpf_reads_leak_nothing", *no_leak))
    results.append(("cpu_list_not_from_0_counted", *on_cpu_list))
    metrics_write(metrics)
    assert tuple(n for n, _, _ in results) == CHECK_NAMES
    return ktap_result(results)


# --- bench ---

def bench(perf: str, tmp: str, sizes: list[int], rounds: int, loops: int) -> int:
    ktap_header(len(sizes))
    results: list[tuple[str, bool, str]] = []
    ev = EVENTS
    metrics: dict[str, object] = {"events": list(ev), "pipe_round_trips": loops,
                                  "workload": "perf bench sched pipe -G c0,c1 pinned to CPU 0",
                                  "rounds": rounds, "cpus": ncpus(), "sizes": {}}
    resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
    enable_perf_event_css()
    for n in sizes:
        rel = f"perfbench.{os.getpid()}.{n}"
        root = f"{CG}/{rel}"
        names = [f"c{i}" for i in range(n)]
        for name in names:
            mkcg(f"{root}/{name}")
        cgroups = [f"{rel}/{name}" for name in names]
        per: dict[str, dict[str, list[float]]] = {
            m: {"wall_s": [], "workload_cpu_ms": [], "perf_cpu_ms": [], "perf_fds": [],
                "perf_event_fds": [], "setup_s": []} for m in ("none", "plain", "bpf")}
        errors = []
        try:
            modes = ["none", "plain", "bpf"]
            for r in range(rounds):
                # each round in another order: a drift of the host's speed (TCG on a shared
                # machine) does not favour one mode
                for mode in modes[r % 3:] + modes[:r % 3]:
                    holder: list[PerfStat] = []

                    def start(mode: str = mode, holder: list[PerfStat] = holder,
                              n: int = n, cgroups: list[str] = cgroups) -> None:
                        if mode == "none":
                            return
                        ps = PerfStat(perf, cgroups, ev, f"{tmp}/bench-{mode}.csv",
                                      bpf=mode == "bpf")
                        holder.append(ps)
                        want = (n * len(ev) if mode == "plain" else len(ev) + 1) * ncpus()
                        ps.wait_ready(want, timeout=600)

                    try:
                        ran = run_in_cgroups(perf, {"c0": ("pipe2", loops)}, root, start,
                                             cpu=0, pipe_cgroups=f"{rel}/c0,{rel}/c1")
                    except BaseException:
                        kill_all(holder)
                        raise
                    ps = holder[0] if holder else None
                    per[mode]["wall_s"].append(ran["c0"].wall_s)
                    per[mode]["workload_cpu_ms"].append(ran["c0"].cpu_ms)
                    if ps is not None:
                        cpu, err = ps.stop()
                        per[mode]["perf_cpu_ms"].append(cpu)
                        per[mode]["perf_fds"].append(ps.fds)
                        per[mode]["perf_event_fds"].append(ps.perf_fds)
                        per[mode]["setup_s"].append(ps.ready_s)
                        text = open(ps.out).read() if os.path.exists(ps.out) else ""
                        got = parse_csv(text).get((f"{rel}/c1", "context-switches"))
                        # the receiver blocks once per round trip
                        if ps.p.returncode != 0 or got is None or got < loops:
                            errors.append(f"{mode} round {r}: exit {ps.p.returncode}, c1 "
                                          f"context-switches {got}; {err.strip()[-300:]}")
        finally:
            rmcg_tree(root)
        med = {m: {k: (statistics.median(v) if v else None) for k, v in d.items()}
               for m, d in per.items()}
        entry = {"median": med, "samples": per}
        if med["plain"]["perf_fds"] and med["bpf"]["perf_fds"]:
            entry["ratio_plain_over_bpf"] = {
                "perf_fds": med["plain"]["perf_fds"] / med["bpf"]["perf_fds"],
                "perf_cpu_ms": med["plain"]["perf_cpu_ms"] / max(med["bpf"]["perf_cpu_ms"], 1e-9),
            }
            # the workload's wall time and CPU time against the same workload with no perf
            # running (medians); under TCG on a shared 2-CPU host both are noisy: the
            # samples and their spread are in the metrics
            entry["slowdown"] = {m: med[m]["wall_s"] / med["none"]["wall_s"]
                                 for m in ("plain", "bpf")}
            entry["cpu_slowdown"] = {m: med[m]["workload_cpu_ms"] / med["none"]["workload_cpu_ms"]
                                     for m in ("plain", "bpf")}
        metrics["sizes"][str(n)] = entry  # type: ignore[index]
        diag(f"{n} cgroups: " + json.dumps({m: {k: (round(v, 3) if v is not None else None)
                                                  for k, v in d.items()}
                                              for m, d in med.items()}))
        if "slowdown" in entry:
            diag(f"{n} cgroups: plain/bpf fds {entry['ratio_plain_over_bpf']['perf_fds']:.1f}, "
                 f"perf cpu {entry['ratio_plain_over_bpf']['perf_cpu_ms']:.2f}; slowdown "
                 f"(wall) plain {entry['slowdown']['plain']:.3f} bpf "
                 f"{entry['slowdown']['bpf']:.3f}; (workload CPU) plain "
                 f"{entry['cpu_slowdown']['plain']:.3f} bpf {entry['cpu_slowdown']['bpf']:.3f}")
        results.append((f"bench_{n}_cgroups_counted", not errors, "\n".join(errors)))
        metrics_write(metrics)
    return ktap_result(results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--perf", default=os.environ.get("PERF", "perf"))
    ap.add_argument("--tmp", default=os.environ.get("HARNESS_OUT", "/tmp"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--cgroup-v1", action="store_true",
                   help="perf_event on a cgroup v1 hierarchy of its own (the workloads in "
                        "its cgroups and in cgroup2's of the same names, whose cpu.stat "
                        "stays the oracle): perf's v1 paths")
    c.add_argument("--move-late", action="store_true",
                   help="the workloads move themselves into their cgroups after counting "
                        "started (echo $$ > cgroup.procs; exec): a case BPF counters "
                        "attribute wrongly; the checks must catch it")
    b = sub.add_parser("bench")
    b.add_argument("--sizes", default="10,100,1000")
    b.add_argument("--rounds", type=int, default=3)
    b.add_argument("--loops", type=int, default=20000)
    args = ap.parse_args()
    # perf, built with LeakSanitizer, reports at its exit only where a check asks it to
    os.environ.setdefault("LSAN_OPTIONS", "detect_leaks=0")
    if args.cmd == "check":
        return check(args.perf, args.tmp, move_late=args.move_late, v1=args.cgroup_v1)
    return bench(args.perf, args.tmp, [int(s) for s in args.sizes.split(",")], args.rounds,
                 args.loops)


if __name__ == "__main__":
    sys.exit(main())
