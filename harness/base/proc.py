"""The one subprocess wrapper: every external program runs through `run()`.

It owns what must be true of every child: an argv list (never a shell string), the
command line logged with shlex.join, output saved to a file as it arrives, a timeout,
its own process group, and one kill path (SIGTERM to the group, a grace period,
SIGKILL, reap) that runs on timeout, on an early-stop match, on Ctrl-C and on any
exception, so no qemu or make survives the harness.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pty
import re
import select
import selectors
import shlex
import signal
import subprocess
import termios
import threading
import time
import tty
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.base import atomic, host, paths
from harness.base import sandbox as sandboxes
from harness.base.errors import HarnessError
from harness.base.model import Status

log = logging.getLogger(__name__)

KILL_GRACE_S = 3.0

# Live process groups, so a signal handler can kill them all (see `kill_all`).
_live: dict[int, subprocess.Popen[bytes]] = {}
_live_lock = threading.Lock()


class ToolMissingError(HarnessError):
    """An external program is not installed."""

    status = Status.SETUP_ERROR

    def __init__(self, program: str, fix: str) -> None:
        super().__init__(f"'{program}' is not installed", fix=fix)
        self.program = program


@dataclass(frozen=True, kw_only=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int | None  # None when killed
    output: str
    duration_s: float
    timed_out: bool = False
    stopped_by: str | None = None  # the early-stop pattern that matched, if any

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.stopped_by is None

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


@dataclass(frozen=True, kw_only=True)
class Quiet:
    """A child that stops making progress, told by its output: until a line matches
    `until` (a guest's "I am ready"), `seconds` without any output ends it, and so does a
    line matching one of `stop` (the kernel reporting a stall), `grace_s` later, so that
    what it prints right after (the stall's stack) is kept. After `until`, neither."""

    seconds: float
    until: re.Pattern[str]
    stop: tuple[re.Pattern[str], ...] = ()
    grace_s: float = 5.0


# What a program prints when a write failed for want of space: strerror(ENOSPC) or
# strerror(EDQUOT) after a colon, as perror(), gcc, ld, cp and Python ("[Errno 28] ...")
# print it, and git's own words ("write error. Out of diskspace"). Not the words alone: a
# compiler quoting errno-base.h's "/* No space left on device */" is no full disk.
_DISK_FULL = re.compile(r"(?::|\]) (?:No space left on device|Disk quota exceeded)\b|"
                        r"write error\. Out of diskspace")
# What a program prints is the tree's to choose: the disk must agree. After a write found
# no space, what frees again is what the failed program removes (an object, an image): a
# file system with less than this free now was full a moment ago.
DISK_LOW = 10 * 2**30


def disk_full(output: str) -> str:
    """The line of this output that says a write failed for want of space, or ""."""
    for line in output.splitlines():
        if _DISK_FULL.search(line):
            return line.strip()[:300]
    return ""


DISK_FULL_FIX = ("free space there (`harness cache` lists what the harness keeps, "
                 "`harness cache prune --max-size SIZE` evicts down to SIZE), or point "
                 "HARNESS_CACHE / TMPDIR / --out at a bigger disk, then run again")


def free_space(log_path: Path | None) -> dict[str, int]:
    """Bytes free on each file system a run writes (the cache, the temporary directory,
    the log's), by the first of those paths on it."""
    import shutil
    import tempfile

    from harness.base import paths

    found: dict[str, int] = {}
    seen: set[int] = set()
    places: tuple[Callable[[], Path | None], ...] = (
        paths.cache_root, lambda: Path(tempfile.gettempdir()),
        lambda: log_path.parent if log_path else None)
    for where in places:  # each found inside the suppress: a full disk can fail any
        with contextlib.suppress(OSError):
            path = where()
            if path is None or (dev := path.stat().st_dev) in seen:
                continue
            seen.add(dev)
            found[str(path)] = shutil.disk_usage(path).free
    return found


def disk_full_cause(output: str, log_path: Path | None) -> str:
    """"" unless this output says a write found no space and a file system the run writes
    has less than DISK_LOW free now; else the first line of a disk-full error: what the
    program said and the free space on each."""
    said = disk_full(output)
    if not said:
        return ""
    free = free_space(log_path)
    if not any(n < DISK_LOW for n in free.values()):
        return ""
    return "a disk is full ({}); now {}".format(
        said, ", ".join(f"{n / 2**30:.1f}G free under {p}" for p, n in free.items()))


def _said(result: Completed, log_path: Path | None) -> str:
    """What a command printed: kept, or (kept out of memory) its log's end."""
    if result.output or log_path is None:
        return result.output
    with contextlib.suppress(OSError), log_path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 2**20))
        return fh.read().decode(errors="replace")
    return ""


class DiskFullError(HarnessError):
    """A step failed because a write found no space: no verdict on what it built."""

    status = Status.SETUP_ERROR


def check_space(result: Completed, what: str, log_path: Path | None) -> None:
    """Raise DiskFullError when this failed command failed for want of space, so that the
    caller's own reading of the failure (a conflict, a build error) is not made of it."""
    if not result.ok and (full := disk_full_cause(_said(result, log_path), log_path)):
        raise DiskFullError(f"{full}\n{what} failed (exit {result.returncode})",
                            fix=DISK_FULL_FIX, log=log_path)


class CommandError(HarnessError):
    """A command failed; carries the command, its exit and the end of its output.

    A command that failed because a disk was full says so first, and is a set-up error
    whatever the stage (a full disk is no verdict on the series: git's checkout failing
    with "Out of diskspace" was once reported as the series' PATCH_CONFLICT)."""

    def __init__(self, what: str, result: Completed, log_path: Path | None = None) -> None:
        status = (
            f"timed out after {result.duration_s:.0f}s"
            if result.timed_out
            else f"exit {result.returncode}"
        )
        text = f"{what} failed: {status}\n$ {shlex.join(result.argv)}\n{result.tail(15)}"
        full = disk_full_cause(_said(result, log_path), log_path)
        if full:
            text = f"{full}\n{text}"
        super().__init__(text, fix=DISK_FULL_FIX if full else "", log=log_path,
                         status=Status.SETUP_ERROR if full else None)
        self.result = result
        self.log_path = log_path


def which(program: str) -> str | None:
    from shutil import which as _which

    found = _which(program)
    if found is None and program in ("vng", "b4"):
        # The console script lives next to our interpreter inside the venv.
        import sys

        candidate = Path(sys.executable).parent / program
        if candidate.exists():
            return str(candidate)
    return found


def require(program: str) -> str:
    path = which(program)
    if path is None:
        raise ToolMissingError(program, host.fix_for(program))
    return path


def version_line(program: str) -> str:
    """The first line of the program's version output ("" when it is not installed)."""
    path = which(program)
    if path is None:
        return ""
    said = version_output(path, "version" if program == "bpftool" else "--version")
    first = (said or "").splitlines()
    return first[0] if first else "?"


VERSIONS_FILE = "program-versions.json"  # in the cache: "path|size|mtime|flag" -> output


def _names_itself(name: str, target: str) -> bool:
    """Whether the file a program's name resolves to is that program: its name without a
    version suffix is in the target's (gcc -> x86_64-linux-gnu-gcc-12, clang-N ->
    clang, ld -> x86_64-linux-gnu-ld.bfd), not a wrapper's (gcc -> ccache)."""
    return re.sub(r"-[\d.]+$", "", name) in target


def version_output(program: str, flag: str = "--version") -> str | None:
    """What `PROGRAM FLAG` prints, stripped; None when it fails or is not installed.
    Remembered by what the program is (its resolved path, size and modification time), as
    build and configuration keys ask a run's compiler, linker, pahole and QEMU each time:
    5-50 ms each (QEMU's loading 46 ms), a tenth of a second of every developer's run."""
    path = which(program)
    if path is None:
        return None
    resolved = Path(path).resolve()
    try:
        st = resolved.stat()
    except OSError:
        return None
    # a wrapper (ccache's gcc, busybox's applets) answers for what it runs, which its own
    # identity does not show: asked each time
    key = f"{path}|{resolved}|{st.st_size}|{st.st_mtime_ns}|{flag}" \
        if _names_itself(Path(path).name, resolved.name) else ""
    memo_file = paths.cache_root() / VERSIONS_FILE
    memo: dict[str, object] = {}
    if key:
        with contextlib.suppress(OSError, ValueError):
            memo = dict(json.loads(memo_file.read_text()))
        if isinstance(said := memo.get(key), str):
            return said
    res = run([path, flag], timeout=30)
    if not res.ok:
        return None
    said = res.output.strip()
    if key:
        memo[key] = said
        # best effort: a version not remembered is asked again next time
        with contextlib.suppress(OSError):
            atomic.write_text(memo_file, json.dumps(memo, indent=1) + "\n")
    return said


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """The kill path: SIGTERM the group, wait a grace period, SIGKILL, reap."""
    if proc.poll() is not None:
        # The leader is gone but its children (qemu under vng) may not be.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        log.error("process group %d did not die after SIGKILL", proc.pid)


def kill_all() -> None:
    """Kill every live child process group (used by the SIGINT/SIGTERM handler)."""
    with _live_lock:
        procs = list(_live.values())
    for proc in procs:
        _kill_group(proc)


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None,
    log_path: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    stop_patterns: Sequence[re.Pattern[str]] = (),
    stdin_data: bytes | None = None,
    keep_output: bool = True,
    sandbox: sandboxes.Reach | None = None,
    quiet: Quiet | None = None,
) -> Completed:
    """Run argv to completion or until the timeout, streaming its output to log_path.

    stdout and stderr are merged, in the order the child wrote them. `on_line` sees
    every complete line as it arrives (progress). A line matching one of
    `stop_patterns` kills the process at once (e.g. QEMU saying KVM failed). `quiet`:
    a child silent for too long before it is ready, or reporting a stall, is killed
    (`stopped_by` says which).
    `sandbox`: the command's code comes from a kernel tree or a series; it runs in
    bubblewrap with that reach (base/sandbox.py), unless the run's policy is off.
    """
    args = tuple(os.fspath(a) for a in argv)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    popen_args: Sequence[str] = args
    confined = sandboxes.confine(sandbox, args, env=env, cwd=cwd) if sandbox else None
    if confined is not None:
        if os.sep not in args[0] and which(args[0]) is None:
            raise ToolMissingError(args[0], host.fix_for(args[0]))
        popen_args, full_env = confined
    shown = ("[sandbox] " if confined is not None else "") + shlex.join(args)
    log.debug("$ %s", shown)
    logf = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = log_path.open("ab")
        logf.write(f"$ {shown}\n".encode())
        logf.flush()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            popen_args,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        if logf:
            logf.close()
        raise ToolMissingError(args[0], host.fix_for(args[0])) from exc
    with _live_lock:
        _live[proc.pid] = proc
    chunks: list[bytes] = []
    timed_out = False
    stopped_by: str | None = None
    partial = b""
    watch = _Watch(quiet, start) if quiet is not None else None
    try:
        if stdin_data is not None and proc.stdin is not None:
            proc.stdin.write(stdin_data)
            proc.stdin.close()
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        fd = proc.stdout.fileno()
        while True:
            remaining = None if timeout is None else timeout - (time.monotonic() - start)
            if remaining is not None and remaining <= 0:
                timed_out = True
                break
            events = sel.select(timeout=min(remaining, 1.0) if remaining is not None else 1.0)
            if watch is not None and (why := watch.expired(time.monotonic())):
                stopped_by = why
                break
            if not events:
                if proc.poll() is not None:
                    # Leader exited; output may still be held open by a grandchild.
                    data = _read_nonblocking(fd)
                    if not data:
                        break
                else:
                    continue
            else:
                data = os.read(fd, 65536)
                if not data:
                    break
            if logf:
                logf.write(data)
                logf.flush()
            if keep_output:
                chunks.append(data)
            if on_line or stop_patterns or watch:
                partial += data
                *lines, partial = partial.split(b"\n")
                if watch is not None:
                    watch.output(time.monotonic())
                for raw in lines:
                    line = raw.decode(errors="replace")
                    if watch is not None:
                        watch.line(line, time.monotonic())
                    if on_line:
                        on_line(line)
                    for pat in stop_patterns:
                        if stopped_by is None and pat.search(line):
                            stopped_by = pat.pattern  # the first match is the cause
                if stopped_by:
                    break
        sel.close()
        if timed_out or stopped_by:
            _kill_group(proc)
        else:
            try:
                proc.wait(timeout=max(1.0, (timeout or 60) - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
    finally:
        # Any exception (KeyboardInterrupt included) ends in the same kill path.
        _kill_group(proc)
        with _live_lock:
            _live.pop(proc.pid, None)
        if proc.stdout:
            proc.stdout.close()
        if logf:
            if timed_out:
                logf.write(f"\n[harness: killed after {timeout}s timeout]\n".encode())
            if stopped_by and watch is not None and watch.stopped:
                logf.write(f"\n[harness: killed: {stopped_by}]\n".encode())
            elif stopped_by:
                logf.write(f"\n[harness: killed, output matched {stopped_by!r}]\n".encode())
            logf.close()
    duration = time.monotonic() - start
    rc = None if (timed_out or stopped_by) else proc.returncode
    return Completed(
        argv=args,
        returncode=rc,
        output=b"".join(chunks).decode(errors="replace"),
        duration_s=duration,
        timed_out=timed_out,
        stopped_by=stopped_by,
    )


class _Watch:
    """`Quiet`'s state while a child runs (times from time.monotonic)."""

    def __init__(self, quiet: Quiet, start: float) -> None:
        self.quiet = quiet
        self.last = start  # the last output
        self.ready = False
        self.stall: tuple[str, float] | None = None  # the stall line and when it came
        self.stopped = False

    def output(self, now: float) -> None:
        self.last = now

    def line(self, line: str, now: float) -> None:
        if self.ready:
            return
        if self.quiet.until.search(line):
            self.ready = True
        elif self.stall is None and any(p.search(line) for p in self.quiet.stop):
            self.stall = (line.strip(), now)

    def expired(self, now: float) -> str | None:
        """Why the child is to be stopped now, or None."""
        if self.ready:
            return None
        why = None
        if self.stall is not None and now - self.stall[1] >= self.quiet.grace_s:
            why = f"a stall reported: {self.stall[0][:200]}"
        elif now - self.last >= self.quiet.seconds:
            why = f"no output for {self.quiet.seconds:.0f}s"
        self.stopped = why is not None
        return why


def _read_nonblocking(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""
    finally:
        os.set_blocking(fd, True)


def check(
    argv: Sequence[str | os.PathLike[str]],
    *,
    what: str,
    timeout: float | None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    stdin_data: bytes | None = None,
    sandbox: sandboxes.Reach | None = None,
) -> Completed:
    """`run`, raising CommandError unless the command exited 0."""
    result = run(
        argv,
        cwd=cwd,
        env=env,
        timeout=timeout,
        log_path=log_path,
        on_line=on_line,
        stdin_data=stdin_data,
        sandbox=sandbox,
    )
    if not result.ok:
        raise CommandError(what, result, log_path)
    return result


def interactive(argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None,
                log_path: Path | None = None) -> int | None:
    """Run argv on a terminal of its own, wired to ours, until it exits; its exit code.

    What the user types goes to it unchanged (our terminal is raw meanwhile: Ctrl-C is a
    byte for the program, not a signal for us); what it prints goes to our terminal and,
    as it arrives, to `log_path`. The child leads its own session and process group on
    that terminal, so the one kill path applies to it as to any other child.
    """
    args = tuple(os.fspath(a) for a in argv)
    log.debug("$ %s", shlex.join(args))
    master, slave = pty.openpty()
    # A transparent line: no echo, no CR/LF translation, no signals from its keys here. The
    # program's own terminal (the guest's console) does all of that, once.
    tty.setraw(slave)
    if os.isatty(0):
        with contextlib.suppress(OSError):
            fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))
    logf = log_path.open("ab") if log_path is not None else None
    try:
        # preexec_fn is safe here: the harness runs no other thread while a shell is open
        proc = subprocess.Popen(args, env={**os.environ, **(env or {})}, stdin=slave,
                                stdout=slave, stderr=slave, start_new_session=True,
                                preexec_fn=_take_terminal)
    except FileNotFoundError as exc:
        os.close(master)
        raise ToolMissingError(args[0], host.fix_for(args[0])) from exc
    finally:
        os.close(slave)
    with _live_lock:
        _live[proc.pid] = proc
    saved = termios.tcgetattr(0) if os.isatty(0) else None
    try:
        if saved is not None:
            tty.setraw(0)
        reading = [master, 0]
        while master in reading:
            for fd in select.select(reading, [], [], 1.0)[0]:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # EIO: the child's side of the terminal is closed
                    data = b""
                if fd == master and data:
                    os.write(1, data)
                    if logf is not None:
                        logf.write(data)
                        logf.flush()
                elif data:
                    os.write(master, data)
                else:
                    reading.remove(fd)
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if saved is not None:
            termios.tcsetattr(0, termios.TCSADRAIN, saved)
        _kill_group(proc)
        with _live_lock:
            _live.pop(proc.pid, None)
        os.close(master)
        if logf is not None:
            logf.close()
    return proc.returncode


def _take_terminal() -> None:
    """In the child, after setsid: its stdin (the new terminal) becomes its controlling
    terminal, so the guest's console gets job control (Ctrl-C stops the guest's program)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
