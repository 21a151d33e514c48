"""Series from the mailing list, through b4 (the tool kernel people use): a thread saved as
an mbox (`--series mbox:FILE`, or an mbox given to `--patch`) or fetched from lore
(`--series lore:MSGID`).

`b4 am` picks the newest revision in the thread, applies the trailers that replies carry
(Reviewed-by, Acked-by, ...), and leaves the cover letter out; its patches become the
series, one per file, each keeping the Message-Id of the mail it came in (results.json
has it per patch). An mbox is worked on offline, and once: the patches are kept under
the cache by the mbox's content. lore needs the network: b4 gets a time limit and its
failure is told with what to do instead.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
from pathlib import Path

from harness.base import atomic, paths, proc
from harness.base.errors import HarnessError
from harness.base.model import Status

log = logging.getLogger(__name__)

LORE_TIMEOUT_S = 60
B4_TIMEOUT_S = 300
_MBOX_FROM = re.compile(rb"^From \S+ ", re.MULTILINE)
_COVER = re.compile(rb"^Subject:\s*\[[^]]*\b0+/\d+\]", re.MULTILINE | re.IGNORECASE)


class MboxError(HarnessError):
    status = Status.SETUP_ERROR


def is_mbox(path: Path) -> bool:
    """More than one mail in the file, or a cover letter: a thread, not one patch."""
    with path.open("rb") as f:
        head = f.read(4 << 20)
    return len(_MBOX_FROM.findall(head)) > 1 or bool(_COVER.search(head))


def _patches_of(outdir: Path) -> list[Path]:
    return sorted(outdir.glob("*.maildir/new/*")) + sorted(outdir.glob("*.maildir/cur/*"))


def _b4(argv: list[str], *, timeout: float, log_path: Path) -> proc.Completed:
    return proc.run([proc.require("b4"), *argv], timeout=timeout, log_path=log_path)


def _store(found: list[Path], dest: Path, b4_log: Path) -> list[Path]:
    """b4's maildir files as NNNN-<name>.patch in `dest`, atomically."""
    with atomic.directory(dest, prefix=".mbox-") as scratch:
        for i, eml in enumerate(found, 1):
            name = re.sub(r"^\d+_", "", eml.name).removesuffix(".eml")
            shutil.copyfile(eml, scratch / f"{i:04d}-{name[:60]}.patch")
        shutil.copyfile(b4_log, scratch / "b4.log")
    return sorted(dest.glob("*.patch"))


def from_mbox(mbox: Path) -> list[Path]:
    """The patches of the newest revision in the thread, trailers applied, no cover."""
    if not mbox.is_file():
        raise MboxError(f"mbox:{mbox}: no such file",
                        fix="give the path of a thread saved as an mbox (b4 mbox, or lore's "
                            "'mbox.gz' link, unpacked)")
    key = hashlib.sha256(mbox.read_bytes()).hexdigest()[:16]
    dest = paths.sub("mbox") / key
    if dest.is_dir():
        return sorted(dest.glob("*.patch"))
    work = paths.sub("mbox") / f".b4-{key}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    b4_log = work / "b4.log"
    res = _b4(["--offline-mode", "am", "--no-cover", "-M", "-m", str(mbox), "-o",
               str(work / "out")], timeout=B4_TIMEOUT_S, log_path=b4_log)
    found = _patches_of(work / "out")
    if not res.ok or not found:
        raise MboxError(f"b4 found no patch series in {mbox}: {res.tail(8).strip()}",
                        fix="is it a thread with [PATCH] mails? b4 am -m FILE says more",
                        log=b4_log)
    chosen = re.search(r"Will use the latest revision: (v\d+)", res.output)
    log.info("%s: %d patches%s (b4)", mbox, len(found),
             f", revision {chosen.group(1)}" if chosen else "")
    patches = _store(found, dest, b4_log)
    shutil.rmtree(work, ignore_errors=True)
    return patches


def from_lore(msgid: str, *, timeout: float = LORE_TIMEOUT_S) -> list[Path]:
    """The thread of `msgid` fetched from lore by b4, then as from_mbox()."""
    msgid = msgid.strip().strip("<>")
    if not re.fullmatch(r"[^\s/]+@[^\s/]+", msgid):
        raise MboxError(f"lore:{msgid}: not a message-id",
                        fix="lore:MSGID, e.g. lore:20251223-name-v2-1-abc@example.org")
    key = hashlib.sha256(msgid.encode()).hexdigest()[:16]
    work = paths.sub("mbox") / f".lore-{key}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    b4_log = work / "b4.log"
    res = _b4(["mbox", "-n", "thread.mbox", "-o", str(work), msgid], timeout=timeout,
              log_path=b4_log)
    thread = work / "thread.mbox"
    if not res.ok or not thread.is_file():
        why = (f"no answer within {timeout:.0f}s" if res.timed_out
               else res.tail(4).strip() or f"b4 exited {res.returncode}")
        raise MboxError(f"lore:{msgid}: b4 could not fetch the thread from lore: {why}",
                        fix="where the network allows: b4 mbox MSGID, then --series "
                            "mbox:FILE with the mbox it saves", log=b4_log)
    return from_mbox(thread)
