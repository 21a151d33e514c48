"""Stages timed and recorded as they finish, shared by every driver (run, check, mutate).

A stage that stops records the status of its error (`HarnessError.status`, else the
stage's own), an OSError becomes an `EnvironmentProblem` naming the cause and the fix, a
signal records INTERRUPTED. Nothing is recorded as PASS before it has passed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from harness.base.errors import HarnessError, from_os_error
from harness.base.model import StageTiming, Status

log = logging.getLogger(__name__)


@dataclass
class StageLog:
    label: str  # in each log line, e.g. the cell's name
    stages: list[StageTiming] = field(default_factory=list)
    current: str = ""  # the stage running now, "" between stages
    announce: bool = True  # log each stage's start (a driver with its own lines says no)
    pending_parts: tuple[tuple[str, float], ...] = ()  # the running stage's, when told

    def parts(self, parts: tuple[tuple[str, float], ...]) -> None:
        """Where the running stage's time went (recorded with it when it ends)."""
        self.pending_parts = parts

    @contextmanager
    def stage(self, name: str, error_status: Status) -> Iterator[None]:
        start = time.monotonic()
        self.current = name
        if self.announce:
            log.info("[%s] %s", self.label, name)
        try:
            yield
        except HarnessError as exc:
            if exc.status is None:
                exc.status = error_status
            self.record(name, exc.status, time.monotonic() - start, str(exc))
            raise
        except OSError as exc:
            problem = from_os_error(exc, f"[{name}]")
            self.record(name, Status.SETUP_ERROR, time.monotonic() - start, str(problem))
            raise problem from exc
        except KeyboardInterrupt:
            self.record(name, Status.INTERRUPTED, time.monotonic() - start,
                        "interrupted by a signal")
            raise
        self.record(name, Status.PASS, time.monotonic() - start)
        self.current = ""

    def record(self, name: str, status: Status, duration_s: float, detail: str = "") -> None:
        parts = self.pending_parts
        if parts and (rest := duration_s - sum(s for _, s in parts)) >= 0.01:
            parts = (*parts, ("other", round(rest, 2)))  # the stage's time no part names
        self.stages.append(StageTiming(stage=name, status=status, duration_s=duration_s,
                                       detail=detail, parts=parts))
        self.pending_parts = ()

    def where(self) -> str:
        """Where a signal stopped the driver: in a stage, or between two."""
        return self.current or (f"after {self.stages[-1].stage}" if self.stages else
                                "before the first stage")
