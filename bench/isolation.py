"""Benchmark: what keeping a series' code in costs: the guest's own root, the build sandbox.

    .venv/bin/python bench/isolation.py [--rounds N] [--default-rounds N] [--quick] [--out FILE]

1. The guest's root made from nothing: rootfs.guest_root into an empty cache of its own
   (apt's resolution, `apt-get download` of every package, unpacking, the content hash),
   and the root's size.
2. Boot: the same kernel (the 6.12 cell's, from the store) and the same test
   (`--test rstat_propagation`), on the guest's own root and on the host's root
   (`--host-root`), in alternating order, N rounds each: the boot stage's `boot` part
   (the kernel's start to the runner's first line), the whole boot+tests stage, and the
   test alone. Ratios of the medians.
3. The default run: `harness run` (sandboxed build, guest on its own root) against
   `harness run --no-sandbox --host-root` (the harness before either existed), in
   alternating order, N rounds each, kernels and tests from the cache: wall time.
4. One incremental build in the sandbox and without it: a one-line change in
   mm/memcontrol.c on top of memcg-kfuncs, each side its own change (`--build-only`).
Prints a table and writes JSON. --quick: one round of 2 alone (the root from the cache,
made if it is not), written to a scratch file unless --out is given: the smoke run CI
makes so that the script keeps working (one round is no figure).
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import target  # noqa: E402
from harness.base.model import CellResult  # noqa: E402
from harness.guest import rootfs  # noqa: E402
from harness.output import results  # noqa: E402

HARNESS = [sys.executable, "-m", "harness", "run"]
BOOT_TEST = ["--kernel", "debian:6.12", "--series", "memcg-kfuncs", "--test", "rstat_propagation"]


def run(argv: list[str], out: Path) -> tuple[float, CellResult]:
    """A harness run: its wall time and its one cell's result (it must pass)."""
    start = time.monotonic()
    res = subprocess.run([*HARNESS, *argv, "--out", str(out)], cwd=REPO, text=True,
                         capture_output=True, check=False)
    wall = time.monotonic() - start
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {res.returncode}\n{res.stdout[-3000:]}")
    return wall, results.load_run(str(out))[0].cells[0]


def boot_parts(cell: CellResult) -> dict[str, float]:
    """The boot stage's parts (boot, tests), its whole, and the test's own duration."""
    stage = next(s for s in cell.stages if s.stage == "boot+tests")
    test = next(t for t in cell.tests if t.name == "rstat_propagation")
    return {"boot": dict(stage.parts)["boot"], "boot+tests": stage.duration_s,
            "test": test.duration_s}


def root_from_nothing(quick: bool) -> dict[str, object]:
    """The x86_64 guest root made into an empty cache of its own (--quick: the cache's,
    made already or made now)."""
    arch = target.arch(target.DEFAULT_ARCH)
    before = os.environ.get("HARNESS_CACHE")
    with tempfile.TemporaryDirectory(prefix="bench-rootfs-") as tmp:
        if not quick:
            os.environ["HARNESS_CACHE"] = tmp
        try:
            start = time.monotonic()
            made = rootfs.guest_root(arch, log_dir=Path(tmp))
            seconds = time.monotonic() - start
            ident = rootfs.identity(made)
        finally:
            if before is None:
                os.environ.pop("HARNESS_CACHE", None)
            else:
                os.environ["HARNESS_CACHE"] = before
    return {"seconds": round(seconds, 1), "from_nothing": not quick,
            "hash": ident.digest, "size_bytes": ident.size, "packages": ident.packages}


def one_line_patch(tmp: Path, n: int) -> Path:
    """A patch adding a comment line (new each time: each build compiles it) near the top
    of mm/vmscan.c, which the series does not touch."""
    import difflib

    cache = Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness")
    repo = sorted((cache / "src").glob("debian-6.12-*"))[-1]
    rel = "mm/vmscan.c"
    before = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{rel}"], check=True,
                            capture_output=True, text=True).stdout
    lines = before.splitlines(keepends=True)
    after = [*lines[:1], f"/* bench/isolation.py change {n} {time.time():.6f} */\n", *lines[1:]]
    diff = "".join(difflib.unified_diff(lines, after, f"a/{rel}", f"b/{rel}", n=3))
    patch = tmp / f"0001-change-{n}.patch"
    patch.write_text("From: Bench <bench@example.org>\nSubject: [PATCH] mm: vmscan: one-line "
                     f"change {n}\n\n---\ndiff --git a/{rel} b/{rel}\n{diff}")
    return patch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="boot rounds per side")
    ap.add_argument("--default-rounds", type=int, default=2,
                    help="default runs per side (each a few minutes)")
    ap.add_argument("--quick", action="store_true",
                    help="one round, no default runs: a smoke run of the script")
    ap.add_argument("--out", type=Path, default=None,
                    help="where the JSON goes (default bench/isolation-results.json; with "
                         "--quick, a scratch file)")
    args = ap.parse_args()
    rounds = 1 if args.quick else args.rounds
    default_rounds = 0 if args.quick else args.default_rounds
    out_file = args.out or (Path(tempfile.mkdtemp()) / "isolation-results.json" if args.quick
                            else REPO / "bench" / "isolation-results.json")
    tmp = Path(tempfile.mkdtemp(prefix="bench-isolation-"))
    root = root_from_nothing(args.quick)
    print(f"guest root: {root['seconds']} s to make, {root['size_bytes']} bytes, "
          f"{root['packages']} packages, hash {root['hash']}", flush=True)
    sides = {"own root": [], "host root": ["--host-root"]}
    boots: dict[str, list[dict[str, float]]] = {k: [] for k in sides}
    if not args.quick:
        run(BOOT_TEST, tmp / "warm-up")  # the kernel and the test built or from the store
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            _, cell = run([*BOOT_TEST, *sides[side]], tmp / f"boot-{side.split()[0]}-{r}")
            boots[side].append(boot_parts(cell))
            print(f"round {r + 1} {side}: {boots[side][-1]}", flush=True)
    defaults: dict[str, list[float]] = {"sandbox + own root": [], "neither (before)": []}
    flags = {"sandbox + own root": [], "neither (before)": ["--no-sandbox", "--host-root"]}
    for r in range(default_rounds):
        order = list(flags) if r % 2 == 0 else list(reversed(flags))
        for side in order:
            wall, _ = run(flags[side], tmp / f"default-{len(flags[side])}-{r}")
            defaults[side].append(round(wall, 1))
            print(f"default run {r + 1} {side}: {wall:.1f} s", flush=True)
    builds: dict[str, list[float]] = {"sandboxed": [], "not sandboxed": []}
    build_flags = {"sandboxed": [], "not sandboxed": ["--no-sandbox"]}
    for r in range(0 if args.quick else rounds):
        order = list(build_flags) if r % 2 == 0 else list(reversed(build_flags))
        for side in order:
            patch = one_line_patch(tmp, r * 2 + (side == "sandboxed"))
            _, cell = run(["--kernel", "debian:6.12", "--series", "memcg-kfuncs", "--patch",
                           str(patch), "--test", "memcg_kfuncs", "--build-only",
                           *build_flags[side]], tmp / f"build-{len(build_flags[side])}-{r}")
            builds[side].append(next(s.duration_s for s in cell.stages if s.stage == "build"))
            print(f"build {r + 1} {side}: {builds[side][-1]:.1f} s", flush=True)

    def med(xs: list[float]) -> float:
        return round(statistics.median(xs), 2) if xs else 0.0

    table = {
        "boot (kernel start to runner)": (med([b["boot"] for b in boots["own root"]]),
                                          med([b["boot"] for b in boots["host root"]])),
        "boot+tests stage": (med([b["boot+tests"] for b in boots["own root"]]),
                             med([b["boot+tests"] for b in boots["host root"]])),
        "rstat_propagation": (med([b["test"] for b in boots["own root"]]),
                              med([b["test"] for b in boots["host root"]])),
    }
    if builds["sandboxed"]:
        table["incremental build"] = (med(builds["sandboxed"]), med(builds["not sandboxed"]))
    if default_rounds:
        table["default run (wall)"] = (med(defaults["sandbox + own root"]),
                                       med(defaults["neither (before)"]))
    print(f"\n{'median seconds':<32} {'isolated':>9} {'before':>9} {'ratio':>7}")
    for name, (a, b) in table.items():
        print(f"{name:<32} {a:>9.2f} {b:>9.2f} {a / b if b else 0:>7.2f}")
    out_file.write_text(json.dumps({
        "command": "bench/isolation.py " + ("--quick" if args.quick else
                                            f"--rounds {rounds} --default-rounds "
                                            f"{default_rounds}"),
        "when": time.strftime("%Y-%m-%d"), "root": root, "boots": boots,
        "default_runs": defaults, "builds": builds,
        "medians": {k: {"isolated": a, "before": b, "ratio": round(a / b, 3) if b else None}
                    for k, (a, b) in table.items()}}, indent=2) + "\n")
    print(f"results: {out_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
