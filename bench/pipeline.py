"""Benchmark: the harness against the same make and vng commands run by hand, side by side.

    .venv/bin/python bench/pipeline.py [--rounds N] [--out FILE]

Needs a harness-built 6.12 test kernel in the cache (run `harness run` once first). Each
round, in one run so machine noise hits both sides alike:
  1. rebuild after a one-line change in mm/memcontrol.c: `make bzImage` by hand in the
     persistent worktree vs the harness's build stage (`harness run --patch` that changes
     the same line, then reverting it);
  2. boot to the first guest command: `vng --run bzImage --disable-kvm -- true` by hand vs
     the harness's boot stage with no tests (guest runner, dmesg dump, power-off included).
Prints a table with the ratios and writes JSON.
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

from harness import build, paths, sources  # noqa: E402


def sh(argv: list[str], **kw: object) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   **kw)  # type: ignore[call-overload]
    return time.monotonic() - start


def harness_stage(args: list[str], out: Path, stage: str) -> float:
    subprocess.run([sys.executable, "-m", "harness", "run", *args, "--out", str(out)],
                   cwd=REPO, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = json.loads((out / "results.json").read_text())
    stages = {s["stage"]: s["duration_s"] for s in data["cells"][0]["stages"]}
    return float(stages[stage])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "pipeline-results.json")
    args = ap.parse_args()
    tree = next(p for p in (paths.cache_root() / "work").iterdir()
                if p.name.startswith("debian-6.12") and p.name.endswith("-base"))
    build_dir = paths.cache_root() / "build" / tree.name
    tools = build.toolchain()
    env = {**os.environ, **build.make_env(tools)}
    tmp = Path(paths.sub("bench"))
    patch = tmp / "0001-oneline.patch"
    rows: dict[str, list[float]] = {"make by hand": [], "harness build stage": [],
                                    "vng by hand": [], "harness boot stage": []}
    # The pristine base: the worktree may still hold a series or an earlier bench patch.
    base = sources.prepare(sources.parse_spec("debian:6.12"), log_dir=tmp).base_commit
    for r in range(args.rounds):
        # A one-line change by hand: edit, make, revert, make (the revert build is not timed).
        target = tree / "mm" / "memcontrol.c"
        argv = build.make_argv(tree, build_dir, tools, "bzImage")
        # The same lock the harness takes: no harness run moves this tree meanwhile.
        with sources.locked(f"tree-{tree.name}", wait_message="bench"):
            sources.git(tree, "checkout", "-q", "-f", base, what="checkout")
            sh(argv, env=env)  # start from an up-to-date build of the pristine base
            original = target.read_text()
            target.write_text(original.replace(
                "#include <linux/page_counter.h>",
                f"#include <linux/page_counter.h>\n/* bench {r} {time.time()} */", 1))
            rows["make by hand"].append(sh(argv, env=env))
            diff = subprocess.run(["git", "-C", str(tree), "diff"], check=True, text=True,
                                  capture_output=True).stdout
            target.write_text(original)
            sources.git(tree, "checkout", "-q", "-f", base, what="checkout")
            sh(argv, env=env)
        patch.write_text("From: bench <b@example.org>\nSubject: [PATCH] bench\n\n---\n" + diff)
        rows["harness build stage"].append(
            harness_stage(["--patch", str(patch)], tmp / f"h{r}", "build"))
        # Boot to the first guest command.
        rows["harness boot stage"].append(
            harness_stage(["--kernel", "debian:6.12", "--accel", "tcg"], tmp / f"b{r}",
                          "boot+tests"))
        # By hand: the same kernel, the same vng options, one command.
        data = json.loads((tmp / f"b{r}" / "results.json").read_text())
        argv = next(s["detail"] for s in data["cells"][0]["stages"]
                    if s["stage"] == "boot+tests")
        kernel = Path(argv.split("--run ", 1)[1].split()[0])
        bindir = Path(sys.executable).parent
        vng = [str(bindir / "vng"), "--run", str(kernel), "--verbose", "--force-9p",
               "--disable-kvm", "--memory", "2G", "--cpus", "2", "--cwd", "/", "--",
               "sh", "-c", "echo BOOTED-BY-HAND"]
        start = time.monotonic()
        out = subprocess.run(vng, timeout=300, capture_output=True, text=True,
                             env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"})
        rows["vng by hand"].append(time.monotonic() - start)
        if "BOOTED-BY-HAND" not in out.stdout + out.stderr:
            raise SystemExit(f"vng by hand did not run the command: {out.stderr[-500:]}")
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"{'what':<24} {'median s':>9}  all")
    for k, v in rows.items():
        print(f"{k:<24} {med[k]:>9.1f}  {', '.join(f'{x:.1f}' for x in v)}")
    ratios = {"build": med["harness build stage"] / med["make by hand"],
              "boot": med["harness boot stage"] / med["vng by hand"]}
    print(f"harness/by-hand: build {ratios['build']:.2f}x, boot {ratios['boot']:.2f}x")
    args.out.write_text(json.dumps({"rows": rows, "median": med, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
