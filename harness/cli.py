"""The command line: a table of commands (COMMANDS: each one's name, arguments, handler,
examples, and whether it holds the cache), and dispatch to the drivers (run, check,
mutate, bisect, shell, ...). Only main() maps errors to exit codes.

Exit codes: 0 passed; 1 a test failed, crashed or timed out, or nothing was tested;
2 a set-up, patch, config, build or boot error, or bad input / a host problem (told as
cause and fix, never a traceback); 128+N killed by signal N (130 SIGINT, 143 SIGTERM).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from harness import target
from harness.base import paths, proc, sandbox
from harness.base.errors import HarnessError, Stopped, from_os_error, signal_of
from harness.base.model import Accel, GuestOptions, GuestSpec, Status
from harness.drivers import doctor, matrix, pipeline, run
from harness.drivers.matrix import Cell, Tier
from harness.kernel import cache, sources
from harness.output import results
from harness.testkinds import command

USAGE = """\
Take a kernel tree, apply a patch series, configure, build, boot it under QEMU and run
selftests inside; judge everything the kernel says, from boot to power-off.

  harness run                       the default matrix cell (or your tree, from inside it)
  harness run --series NAME --test T    a series and a test on Debian's 6.12
  harness shell                     the same kernel, booted into a shell here

exit codes: 0 passed; 1 a test failed, crashed or timed out, or nothing was tested;
2 a set-up, patch, config, build or boot error, or bad input (told as cause and fix);
128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM)."""

log = logging.getLogger("harness")
DEFAULT_KERNEL = run.DEFAULT_KERNEL
KERNEL_HELP = (f"debian:6.12, debian:6.1, git:PATH[@REV], tarball:PATH (a kernel release "
               f"tarball) (default: the kernel git tree you are in, else {DEFAULT_KERNEL})")


def _version() -> str:
    """The installed harness's version, and the commit of this checkout when it is one
    (asked only for --version: every other command must run without git, doctor first)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        number = version("harness")
    except PackageNotFoundError:
        number = "unknown"
    try:
        rev = results.harness_rev()
    except (HarnessError, OSError):
        rev = "unknown"
    return number if rev == "unknown" else f"{number} ({rev[:12]})"


class _Version(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"harness {_version()}")
        parser.exit()


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(message)s",
                                           "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


# ---- values the options take ----


def count(what: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """An option's whole number from `low` to `high` (None: no upper bound), or argparse's
    error saying what it counts and its range."""
    bounds = f"{low} to {high}" if high is not None else f"at least {low}"

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = low - 1
        if n < low or (high is not None and n > high):
            raise argparse.ArgumentTypeError(f"{text!r}: {what}, {bounds}")
        return n

    return parse


ATTEMPTS = count("a number of attempts", 1, 1000)
BOOTS = count("a number of fresh boots", 1, 100)
RUNS = count("a number of runs", 1)


def _statuses(text: str) -> frozenset[Status]:
    try:
        return frozenset(Status(s.strip().upper()) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: statuses, comma-separated, of {', '.join(s.value for s in Status)}"
        ) from None


# ---- the options several commands share ----


def _tree_options(p: argparse.ArgumentParser, *, several_kernels: bool = False) -> None:
    """The kernel to build and what goes on it: one vocabulary for run, check and shell."""
    if several_kernels:
        _many(p, "--kernel", "SPEC",
              help=KERNEL_HELP + "; image:PATH (a built kernel image: no patches, no "
                   "tests built from the tree); repeatable")
    else:
        p.add_argument("--kernel", default=None, metavar="SPEC", help=KERNEL_HELP)
    _many(p, "--series", "NAME",
          help="patch series under patches/, mbox:FILE or lore:MSGID (a thread from "
               "the list, through b4); repeatable")
    _many(p, "--config", "FRAGMENT",
          help="kconfig fragment name or path (repeatable; default: base)")
    _many(p, "--patch", "FILE",
          help="extra patch, or a thread saved as an mbox, applied after the series "
               "(repeatable)")
    p.add_argument("--arch", default=None, choices=target.known_arches(),
                   help=f"the arch to build for (default {target.DEFAULT_ARCH}; "
                        "harness/target/arches/ARCH.toml)")
    p.add_argument("--toolchain", default=None, choices=target.known_toolchains(),
                   help=f"the toolchain to build with (default {target.DEFAULT_TOOLCHAIN}; "
                        "llvm: clang, lld and the LLVM binutils 19)")
    _sandbox_option(p)


def _sandbox_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the kernel tree's code (make, scripts/, tools built from it) "
                        "with all your rights instead of in bubblewrap (no network, no "
                        "home); recorded in results.json and on the terminal")


def _sandbox_policy(args: argparse.Namespace) -> sandbox.Policy:
    """--no-sandbox, where a command has it: the policy its run is under."""
    off = getattr(args, "no_sandbox", False)
    return sandbox.Policy(enabled=not off, why_off="--no-sandbox" if off else "")


def _guest_options(p: argparse.ArgumentParser) -> None:
    """The guest's knobs: one vocabulary for run and shell."""
    p.add_argument("--append", default="", metavar="ARGS",
                   help="extra kernel command line for the guest (e.g. panic_on_warn=1)")
    p.add_argument("--memory", default=None, metavar="SIZE",
                   help=f"the guest's RAM, e.g. 1536M or 4G (default {GuestSpec.memory})")
    p.add_argument("--cpus", type=int, default=None, metavar="N",
                   help=f"the guest's CPUs (default {GuestSpec.cpus})")
    p.add_argument("--host-root", action="store_true",
                   help="boot the guest on the host's root, as vng does (your tools in the "
                        "guest; the tree's tests can then read your files), not on a root "
                        "of its own; recorded in results.json and on the terminal")
    _accel_option(p)


def _accel_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accel", choices=[a.value for a in Accel], default="auto",
                   help="auto: KVM when a short real boot shows it works, else TCG "
                        "(a guest of another arch: always TCG)")


def _tier_option(p: argparse.ArgumentParser, *, default: str | None, help: str) -> None:
    p.add_argument("--tier", choices=[t.value for t in Tier], default=default, help=help)


def _many(p: argparse.ArgumentParser, flag: str, metavar: str | None, help: str) -> None:
    """An option given as often as wanted (each value kept, in order)."""
    p.add_argument(flag, action="append", default=[], metavar=metavar, help=help)


def _out_option(p: argparse.ArgumentParser, help: str | None = None) -> None:
    p.add_argument("--out", type=Path, metavar="DIR", help=help)


# ---- each command's arguments ----


def _run_arguments(r: argparse.ArgumentParser) -> None:
    _tree_options(r, several_kernels=True)
    _many(r, "--test", "NAME|PATH",
          help="selftest name, test directory, kselftest:TARGET or test_progs:NAME; "
               "NAME:CHECK[,CHECK] (globs) runs only those checks of its CHECK table (and "
               "what they need), test_progs:NAME/SUBTEST and kselftest:TARGET:PROGRAM:NAME "
               "those subtests (repeatable; default: the tests of the base's matrix cell)")
    r.add_argument("--affected", action="store_true",
                   help="run only the checks the change can affect: the map (--map) says "
                        "which checks reach the kernel functions the tree's last commit "
                        "(the last patch, or your uncommitted changes) touches; every test "
                        "whole when it cannot say")
    r.add_argument("--map", action="store_true",
                   help="on the gcov kernel (--coverage), run each check alone and record "
                        "which kernel functions it reaches: the map --affected reads")
    r.add_argument("--boot-only", action="store_true",
                   help="run no test: judge the kernel by its boot and shutdown alone")
    r.add_argument("--build-only", action="store_true",
                   help="build the kernel (into the kernel store) and the tests, boot nothing "
                        "(a CI build job; PASS when every build stage passed)")
    r.add_argument("--prebuilt", type=Path, metavar="BUILD_RUN",
                   help="boot the kernel and tests a --build-only run of these cells made "
                        "(its directory; the kernel and test builds imported with harness "
                        "cache import): no source, no build (a CI test job)")
    r.add_argument("--coverage", action="store_true",
                   help="build with gcov for the series' C files and report, per patch, "
                        "which of its added lines the tests ran (a kernel of its own)")
    _guest_options(r)
    _out_option(r, "this run's results directory (new, empty, or an earlier run's)")
    _tier_option(r, default=None,
                 help="run the matrix cells of this tier (default tier when no options)")
    _many(r, "--cell", None, help="run only these matrix cells")
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
    _run_command_and_shard_arguments(r)


def _run_command_and_shard_arguments(r: argparse.ArgumentParser) -> None:
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
    r.add_argument("--retry-failed", type=BOOTS, default=0, metavar="N",
                   help="each test that failed or timed out runs again in N fresh boots of "
                        "the same kernel: one that then passes is FLAKY, with the share of "
                        "boots it failed in; one that fails in every boot stays FAIL")
    r.add_argument("--repeat", type=ATTEMPTS, default=None, metavar="N",
                   help="run each selected test N times in one boot, each a fresh process; "
                        "judged as one, every attempt kept (default: each test's own "
                        "`repeat`, else 1)")


def _shell_arguments(sh: argparse.ArgumentParser) -> None:
    _tree_options(sh)
    _many(sh, "--test", "NAME|PATH",
          help="the selftests to build for the shell (default: the kernel's "
               "default tests, as run)")
    _guest_options(sh)
    _out_option(sh, "the shell's results directory (default results/shell-<timestamp>)")


def _check_arguments(c: argparse.ArgumentParser) -> None:
    _tree_options(c)
    _out_option(c, "results directory (default results/check-<timestamp>)")


def _compare_arguments(cmp: argparse.ArgumentParser) -> None:
    cmp.add_argument("before", metavar="A", help="a run directory or results.json, or RUN:CELL "
                     "for one cell of it")
    cmp.add_argument("after", metavar="B", help="the same for the run to judge")
    cmp.add_argument("--json", type=Path, metavar="FILE", help="also write the comparison as "
                     "JSON")
    cmp.add_argument("--markdown", type=Path, metavar="FILE", help="also write it as markdown "
                     "(for a pull request or a mail)")
    cmp.add_argument("--html", type=Path, metavar="FILE", help="also write it as a web page")


def _verdicts_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("runs", nargs="+", metavar="RUN[:CELL]",
                   help="run directories (or results.json), or one cell of each")
    v.add_argument("--markdown", type=Path, metavar="FILE",
                   help="also write the table as markdown (with what each check that did "
                        "not pass said)")


def _bisect_arguments(bi: argparse.ArgumentParser) -> None:
    bi.add_argument("--series", required=True, metavar="NAME")
    bi.add_argument("--test", required=True, metavar="T")
    bi.add_argument("--cell", metavar="C", help="the matrix cell to bisect in (default: the "
                    "first one that applies the series)")
    bi.add_argument("--good", type=_statuses, default=None, metavar="S[,S]",
                    help="statuses that count as good (default PASS)")
    bi.add_argument("--bad", type=_statuses, default=None, metavar="S[,S]",
                    help="statuses that count as bad (default FAIL,CRASHED,TIMEOUT,FLAKY)")
    _accel_option(bi)
    _sandbox_option(bi)
    _out_option(bi)


def _mutate_arguments(mu: argparse.ArgumentParser) -> None:
    mu.add_argument("--series", required=True, metavar="NAME",
                    help="the series whose added C lines are mutated")
    _many(mu, "--target", "FILE[:FUNCTION]",
          help="also mutate this kernel function (or file), e.g. "
               "kernel/cgroup/rstat.c:cgroup_rstat_flush_locked (repeatable)")
    _many(mu, "--test", "NAME",
          help="the tests that must kill them (default: the cell's)")
    mu.add_argument("--cell", default=None, metavar="NAME",
                    help="matrix cell to mutate in (default: the first default/ci cell that "
                         "applies the series and declares no expectations)")
    mu.add_argument("--max", type=int, default=None, metavar="N",
                    help="run at most N mutants, drawn by --seed (default: all)")
    mu.add_argument("--seed", type=int, default=0, metavar="S")
    _many(mu, "--mutant", "ID",
          help="run only these mutants (ids from mutants.json; repeatable)")
    mu.add_argument("--scope", default="series", metavar="series|callees|FILE[:FUNCTION]",
                    help="what to mutate: the lines the series adds (default), those and the "
                         "functions of .c files its changed functions call, or that code")
    mu.add_argument("--coverage", action="store_true",
                    help="run the baseline with gcov: a mutant on a series line no test runs "
                         "is reported 'not covered' without a run")
    mu.add_argument("--affected", action="store_true",
                    help="run each mutant with only the checks the cell's map (harness run "
                         "--cell CELL --map) says its line can affect; with the full tests' "
                         "verdicts cached (the same run without --affected), say how many "
                         "of their kills the affected checks alone make")
    mu.add_argument("--fresh", action="store_true",
                    help="judge every mutant anew: ignore cached verdicts")
    mu.add_argument("--baseline-runs", type=int, default=2, metavar="N",
                    help="run the unmutated kernel N times; a result not PASS in each "
                         "cannot judge a mutant (default 2)")
    _accel_option(mu)
    _sandbox_option(mu)
    _out_option(mu, "results directory (default results/mutate-<timestamp>)")


def _explain_arguments(why: argparse.ArgumentParser) -> None:
    why.add_argument("run", metavar="RUN[:CELL]", help="a run directory (or its "
                     "results.json), or one cell of it")
    why.add_argument("--json", action="store_true", help="the same as JSON")


def _report_arguments(rep: argparse.ArgumentParser) -> None:
    rep.add_argument("run", metavar="RUN", help="a run directory (or its results.json)")
    _out_option(rep, "where index.html goes (default: RUN/report)")


def _history_arguments(hi: argparse.ArgumentParser) -> None:
    hi.add_argument("what", nargs="*", metavar="CELL|TEST|TEST:SUBTEST",
                    help="what to show (default: every test); or: import RUN...")
    hi.add_argument("--last", type=RUNS, default=10, metavar="N",
                    help="the last N runs of each (default 10)")
    hi.add_argument("--json", action="store_true", help="as JSON")
    hi.add_argument("--flakes", action="store_true",
                    help="flakes measured over fresh boots: each declared-flaky test's "
                         "failure rate (95%% interval), and tests not declared that fail "
                         "intermittently")
    hi.add_argument("--history", type=Path, default=None, metavar="FILE",
                    help="the database (default $HARNESS_HISTORY, else "
                         "~/.cache/harness/history.sqlite)")


def _no_arguments(p: argparse.ArgumentParser) -> None:
    """mcp and doctor take none."""


def _parse_arguments(ps: argparse.ArgumentParser) -> None:
    ps.add_argument("file", help="log file, or - for stdin")
    _out_option(ps)
    ps.add_argument("--name", default=None, help="test name (default: the file name)")


def _matrix_arguments(ls: argparse.ArgumentParser) -> None:
    _tier_option(ls, default="default",
                 help="the cells of this tier (default: default, what `harness run` runs)")


def _cache_arguments(ca: argparse.ArgumentParser) -> None:
    ca_sub = ca.add_subparsers(dest="action", metavar="ACTION")  # none: list
    _subcommand(ca_sub, "list", help="the entries, their size, last use and what for")
    pr = _subcommand(ca_sub, "prune", help="evict least recently used entries until the "
                     "cache fits in its limit")
    pr.add_argument("--max-size", default=None, metavar="SIZE",
                    help="the limit (default $HARNESS_CACHE_MAX, else 40G)")
    pr.add_argument("--dry-run", action="store_true", help="say what would go")
    dr = _subcommand(ca_sub, "drop", help="remove the entries named")
    dr.add_argument("names", nargs="*", metavar="NAME",
                    help="the entries to remove (globs, e.g. 'git-linux-*')")
    dr.add_argument("--dry-run", action="store_true", help="say what would go")
    cx = _subcommand(ca_sub, "export", help="entries into an archive another machine imports")
    _many(cx, "--run", "RUN",
          help="a run (directory or results.json) whose cells' stored kernels, and "
               "the test builds used while it ran, go in (repeatable)")
    _many(cx, "--cell", "NAME",
          help="only these cells of the runs (repeatable)")
    _many(cx, "--entry", "NAME",
          help="these entries, named as `harness cache` lists them (globs; "
               "kernels and test builds; repeatable)")
    cx.add_argument("-o", "--output", type=Path, default=None, metavar="FILE.tar",
                    help="the archive to write (.tar, .tar.gz or .tar.xz)")
    ci_ = _subcommand(ca_sub, "import", help="an archive's entries into this cache")
    ci_.add_argument("archive", type=Path, metavar="FILE.tar")


def _ci_arguments(ci: argparse.ArgumentParser) -> None:
    ci_sub = ci.add_subparsers(dest="what", required=True, metavar="SUBCOMMAND")
    for system, runners in (("github", "GitHub Actions workflow"),
                            ("gitlab", "GitLab CI pipeline")):
        _ci_pipeline_arguments(_subcommand(ci_sub, system,
                                           help=f"the {runners} of the tier's cells"), system)
    key = _subcommand(ci_sub, "cache-key", help="the cache keys of the cells' build jobs")
    _many(key, "--cell", "NAME",
          help="the cells whose kernels the keys cover (repeatable)")
    an = _subcommand(ci_sub, "annotate", help="runs' failures as GitHub annotations")
    an.add_argument("runs", nargs="*", type=Path, metavar="RUN",
                    help="the runs (directories or results.json) whose failures to annotate")
    an.add_argument("--summary", type=Path, default=None, metavar="FILE",
                    help="also append a markdown summary of the runs to FILE "
                         "(\"$GITHUB_STEP_SUMMARY\")")
    mi = _subcommand(ci_sub, "minutes", help="what the matrix costs in runner-minutes, from "
                     "runs that measured its cells")
    mi.add_argument("runs", nargs="*", type=Path, metavar="RUN",
                    help="earlier runs measuring the cells")
    mi.add_argument("--tier", choices=[t.value for t in Tier], default="ci")
    mi.add_argument("--setup-minutes", type=float, default=1.5, metavar="M",
                    help="a job's set-up before the harness runs (bootstrap, cache restore "
                         "and save; 1.5: bootstrap measured on a fresh machine, see README)")


def _ci_pipeline_arguments(gen: argparse.ArgumentParser, system: str) -> None:
    gen.add_argument("--tier", choices=[t.value for t in Tier], default="ci")
    gen.add_argument("--accel", choices=[a.value for a in Accel], default=Accel.AUTO.value,
                     help="the guests' accelerator (default auto: KVM where the runner has "
                          "it, else TCG, the reason in results.json; kvm needs "
                          + ("--test-runs-on" if system == "github" else "--test-tag")
                          + " naming runners with /dev/kvm)")
    flag, what = (("--runs-on", "label"), ("--tag", "tag"))[system == "gitlab"]
    default = "ubuntu-latest" if system == "github" else "any runner"
    _many(gen, flag, what.upper(),
          help=f"the runner {what}(s) of every job that builds or boots (repeatable; "
               f"default: {default})")
    _many(gen, f"--test-{flag[2:]}", what.upper(),
          help=f"the runner {what}(s) of the test jobs apart (runners with /dev/kvm, say; "
               "repeatable; default: as the build jobs')")
    if system == "github":
        gen.add_argument("--container-options", default=None, metavar="OPTS",
                         help="docker options of the test jobs' debian:12 container "
                              "(default --device /dev/kvm, none with --accel tcg)")
    gen.add_argument("--runner-disk", type=int, default=None, metavar="GB",
                     help="the runners' free disk, which sizes ccache and the harness cache "
                          "(default 14, a GitHub-hosted runner's)")
    gen.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                     help="write the file here (default: stdout)")


def _export_arguments(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("--bundle", default=None, metavar="RUN",
                    help="the run's whole directory (results, logs, every input it carries; "
                         "no kernel image) as one .tar.gz a reviewer reproduces: harness "
                         "reproduce FILE")
    ex.add_argument("-o", "--output", dest="bundle_output", type=Path, default=None,
                    metavar="FILE", help="with --bundle: the archive (default RUN-NAME.tar.gz "
                                         "here)")
    ex_sub = ex.add_subparsers(dest="format", required=False, metavar="FORMAT")
    for fmt, what in (("junit", "JUnit XML"), ("kcidb", "KCIDB JSON (schema 4)")):
        e = _subcommand(ex_sub, fmt, help=f"the run as {what}")
        e.add_argument("run", metavar="RUN", help="a run directory (or its results.json)")
        e.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                       help="write it here (default: stdout)")
        if fmt == "kcidb":
            _kcidb_arguments(e)


def _reproduce_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("source", type=Path, metavar="DIR|ARCHIVE",
                   help="a run's results directory, wherever it is now, or its bundle "
                        "(harness export --bundle RUN)")
    _out_option(r, "the reproduction's results directory (default results/reproduce-<id>; "
                   "never inside the run reproduced)")
    _many(r, "--cell", "NAME", help="reproduce only these cells (repeatable)")
    _many(r, "--test", "NAME", help="only these tests of the cells (repeatable; a -- "
                                    "command of the run is then left out)")
    r.add_argument("--accel", choices=[a.value for a in Accel], default=None,
                   help="the accelerator (default: what the run asked; KVM against TCG is "
                        "said when they differ)")
    r.add_argument("--kernel", default=None, metavar="SPEC",
                   help="build on this kernel source instead of the run's (e.g. debian:6.12: "
                        "the package Debian serves now); said as an input that differs")
    _many(r, "--patch", "FILE",
          help="apply FILE in place of the run's patch of the same file name (said as an "
               "input that differs; repeatable)")
    r.add_argument("--at-revision", action="store_true",
                   help="run the run's own harness revision (checked out into a temporary "
                        "worktree of this clone, when it has the commit): an exact rerun")


def _kcidb_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("--run-id", default=None, metavar="ID",
                   help="the run's id, unique per run, in every object's id "
                        "(default: GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT, or "
                        "CI_PIPELINE_ID, when set; else derived from the run's start "
                        "time and its results.json)")
    e.add_argument("--origin", default=None, metavar="NAME",
                   help="the submitting CI system, [a-z0-9_] (default harness)")
    e.add_argument("--include-broken", action="store_true",
                   help="also export broken-variant cells, their declared results "
                        "marked misc.expected (default: left out, they are no "
                        "regressions)")


def _merge_arguments(mg: argparse.ArgumentParser) -> None:
    mg.add_argument("runs", nargs="+", type=Path, metavar="DIR")
    mg.add_argument("--out", type=Path, required=True, metavar="DIR")
    _tier_option(mg, default=None, help="expect the matrix cells of this tier")
    _many(mg, "--cell", "NAME",
          help="expect this matrix cell (repeatable; with --tier: those as well)")
    mg.add_argument("--matrix", type=Path, default=None, help="matrix file (default matrix.toml)")
    mg.add_argument("--plan", type=Path, default=None, metavar="FILE",
                    help="expect the cells this plan file lists (JSON: {\"cells\": [NAME, "
                         "...]}, as shard.write_plan writes it)")
    mg.add_argument("--builds", nargs="+", type=Path, default=[], metavar="DIR",
                    help="CI build jobs' --build-only runs: a cell no run holds takes the "
                         "build error that kept it from its test job, not MISSING")


# ---- each command's handler: its options as one request to one driver function ----


def run_request(args: argparse.Namespace) -> run.Request:
    """`harness run`'s options as one request: the selection of cells, the guest, how each
    cell runs and is judged, where the run goes."""
    selection = run.Selection(
        kernels=tuple(args.kernel), series=tuple(args.series), configs=tuple(args.config),
        tests=tuple(args.test), patches=tuple(args.patch), boot_only=args.boot_only,
        coverage=args.coverage, tier=args.tier, cells=tuple(args.cell), matrix=args.matrix,
        arch=args.arch, toolchain=args.toolchain, guest_command=tuple(args.guest_command),
        cwd=args.cwd, timeout=args.timeout, shard=args.shard, costs=args.costs,
        baseline=args.baseline, affected=args.affected, record_map=args.map)
    options = pipeline.RunOptions(strict=args.strict, repeat=args.repeat,
                                  build_only=args.build_only, retry_failed=args.retry_failed,
                                  host_root=args.host_root, prebuilt=args.prebuilt)
    return run.Request(selection=selection, here=Path.cwd(), guest=guest_options(args),
                       options=options, accel=Accel(args.accel), out=args.out,
                       bisect_exit=args.bisect_exit, argv=_argv())


def guest_options(args: argparse.Namespace) -> GuestOptions:
    return GuestOptions(memory=args.memory, cpus=args.cpus, append=args.append)


def planned(args: argparse.Namespace) -> tuple[list[Cell], str]:
    """The cells `harness run` with these options runs, and what it says first: the plan
    alone, nothing built or run (CI job generation and tests read it)."""
    return run.plan(run_request(args))


def cmd_run(args: argparse.Namespace) -> int:
    return run.command(run_request(args))


def cmd_shell(args: argparse.Namespace) -> int:
    from harness.drivers import shell

    request = shell.Request(
        kernel=args.kernel, series=tuple(args.series), configs=tuple(args.config),
        tests=tuple(args.test), patches=tuple(args.patch), guest=guest_options(args),
        arch=args.arch, toolchain=args.toolchain, accel=Accel(args.accel), out=args.out,
        here=Path.cwd(), interactive=sys.stdin.isatty(), host_root=args.host_root)
    return shell.command(request)


def cmd_parse(args: argparse.Namespace) -> int:
    from harness.drivers import finished

    return finished.parse_log(args.file, name=args.name, out=args.out, argv=_argv())


def cmd_check(args: argparse.Namespace) -> int:
    from harness.drivers import check

    kernel, where = sources.kernel_or_yours(args.kernel, Path.cwd())
    print(f"checking against {where}", flush=True)
    request = check.CheckRequest(kernel=kernel, series=tuple(args.series),
                                 patches=tuple(Path(p).resolve() for p in args.patch),
                                 configs=tuple(args.config or ["base"]),
                                 arch=args.arch or target.DEFAULT_ARCH,
                                 toolchain=args.toolchain or target.DEFAULT_TOOLCHAIN)
    out = results.out_dir(args.out, "check", marker="check.json")
    return check.command(request, out, argv=_argv())


def cmd_mutate(args: argparse.Namespace) -> int:
    from harness.drivers import mutate

    out = results.out_dir(args.out, "mutate", marker="mutants.json")
    return mutate.command(mutate.Request(
        series=args.series, targets=tuple(args.target), tests=tuple(args.test),
        cell=args.cell, max=args.max, seed=args.seed, accel=Accel(args.accel),
        only=tuple(args.mutant), fresh=args.fresh, baseline_runs=args.baseline_runs,
        scope=args.scope, coverage=args.coverage, affected=args.affected), out)


def cmd_bisect(args: argparse.Namespace) -> int:
    from harness.drivers import bisect

    request = bisect.Request(series=args.series, test=args.test, cell=args.cell,
                             good=args.good or bisect.DEFAULT_GOOD,
                             bad=args.bad or bisect.DEFAULT_BAD, accel=Accel(args.accel))
    out = results.out_dir(args.out, "bisect", marker="bisect.json")
    return bisect.command(request, out)


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.drivers import finished

    return finished.compare(finished.CompareRequest(before=args.before, after=args.after,
                                            json=args.json, markdown=args.markdown,
                                            html=args.html))


def cmd_verdicts(args: argparse.Namespace) -> int:
    from harness.drivers import finished

    return finished.verdicts(tuple(args.runs), args.markdown)


def cmd_explain(args: argparse.Namespace) -> int:
    from harness.drivers import finished

    return finished.explain_command(args.run, as_json=args.json)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.drivers import finished

    return finished.write_report(args.run, args.out)


def cmd_ci(args: argparse.Namespace) -> int:
    from harness.ci import ciplan, commands

    if args.what == "cache-key":
        return commands.cache_key(tuple(args.cell))
    if args.what == "annotate":
        return commands.annotate(tuple(args.runs), args.summary)
    if args.what == "minutes":
        return commands.minutes(tuple(args.runs), Tier(args.tier), args.setup_minutes)
    github = args.what == "github"
    settings = ciplan.Settings(
        accel=Accel(args.accel), runs_on=tuple(args.runs_on) if github else (),
        test_runs_on=tuple(args.test_runs_on) if github else (),
        tags=() if github else tuple(args.tag), test_tags=() if github else tuple(args.test_tag),
        container_options=args.container_options if github else None,
        disk_gb=args.runner_disk or ciplan.DEFAULT_DISK_GB)
    return commands.pipeline(commands.PipelineRequest(system=args.what, tier=Tier(args.tier),
                                                      settings=settings, output=args.output))


def cmd_export(args: argparse.Namespace) -> int:
    from harness.drivers import finished

    if args.bundle is not None or args.format is None:
        if args.format is not None or args.bundle is None:
            args.command_parser.error("give a FORMAT (junit, kcidb) and RUN, or --bundle RUN")
        return finished.export_bundle(args.bundle, args.bundle_output)
    options = finished.KcidbOptions()
    if args.format == "kcidb":
        options = finished.KcidbOptions(run_id=args.run_id, origin=args.origin or options.origin,
                                    include_broken=args.include_broken)
    return finished.export(args.run, args.format, args.output, options)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from harness.drivers import reproduce

    return reproduce.command(reproduce.Request(
        source=args.source, out=args.out, cells=tuple(args.cell), tests=tuple(args.test),
        accel=Accel(args.accel) if args.accel else None, kernel=args.kernel,
        patches=tuple(Path(p) for p in args.patch), at_revision=args.at_revision,
        argv=_argv()))


def cmd_merge(args: argparse.Namespace) -> int:
    from harness.drivers import finished

    return finished.merge(finished.MergeRequest(runs=tuple(args.runs), out=args.out, tier=args.tier,
                                        cells=tuple(args.cell), matrix=args.matrix,
                                        plan=args.plan, builds=tuple(args.builds)),
                      argv=_argv())


def cmd_cache(args: argparse.Namespace) -> int:
    from harness.drivers import store

    if args.action in (None, "list"):
        return store.show(None)
    if args.action == "prune":
        return store.prune(args.max_size, dry_run=args.dry_run)
    if args.action == "drop":
        return store.drop(tuple(args.names), dry_run=args.dry_run)
    if args.action == "export":
        return store.export(tuple(args.run), tuple(args.cell), tuple(args.entry), args.output)
    return store.import_archive(args.archive)


def cmd_history(args: argparse.Namespace) -> int:
    from harness.drivers import finished

    return finished.history(tuple(args.what), last=args.last, as_json=args.json,
                        path=args.history, flakes=args.flakes)


def cmd_mcp(args: argparse.Namespace) -> int:
    from harness import mcp_server

    return mcp_server.serve()


def cmd_doctor(args: argparse.Namespace) -> int:
    found = doctor.checks()
    print(doctor.render(found))
    return 0 if all(c.ok or c.optional for c in found) else 2


def cmd_matrix(args: argparse.Namespace) -> int:
    print(matrix.listing(matrix.load(), Tier(args.tier)))
    return 0


def _argv() -> tuple[str, ...]:
    """The command line as given, for results.json and reproduce.sh."""
    return tuple(sys.argv[1:]) or ("run",)


# ---- the table of commands ----


@dataclass(frozen=True, kw_only=True)
class Command:
    """One command of `harness`: one row of COMMANDS."""

    name: str
    help: str  # its line in `harness --help`
    arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    examples: tuple[str, ...]  # what its --help ends with (tests/unit/test_cli.py parses them)
    # it reads or fills the cache: it holds it (cache.in_use) while it runs, and evicts
    # down to the cache's limit when it ends
    uses_cache: bool = False
    takes_command: bool = False  # `-- CMD ARGS...` after its options: a command for the guest
    usage: str | None = None
    epilog: str | None = None


COMMANDS: tuple[Command, ...] = (
    Command(name="run", help="source -> series -> config -> build -> boot -> selftests",
            arguments=_run_arguments, handler=cmd_run, uses_cache=True, takes_command=True,
            usage="harness run [OPTIONS] [-- CMD [ARGS...]]",
            epilog="-- CMD ARGS...: run CMD in the guest as one more test (its own output "
                   "file, time limit, exit status, splats attributed), after the tests "
                   "asked for, or alone when none are",
            examples=("harness run --series memcg-kfuncs --test memcg_kfuncs",
                      "harness run --cell 6.12 --retry-failed 2")),
    Command(name="shell", help="boot the kernel (built or stored) into a shell on this "
            "terminal, with the selftests built and a writable results directory",
            arguments=_shell_arguments, handler=cmd_shell, uses_cache=True,
            examples=("harness shell --kernel debian:6.12 --series memcg-kfuncs",)),
    Command(name="check", help="per patch: checkpatch, every prefix builds, no new W=1 "
            "warnings", arguments=_check_arguments, handler=cmd_check, uses_cache=True,
            examples=("harness check --series memcg-kfuncs",)),
    Command(name="compare", help="what changed between two runs: newly failing, fixed, new "
            "splats, metrics beyond their spread (exit 1: regressed)",
            arguments=_compare_arguments, handler=cmd_compare,
            examples=("harness compare results/A results/B --markdown diff.md",)),
    Command(name="verdicts", help="each check's verdict in each run or cell, side by side "
            "(exit 1: a check's verdict differs between them)",
            arguments=_verdicts_arguments, handler=cmd_verdicts,
            examples=("harness verdicts results/A:7.2 results/B:6.12 results/C:6.1 "
                      "--markdown table.md",)),
    Command(name="bisect", help="the first patch of a series at which a test goes from good "
            "to bad (SKIP and stage errors stepped over)", arguments=_bisect_arguments,
            handler=cmd_bisect, uses_cache=True,
            examples=("harness bisect --series memcg-kfuncs-broken --test memcg_kfuncs",)),
    Command(name="mutate", help="mutation testing: which one-line bugs in a series (or a "
            "kernel function) do the tests miss?", arguments=_mutate_arguments,
            handler=cmd_mutate, uses_cache=True,
            examples=("harness mutate --series memcg-kfuncs --max 20",)),
    Command(name="explain", help="why a run failed, from its results: per cell its error "
            "and patches, per failing test its reason, failing checks, splats, whether the "
            "history knew it, and the end of its output", arguments=_explain_arguments,
            handler=cmd_explain,
            examples=("harness explain results/RUN", "harness explain results/RUN:6.12 --json")),
    Command(name="report", help="a static HTML page of a run: the matrix grid, details, "
            "splats, features, patches, benchmark plots", arguments=_report_arguments,
            handler=cmd_report, examples=("harness report results/RUN",)),
    Command(name="history", help="each test's record over the last runs: pass rate, flips, "
            "first and last failure; `history import RUN...` records runs made elsewhere",
            arguments=_history_arguments, handler=cmd_history,
            examples=("harness history memcg_kfuncs --last 20", "harness history --flakes",
                      "harness history import results/RUN")),
    Command(name="mcp", help="the harness as an MCP server on stdin/stdout, for agents "
            "(tools: explain, history, compare, write_report; jobs: start, status, wait); "
            "needs the mcp extra: pip install -e '.[mcp]'", arguments=_no_arguments,
            handler=cmd_mcp, examples=("harness mcp",)),
    Command(name="parse", help="parse a saved KTAP log offline, like run does",
            arguments=_parse_arguments, handler=cmd_parse,
            examples=("harness parse guest/memcg_kfuncs.out",)),
    Command(name="matrix", help="list the matrix cells", arguments=_matrix_arguments,
            handler=cmd_matrix, examples=("harness matrix --tier full",)),
    Command(name="doctor", help="check tools, disk and KVM, and say how to fix each",
            arguments=_no_arguments, handler=cmd_doctor, examples=("harness doctor",)),
    Command(name="cache", help="what the cache holds (size, last use, what for); prune or "
            "drop entries; export them to an archive, import one",
            arguments=_cache_arguments, handler=cmd_cache,
            examples=("harness cache prune --dry-run --max-size 20G",
                      "harness cache export --run results/RUN -o kernels.tar")),
    Command(name="ci", help="CI systems: a GitHub Actions workflow or a GitLab CI pipeline "
            "from the matrix, the cache keys of its build jobs, a run's failures as GitHub "
            "annotations, what the matrix costs in runner-minutes",
            arguments=_ci_arguments, handler=cmd_ci,
            examples=("harness ci github -o .github/workflows/harness.yml",
                      "harness ci annotate results/RUN --summary summary.md")),
    Command(name="export", help="a run's results in a format CI systems read (junit, "
            "kcidb), or its whole directory as one archive to send (--bundle)",
            arguments=_export_arguments, handler=cmd_export,
            examples=("harness export junit results/RUN -o junit.xml",
                      "harness export --bundle results/RUN -o run.tar.gz")),
    Command(name="reproduce", help="make a run again from what its directory (or bundle) "
            "carries, from any clone, anywhere; compare test by test: exit 0 verdicts "
            "match, 1 they differ (the tests and the inputs named), 2 it cannot be "
            "reproduced here (the cause and the fix)", arguments=_reproduce_arguments,
            handler=cmd_reproduce, uses_cache=True,
            examples=("harness reproduce results/RUN", "harness reproduce run.tar.gz --test "
                      "rstat_propagation", "harness reproduce results/RUN --at-revision")),
    Command(name="merge", help="join the run directories of shards into one: results.json, "
            "summary, exit code; with the plan (--tier, --cell or --plan), a cell no run "
            "holds is MISSING", arguments=_merge_arguments, handler=cmd_merge,
            examples=("harness merge results/shard-1 results/shard-2 --out results/all "
                      "--tier ci",)),
)
BY_NAME = {c.name: c for c in COMMANDS}


# ---- the parser, from the table ----


class Subcommands(Protocol):
    """What argparse's add_subparsers() gives: a parser for each (sub)command."""

    def add_parser(self, name: str, **how: Any) -> argparse.ArgumentParser: ...


def _subcommand(sub: Subcommands, name: str, **how: Any) -> argparse.ArgumentParser:
    """A (sub)command's parser; it names itself in the arguments it parses
    (`command_parser`), so that an error is told by the one the arguments reached."""
    parser = sub.add_parser(name, **how)
    parser.set_defaults(command_parser=parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description=USAGE,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="the harness's version and commit, then exit")
    p.set_defaults(command_parser=p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           title="commands (harness COMMAND --help says more)")
    for c in COMMANDS:
        shown = "\n".join(f"  {e}" for e in c.examples)
        epilog = (f"{textwrap.fill(c.epilog, 88)}\n\n" if c.epilog else "") + \
            f"examples:\n{shown}"
        c.arguments(_subcommand(sub, c.name, help=c.help, usage=c.usage, epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter))
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """argparse, with what follows the first `--` kept apart as the guest's command."""
    parser = build_parser()
    cmd: list[str] = []
    separated = "--" in argv
    if separated:
        at = argv.index("--")
        argv, cmd = argv[:at], argv[at + 1:]
    args, extra = parser.parse_known_args(argv)
    if extra:  # told by the (sub)command that was given them, with its own usage
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if separated and not BY_NAME[args.command].takes_command:
        parser.error(f"harness {args.command} takes no -- CMD; harness run [OPTIONS] -- CMD "
                     "runs a command in the guest")
    if separated and not cmd:
        parser.error("-- is followed by no command: harness run [OPTIONS] -- CMD [ARGS...]")
    args.guest_command = cmd
    return args


def _prune_after(command: str) -> None:
    done = cache.prune(cache.max_size(), after_command=True)
    if done.evicted:
        log.info("cache over its %s limit after %s: evicted %s (least recently used)",
                 cache.human(done.limit), command,
                 ", ".join(f"{e.kind.value} {e.name}" for e in done.evicted))
    elif done.skipped_reason and done.total_before > done.limit:
        log.warning("cache over its %s limit (%s), not pruned: %s",
                    cache.human(done.limit), cache.human(done.total_before),
                    done.skipped_reason)


def _room_before(args: argparse.Namespace) -> None:
    """Room under the cache before a command that may build writes to it: the least
    recently used entries go while the disk has less than cache.ROOM free; what could not
    be made is said before the run starts, not found by a build that fails for space. A
    run of prebuilt kernels builds nothing (and its kernels, just imported, keep their
    old times: they would go first)."""
    command = args.command
    if getattr(args, "prebuilt", None) or str(getattr(args, "kernel", "")).startswith(
            "image:"):
        return
    made = cache.make_room()
    if made.done is None:
        return
    freed = sum(e.size for e in made.done.evicted)
    where = f"{cache.human(made.free)} free under {paths.cache_root()}"
    if made.done.evicted:
        log.info("%s, less than the %s a build is given: evicted %s before %s "
                 "(least recently used, %s)", where, cache.human(made.room),
                 ", ".join(f"{e.kind.value} {e.name}" for e in made.done.evicted), command,
                 cache.human(freed))
        return
    why = made.done.skipped_reason or (
        f"evicting all the cache did not use in the last {cache.RECENT_S / 60:.0f} minutes "
        "would not make it, so nothing was")
    log.warning("%s, less than the %s a build is given (%s): a build may fail for space; "
                "free space on that disk, or point HARNESS_CACHE at a bigger one", where,
                cache.human(made.room), why)


def _run_command(args: argparse.Namespace) -> int:
    """The command's handler; one that uses the cache makes room first, holds the cache
    while it runs, and prunes it after."""
    chosen = BY_NAME[args.command]
    if not chosen.uses_cache:
        return chosen.handler(args)
    _room_before(args)
    with cache.in_use(), sandbox.using(_sandbox_policy(args)):
        code = chosen.handler(args)
    _prune_after(args.command)
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse told the user (usage, or --help): its exit code
        return exc.code if isinstance(exc.code, int) else 2
    _setup_logging(args.verbose)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        return _run_command(args)
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
