"""Series from the mailing list through b4, offline: a thread made from our own
memcg-kfuncs series (v1, v2, a Reviewed-by on v2 2/4). Applying one is tested in
tests/unit/test_pipeline.py (fake tree) and tests/e2e/test_daily.py (Debian 6.12)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.kernel import mbox, series
from tests.helpers.mailthread import REVIEWER, build_thread

OURS = sorted((Path(__file__).resolve().parents[2] / "patches" / "memcg-kfuncs").glob(
    "000*.patch"))


@pytest.fixture
def thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    return build_thread(OURS, tmp_path / "thread.mbox")


def test_the_newest_revision_with_its_trailers_and_no_cover(thread: Path) -> None:
    assert mbox.is_mbox(thread) and not mbox.is_mbox(OURS[0])
    got = series.collect([f"mbox:{thread}"], [], None)
    assert [series.subject_of(p.path) for p in got] == [series.subject_of(p) for p in OURS]
    assert all("[PATCH v2 " in p.path.read_text() for p in got)
    assert [p.message_id for p in got] == [f"<harness-test-v2-{n}@example.org>"
                                           for n in range(1, 5)]
    assert [REVIEWER in p.path.read_text() for p in got] == [False, True, False, False]
    assert {p.series for p in got} == {f"mbox:{thread}"}
    # the same thread as --patch: split the same way, one patch per row
    as_patch = series.collect([], [thread], None)
    assert [p.path for p in as_patch] == [p.path for p in got]
    assert {p.series for p in as_patch} == {"--patch thread.mbox"}


def test_a_file_without_a_series_is_told(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    mails = tmp_path / "chat.mbox"
    mails.write_text("From a Mon Jan  1 00:00:00 2026\nFrom: a@b\nSubject: hi\n\nhello\n\n"
                     "From b Mon Jan  1 00:00:00 2026\nFrom: b@c\nSubject: Re: hi\n\nyo\n")
    with pytest.raises(mbox.MboxError, match="b4 found no patch series"):
        series.collect([f"mbox:{mails}"], [], None)
    with pytest.raises(mbox.MboxError, match="no such file"):
        series.collect([f"mbox:{tmp_path / 'nope'}"], [], None)


def test_lore_without_network_fails_in_time_and_says_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    started = time.monotonic()
    with pytest.raises(mbox.MboxError) as exc:
        mbox.from_lore("20251223000000.1-v2@example.org", timeout=20)
    assert time.monotonic() - started < 30
    text = str(exc.value)
    assert "b4 could not fetch the thread from lore" in text
    assert "--series mbox:FILE" in text
    with pytest.raises(mbox.MboxError, match="not a message-id"):
        mbox.from_lore("not an id")
