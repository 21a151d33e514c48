"""--bisect-exit: the exit code `git bisect run` needs, from each cell's status."""

from __future__ import annotations

import pytest

from harness.base.model import CellResult, StageTiming, Status
from harness.output import results


def cell(status: Status, stage: str = "boot+tests") -> CellResult:
    return CellResult(cell="c", kernel="k", kernel_version="6.12", status=status, patches=(),
                      config=None, stages=(StageTiming(stage=stage, status=status,
                                                       duration_s=1.0),), tests=(),
                      arch="x86_64", toolchain="gcc")


@pytest.mark.parametrize(("status", "stage", "code"), [
    (Status.PASS, "boot+tests", 0), (Status.XPASS, "boot+tests", 0),
    (Status.FAIL, "boot+tests", 1), (Status.CRASHED, "boot+tests", 1),
    (Status.TIMEOUT, "boot+tests", 1), (Status.FLAKY, "boot+tests", 1),
    (Status.SKIP, "boot+tests", 1), (Status.NO_TESTS, "boot+tests", 1),
    (Status.BOOT_ERROR, "boot+tests", 1),  # the kernel did not boot: the commit is bad
    (Status.PATCH_CONFLICT, "series", 125), (Status.CONFIG_ERROR, "kconfig", 125),
    (Status.BUILD_ERROR, "build", 125),
    (Status.BOOT_ERROR, "accel", 128),  # QEMU or KVM did not start: not the commit
    (Status.SETUP_ERROR, "source", 128), (Status.INTERRUPTED, "build", 128),
])
def test_bisect_exit_codes(status: Status, stage: str, code: int) -> None:
    assert results.bisect_exit_code([cell(status, stage)]) == code


def test_the_most_serious_cell_wins() -> None:
    assert results.bisect_exit_code([cell(Status.PASS), cell(Status.BUILD_ERROR, "build"),
                                     cell(Status.FAIL)]) == 125
    assert results.bisect_exit_code([cell(Status.BUILD_ERROR, "build"),
                                     cell(Status.SETUP_ERROR, "source")]) == 128
