"""Benchmark: the developer's loop through the harness against the same make + vng by hand.

    .venv/bin/python bench/pipeline.py [--rounds N] [--quick] [--case loop|affected|all]
                                       [--test T]... [--out FILE]

Two cases (`--case`, default all):

- `affected`, the developer's case: a one-line change in a function of
  mm/bpf_memcontrol.c (bpf_mem_cgroup_usage(): its return gets `+ 0 * N`, a new N each
  round, so it compiles anew), then `harness run --series memcg-kfuncs --patch
  ONE-LINE.patch --affected` (the checks the map picks; `--test` as given, default the
  cell's tests), against the same build and the same guest commands by hand: `make
  bzImage` in the harness's worktree and build directory, then one `vng` that sets up
  swap and the scratch file system as the runner does (when a test needs them) and runs
  each command of the harness's guest plan (plan.tsv) in its directory under its timeout,
  its KTAP required all ok. The warm-up run says which checks the map picked; it needs
  the map (`harness run --kernel debian:6.12 --series memcg-kfuncs --map`, with the same
  --test), or --affected runs every test whole (and says why).
- `loop`, described below.

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
makes so that the script keeps working (a timing of one round is no figure); its loop
runs memcg_kfuncs:usage_matches_memory_current on both sides ($HARNESS_CHECKS by hand),
not the whole test, and its affected case asks --affected among that check's selection
(--affected narrows a selection: the map must still pick the check, or the run fails);
no warm-up runs: each case's first harness run (a fresh change, so it builds) is its
harness side and its warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
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
from harness.base.model import Accel, CellResult, GuestSpec, KernelImage, Status  # noqa: E402
from harness.guest import vm  # noqa: E402
from harness.judge import checks as checks_mod  # noqa: E402
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
HARNESS = [sys.executable, "-m", "harness", "run", "--series", "memcg-kfuncs"]
# --quick's loop runs one check of memcg_kfuncs (and what it needs) on both sides: the
# smoke run goes through every step of a round in a third of the whole test's time
QUICK_CHECKS = "usage_matches_memory_current"
AFFECTED_FILE = "mm/bpf_memcontrol.c"
AFFECTED_FUNCTION = "bpf_mem_cgroup_usage"


def timed(argv: list[str], **kw: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    res = subprocess.run(argv, text=True, capture_output=True, **kw)  # type: ignore[call-overload]
    return time.monotonic() - start, res


def warm_up(tmp: Path, test: str) -> tuple[KernelImage, Path]:
    """One harness run of the test: the kernel (image, version) and the selftest's
    directory the rounds use, as that run recorded them."""
    out = tmp / "warm-up"
    res = subprocess.run([*HARNESS, "--test", test, "--out", str(out)], cwd=REPO, text=True,
                         capture_output=True, check=False)
    cell = results.load_run(str(out))[0].cells[0]
    if res.returncode != 0 or cell.status is not Status.PASS:
        raise SystemExit(f"the warm-up run: {cell.status.value} {cell.error}\n"
                         f"{res.stderr[-2000:]}")
    return run_facts(out)


def run_facts(out: Path) -> tuple[KernelImage, Path]:
    """The kernel (image, version) and memcg_kfuncs' directory a harness run recorded."""
    cell = results.load_run(str(out))[0].cells[0]
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
    ap.add_argument("--case", choices=("loop", "affected", "all"), default="all")
    ap.add_argument("--test", action="append", default=[],
                    help="the affected case's tests (default: the cell's; --quick: "
                         f"memcg_kfuncs:{QUICK_CHECKS})")
    ap.add_argument("--out", type=Path, default=None,
                    help="the JSON written (default bench/pipeline-results.json; with "
                         "--quick, a scratch file)")
    args = ap.parse_args()
    rounds = 1 if args.quick else args.rounds
    out_file = args.out or (Path(tempfile.mkdtemp()) / "pipeline-results.json" if args.quick
                            else REPO / "bench" / "pipeline-results.json")
    tmp = Path(tempfile.mkdtemp(prefix="bench-pipeline-", dir=paths.sub("bench")))
    doc: dict[str, object] = {
        "command": "bench/pipeline.py " + (f"--rounds {rounds}" if not args.quick else "--quick")
                   + (f" --case {args.case}" if args.case != "all" else "")
                   + "".join(f" --test {t}" for t in args.test),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if args.case in ("loop", "all"):
        doc.update(loop_case(tmp, rounds, QUICK_CHECKS if args.quick else "",
                             warm_up_is_a_round=args.quick))
    if args.case in ("affected", "all"):
        tests = args.test or ([f"memcg_kfuncs:{QUICK_CHECKS}"] if args.quick else [])
        doc["affected"] = affected_case(tmp, rounds, tests, warm_up_is_a_round=args.quick)
    out_file.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"results: {out_file}")
    return 0


def by_hand_commands(tree: KernelTree) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """What a developer types by hand in the harness's worktree: the make command line with
    its environment (same O= directory, compiler and ccache), and vng's environment."""
    tools = build.tools()
    env = {**os.environ, **build.make_env(tools)}
    make = build.make_argv(tree.path, tree.build_dir, tools, tree.target.arch.make_target)
    bindir = Path(sys.executable).parent
    return make, env, {**os.environ, "TERM": "dumb", "PATH": f"{bindir}:{os.environ['PATH']}"}


def loop_case(tmp: Path, rounds: int, checks: str,
              warm_up_is_a_round: bool = False) -> dict[str, object]:
    """The one-line change in mm/memcontrol.c -> memcg_kfuncs (whole, or only CHECKS),
    harness against by hand. With WARM_UP_IS_A_ROUND (--quick), no warm-up run: the first
    round's harness side goes first and is the warm-up too."""
    test = "memcg_kfuncs" + (f":{checks}" if checks else "")
    facts: list[tuple[KernelImage, Path]] = [] if warm_up_is_a_round else [warm_up(tmp, test)]
    select = f"{checks_mod.ENV}={shlex.quote(checks)} " if checks else ""
    from harness.kernel import series as series_mod

    spec = sources.parse_spec("debian:6.12")
    tree = KernelTree.open(spec, ["base"], log_dir=tmp)
    with tree.locked():  # the series as the harness applies it
        tree.apply(series_mod.collect(("memcg-kfuncs",), [], series_mod.base_name(spec)),
                   log_dir=tmp)
        with_series = tree.rev()
    build_dir = tree.build_dir
    make, env, vng_env = by_hand_commands(tree)
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
            kernel, test_dir = facts[0]
            boot = vm.Boot(kernel=replace(kernel, boot_image=image), accel=Accel.TCG,
                           guest=GuestSpec())
            argv = vm.vng_argv(boot, command=["sh", "-c", f"{SWAP_ON}; cd {test_dir} && "
                                              f"{select}./memcg_kfuncs"], cwd=Path("/"))
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
        t, res = timed([*HARNESS, "--test", test, "--patch", str(patch), "--out", str(out)],
                       cwd=REPO)
        cell = results.load_run(str(out))[0].cells[0]
        if res.returncode != 0 or cell.status is not Status.PASS:
            raise SystemExit(f"harness round {r}: {cell.status.value} {cell.error}")
        stages.append({s.stage: s.duration_s for s in cell.stages})
        rows["harness run"].append(t)
        if not facts:
            facts.append(run_facts(out))

    for r in range(rounds):
        first_by_hand = r % 2 == 0 and bool(facts)
        for side in ((by_hand, by_harness) if first_by_hand else (by_harness, by_hand)):
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
    return {"test": test, "rows": rows,
            "parts": parts, "median": med, "ratio": ratio, "harness_stages": stages,
            "harness_stage_median": stage_med}


def affected_case(tmp: Path, rounds: int, tests: list[str],
                  warm_up_is_a_round: bool = False) -> dict[str, object]:
    """The developer's case: a one-line change in bpf_mem_cgroup_usage(), then the checks
    the map picks, through the harness (--affected) and by hand (the same build, the same
    guest commands). With WARM_UP_IS_A_ROUND (--quick), the warm-up run, a fresh change
    too, is the harness side of the first round."""
    from harness.judge import affected
    from harness.kernel import series as series_mod

    spec = sources.parse_spec("debian:6.12")
    tree = KernelTree.open(spec, ["base"], log_dir=tmp)
    with tree.locked():
        tree.apply(series_mod.collect(("memcg-kfuncs",), [], series_mod.base_name(spec)),
                   log_dir=tmp)
        head = tree.rev()
        text = (tree.path / AFFECTED_FILE).read_text()
    span = next(x for x in affected.function_spans(text) if x.name == AFFECTED_FUNCTION)
    lines = text.split("\n")
    at = next(i for i in range(span.start - 1, span.end) if lines[i].lstrip().startswith(
        "return "))
    argv = [sys.executable, "-m", "harness", "run", "--series", "memcg-kfuncs", "--affected",
            *(a for t in tests for a in ("--test", t))]

    def changed(n: int) -> str:
        new = list(lines)
        new[at] = new[at].rstrip(";") + f" + 0 * {n};"  # a new compile, the same code
        return "\n".join(new)

    def patch_for(n: int) -> Path:
        with tree.locked():
            tree.reset_to(head)
            (tree.path / AFFECTED_FILE).write_text(changed(n))
            diff = tree.git("diff", what="git diff")
            tree.reset_to(head)
        path = tmp / f"affected-{n}.patch"
        path.write_text("From: Bench <bench@example.org>\nSubject: [PATCH] mm: bpf_memcontrol: "
                        f"one-line change {n}\n\n---\n{diff}")
        return path

    counter = [int(time.time())]

    def harness_side(label: str) -> tuple[float, CellResult, Path]:
        counter[0] += 1
        out = tmp / f"affected-{label}"
        t, res = timed([*argv, "--patch", str(patch_for(counter[0])), "--out", str(out)],
                       cwd=REPO)
        cell = results.load_run(str(out))[0].cells[0]
        if res.returncode != 0 or cell.status is not Status.PASS:
            raise SystemExit(f"harness --affected ({label}): {cell.status.value} "
                             f"{cell.error}\n{res.stdout[-3000:]}")
        return t, cell, out / cell.cell

    # the warm-up: the kernel built, the tests built, and what the map picks
    t_warm, cell, cell_dir = harness_side("warm-up")
    picked = cell.affected
    plan = [ln.split("\t", 4) for ln in (cell_dir / "guest" / "plan.tsv").read_text()
            .splitlines() if ln]
    print("--affected picked: " + ("every test whole: " + picked.fallback if picked and
                                    picked.fallback else "; ".join(
        f"{t.test}: {t.ran}" + (f" {','.join(t.checks)}" if t.checks else "")
        for t in (picked.tests if picked else ()))))
    script = tmp / "by-hand.sh"
    needs = {n for row in plan for n in row[3].split(",") if n != "-"}
    body = ["echo \"bench-start $(cut -d' ' -f1 /proc/uptime)\"", "export HARNESS_OUT=/tmp"]
    if "swap" in needs or "scratch" in needs:
        body.append(SWAP_ON)
    for name, tmo, cwd, _needs, cmd in plan:
        body.append(f"(cd {shlex.quote(cwd)} && timeout -k 5 {tmo} sh -c {shlex.quote(cmd)}) "
                    f"2>&1; echo \"== {name} rc=$?\"")
    body.append("echo \"bench-end $(cut -d' ' -f1 /proc/uptime)\"")
    script.write_text("\n".join(body) + "\n")
    build_dir = tree.build_dir
    make, env, vng_env = by_hand_commands(tree)
    kernel = KernelImage(boot_image=Path(cell.image), vmlinux=None, config=None,
                         version=cell.kernel_version, arch=cell.arch, toolchain=cell.toolchain)
    rows: dict[str, list[float]] = {"by hand (make + vng)": [], "harness run --affected": []}
    parts: dict[str, list[float]] = {"make": [], "vng": [], "guest: to the command": [],
                                     "guest: the commands": []}
    stages: list[dict[str, float]] = []
    outside: list[float] = []

    def by_hand() -> None:
        counter[0] += 1
        with tree.locked():
            tree.reset_to(head)
            (tree.path / AFFECTED_FILE).write_text(changed(counter[0]))
            t_make, res = timed(make, env=env)
            if res.returncode != 0:
                raise SystemExit(f"make failed: {res.stdout[-2000:]}")
            boot = vm.Boot(kernel=replace(kernel, boot_image=build_dir / tree.target.arch.image),
                           accel=Accel.TCG, guest=GuestSpec())
            t_vng, got = timed(vm.vng_argv(boot, command=["sh", str(script)], cwd=Path("/")),
                               env=vng_env, timeout=900)
            tree.reset_to(head)
        text = got.stdout + got.stderr
        rcs = re.findall(r"^== (\S+) rc=(\d+)", text, re.MULTILINE)
        marks = dict(re.findall(r"(bench-start|bench-end) (\d+\.\d+)", text))
        if len(rcs) != len(plan) or any(rc != "0" for _, rc in rcs) or \
                re.search(r"^not ok ", text, re.MULTILINE) or len(marks) != 2:
            raise SystemExit(f"by hand did not pass: {rcs}\n{text[-3000:]}")
        parts["make"].append(t_make)
        parts["vng"].append(t_vng)
        parts["guest: to the command"].append(float(marks["bench-start"]))
        parts["guest: the commands"].append(float(marks["bench-end"]) -
                                            float(marks["bench-start"]))
        rows["by hand (make + vng)"].append(t_make + t_vng)

    def through_harness() -> None:
        record(*harness_side(f"round-{len(stages)}")[:2])

    def record(t: float, c: CellResult) -> None:
        stages.append({x.stage: x.duration_s for x in c.stages})
        for x in c.stages:
            for part, secs in x.parts:
                if x.stage == "boot+tests":
                    stages[-1][f"boot+tests: {part}"] = secs
        outside.append(t - sum(x.duration_s for x in c.stages))
        rows["harness run --affected"].append(t)

    if warm_up_is_a_round:
        record(t_warm, cell)
    for r in range(rounds):
        for side in ((by_hand, through_harness) if r % 2 == 0 else (through_harness, by_hand)):
            if not (warm_up_is_a_round and r == 0 and side is through_harness):
                side()
    med = {k: statistics.median(v) for k, v in {**rows, **parts}.items()}
    print(f"\nthe developer's case: one line of {AFFECTED_FUNCTION}(), --affected")
    print(f"{'what':<26} {'median s':>9}  rounds")
    for k, v in {**rows, **parts}.items():
        print(f"{k:<26} {med[k]:>9.1f}  {', '.join(f'{x:.1f}' for x in v)}")
    ratio = med["harness run --affected"] / med["by hand (make + vng)"]
    print(f"harness / by hand: {ratio:.2f}x")
    stage_med = {k: statistics.median(x.get(k, 0.0) for x in stages) for k in stages[0]}
    print("harness stages (median s): " + ", ".join(f"{k} {v:.2f}" for k, v in stage_med.items())
          + f"; outside the stages {statistics.median(outside):.2f}")
    return {"change": f"{AFFECTED_FILE}:{AFFECTED_FUNCTION}: {lines[at].strip()} + 0 * N",
            "tests": tests, "picked": [{"test": t.test, "ran": t.ran, "checks": list(t.checks),
                                        "why": t.why} for t in (picked.tests if picked else ())],
            "fallback": picked.fallback if picked else "", "plan": [row[0] for row in plan],
            "rows": rows, "parts": parts, "median": med, "ratio": ratio,
            "harness_stages": stages, "harness_stage_median": stage_med,
            "outside_stages": outside}


if __name__ == "__main__":
    sys.exit(main())
