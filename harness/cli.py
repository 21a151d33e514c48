"""The command line: parsers, and dispatch to the drivers (run, check, mutate, bisect,
shell, ...). Only main() maps errors to exit codes.

Exit codes: 0 passed; 1 a test failed, crashed or timed out, or nothing was tested;
2 a set-up, patch, config, build or boot error, or bad input / a host problem (told as
cause and fix, never a traceback); 128+N killed by signal N (130 SIGINT, 143 SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from harness import target
from harness.base import atomic, paths, proc
from harness.base.errors import EnvironmentProblem, HarnessError, Stopped, from_os_error, signal_of
from harness.base.model import Accel, CellResult, Status, TestResult
from harness.drivers import doctor, matrix, run
from harness.drivers.matrix import Cell, Tier
from harness.judge import ktap
from harness.kernel import cache, sources
from harness.output import results
from harness.testkinds import command

if TYPE_CHECKING:
    from harness.ci.shard import Planned

log = logging.getLogger("harness")
DEFAULT_KERNEL = run.DEFAULT_KERNEL
KERNEL_HELP = (f"debian:6.12, debian:6.1, git:PATH[@REV], tarball:PATH (a kernel release "
               f"tarball) (default: the kernel git tree you are in, else {DEFAULT_KERNEL})")


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(message)s",
                                           "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def _attempts(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of attempts, 1 to 1000")
    return n


def _statuses(text: str) -> frozenset[Status]:
    try:
        return frozenset(Status(s.strip().upper()) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: statuses, comma-separated, of {', '.join(s.value for s in Status)}"
        ) from None


def _tree_options(p: argparse.ArgumentParser, *, several_kernels: bool = False) -> None:
    """The kernel to build and what goes on it: one vocabulary for run, check and shell."""
    if several_kernels:
        p.add_argument("--kernel", action="append", default=[], metavar="SPEC",
                       help=KERNEL_HELP + "; image:PATH (a built kernel image: no patches, no "
                            "tests built from the tree); repeatable")
    else:
        p.add_argument("--kernel", default=None, metavar="SPEC", help=KERNEL_HELP)
    p.add_argument("--series", action="append", default=[], metavar="NAME",
                   help="patch series under patches/, mbox:FILE or lore:MSGID (a thread from "
                        "the list, through b4); repeatable")
    p.add_argument("--config", action="append", default=[], metavar="FRAGMENT",
                   help="kconfig fragment name or path (repeatable; default: base)")
    p.add_argument("--patch", action="append", default=[], metavar="FILE",
                   help="extra patch, or a thread saved as an mbox, applied after the series "
                        "(repeatable)")
    p.add_argument("--arch", default=None, choices=target.known_arches(),
                   help=f"the arch to build for (default {target.DEFAULT_ARCH}; "
                        "harness/target/arches/ARCH.toml)")
    p.add_argument("--toolchain", default=None, choices=target.known_toolchains(),
                   help=f"the toolchain to build with (default {target.DEFAULT_TOOLCHAIN}; "
                        "llvm: clang, lld and the LLVM binutils 19)")


def _guest_options(p: argparse.ArgumentParser) -> None:
    """The guest's knobs: one vocabulary for run and shell."""
    p.add_argument("--append", default="", metavar="ARGS",
                   help="extra kernel command line for the guest (e.g. panic_on_warn=1)")
    p.add_argument("--memory", default=None, metavar="SIZE",
                   help=f"the guest's RAM, e.g. 1536M or 4G (default {Cell.memory})")
    p.add_argument("--cpus", type=int, default=None, metavar="N",
                   help=f"the guest's CPUs (default {Cell.cpus})")
    _accel_option(p)


def _accel_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accel", choices=[a.value for a in Accel], default="auto",
                   help="auto: KVM when a short real boot shows it works, else TCG "
                        "(a guest of another arch: always TCG)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="source -> series -> config -> build -> boot -> selftests",
                       usage="harness run [OPTIONS] [-- CMD [ARGS...]]",
                       epilog="-- CMD ARGS...: run CMD in the guest as one more test (its own "
                              "output file, time limit, exit status, splats attributed), "
                              "after the tests asked for, or alone when none are")
    _tree_options(r, several_kernels=True)
    r.add_argument("--test", action="append", default=[], metavar="NAME|PATH",
                   help="selftest name, test directory, kselftest:TARGET or test_progs:NAME "
                        "(repeatable; default: the tests of the base's matrix cell)")
    r.add_argument("--boot-only", action="store_true",
                   help="run no test: judge the kernel by its boot and shutdown alone")
    r.add_argument("--build-only", action="store_true",
                   help="build the kernel (into the kernel store) and the tests, boot nothing "
                        "(a CI build job; PASS when every build stage passed)")
    r.add_argument("--coverage", action="store_true",
                   help="build with gcov for the series' C files and report, per patch, "
                        "which of its added lines the tests ran (a kernel of its own)")
    _guest_options(r)
    r.add_argument("--out", type=Path, metavar="DIR",
                   help="this run's results directory (new, empty, or an earlier run's)")
    r.add_argument("--tier", choices=[t.value for t in Tier], default=None,
                   help="run the matrix cells of this tier (default tier when no options)")
    r.add_argument("--cell", action="append", default=[], help="run only these matrix cells")
    r.add_argument("--matrix", type=Path, default=None, help="matrix file (default matrix.toml)")
    r.add_argument("--baseline", action="store_true",
                   help="A/B: run each cell also on its base without the series and patches "
                        "(no expectations), then compare: what the series changed")
    r.add_argument("--strict", action="store_true",
                   help="an unexpected pass (XPASS) fails the run")
    r.add_argument("--bisect-exit", action="store_true",
                   help="exit codes for `git bisect run`: 0 good, 1 bad, 125 this commit "
                        "cannot be tested (patch, config or build error), 128 the "
                        "environment failed (stops the bisection)")
    r.add_argument("--timeout", type=int, default=command.DEFAULT_TIMEOUT_S, metavar="S",
                   help="with -- CMD: the command's time limit in the guest, seconds "
                        f"(default {command.DEFAULT_TIMEOUT_S})")
    r.add_argument("--cwd", default=None, metavar="DIR",
                   help="with -- CMD: the directory it runs from in the guest (default: the "
                        "current one; the guest sees the host's files read-only)")
    r.add_argument("--shard", default=None, metavar="K/N",
                   help="run only shard K of N of the selected cells (cells that build the "
                        "same kernel stay together; see harness merge)")
    r.add_argument("--costs", type=Path, default=None, metavar="RESULTS_JSON",
                   help="with --shard: balance by the cell durations of an earlier run")
    r.add_argument("--repeat", type=_attempts, default=None, metavar="N",
                   help="run each selected test N times in one boot, each a fresh process; "
                        "judged as one, every attempt kept (default: each test's own "
                        "`repeat`, else 1)")

    sh = sub.add_parser("shell", help="boot the kernel (built or stored) into a shell on "
                        "this terminal, with the selftests built and a writable results "
                        "directory")
    _tree_options(sh)
    sh.add_argument("--test", action="append", default=[], metavar="NAME|PATH",
                    help="the selftests to build for the shell (default: the kernel's "
                         "default tests, as run)")
    _guest_options(sh)
    sh.add_argument("--out", type=Path, metavar="DIR",
                    help="the shell's results directory (default results/shell-<timestamp>)")

    ci = sub.add_parser("ci", help="CI systems: a GitHub Actions workflow or a GitLab CI "
                        "pipeline from the matrix, the cache keys of its build jobs, a run's "
                        "failures as GitHub annotations, what the matrix costs in "
                        "runner-minutes")
    ci.add_argument("what", choices=["github", "gitlab", "cache-key", "annotate", "minutes"])
    ci.add_argument("runs", nargs="*", type=Path, metavar="RUN",
                    help="annotate: the runs (directories or results.json) whose failures "
                         "to annotate; minutes: earlier runs measuring the cells")
    ci.add_argument("--setup-minutes", type=float, default=1.5, metavar="M",
                    help="minutes: a job's set-up before the harness runs (bootstrap, cache "
                    "restore and save; 1.5: bootstrap measured on a fresh machine, see README)")
    ci.add_argument("--tier", choices=[t.value for t in Tier], default="ci")
    ci.add_argument("--cell", action="append", default=[], metavar="NAME",
                    help="cache-key: the cells whose kernels the keys cover (repeatable)")
    ci.add_argument("--accel", choices=[Accel.TCG.value, Accel.KVM.value],
                    default=Accel.TCG.value,
                    help="github, gitlab: the guests' accelerator (default tcg, on any "
                         "runner; kvm needs --runs-on or --tag naming runners with /dev/kvm)")
    ci.add_argument("--runs-on", action="append", default=[], metavar="LABEL",
                    help="github: the runner label(s) of the jobs that build and boot "
                         "(repeatable; default ubuntu-latest)")
    ci.add_argument("--container-options", default=None, metavar="OPTS",
                    help="github: docker options of their debian:12 container (default "
                         "--privileged)")
    ci.add_argument("--tag", action="append", default=[], metavar="TAG",
                    help="gitlab: the runner tag(s) of the jobs that build and boot "
                         "(repeatable; default none: any runner)")
    ci.add_argument("--summary", type=Path, default=None, metavar="FILE",
                    help="annotate: also append a markdown summary of the runs to FILE "
                         "(\"$GITHUB_STEP_SUMMARY\")")
    ci.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                    help="github, gitlab: write the file here (default: stdout)")
    ex = sub.add_parser("export", help="a run's results in a format CI systems read "
                        "(junit, kcidb)")
    ex.add_argument("format", choices=["junit", "kcidb"])
    ex.add_argument("run", metavar="RUN", help="a run directory (or its results.json)")
    ex.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                    help="write it here (default: stdout)")
    ex.add_argument("--run-id", default=None, metavar="ID",
                    help="kcidb: the run's id, unique per run, in every object's id (default: "
                         "GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT, or CI_PIPELINE_ID, when set; "
                         "else derived from the run's start time and its results.json)")
    ex.add_argument("--origin", default=None, metavar="NAME",
                    help="kcidb: the submitting CI system, [a-z0-9_] (default harness)")
    ex.add_argument("--include-broken", action="store_true",
                    help="kcidb: also export broken-variant cells, their declared results "
                         "marked misc.expected (default: left out, they are no regressions)")
    mg = sub.add_parser("merge", help="join the run directories of shards into one: "
                        "results.json, summary, exit code; with the plan (--tier, --cell or "
                        "--plan), a cell no run holds is MISSING")
    mg.add_argument("runs", nargs="+", type=Path, metavar="DIR")
    mg.add_argument("--out", type=Path, required=True, metavar="DIR")
    mg.add_argument("--tier", choices=[t.value for t in Tier], default=None,
                    help="expect the matrix cells of this tier")
    mg.add_argument("--cell", action="append", default=[], metavar="NAME",
                    help="expect this matrix cell (repeatable; with --tier: those as well)")
    mg.add_argument("--matrix", type=Path, default=None, help="matrix file (default matrix.toml)")
    mg.add_argument("--plan", type=Path, default=None, metavar="FILE",
                    help="expect the cells this plan file lists (JSON: {\"cells\": [NAME, "
                         "...]}, as shard.write_plan writes it)")

    ps = sub.add_parser("parse", help="parse a saved KTAP log offline, like run does")
    ps.add_argument("file", help="log file, or - for stdin")
    ps.add_argument("--out", type=Path, metavar="DIR")
    ps.add_argument("--name", default=None, help="test name (default: the file name)")

    c = sub.add_parser("check", help="per patch: checkpatch, every prefix builds, no new W=1 "
                       "warnings")
    _tree_options(c)
    c.add_argument("--out", type=Path, metavar="DIR",
                   help="results directory (default results/check-<timestamp>)")

    mu = sub.add_parser("mutate", help="mutation testing: which one-line bugs in a series (or "
                        "a kernel function) do the tests miss?")
    mu.add_argument("--series", required=True, metavar="NAME",
                    help="the series whose added C lines are mutated")
    mu.add_argument("--target", action="append", default=[], metavar="FILE[:FUNCTION]",
                    help="also mutate this kernel function (or file), e.g. "
                         "kernel/cgroup/rstat.c:cgroup_rstat_flush_locked (repeatable)")
    mu.add_argument("--test", action="append", default=[], metavar="NAME",
                    help="the tests that must kill them (default: the cell's)")
    mu.add_argument("--cell", default=None, metavar="NAME",
                    help="matrix cell to mutate in (default: the first default/ci cell that "
                         "applies the series and declares no expectations)")
    mu.add_argument("--max", type=int, default=None, metavar="N",
                    help="run at most N mutants, drawn by --seed (default: all)")
    mu.add_argument("--seed", type=int, default=0, metavar="S")
    mu.add_argument("--mutant", action="append", default=[], metavar="ID",
                    help="run only these mutants (ids from mutants.json; repeatable)")
    mu.add_argument("--scope", default="series", metavar="series|callees|FILE[:FUNCTION]",
                    help="what to mutate: the lines the series adds (default), those and the "
                         "functions of .c files its changed functions call, or that code")
    mu.add_argument("--coverage", action="store_true",
                    help="run the baseline with gcov: a mutant on a series line no test runs "
                         "is reported 'not covered' without a run")
    mu.add_argument("--fresh", action="store_true",
                    help="judge every mutant anew: ignore cached verdicts")
    mu.add_argument("--baseline-runs", type=int, default=2, metavar="N",
                    help="run the unmutated kernel N times; a result not PASS in each "
                         "cannot judge a mutant (default 2)")
    _accel_option(mu)
    mu.add_argument("--out", type=Path, metavar="DIR",
                    help="results directory (default results/mutate-<timestamp>)")

    bi = sub.add_parser("bisect", help="the first patch of a series at which a test goes from "
                        "good to bad (SKIP and stage errors stepped over)")
    bi.add_argument("--series", required=True, metavar="NAME")
    bi.add_argument("--test", required=True, metavar="T")
    bi.add_argument("--cell", metavar="C", help="the matrix cell to bisect in (default: the "
                    "first one that applies the series)")
    bi.add_argument("--good", type=_statuses, default=None, metavar="S[,S]",
                    help="statuses that count as good (default PASS)")
    bi.add_argument("--bad", type=_statuses, default=None, metavar="S[,S]",
                    help="statuses that count as bad (default FAIL,CRASHED,TIMEOUT,FLAKY)")
    _accel_option(bi)
    bi.add_argument("--out", type=Path, metavar="DIR")
    cmp = sub.add_parser("compare", help="what changed between two runs: newly failing, fixed, "
                         "new splats, metrics beyond their spread (exit 1: regressed)")
    cmp.add_argument("before", metavar="A", help="a run directory or results.json, or RUN:CELL "
                     "for one cell of it")
    cmp.add_argument("after", metavar="B", help="the same for the run to judge")
    cmp.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as "
                     "JSON")
    cmp.add_argument("--markdown", type=Path, metavar="FILE", help="also write it as markdown "
                     "(for a pull request or a mail)")
    cmp.add_argument("--html", type=Path, metavar="FILE", help="also write it as a web page")
    rep = sub.add_parser("report", help="a static HTML page of a run: the matrix grid, "
                         "details, splats, features, patches, benchmark plots")
    rep.add_argument("run", metavar="RUN", help="a run directory (or its results.json)")
    rep.add_argument("--out", type=Path, metavar="DIR", help="where index.html goes "
                     "(default: RUN/report)")
    ca = sub.add_parser("cache", help="what the cache holds (size, last use, what for); "
                        "prune or drop entries; export them to an archive, import one")
    ca.add_argument("action", nargs="?", choices=["list", "prune", "drop", "export", "import"],
                    default="list")
    ca.add_argument("names", nargs="*", metavar="NAME",
                    help="drop: the entries to remove (globs, e.g. 'git-linux-*'); import: "
                         "the archive")
    ca.add_argument("--max-size", default=None, metavar="SIZE",
                    help="prune: evict least recently used until the cache fits in SIZE "
                         "(default $HARNESS_CACHE_MAX, else 40G)")
    ca.add_argument("--dry-run", action="store_true", help="prune/drop: say what would go")
    ca.add_argument("--run", action="append", default=[], metavar="RUN",
                    help="export: a run (directory or results.json) whose cells' stored "
                         "kernels, and the test builds used while it ran, go in "
                         "(repeatable)")
    ca.add_argument("--cell", action="append", default=[], metavar="NAME",
                    help="export: only these cells of the runs (repeatable)")
    ca.add_argument("--entry", action="append", default=[], metavar="NAME",
                    help="export: these entries, named as `harness cache` lists them "
                         "(globs; kernels and test builds; repeatable)")
    ca.add_argument("-o", "--output", type=Path, default=None, metavar="FILE.tar",
                    help="export: the archive to write (.tar, .tar.gz or .tar.xz)")
    sub.add_parser("doctor", help="check tools, disk and KVM, and say how to fix each")
    ls = sub.add_parser("matrix", help="list the matrix cells")
    ls.add_argument("--tier", choices=[t.value for t in Tier], default="default",
                    help="the cells of this tier (default: default, what `harness run` runs)")
    return p


def _cells_from_args(args: argparse.Namespace) -> tuple[list[Cell], str]:
    """The cells to run, and the first line of output: what this run tests."""
    return run.cells_for(run.Selection(
        kernels=tuple(args.kernel), series=tuple(args.series), configs=tuple(args.config),
        tests=tuple(args.test), patches=tuple(args.patch), boot_only=args.boot_only,
        build_only=args.build_only, coverage=args.coverage, append=args.append,
        tier=args.tier, cells=tuple(args.cell), matrix=args.matrix, memory=args.memory,
        cpus=args.cpus, arch=args.arch, toolchain=args.toolchain,
        guest_command=tuple(args.guest_command), cwd=args.cwd, timeout=args.timeout),
        here=Path.cwd())


def _results_dir(out: Path | None, kind: str = "", *, marker: str = "results.json") -> Path:
    """--out, else results/[KIND-]<run id>; new, empty, or an earlier run's of this kind
    (emptied first)."""
    path = (out or Path("results") / f"{kind + '-' if kind else ''}{results.new_run_id()}"
            ).resolve()
    results.prepare_out(path, marker=marker)
    return path


def cmd_run(args: argparse.Namespace) -> int:
    from harness.ci import shard

    cells, what = _cells_from_args(args)
    if args.coverage:
        cells = [matrix.with_coverage(c) for c in cells]
        what += "\ncoverage: the series' C files built with gcov (a kernel of their own)"
    if args.costs is not None and args.shard is None:
        raise EnvironmentProblem("--costs balances shards: give --shard K/N with it")
    if args.shard is not None:
        k, n = shard.parse(args.shard)
        costs = shard.costs_from(args.costs) if args.costs is not None else {}
        cells = shard.plan(cells, n, costs)[k - 1]
        what += (f"\nshard {k}/{n}: " + (", ".join(c.name for c in cells) or
                                        "no cell (more shards than kernels)"))
    if args.baseline:
        cells = run.baseline_cells(cells)
        what += "\n(--baseline: each cell also on its base without the series: <cell>.base)"
    print(what, flush=True)
    out = _results_dir(args.out)
    log.info("results: %s", out)
    report = run.run(run.RunRequest(
        cells=tuple(cells), what=what, out=out, accel=Accel(args.accel), strict=args.strict,
        repeat=args.repeat, build_only=args.build_only, baseline=args.baseline,
        bisect_exit=args.bisect_exit, argv=tuple(sys.argv[1:]) or ("run",)))
    print(f"\nresults: {report.results}  (exit {report.exit_code})")
    return report.exit_code


def _your_tree_or(kernel: str | None) -> tuple[str, str]:
    """--kernel, else the kernel git tree the user is in, else the default; and how to say
    it."""
    if kernel:
        return kernel, kernel
    here = sources.enclosing_kernel_tree(Path.cwd())
    if here is None:
        return DEFAULT_KERNEL, DEFAULT_KERNEL
    return f"git:{here}", f"your tree {here} (HEAD + uncommitted changes)"


def cmd_shell(args: argparse.Namespace) -> int:
    from harness.drivers import shell

    if not sys.stdin.isatty():
        raise EnvironmentProblem("harness shell needs a terminal: its input is not one",
                                 fix="run it from a terminal; to run a command in the "
                                     "guest without one: harness run [OPTIONS] -- CMD")
    memory = args.memory or Cell.memory
    cpus = Cell.cpus if args.cpus is None else args.cpus  # 0 is refused, not defaulted
    matrix.check_guest_size(memory, cpus)
    kernel, where = _your_tree_or(args.kernel)
    tests = tuple(args.test) or matrix.default_tests(kernel, matrix.load())[0]
    cell = Cell(name="shell", tier=Tier.DEFAULT, kernel=kernel, series=tuple(args.series),
                configs=tuple(args.config or ["base"]), tests=tests,
                patches=tuple(str(Path(p).resolve()) for p in args.patch),
                append=args.append, memory=memory, cpus=cpus,
                arch=args.arch or Cell.arch, toolchain=args.toolchain or Cell.toolchain)
    out = _results_dir(args.out, "shell", marker="shell.json")
    print(f"shell on {where}" + (f" + series {', '.join(args.series)}" if args.series else "")
          + f"; results: {out}", flush=True)
    session = shell.run(cell, out, accel=Accel(args.accel))
    atomic.write_json(out / "shell.json", shell.to_json(session))
    print(shell.summary(session))
    return session.code


def cmd_parse(args: argparse.Namespace) -> int:
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise EnvironmentProblem(f"--out {args.out} is a file, not a directory",
                                 fix="give a new or empty directory")
    if args.file == "-":
        parsed = ktap.parse(sys.stdin)
        name = args.name or "stdin"
    else:
        path = Path(args.file)
        if path.is_dir():
            raise EnvironmentProblem(f"{path} is a directory, not a log file",
                                     fix="give the log file itself (e.g. a test's .out file "
                                         "in a run's guest/ directory), or - for stdin")
        try:
            with path.open(errors="replace") as stream:
                parsed = ktap.parse(stream)
        except OSError as exc:
            raise from_os_error(exc, f"reading {path}") from None
        name = args.name or path.name
    status = parsed.status
    test = TestResult(name=name, status=status, duration_s=0.0, exit_code=None, ktap=parsed,
                      reason="; ".join(parsed.errors))
    cell = CellResult(cell="parse", kernel="", kernel_version="", status=status, patches=(),
                      config=None, stages=(), tests=(test,))
    print(results.summary([cell]))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        results.write_json(args.out / "results.json", [cell],
                           meta={"command": ["harness", *sys.argv[1:]], "source_log": args.file})
    return results.exit_code([cell])


def cmd_check(args: argparse.Namespace) -> int:
    from harness.drivers import check

    kernel, where = _your_tree_or(args.kernel)
    print(f"checking against {where}", flush=True)
    request = check.CheckRequest(kernel=kernel, series=tuple(args.series),
                                 patches=tuple(Path(p).resolve() for p in args.patch),
                                 configs=tuple(args.config or ["base"]),
                                 arch=args.arch or target.DEFAULT_ARCH,
                                 toolchain=args.toolchain or target.DEFAULT_TOOLCHAIN)
    out = _results_dir(args.out, "check", marker="check.json")
    log.info("results: %s", out)
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": ["harness", *sys.argv[1:]], "harness_rev": results.harness_rev()}
    report = check.run(request, out)
    check.write_json(out / "check.json", report, meta=meta)
    if report.error:
        log.error("%s", report.error)
    print(check.summary_table(report))
    print(f"\ncheck: {out / 'check.json'}  (exit {report.exit_code})")
    return report.exit_code


def cmd_mutate(args: argparse.Namespace) -> int:
    from harness.drivers import mutate

    out = _results_dir(args.out, "mutate", marker="mutants.json")
    log.info("results: %s", out)
    request = mutate.Request(series=args.series, targets=tuple(args.target),
                             tests=tuple(args.test), cell=args.cell, max=args.max,
                             seed=args.seed, accel=Accel(args.accel),
                             only=tuple(args.mutant), fresh=args.fresh,
                             baseline_runs=args.baseline_runs, scope=args.scope,
                             coverage=args.coverage)
    state = mutate.State(request=request, out=out, cell=mutate.choose_cell(request,
                                                                            matrix.load()))
    try:
        state = mutate.run(request, out)
    finally:
        atomic.write_json(out / "mutants.json", mutate.to_json(state))
    print(mutate.summary(state))
    code = mutate.exit_code(state)
    print(f"\nmutants: {out / 'mutants.json'}  (exit {code})")
    return code


def cmd_bisect(args: argparse.Namespace) -> int:
    from harness.drivers import bisect

    request = bisect.Request(series=args.series, test=args.test, cell=args.cell,
                             good=args.good or bisect.DEFAULT_GOOD,
                             bad=args.bad or bisect.DEFAULT_BAD, accel=Accel(args.accel))
    if request.good & request.bad:
        raise EnvironmentProblem("--good and --bad share " + ", ".join(
            sorted(s.value for s in request.good & request.bad)),
            fix="a status is either good or bad")
    out = _results_dir(args.out, "bisect", marker="bisect.json")
    log.info("results: %s", out)
    outcome = bisect.run(request, out)
    atomic.write_json(out / "bisect.json", bisect.to_json(outcome))
    print(bisect.summary(outcome))
    print(f"\nbisect: {out / 'bisect.json'}  (exit {outcome.exit_code})")
    return outcome.exit_code


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.output import compare

    a, cell_a, _ = results.load_run(args.before)
    b, cell_b, _ = results.load_run(args.after)
    label_a, label_b = args.before, args.after
    try:
        result = compare.compare(a, b, labels=(label_a, label_b), cells=(cell_a, cell_b))
    except KeyError as exc:
        raise EnvironmentProblem(str(exc.args[0]), fix="name a cell the run has") from None
    if not result.cells:
        raise EnvironmentProblem(f"{label_a} and {label_b} have no cell in common",
                                 fix="compare one cell of each: A:CELL B:CELL")
    print(compare.render_terminal(result))
    if args.json:
        atomic.write_json(args.json, compare.to_json(result))
    if args.markdown:
        atomic.write_text(args.markdown, compare.render_markdown(result))
    if args.html:
        from harness.output import report

        atomic.write_text(args.html, report.render_comparison(result))
    return 1 if result.regressed else 0


def cmd_report(args: argparse.Namespace) -> int:
    from harness.output import report

    doc, _cell, file = results.load_run(args.run)
    out = (args.out or file.parent / "report").resolve()
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "index.html",
                      report.render(doc, results.log_tails(doc, file.parent)))
    print(f"report: {out / 'index.html'}")
    return 0


def cmd_ci(args: argparse.Namespace) -> int:
    from harness.ci import ciplan, gitlab, workflow

    if args.what != "minutes" and args.what != "annotate" and args.runs:
        raise EnvironmentProblem(f"harness ci {args.what} takes no runs",
                                 fix="runs go to harness ci annotate or harness ci minutes")
    for option, given, takes in (("--cell", args.cell, ("cache-key",)),
                                 ("--summary", args.summary, ("annotate",)),
                                 ("-o", args.output, ("github", "gitlab"))):
        if given and args.what not in takes:
            raise EnvironmentProblem(f"{option}: an option of harness ci {' and '.join(takes)}",
                                     fix=f"leave it out of harness ci {args.what}")
    if args.what == "cache-key":
        if not args.cell:
            raise EnvironmentProblem("harness ci cache-key needs --cell",
                                     fix="harness ci cache-key --cell 6.12 [--cell ...]")
        keys = workflow.cache_key(matrix.select(matrix.load(), Tier.FULL, tuple(args.cell)))
        print(f"store_key={keys.store}\nccache_prefix={keys.ccache_prefix}")
        return 0
    if args.what == "minutes":
        return _ci_minutes(args)
    if args.what == "annotate":
        return _ci_annotate(args)
    github_only = [o for o, v in (("--runs-on", args.runs_on),
                                  ("--container-options", args.container_options)) if v]
    if args.what == "gitlab" and github_only:
        raise EnvironmentProblem(f"{', '.join(github_only)}: options of harness ci github",
                                 fix="harness ci gitlab takes --tag for its runners")
    if args.what == "github" and args.tag:
        raise EnvironmentProblem("--tag: an option of harness ci gitlab",
                                 fix="harness ci github takes --runs-on LABEL")
    settings = ciplan.Settings(
        accel=Accel(args.accel), runs_on=tuple(args.runs_on), tags=tuple(args.tag),
        container_options=ciplan.DEFAULT_CONTAINER_OPTIONS if args.container_options is None
        else args.container_options)
    cells = matrix.select(matrix.load(), Tier(args.tier))
    render = workflow.render if args.what == "github" else gitlab.render
    what = "workflow" if args.what == "github" else "pipeline"
    return _write_or_print(render(cells, args.tier, settings), args.output, what)


def _ci_annotate(args: argparse.Namespace) -> int:
    from harness.output import annotate

    if not args.runs:
        raise EnvironmentProblem("harness ci annotate needs the runs",
                                 fix="harness ci annotate results/RUN [--summary FILE]")
    docs = [(results.load_run(str(r))[0], r) for r in args.runs]
    several = len(docs) > 1
    for doc, given in docs:
        label = (given.parent if given.name == "results.json" else given).name if several else ""
        for line in annotate.annotation_lines(doc, label=label):
            print(line)
    if args.summary is not None:
        with args.summary.open("a") as out:
            for doc, given in docs:
                label = (given.parent if given.name == "results.json" else given).name
                out.write(annotate.summary(doc, label=label) + "\n")
    return 0


def _ci_minutes(args: argparse.Namespace) -> int:
    from harness.ci import workflow

    if not args.runs:
        raise EnvironmentProblem("harness ci minutes needs the runs that measured the cells",
                                 fix="harness ci minutes results/run-A results/run-B "
                                 "--tier full (the runs first, then the options)")
    from harness.kernel.build import stored_build_seconds

    docs = [results.load_run(str(r))[0] for r in args.runs]
    costs = workflow.job_costs(matrix.select(matrix.load(), Tier(args.tier)), docs,
                               stored_build_seconds())
    print(workflow.render_minutes(costs, args.setup_minutes * 60))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from harness.output import junit, kcidb

    doc, _cell, _file = results.load_run(args.run)
    if args.format == "kcidb":
        run_id = kcidb.resolve_run_id(doc, given=args.run_id, env=os.environ)
        text = json.dumps(kcidb.export(doc, run_id=run_id, origin=args.origin or kcidb.ORIGIN,
                                       include_broken=args.include_broken), indent=1) + "\n"
    else:
        given = [o for o, v in (("--run-id", args.run_id), ("--origin", args.origin),
                                ("--include-broken", args.include_broken)) if v]
        if given:
            raise EnvironmentProblem(f"{', '.join(given)}: options of the kcidb export",
                                     fix="leave them out of harness export junit")
        text = junit.render(doc)
    return _write_or_print(text, args.output, args.format)


def _write_or_print(text: str, output: Path | None, what: str) -> int:
    """-o FILE (written whole or not at all, and said), or standard output."""
    if output is None:
        sys.stdout.write(text)
    else:
        atomic.write_text(output, text)
        print(f"{what}: {output}")
    return 0


def _merge_plan(args: argparse.Namespace) -> tuple[Planned, ...] | None:
    """The cells `harness merge` expects (shard.Planned), or None: no plan given."""
    from harness.ci import shard

    if args.plan is not None:
        if args.tier or args.cell:
            raise EnvironmentProblem("--plan and --tier/--cell both name the cells expected",
                                     fix="give the plan file, or the matrix cells")
        return shard.read_plan(args.plan)
    if not (args.tier or args.cell):
        return None
    every = matrix.load(args.matrix)
    names = {c.name for c in matrix.select(every, Tier.FULL, tuple(args.cell))} \
        if args.cell else set()
    if args.tier:
        names |= {c.name for c in matrix.select(every, Tier(args.tier))}
    return shard.planned([c for c in every if c.name in names])


def cmd_merge(args: argparse.Namespace) -> int:
    """Exit: the merged run's (shard.merge): 1 also for a MISSING cell, 2 for a conflict,
    an incomplete run, or an unreadable run when no plan says what it held."""
    import uuid

    from harness.ci import shard

    out = args.out.resolve()
    runs = [r.resolve() for r in args.runs]
    if out in runs:
        raise EnvironmentProblem("--out is one of the runs merged", fix="give a new directory")
    expected = _merge_plan(args)
    results.prepare_out(out)
    merged = shard.merge(runs, expected=expected,
                         run_id=f"merge-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}",
                         merged_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    for cell, source in merged.sources.items():
        if (source / cell).is_dir():
            shutil.copytree(source / cell, out / cell, symlinks=True)
    merged.doc["command"] = ["harness", *sys.argv[1:]]
    atomic.write_json(out / "results.json", merged.doc)
    print(shard.summary(merged))
    code = int(merged.doc["exit_code"])
    print(f"\nresults: {out / 'results.json'}  (exit {code})")
    return code


def cmd_cache(args: argparse.Namespace) -> int:
    from harness.kernel import cache

    export_only = [o for o, v in (("--run", args.run), ("--cell", args.cell),
                                  ("--entry", args.entry), ("-o", args.output)) if v]
    if export_only and args.action != "export":
        raise EnvironmentProblem(f"{', '.join(export_only)}: options of harness cache export",
                                 fix=f"leave them out of harness cache {args.action}")
    if args.action == "export":
        return _cache_export(args)
    if args.action == "import":
        return _cache_import(args)
    limit = cache.parse_size(args.max_size) if args.max_size else cache.max_size()
    if args.action == "list":
        if args.names:
            raise EnvironmentProblem("harness cache list takes no names",
                                     fix="harness cache drop NAME... removes entries")
        print(cache.render(cache.entries(), limit))
        return 0
    if args.action == "drop":
        if not args.names:
            raise EnvironmentProblem("harness cache drop needs the names of the entries",
                                     fix="harness cache lists them")
        done = cache.drop(tuple(args.names), dry_run=args.dry_run)
    else:
        done = cache.prune(limit, dry_run=args.dry_run)
    verb = "would evict" if args.dry_run else "evicted"
    for e in done.evicted:
        print(f"{verb} {e.kind.value} {e.name} ({cache.human(e.size)}; {e.used_for or '-'})")
    if done.skipped_reason:
        print(f"nothing evicted: {done.skipped_reason}; try again when it is done")
        return 1
    left = done.total_before - sum(e.size for e in done.evicted)
    print(f"{len(done.evicted)} entries {verb}; the cache holds {cache.human(left)}"
          + (f" (limit {cache.human(limit)})" if args.action == "prune" else ""))
    return 0


def _cache_export(args: argparse.Namespace) -> int:
    from harness.kernel import cache

    if args.names:
        raise EnvironmentProblem("harness cache export takes no names",
                                 fix="name the entries with --entry NAME, or the runs with "
                                     "--run RUN")
    if args.cell and not args.run:
        # a cell's kernel is named by its tree id and .config, known once a run made them
        raise EnvironmentProblem("--cell picks cells of the runs given: there is none",
                                 fix="give the run that ran them: --run results/RUN --cell C")
    if args.output is None or not (args.run or args.entry):
        raise EnvironmentProblem("harness cache export needs what to export and where",
                                 fix="harness cache export --run results/RUN [--cell C]... "
                                     "[--entry NAME]... -o FILE.tar")
    runs = [(doc, file) for doc, _cell, file in (results.load_run(r) for r in args.run)]
    names = cache.run_entries(runs, tuple(args.cell)) if runs else {}
    if args.entry:
        names.update(cache.named_entries(tuple(args.entry)))
    done = cache.export(names, args.output)
    for name, what in done.entries.items():
        print(f"exported {name} ({what or '-'})")
    print(f"{len(done.entries)} entries, {cache.human(done.size)}: {done.archive}")
    return 0


def _cache_import(args: argparse.Namespace) -> int:
    from harness.kernel import cache

    if len(args.names) != 1:
        raise EnvironmentProblem("harness cache import takes one archive",
                                 fix="harness cache import FILE.tar")
    done = cache.import_archive(Path(args.names[0]))
    for name, what in done.added.items():
        print(f"imported {name} ({what or '-'})")
    for name, what in done.present.items():
        print(f"already in the cache: {name} ({what or '-'})")
    print(f"{len(done.added)} entries imported, {len(done.present)} already there, into "
          f"{paths.cache_root()}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    found = doctor.checks()
    print(doctor.render(found))
    return 0 if all(c.ok or c.optional for c in found) else 2


def cmd_matrix(args: argparse.Namespace) -> int:
    every = matrix.load()
    shown = matrix.select(every, Tier(args.tier))
    for c in shown:
        expect = ""
        if c.has_expectations:
            parts = [f"all={c.expect_status}"] if c.expect_status else []
            expect = " expect=" + ",".join(parts + [f"{t}={s}" for t, s in c.expect])
        built = f" arch={c.arch} toolchain={c.toolchain}" \
            if target.label(c.arch, c.toolchain) else ""
        print(f"{c.name:<28} {c.tier.value:<8} {c.kernel:<14} series={','.join(c.series) or '-'}"
              f" configs={','.join(c.configs)}{built} tests={','.join(c.tests)}{expect}")
    if len(shown) < len(every):
        print(f"({len(shown)} of {len(every)} cells: the {args.tier} tier; --tier full lists "
              "them all)")
    return 0


TAKE_A_COMMAND = ("run",)
# The commands that read or fill the cache: they hold it (cache.in_use) while they run,
# and evict down to its limit when they end.
USE_THE_CACHE = ("run", "check", "mutate", "bisect", "shell")


def _prune_after(command: str) -> None:
    done = cache.prune(cache.max_size())
    if done.evicted:
        log.info("cache over its %s limit after %s: evicted %s (least recently used)",
                 cache.human(done.limit), command,
                 ", ".join(f"{e.kind.value} {e.name}" for e in done.evicted))
    elif done.skipped_reason and done.total_before > done.limit:
        log.warning("cache over its %s limit (%s), not pruned: %s",
                    cache.human(done.limit), cache.human(done.total_before),
                    done.skipped_reason)  # the subcommands that take `-- CMD ARGS...`


def parse_args(argv: list[str]) -> argparse.Namespace:
    """argparse, with what follows the first `--` kept apart as the guest's command."""
    parser = build_parser()
    cmd: list[str] = []
    separated = "--" in argv
    if separated:
        at = argv.index("--")
        argv, cmd = argv[:at], argv[at + 1:]
    args = parser.parse_args(argv)
    if separated and args.command not in TAKE_A_COMMAND:
        parser.error(f"harness {args.command} takes no -- CMD; harness run [OPTIONS] -- CMD "
                     "runs a command in the guest")
    if separated and not cmd:
        parser.error("-- is followed by no command: harness run [OPTIONS] -- CMD [ARGS...]")
    args.guest_command = cmd
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    _setup_logging(args.verbose)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "run": cmd_run, "parse": cmd_parse, "doctor": cmd_doctor, "matrix": cmd_matrix,
        "check": cmd_check, "mutate": cmd_mutate, "compare": cmd_compare,
        "bisect": cmd_bisect, "report": cmd_report, "shell": cmd_shell, "cache": cmd_cache,
        "merge": cmd_merge, "ci": cmd_ci, "export": cmd_export}
    try:
        if args.command not in USE_THE_CACHE:
            return handlers[args.command](args)
        with cache.in_use():
            code = handlers[args.command](args)
        _prune_after(args.command)
        return code
    except KeyboardInterrupt as exc:
        # Stay for the kill path: a second signal must not cut it short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        proc.kill_all()
        signum = signal_of(exc)
        log.error("interrupted by %s; child processes killed", signal.Signals(signum).name)
        return 128 + int(signum)
    except HarnessError as exc:
        log.error("%s", exc)
        # under `git bisect run` a harness that could not run must stop it, not blame the
        # commit (2 would read "bad")
        return results.BISECT_STOP if getattr(args, "bisect_exit", False) else 2
    except BrokenPipeError:  # the reader went away (| head): nothing left to tell
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        log.error("%s", from_os_error(exc, f"harness {args.command}"))
        return 2
    finally:
        proc.kill_all()


if __name__ == "__main__":
    sys.exit(main())
