"""Every git command of the harness, through `proc` (one subprocess wrapper, one kill path:
a signal or a timeout stops git like any other child)."""

from __future__ import annotations

from pathlib import Path

from harness.base import proc


def git(repo: Path, *args: str, what: str, timeout: float = 600,
        env: dict[str, str] | None = None, log_path: Path | None = None) -> str:
    """`git -C REPO ARGS`, its output; CommandError (with `what` and the output) on failure."""
    return proc.check(["git", "-C", str(repo), *args], what=what, timeout=timeout, env=env,
                      log_path=log_path).output


def git_run(repo: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None,
            log_path: Path | None = None) -> proc.Completed:
    """`git -C REPO ARGS` whose failure is an answer (is it a repository, does a patch
    apply): the caller reads the exit code."""
    return proc.run(["git", "-C", str(repo), *args], timeout=timeout, env=env,
                    log_path=log_path)
