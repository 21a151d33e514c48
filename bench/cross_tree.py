"""Benchmark: the first build of a new tree that equals a stored kernel plus a one-line change.

    .venv/bin/python bench/cross_tree.py --variant NAME=CHECKOUT:CACHE[:rebuild]... [--out FILE]
    .venv/bin/python bench/cross_tree.py --quick

A kernel developer's first `harness run` in their own tree (`git:PATH`) after the harness
has built Debian's 6.12 once. For each variant (a harness checkout with its .venv, and a
HARNESS_CACHE), in one run so that machine noise hits all alike:
  1. `harness run --kernel debian:6.12 --boot-only`: the stored kernel (or its build, in a
     cache that has none, or after `:rebuild` dropped it from the store: timed, reported
     as the warm-up; this variant's layout then fills ccache);
  2. a new user tree: a clone of the cache's Debian import plus a one-line change to
     mm/memcontrol.c, committed (a new name each time, so a new worktree);
  3. `harness run --kernel git:TREE --boot-only`: timed, with the build stage from
     results.json and the ccache hits and misses of that build.
Give the layout before this change as one variant (a checkout of the older commit with its
cache, warmed by the older code) and this one as another. Prints a table and writes JSON.
--quick: one variant, this checkout with its cache ($HARNESS_CACHE, else ~/.cache/harness),
results to a scratch file, and the cache entries made for the new tree dropped after: the
smoke run CI makes so that the script keeps working.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.base.model import Status  # noqa: E402
from harness.output import results  # noqa: E402

LINE = "#include <linux/page_counter.h>\n"


def sh(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    done: subprocess.CompletedProcess[str] = subprocess.run(  # type: ignore[call-overload]
        argv, text=True, capture_output=True, check=False, **kw)
    return done


def ccache_stats(cache: Path) -> dict[str, int]:
    out = sh(["ccache", "--print-stats"], env={**os.environ, "CCACHE_DIR": str(cache / "ccache")})
    return {k: int(v) for k, v in (ln.split("\t") for ln in out.stdout.splitlines()
                                   if "\t" in ln and ln.split("\t")[1].isdigit())}


def harness_run(checkout: Path, cache: Path, kernel: str, out: Path) -> dict[str, object]:
    env = {**os.environ, "HARNESS_CACHE": str(cache)}
    before = ccache_stats(cache)
    start = time.monotonic()
    res = sh([str(checkout / ".venv/bin/harness"), "run", "--kernel", kernel, "--boot-only",
              "--out", str(out)], env=env, cwd=checkout)
    wall = time.monotonic() - start
    after = ccache_stats(cache)
    cell = results.load_run(str(out))[0].cells[0]
    if res.returncode != 0 or cell.status is not Status.PASS:
        raise SystemExit(f"{kernel} with {checkout}: exit {res.returncode}, "
                         f"{cell.status.value} {cell.error}\n{res.stderr[-2000:]}")
    hits = sum(after.get(k, 0) - before.get(k, 0)
               for k in ("direct_cache_hit", "preprocessed_cache_hit"))
    misses = after.get("cache_miss", 0) - before.get("cache_miss", 0)
    build = next(s.duration_s for s in cell.stages if s.stage == "build")
    return {"wall_s": round(wall, 1), "build_s": round(build, 1), "ccache_hits": hits,
            "ccache_misses": misses, "kernel": Path(cell.image).parent.name}


def user_tree(cache: Path, where: Path) -> Path:
    (src,) = [d for d in (cache / "src").glob("debian-6.12-*") if (d / ".git").exists()]
    tree = where / f"linux-{time.time_ns()}"
    subprocess.run(["git", "clone", "-q", "--shared", str(src), str(tree)], check=True)
    target = tree / "mm" / "memcontrol.c"
    text = target.read_text()
    assert LINE in text, f"{target}: no {LINE!r}"
    # a change of its own: another variant in the same cache must not find it stored
    target.write_text(text.replace(LINE, f"{LINE}static int __maybe_unused bench_line = "
                                   f"{time.time_ns() % 1000000};\n", 1))
    env = {**os.environ, "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.org",
           "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.org"}
    subprocess.run(["git", "-C", str(tree), "commit", "-qam", "mm: one-line change"],
                   check=True, env=env)
    return tree


def forget(checkout: Path, cache: Path, tree: Path, out: Path, *, strict: bool) -> None:
    """The cache entries made for a one-off tree (its import, worktree and kernel: ~4 GB)
    leave with it: a smoke run must not fill the disk the suite after it writes to. After
    a failed run (strict=False), what is there goes and a refusal is only said."""
    names = [f"git-{tree.name}-*"]
    try:
        names.append(Path(results.load_run(str(out))[0].cells[0].image).parent.name)
    except (OSError, ValueError, IndexError, results.ResultsError):
        if strict:
            raise
    res = sh([str(checkout / ".venv/bin/harness"), "cache", "drop", *names],
             env={**os.environ, "HARNESS_CACHE": str(cache)}, cwd=checkout)
    if res.returncode != 0:
        said = f"harness cache drop {' '.join(names)}: exit {res.returncode}\n" \
               f"{res.stdout[-1000:]}{res.stderr[-1000:]}"
        if strict:
            raise SystemExit(said)
        print(said, file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=CHECKOUT:CACHE[:rebuild] (a harness checkout with .venv; a "
                    "HARNESS_CACHE; rebuild: drop the stored 6.12 kernel first)")
    ap.add_argument("--quick", action="store_true",
                    help="one variant: this checkout and its cache (CI's smoke run)")
    ap.add_argument("--work", type=Path, default=None,
                    help="where the user trees go (default /tmp/bench-cross-tree; with "
                         "--quick a scratch directory)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the JSON written (default bench/cross-tree-results.json; with "
                         "--quick, a scratch file)")
    args = ap.parse_args()
    if args.quick == bool(args.variant):
        ap.error("give --variant NAME=CHECKOUT:CACHE[:rebuild]..., or --quick")
    if args.quick:
        own = os.environ.get("HARNESS_CACHE") or str(Path.home() / ".cache" / "harness")
        args.variant = [f"this={REPO}:{own}"]
        scratch = Path(tempfile.mkdtemp(prefix="bench-cross-tree-"))
        args.work = args.work or scratch / "trees"  # removed at the end: a kernel checkout
        args.out = args.out or scratch / "cross-tree-results.json"
    args.work = args.work or Path("/tmp/bench-cross-tree")
    args.out = args.out or REPO / "bench" / "cross-tree-results.json"
    args.work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, object]] = {}
    for spec in args.variant:
        m = re.fullmatch(r"([^=]+)=([^:]+):([^:]+)(:rebuild)?", spec)
        if not m:
            raise SystemExit(f"--variant {spec}: give NAME=CHECKOUT:CACHE[:rebuild]")
        name, checkout, cache = m.group(1), Path(m.group(2)), Path(m.group(3))
        commit = sh(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"]).stdout.strip()
        warm = harness_run(checkout, cache, "debian:6.12", args.work / f"{name}-warm")
        if m.group(4):
            image = results.load_run(str(args.work / f"{name}-warm"))[0].cells[0].image
            sh(["rm", "-rf", str(Path(image).parent)])
            warm = harness_run(checkout, cache, "debian:6.12", args.work / f"{name}-rebuild")
        tree = user_tree(cache, args.work)
        try:
            first = harness_run(checkout, cache, f"git:{tree}", args.work / f"{name}-tree")
        except BaseException:
            if args.quick:
                forget(checkout, cache, tree, args.work / f"{name}-tree", strict=False)
            raise
        if args.quick:
            forget(checkout, cache, tree, args.work / f"{name}-tree", strict=True)
        rows[name] = {"checkout": str(checkout), "commit": commit, "cache": str(cache),
                      "tree": tree.name, "warm_up": warm, "new_tree": first}
    print(f"{'variant':<10} {'commit':<9} {'warm-up build s':>15} {'new tree build s':>16} "
          f"{'hits':>6} {'misses':>6}")
    for name, r in rows.items():
        w, t = r["warm_up"], r["new_tree"]
        assert isinstance(w, dict) and isinstance(t, dict)
        print(f"{name:<10} {r['commit']!s:<9} {w['build_s']:>15} {t['build_s']:>16} "
              f"{t['ccache_hits']:>6} {t['ccache_misses']:>6}")
    args.out.write_text(json.dumps({
        "command": "bench/cross_tree.py " + " ".join(f"--variant {v}" for v in args.variant),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "variants": rows}, indent=2) + "\n")
    if args.quick:
        shutil.rmtree(args.work, ignore_errors=True)
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
