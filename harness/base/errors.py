"""One error base class: what went wrong, what to do about it, the log to open, the status.

Every stage raises a subclass of `HarnessError`; the pipeline catches `HarnessError` in
one place and records `status` for the stage that stopped, and the CLI maps what is left
to exit 2. The message is written for the terminal: the first line names the cause, the
following lines the details (patch, file:line, hunk, option, dependency), then `fix:` and
`log:` lines.
"""

from __future__ import annotations

import signal
from pathlib import Path

from harness.base.model import Status


class HarnessError(Exception):
    """Base of every error the harness reports to the user (never a traceback)."""

    # The status of the cell this error stops; None: that of the stage it happened in
    # (a failed `make` is a CONFIG_ERROR in kconfig and a BUILD_ERROR in build).
    status: Status | None = None

    def __init__(self, message: str, *, fix: str = "", log: Path | None = None,
                 status: Status | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.log = log
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        lines = [self.message.rstrip()]
        if self.fix and "\nfix: " not in self.message and not self.message.startswith("fix: "):
            lines.append(f"fix: {self.fix}")
        if self.log is not None and f"log: {self.log}" not in self.message:
            lines.append(f"log: {self.log}")
        return "\n".join(lines)


class EnvironmentProblem(HarnessError):
    """The host stops the run: a full disk, an unwritable or wrong --out, a missing file."""

    status = Status.SETUP_ERROR


def from_os_error(exc: OSError, doing: str) -> EnvironmentProblem:
    """An OSError while `doing` something, told as cause and fix."""
    import errno

    where = f" ({exc.filename})" if exc.filename else ""
    cause = exc.strerror or str(exc)
    fixes = {
        errno.ENOSPC: "free space on that file system, or point --out / HARNESS_CACHE at a "
                      "bigger one",
        errno.EDQUOT: "free space within your quota, or point --out / HARNESS_CACHE elsewhere",
        errno.EACCES: "choose a directory you can write to",
        errno.EROFS: "choose a directory on a writable file system",
        errno.ENOTDIR: "a path component is a file, not a directory: choose another path",
        errno.EISDIR: "give a file, not a directory",
        errno.ENOENT: "check the path",
    }
    return EnvironmentProblem(f"{doing} failed: {cause}{where}",
                              fix=fixes.get(exc.errno or 0, "check the path and the disk"))


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM: every path out goes through the wrapper's kill path."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    """The signal behind an interruption (a Stopped, or what wraps one)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, Stopped):
            return seen.signum
        seen = seen.__cause__ or seen.__context__
    return int(signal.SIGINT)
