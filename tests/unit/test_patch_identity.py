"""Every patch the project carries is authored and signed off in the project's one
identity, the one its commits carry (a series' cover letter says that whoever sends it
upstream adds their own Signed-off-by: the DCO needs a real person)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_patch_is_the_projects_own() -> None:
    project = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%an <%ae>"],
                             text=True, capture_output=True, check=True).stdout.strip()
    patches = sorted((REPO / "patches").rglob("*.patch"))
    assert len(patches) > 10
    for patch in patches:
        # a mail header may be folded onto the next line (RFC 5322): unfolded first
        head = re.sub(r"\n[ \t]+", " ", patch.read_text(errors="replace").split("\n---\n", 1)[0])
        authors = re.findall(r"^From: (.+)$", head, re.M)
        signed = re.findall(r"^Signed-off-by: (.+)$", head, re.M)
        assert authors == [project], f"{patch.relative_to(REPO)}: From {authors}"
        assert signed == [project], f"{patch.relative_to(REPO)}: Signed-off-by {signed}"
    for cover in sorted((REPO / "patches").rglob("cover-letter.txt")):
        assert "adds their\nown Signed-off-by" in cover.read_text(), cover
