"""Benchmark: the developer's loop through the harness against the same make + vng by hand.

    .venv/bin/python bench/pipeline.py [--rounds N] [--quick] [--out FILE]

The loop: a one-line change in mm/memcontrol.c (on top of the memcg-kfuncs series) ->
the memcg_kfuncs selftest's result. First a warm-up `harness run` of the same test (the
kernel built or taken from the store, the selftest built; it says which worktree, build
directory and test directory the harness uses). Then each round, in one run so machine
noise hits both sides alike, and in alternating order (by hand first in even rounds, the
harness first in odd ones):
  - by hand, in the harness's own worktree and O= build directory (same .config, BTF on,
    same ccache): edit the line, `make bzImage`, then `vng --run bzImage` with the same
    options the harness uses, running the already-built selftest; its KTAP must be all ok;
  - the harness: `harness run --series memcg-kfuncs --patch ONE-LINE.patch --test
    memcg_kfuncs` (a fresh change each round, so it builds too), exit 0 and PASS.
Each change is new (a counter and the time in a comment), so both sides rebuild
memcontrol.o and relink (BTF) every round. Prints a table with the ratio and writes JSON.
--quick: one round, written to a scratch file unless --out is given: the smoke run CI
makes so that the script keeps working (a timing of one round is no figure).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.base import paths  # noqa: E402
from harness.base.model import Accel, GuestSpec, KernelImage, Status  # noqa: E402
from harness.guest import vm  # noqa: E402
from harness.kernel import build, sources  # noqa: E402
from harness.kernel.tree import KernelTree  # noqa: E402
from harness.output import results  # noqa: E402

ANCHOR = "#include <linux/page_counter.h>\n"
# The test needs swap and a disk file system for its page cache (test.toml: needs =
# ["swap", "scratch"]); by hand, set up as the guest runner sets them up: without them the
# test takes other paths (page cache on tmpfs) or fails (no swap), and is not the same test.
SWAP_ON = ("echo 1G > /sys/block/zram0/disksize && mkswap /dev/zram0 > /dev/null && "
           "swapon /dev/zram0 && mkdir -p /run/s && truncate -s 1G /run/s.img && "
           "mkfs.ext2 -q -F /run/s.img && mount -o loop /run/s.img /run/s && "
           "export HARNESS_SCRATCH=/run/s")
HARNESS = [sys.executable, "-m", "harness", "run", "--series", "memcg-kfuncs",
           "--test", "memcg_kfuncs"]


def timed(argv: list[str], **kw: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    res = subprocess.run(argv, text=True, capture_output=True, **kw)  # type: ignore[call-overload]
    return time.monotonic() - start, res


def warm_up(tmp: Path) -> tuple[KernelImage, Path]:
    """One harness run of the test: the kernel (image, version) and the selftest's
    directory the rounds use, as that run recorded them."""
    out = tmp / "warm-up"
    res = subprocess.run([*HARNESS, "--out", str(out)], cwd=REPO, text=True,
                         capture_output=True, check=False)
    cell = results.load_run(str(out))[0].cells[0]
    if res.returncode != 0 or cell.status is not Status.PASS:
        raise SystemExit(f"the warm-up run: {cell.status.value} {cell.error}\n"
                         f"{res.stderr[-2000:]}")
    plan = (out / cell.cell / "guest" / "plan.tsv").read_text().splitlines()
    test_dir = Path(next(ln.split("\t")[2] for ln in plan
                         if ln.split("\t")[0] == "memcg_kfuncs"))
    return KernelImage(boot_image=Path(cell.image), vmlinux=None, config=None,
                       version=cell.kernel_version, arch=cell.arch,
                       toolchain=cell.toolchain), test_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="one round, results to a scratch file (CI's smoke run)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the JSON written (default bench/pipeline-results.json; with "
                         "--quick, a scratch file)")
    args = ap.parse_args()
    rounds = 1 if args.quick else args.rounds
    out_file = args.out or (Path(tempfile.mkdtemp()) / "pipeline-results.json" if args.quick
                            else REPO / "bench" / "pipeline-results.json")
    tmp = Path(tempfile.mkdtemp(prefix="bench-pipeline-", dir=paths.sub("bench")))
    kernel, test_dir = warm_up(tmp)
    tree = KernelTree.open(sources.parse_spec("debian:6.12"), ["base"], log_dir=tmp)
    with tree.locked():
        with_series = tree.rev()  # the series as the warm-up applied it
    build_dir = tree.build_dir
    tools = build.tools()
    env = {**os.environ, **build.make_env(tools)}
    make = build.make_argv(tree.path, build_dir, tools, tree.target.arch.make_target)
    bindir = Path(sys.executable).parent
    vng_env = {**os.environ, "TERM": "dumb", "PATH": f"{bindir}:{os.environ['PATH']}"}
    rows: dict[str, list[float]] = {"by hand (make + vng)": [], "harness run": []}
    parts: dict[str, list[float]] = {"make": [], "vng": []}
    stages: list[dict[str, float]] = []
    target = tree.path / "mm" / "memcontrol.c"

    def one_line(r: int, side: str) -> str:
        return f"{ANCHOR}/* bench round {r} {side} {time.time():.6f} */\n"

    def by_hand(r: int) -> None:
        with tree.locked():
            tree.reset_to(with_series)
            target.write_text(target.read_text().replace(ANCHOR, one_line(r, "hand"), 1))
            t_make, res = timed(make, env=env)
            if res.returncode != 0:
                raise SystemExit(f"make failed: {res.stdout[-2000:]}")
            image = build_dir / tree.target.arch.image
            boot = vm.Boot(kernel=replace(kernel, boot_image=image), accel=Accel.TCG,
                           guest=GuestSpec())
            argv = vm.vng_argv(boot, command=["sh", "-c", f"{SWAP_ON}; cd {test_dir} && "
                                              "./memcg_kfuncs"], cwd=Path("/"))
            t_vng, out = timed(argv, env=vng_env, timeout=600)
            tree.reset_to(with_series)
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
        with tree.locked():
            tree.reset_to(with_series)
            target.write_text(target.read_text().replace(ANCHOR, one_line(r, "harness"), 1))
            diff = tree.git("diff", what="git diff")
            tree.reset_to(with_series)
        patch = tmp / f"0001-round-{r}.patch"
        patch.write_text("From: Bench <bench@example.org>\nSubject: [PATCH] mm: memcontrol: "
                         f"one-line change {r}\n\n---\n{diff}")
        out = tmp / f"run-{r}"
        t, res = timed([*HARNESS, "--patch", str(patch), "--out", str(out)], cwd=REPO)
        cell = results.load_run(str(out))[0].cells[0]
        if res.returncode != 0 or cell.status is not Status.PASS:
            raise SystemExit(f"harness round {r}: {cell.status.value} {cell.error}")
        stages.append({s.stage: s.duration_s for s in cell.stages})
        rows["harness run"].append(t)

    for r in range(rounds):
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
    out_file.write_text(json.dumps({
        "command": "bench/pipeline.py " + (f"--rounds {rounds}" if not args.quick else "--quick"),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": rows, "parts": parts,
        "median": med, "ratio": ratio, "harness_stages": stages,
        "harness_stage_median": stage_med}, indent=2) + "\n")
    print(f"results: {out_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
