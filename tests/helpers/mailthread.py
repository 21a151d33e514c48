"""A mailing-list thread made from one of our series, as lore would serve it: v1 and v2 of
the series (each with its cover letter, patches threaded under it) and a reply to v2's
second patch carrying a Reviewed-by. What `--series mbox:FILE` and `--patch MBOX` are
tested with (tests/unit/test_mbox.py, tests/e2e/test_daily.py), offline."""

from __future__ import annotations

import email
import email.policy
import mailbox
import re
from email.message import EmailMessage
from pathlib import Path

REVIEWER = "Reviewed-by: Jane Reviewer <jane@example.org>"


def _msgid(version: int, number: int) -> str:
    return f"<harness-test-v{version}-{number}@example.org>"


def build_thread(patches: list[Path], out: Path, *, cover: str = "memcg kfuncs") -> Path:
    """out: an mbox with v1 and v2 of `patches` (v2 identical but for its subjects) and a
    reviewer's reply to v2 patch 2."""
    box = mailbox.mbox(str(out), create=True)
    total = len(patches)
    for version in (1, 2):
        tag = "PATCH" if version == 1 else "PATCH v2"
        c = EmailMessage()
        c["From"] = "Seed 605c62d7 maintainers <maintainers@users.noreply.a-seed-605c62d7.example>"
        c["Subject"] = f"[{tag} 0/{total}] {cover}"
        c["Date"] = f"Mon, {22 + version} Nov 2026 10:00:00 +0000"
        c["Message-Id"] = _msgid(version, 0)
        c.set_content(f"The cover letter of v{version}.\n")
        box.add(c)
        for n, path in enumerate(patches, 1):
            msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            subject = re.sub(r"^\[PATCH[^]]*\]\s*", "", str(msg["Subject"]).replace("\n", ""))
            del msg["Subject"]
            msg["Subject"] = f"[{tag} {n}/{total}] {subject}"
            del msg["Date"]
            msg["Date"] = f"Mon, {22 + version} Nov 2026 10:0{n}:00 +0000"
            msg["Message-Id"] = _msgid(version, n)
            msg["In-Reply-To"] = _msgid(version, 0)
            msg["References"] = _msgid(version, 0)
            box.add(msg)
    reply = EmailMessage()
    reply["From"] = "Jane Reviewer <jane@example.org>"
    reply["Subject"] = f"Re: [PATCH v2 2/{total}] (review)"
    reply["Date"] = "Tue, 24 Nov 2026 09:00:00 +0000"
    reply["Message-Id"] = "<harness-test-review@example.org>"
    reply["In-Reply-To"] = _msgid(2, 2)
    reply["References"] = f"{_msgid(2, 0)} {_msgid(2, 2)}"
    reply.set_content(f"Looks right to me.\n\n{REVIEWER}\n")
    box.add(reply)
    box.flush()
    box.close()
    return out
