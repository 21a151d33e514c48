"""`harness check` on the real series and the real Debian 6.12 tree: checkpatch, every prefix
builds, no new W=1 warnings. Prefix kernels already in the store are not built again."""

from __future__ import annotations

import json
import sys

import pytest

from .conftest import REPO, harness

CHECK_TIMEOUT_S = 90 * 60  # up to 3 incremental builds, possibly behind another run's lock
SERIES = "memcg-kfuncs"


def test_memcg_kfuncs_series_is_clean_patch_by_patch(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("check") / "out"
    proc = harness("check", "--series", SERIES, "--kernel", "debian:6.12", "--out", str(out),
                   timeout=CHECK_TIMEOUT_S)
    (out.parent / "harness-output.log").write_text(proc.stdout + "\n--- stderr ---\n"
                                                   + proc.stderr)
    sys.stderr.write(proc.stdout[-4000:])
    report = out / "check.json"
    assert report.exists(), f"no check.json; harness said:\n{proc.stderr[-3000:]}"
    data = json.loads(report.read_text())
    assert data["error"] == "", data["error"]

    listed = [ln.split("#", 1)[0].strip()
              for ln in (REPO / "patches" / SERIES / "series").read_text().splitlines()]
    assert [p["name"] for p in data["patches"]] == [n for n in listed if n]
    for p in data["patches"]:
        assert p["state"] == "applied", p["name"]
        cp = p["checkpatch"]
        assert cp["clean"], (p["name"], cp["issues"])
        assert cp["lines_checked"] > 0 and "Traceback" not in cp["output"]
        assert p["build"]["built"] is True, (p["name"], p["build"]["error_lines"])
        assert p["build"]["kernel_version"].startswith("6.12.")
        assert p["w1"]["new"] == [], (p["name"], p["w1"]["new"])
        # Every .c file the patch touches really was compiled with W=1 on both sides.
        for f in p["w1"]["files"]:
            assert f["compared"], (p["name"], f["source"], f["note"])
            assert f["after"]["state"] == "compiled", (p["name"], f["source"])
            # before: compiled, or absent when this patch creates the file (every warning
            # of a new file is new)
            assert f["before"]["state"] == "compiled" or (
                f["before"]["state"] == "absent" and f["note"] == "new file"), f
            assert (out / f["after"]["log"]).exists()
        assert [f["source"] for f in p["w1"]["files"]] == p["w1"]["c_files"]
    # The C patches of this series touch mm/memcontrol.c and create mm/bpf_memcontrol.c:
    # the W=1 check was not vacuous, on both kinds of file.
    assert any("mm/memcontrol.c" in p["w1"]["c_files"] for p in data["patches"])
    assert any(f["source"] == "mm/bpf_memcontrol.c" and f["note"] == "new file"
               for p in data["patches"] for f in p["w1"]["files"])
    assert data["exit_code"] == 0 and data["status"] == "clean"
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "patch(es) clean" in proc.stdout
