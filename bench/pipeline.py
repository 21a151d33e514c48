"""Benchmark: the developer's loop through the harness against the same make + vng by hand.

    .venv/bin/python bench/pipeline.py [--rounds N] [--out FILE]

The loop: a one-line change in mm/memcontrol.c (on top of the memcg-kfuncs series) ->
the memcg_kfuncs selftest's result. Each round, in one run so machine noise hits both
sides alike, and in alternating order (by hand first in even rounds, the harness first in
odd ones):
  - by hand, in the harness's own worktree and O= build directory (same .config, BTF on,
    same ccache): edit the line, `make bzImage`, then `vng --run bzImage` with the same
    options the harness uses, running the already-built selftest; its KTAP must be all ok;
  - the harness: `harness run --series memcg-kfuncs --patch ONE-LINE.patch --test
    memcg_kfuncs` (a fresh change each round, so it builds too), exit 0 and PASS.
Each change is new (a counter and the time in a comment), so both sides rebuild
memcontrol.o and relink (lz4, BTF) every round. Needs the 6.12 + memcg-kfuncs kernel in the
cache (`harness run` once first). Prints a table with the ratio and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import selftests
from harness.base import paths
from harness.base.model import Accel
from harness.guest import vm
from harness.kernel import build, kconfig, series, sources

ANCHOR = "#include <linux/page_counter.h>\n"


def timed(argv: list[str], **kw: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    res = subprocess.run(argv, text=True, capture_output=True, **kw)  # type: ignore[call-overload]
    return time.monotonic() - start, res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "pipeline-results.json")
    args = ap.parse_args()
    tmp = Path(paths.sub("bench"))
    spec = sources.parse_spec("debian:6.12")
    source = sources.prepare(spec, log_dir=tmp)
    tree = sources.worktree(source, kconfig.config_slug(["base"]), log_dir=tmp)
    build_dir = paths.build_dir(tree)
    tools = build.tools()
    env = {**os.environ, **build.make_env(tools)}
    make = build.make_argv(tree, build_dir, tools, "bzImage")
    patches = series.collect(["memcg-kfuncs"], [], "6.12")
    with sources.locked(f"tree-{tree.name}", wait_message="bench"):
        series.apply(tree, source.base_commit, patches, log_dir=tmp)
        with_series = sources.git(tree, "rev-parse", "HEAD", what="rev-parse").strip()
        kernel = build.build(tree, build_dir, log_dir=tmp, tools=tools)
    manifest = selftests.resolve("memcg_kfuncs").manifest
    assert manifest is not None
    test_dir = selftests.build_own(manifest, kernel, log_dir=tmp)
    bindir = Path(sys.executable).parent
    vng_env = {**os.environ, "TERM": "dumb", "PATH": f"{bindir}:{os.environ['PATH']}"}
    rows: dict[str, list[float]] = {"by hand (make + vng)": [], "harness run": []}
    parts: dict[str, list[float]] = {"make": [], "vng": []}
    stages: list[dict[str, float]] = []
    target = tree / "mm" / "memcontrol.c"

    def one_line(r: int, side: str) -> str:
        return f"{ANCHOR}/* bench round {r} {side} {time.time():.6f} */\n"

    def by_hand(r: int) -> None:
        with sources.locked(f"tree-{tree.name}", wait_message="bench"):
            sources.git(tree, "checkout", "-q", "-f", "--detach", with_series, what="checkout")
            target.write_text(target.read_text().replace(ANCHOR, one_line(r, "hand"), 1))
            t_make, res = timed(make, env=env)
            if res.returncode != 0:
                raise SystemExit(f"make failed: {res.stdout[-2000:]}")
            image = build_dir / "arch/x86/boot/bzImage"
            argv = vm.vng_argv(kernel.__class__(boot_image=image, vmlinux=None, config=None,
                                                version=kernel.version), Accel.TCG, rwdirs=[],
                               command=["sh", "-c", f"cd {test_dir} && ./memcg_kfuncs"],
                               memory="2G", cpus=2, cwd=Path("/"))
            t_vng, out = timed(argv, env=vng_env, timeout=600)
            sources.git(tree, "checkout", "-q", "-f", "--detach", with_series, what="checkout")
        # (vng 1.42 exits 255 with this kernel whatever the command did: its own
        # exit-code channel is not there; the guest's init says what the command did.)
        text = out.stdout + out.stderr
        if "script exited with code 0" not in text or "not ok" in text \
                or "Totals: pass:" not in text:
            raise SystemExit(f"the test by hand did not pass (vng exit {out.returncode}): "
                             f"{text[-2000:]}")
        parts["make"].append(t_make)
        parts["vng"].append(t_vng)
        rows["by hand (make + vng)"].append(t_make + t_vng)

    def by_harness(r: int) -> None:
        with sources.locked(f"tree-{tree.name}", wait_message="bench"):
            sources.git(tree, "checkout", "-q", "-f", "--detach", with_series, what="checkout")
            target.write_text(target.read_text().replace(ANCHOR, one_line(r, "harness"), 1))
            diff = sources.git(tree, "diff", what="git diff")
            sources.git(tree, "checkout", "-q", "-f", "--detach", with_series, what="checkout")
        patch = tmp / f"0001-round-{r}.patch"
        patch.write_text("From: Bench <bench@example.org>\nSubject: [PATCH] mm: memcontrol: "
                         f"one-line change {r}\n\n---\n{diff}")
        out = tmp / f"run-{r}"
        t, res = timed([sys.executable, "-m", "harness", "run", "--series", "memcg-kfuncs",
                        "--patch", str(patch), "--test", "memcg_kfuncs", "--out", str(out)],
                       cwd=REPO)
        data = json.loads((out / "results.json").read_text())
        cell = data["cells"][0]
        if res.returncode != 0 or cell["status"] != "PASS":
            raise SystemExit(f"harness round {r}: {cell['status']} {cell['error']}")
        stages.append({s["stage"]: s["duration_s"] for s in cell["stages"]})
        rows["harness run"].append(t)

    for r in range(args.rounds):
        for side in ((by_hand, by_harness) if r % 2 == 0 else (by_harness, by_hand)):
            side(r)
    med = {k: statistics.median(v) for k, v in {**rows, **parts}.items()}
    print(f"{'what':<22} {'median s':>9}  rounds")
    for k, v in {**rows, **parts}.items():
        print(f"{k:<22} {med[k]:>9.1f}  {', '.join(f'{x:.1f}' for x in v)}")
    ratio = med["harness run"] / med["by hand (make + vng)"]
    print(f"harness / by hand: {ratio:.2f}x")
    stage_med = {k: statistics.median(s[k] for s in stages) for k in stages[0]}
    print("harness stages (median s): " + ", ".join(f"{k} {v:.1f}"
                                                   for k, v in stage_med.items()))
    args.out.write_text(json.dumps({
        "command": "bench/pipeline.py --rounds " + str(args.rounds),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": rows, "parts": parts,
        "median": med, "ratio": ratio, "harness_stages": stages,
        "harness_stage_median": stage_med}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
