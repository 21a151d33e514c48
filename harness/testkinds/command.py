"""`harness run ... -- CMD ARGS`: the user's own command, run in the guest as one more test.

It gets what every test gets: its own output file, a time limit, its exit status as the
verdict (0 passes), the splats logged while it ran attributed to it, and the taint it
left. It is not named by `--test` (a shell line does not fit a test name), so `resolve`
claims nothing: the CLI builds its reference with `ref()`. It runs from the directory
`harness run` was started in, which the guest sees as the host sees it (read-only).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.guest.protocol import GuestTest
from harness.testkinds.base import BuildContext, TestRef, setup_error

DEFAULT_TIMEOUT_S = 600
KIND_NAME = "command"


def test_name(argv: Sequence[str]) -> str:
    """`cmd-<program>`: what the results and the guest's output file are called."""
    program = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(argv[0]).name) if argv else ""
    return f"cmd-{program or 'command'}"


def ref(argv: Sequence[str], *, cwd: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> TestRef:
    if not argv:
        raise setup_error("-- names no command", fix="harness run [OPTIONS] -- CMD [ARGS...]")
    if timeout_s < 1:
        raise setup_error(f"--timeout {timeout_s}: the command needs at least 1 second")
    line = shlex.join(argv)
    if "\n" in line or "\t" in line:
        raise setup_error("the command holds a tab or a newline, which the guest's plan "
                          "cannot carry", fix="put it in a script and run the script")
    return TestRef(kind=KIND_NAME, name=test_name(argv), target=line, timeout_s=timeout_s,
                   cwd=cwd)


class Command:
    name = KIND_NAME
    from_tree = False
    host_only = False

    def resolve(self, text: str) -> TestRef | None:
        return None

    def check_in_tree(self, ref: TestRef, tree: Path) -> None:
        pass

    def build(self, refs: Sequence[TestRef], ctx: BuildContext) -> Mapping[str, Path]:
        return {r.name: Path(r.cwd or "/") for r in refs}

    def plan(self, ref: TestRef, built: Path) -> list[GuestTest]:
        return [GuestTest(name=ref.name, timeout_s=ref.timeout_s or DEFAULT_TIMEOUT_S,
                          cwd=built, command=ref.target, fmt="exit", show_output=True)]


KIND = Command()
