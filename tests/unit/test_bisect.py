"""The search of `harness bisect` (pure); the runs themselves: test_pipeline, e2e."""

from __future__ import annotations

import pytest

from harness.base.model import Status
from harness.drivers import bisect
from harness.drivers.bisect import Verdict

G, B, S = Verdict.GOOD, Verdict.BAD, Verdict.SKIP


def search(truth: list[Verdict]) -> tuple[list[int], int | None, tuple[int, ...]]:
    """Bisect prefixes 0..n whose verdicts are `truth`, as bisect.run does."""
    n = len(truth) - 1
    known = {n: truth[n]}
    order = [n]
    while (k := bisect.next_prefix(known)) is not None:
        known[k] = truth[k]
        order.append(k)
    first, candidates = bisect.conclude(known)
    return order, first, candidates


def test_memcg_kfuncs_broken_shape_names_the_last_patch() -> None:
    # base and the first two patches SKIP (the kfuncs are not all there), 3 and 4 PASS,
    # the deliberately broken fifth FAILs
    order, first, _ = search([S, S, S, G, G, B])
    assert first == 5
    assert order[0] == 5 and len(order) <= 4


@pytest.mark.parametrize("bad_from", range(1, 9))
def test_every_culprit_is_found_in_log_steps(bad_from: int) -> None:
    truth = [G] * bad_from + [B] * (9 - bad_from)
    order, first, _ = search(truth)
    assert first == bad_from
    assert len(order) <= 5  # 1 + ceil(log2(9))


def test_skips_around_the_culprit_leave_candidates_not_a_guess() -> None:
    _, first, candidates = search([G, S, S, B, B])
    assert first is None and candidates == (1, 2, 3)
    _, first, candidates = search([S, S, B])  # no good prefix at all
    assert first is None and candidates == (1, 2)


def test_bad_on_the_base_is_said() -> None:
    assert search([B, B, B])[1] == 0


def test_statuses_are_sorted_into_verdicts() -> None:
    good, bad = bisect.DEFAULT_GOOD, bisect.DEFAULT_BAD
    assert bisect.verdict_of(Status.PASS, good, bad) is G
    for s in (Status.FAIL, Status.CRASHED, Status.TIMEOUT, Status.FLAKY):
        assert bisect.verdict_of(s, good, bad) is B
    for s in (Status.SKIP, Status.BUILD_ERROR, Status.XFAIL):
        assert bisect.verdict_of(s, good, bad) is S
