"""Test kinds as backends behind one protocol (`base.TestKind`): resolve, check against the
tree, build, plan. A `--test` string goes to the first kind that claims it; our own tests
(a name or a directory) are the kind of last resort.

- `own`: `selftests/<name>/` or any directory with `test.toml`
- `kselftest:TARGET[:TEST,...]`: the tree's tools/testing/selftests/TARGET
- `test_progs:TEST`: one test of the tree's BPF selftests
- `command`: `harness run ... -- CMD ARGS` (never named by a `--test` string)
- `perf`: an own test whose test.toml asks for the tree's perf (`[build] tools = ["perf"]`)
"""

from __future__ import annotations

from harness.testkinds.base import BuildContext, Manifest, SelftestError, TestKind, TestRef
from harness.testkinds.command import KIND as COMMAND
from harness.testkinds.command import ref as command_ref
from harness.testkinds.kselftest import KIND as KSELFTEST
from harness.testkinds.own import KIND as OWN
from harness.testkinds.perf import KIND as PERF
from harness.testkinds.test_progs import KIND as TEST_PROGS

KINDS: tuple[TestKind, ...] = (KSELFTEST, TEST_PROGS, COMMAND, PERF, OWN)
BY_NAME: dict[str, TestKind] = {k.name: k for k in KINDS}

__all__ = [
    "BY_NAME",
    "KINDS",
    "PERF",
    "TEST_PROGS",
    "BuildContext",
    "Manifest",
    "SelftestError",
    "TestKind",
    "TestRef",
    "command_ref",
    "kind_of",
    "resolve",
]


def resolve(text: str) -> TestRef:
    """What a --test or matrix `tests` entry names; SETUP_ERROR (with the fix) if nothing."""
    for kind in KINDS:
        ref = kind.resolve(text)
        if ref is not None:
            return ref
    raise AssertionError("the own kind resolves or raises")  # pragma: no cover


def kind_of(ref: TestRef) -> TestKind:
    return BY_NAME[ref.kind]
