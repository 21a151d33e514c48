"""Benchmark: `harness parse` of a test's output flood, the worst log a test can leave.

    .venv/bin/python bench/parse_flood.py [--mb N] [--rounds N] [--quick] [--out FILE]

A test stuck in a loop prints one result line again and again; another prints hundreds of
thousands of distinct results. For each kind, N MB (default 50) is written once and parsed
by `harness parse` --rounds times (default 3) in fresh processes: the median wall time and
the largest resident set of a round are reported, with the size of results.json. The
unit tests check what the parse keeps (bounded results.json, the warning on the
terminal); how long it takes on this machine is this script's question. --quick: 2 MB and
one round, the smoke run CI makes so that the script keeps working.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINE = "ok 1 a result line printed again and again by a test in a loop\n"


def write_flood(path: Path, kind: str, mb: int) -> None:
    with path.open("w") as f:
        f.write("TAP version 13\n")
        if kind == "repeated":
            f.write("1..1\n")
            for _ in range(mb * 2**20 // len(LINE) // 1000):
                f.write(LINE * 1000)
            return
        i, size = 0, 0
        while size < mb * 2**20:
            i += 1
            line = f"ok {i} distinct result {i}\n"
            f.write(line)
            size += len(line)


def parse_once(flood: Path, out: Path) -> tuple[float, int, int]:
    """Wall seconds, the child's max RSS in KiB, results.json bytes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.monotonic()
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "harness"), "parse", str(flood),
                           "--out", str(out)], capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"harness parse exited {proc.returncode}:\n{proc.stdout[-2000:]}")
    rss = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return seconds, rss, (out / "results.json").stat().st_size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 MB, one round (CI's smoke run)")
    ap.add_argument("--out", type=Path, help="write the results as JSON")
    args = ap.parse_args()
    mb, rounds = (2, 1) if args.quick else (args.mb, args.rounds)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("repeated", "distinct"):
            flood = Path(tmp) / f"{kind}.tap"
            write_flood(flood, kind, mb)
            runs = [parse_once(flood, Path(tmp) / f"{kind}-{r}") for r in range(rounds)]
            results[kind] = {"mb": mb, "rounds": rounds,
                             "median_s": round(statistics.median(r[0] for r in runs), 3),
                             "max_rss_kib": max(r[1] for r in runs),
                             "results_json_bytes": max(r[2] for r in runs)}
    print(f"{'flood':<10}{'MB':>5}{'median s':>10}{'max RSS MiB':>13}{'results.json KiB':>18}")
    for kind, r in results.items():
        print(f"{kind:<10}{r['mb']:>5}{r['median_s']:>10.2f}{r['max_rss_kib'] / 1024:>13.0f}"
              f"{r['results_json_bytes'] / 1024:>18.0f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
