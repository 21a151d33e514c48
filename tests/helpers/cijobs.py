"""Generated CI files read back as what their jobs would run (tests/unit/test_workflow.py,
tests/unit/test_gitlab.py): each `harness run` line of a job's script is parsed by the
harness's own argument parser, so a count of the kernels the build jobs build is a count
of what `harness run` would be asked to build, not of strings that look like it."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass

from harness import cli
from harness.drivers import shard


@dataclass(frozen=True, kw_only=True)
class Built:
    """A kernel a job builds: what shard.kernel_of compares, the cells whose tests it
    builds with it, and where its run goes."""

    kernel: tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], str]
    cells: tuple[str, ...]
    out: str


def harness_runs(script: str) -> list[argparse.Namespace]:
    """Every `harness run ...` line of a shell script, parsed as the harness parses it."""
    found = []
    for line in script.splitlines():
        if "/harness run " not in line:
            continue
        words = shlex.split(line, comments=True)
        if len(words) > 1 and words[0].endswith("/harness") and words[1] == "run":
            found.append(cli.parse_args(words[1:]))
    return found


def builds(script: str) -> list[Built]:
    """The kernels a script builds: its --build-only runs (a run without it is a test,
    whose kernel comes from the store), each of the cells of one kernel."""
    found = []
    for a in harness_runs(script):
        if a.build_only:
            cells, _what = cli.planned(a)
            kernels = {shard.kernel_of(c) for c in cells}
            assert len(kernels) == 1, [c.name for c in cells]
            found.append(Built(kernel=kernels.pop(), cells=tuple(c.name for c in cells),
                               out=str(a.out)))
    return found
