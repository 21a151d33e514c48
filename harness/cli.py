"""The command line: parsers, and dispatch to the drivers (run, check, mutate, bisect,
shell, ...). Only main() maps errors to exit codes.

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
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from harness import target
from harness.base import proc, sandbox
from harness.base.errors import HarnessError, Stopped, from_os_error, signal_of
from harness.base.model import Accel, Status
from harness.drivers import doctor, matrix, run, runs
from harness.drivers.matrix import Cell, Tier
from harness.kernel import cache, sources
from harness.output import results
from harness.testkinds import command

if TYPE_CHECKING:
    pass

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


def _attempts(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of attempts, 1 to 1000")
    return n


def _boots(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 100:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of fresh boots, 1 to 100")
    return n


def _last(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of runs, at least 1")
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
                   help=f"the guest's RAM, e.g. 1536M or 4G (default {Cell.memory})")
    p.add_argument("--cpus", type=int, default=None, metavar="N",
                   help=f"the guest's CPUs (default {Cell.cpus})")
    p.add_argument("--host-root", action="store_true",
                   help="boot the guest on the host's root, as vng does (your tools in the "
                        "guest; the tree's tests can then read your files), not on a root "
                        "of its own; recorded in results.json and on the terminal")
    _accel_option(p)


def _accel_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accel", choices=[a.value for a in Accel], default="auto",
                   help="auto: KVM when a short real boot shows it works, else TCG "
                        "(a guest of another arch: always TCG)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description=USAGE,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="the harness's version and commit, then exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           title="commands (harness COMMAND --help says more)")

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
    r.add_argument("--prebuilt", type=Path, metavar="BUILD_RUN",
                   help="boot the kernel and tests a --build-only run of these cells made "
                        "(its directory; the kernel and test builds imported with harness "
                        "cache import): no source, no build (a CI test job)")
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
    r.add_argument("--retry-failed", type=_boots, default=0, metavar="N",
                   help="each test that failed or timed out runs again in N fresh boots of "
                        "the same kernel: one that then passes is FLAKY, with the share of "
                        "boots it failed in; one that fails in every boot stays FAIL")
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

    c = sub.add_parser("check", help="per patch: checkpatch, every prefix builds, no new W=1 "
                       "warnings")
    _tree_options(c)
    c.add_argument("--out", type=Path, metavar="DIR",
                   help="results directory (default results/check-<timestamp>)")

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
    _sandbox_option(bi)
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
    _sandbox_option(mu)
    mu.add_argument("--out", type=Path, metavar="DIR",
                    help="results directory (default results/mutate-<timestamp>)")

    why = sub.add_parser("explain", help="why a run failed, from its results: per cell its "
                        "error and patches, per failing test its reason, failing checks, "
                        "splats, whether the history knew it, and the end of its output")
    why.add_argument("run", metavar="RUN[:CELL]", help="a run directory (or its "
                     "results.json), or one cell of it")
    why.add_argument("--json", action="store_true", help="the same as JSON")
    rep = sub.add_parser("report", help="a static HTML page of a run: the matrix grid, "
                         "details, splats, features, patches, benchmark plots")
    rep.add_argument("run", metavar="RUN", help="a run directory (or its results.json)")
    rep.add_argument("--out", type=Path, metavar="DIR", help="where index.html goes "
                     "(default: RUN/report)")
    hi = sub.add_parser("history", help="each test's record over the last runs: pass "
                        "rate, flips, first and last failure; `history import RUN...` "
                        "records runs made elsewhere",
                        )
    hi.add_argument("what", nargs="*", metavar="CELL|TEST|TEST:SUBTEST",
                    help="what to show (default: every test); or: import RUN...")
    hi.add_argument("--last", type=_last, default=10, metavar="N",
                    help="the last N runs of each (default 10)")
    hi.add_argument("--json", action="store_true", help="as JSON")
    hi.add_argument("--flakes", action="store_true",
                    help="flakes measured over fresh boots: each declared-flaky test's "
                         "failure rate (95%% interval), and tests not declared that fail "
                         "intermittently")
    hi.add_argument("--history", type=Path, default=None, metavar="FILE",
                    help="the database (default $HARNESS_HISTORY, else "
                         "~/.cache/harness/history.sqlite)")
    sub.add_parser("mcp", help="the harness as an MCP server on stdin/stdout, for agents "
                   "(tools: explain, history, compare, write_report; jobs: start, status, "
                   "wait); needs the mcp extra: pip install -e '.[mcp]'")
    ps = sub.add_parser("parse", help="parse a saved KTAP log offline, like run does")
    ps.add_argument("file", help="log file, or - for stdin")
    ps.add_argument("--out", type=Path, metavar="DIR")
    ps.add_argument("--name", default=None, help="test name (default: the file name)")

    ls = sub.add_parser("matrix", help="list the matrix cells")
    ls.add_argument("--tier", choices=[t.value for t in Tier], default="default",
                    help="the cells of this tier (default: default, what `harness run` runs)")
    sub.add_parser("doctor", help="check tools, disk and KVM, and say how to fix each")
    ca = sub.add_parser("cache", help="what the cache holds (size, last use, what for); "
                        "prune or drop entries; export them to an archive, import one")
    ca_sub = ca.add_subparsers(dest="action", metavar="ACTION")  # none: list
    ca_sub.add_parser("list", help="the entries, their size, last use and what for")
    pr = ca_sub.add_parser("prune", help="evict least recently used entries until the cache "
                           "fits in its limit")
    pr.add_argument("--max-size", default=None, metavar="SIZE",
                    help="the limit (default $HARNESS_CACHE_MAX, else 40G)")
    pr.add_argument("--dry-run", action="store_true", help="say what would go")
    dr = ca_sub.add_parser("drop", help="remove the entries named")
    dr.add_argument("names", nargs="*", metavar="NAME",
                    help="the entries to remove (globs, e.g. 'git-linux-*')")
    dr.add_argument("--dry-run", action="store_true", help="say what would go")
    cx = ca_sub.add_parser("export", help="entries into an archive another machine imports")
    cx.add_argument("--run", action="append", default=[], metavar="RUN",
                    help="a run (directory or results.json) whose cells' stored kernels, and "
                         "the test builds used while it ran, go in (repeatable)")
    cx.add_argument("--cell", action="append", default=[], metavar="NAME",
                    help="only these cells of the runs (repeatable)")
    cx.add_argument("--entry", action="append", default=[], metavar="NAME",
                    help="these entries, named as `harness cache` lists them (globs; "
                         "kernels and test builds; repeatable)")
    cx.add_argument("-o", "--output", type=Path, default=None, metavar="FILE.tar",
                    help="the archive to write (.tar, .tar.gz or .tar.xz)")
    ci_ = ca_sub.add_parser("import", help="an archive's entries into this cache")
    ci_.add_argument("archive", type=Path, metavar="FILE.tar")
    ci = sub.add_parser("ci", help="CI systems: a GitHub Actions workflow or a GitLab CI "
                        "pipeline from the matrix, the cache keys of its build jobs, a run's "
                        "failures as GitHub annotations, what the matrix costs in "
                        "runner-minutes")
    ci_sub = ci.add_subparsers(dest="what", required=True, metavar="SUBCOMMAND")
    for system, runners in (("github", "GitHub Actions workflow"),
                            ("gitlab", "GitLab CI pipeline")):
        gen = ci_sub.add_parser(system, help=f"the {runners} of the tier's cells")
        gen.add_argument("--tier", choices=[t.value for t in Tier], default="ci")
        gen.add_argument("--accel", choices=[a.value for a in Accel], default=Accel.AUTO.value,
                         help="the guests' accelerator (default auto: KVM where the runner "
                              "has it, else TCG, the reason in results.json; kvm needs "
                              + ("--test-runs-on" if system == "github" else "--test-tag")
                              + " naming runners with /dev/kvm)")
        flag, what = (("--runs-on", "label"), ("--tag", "tag"))[system == "gitlab"]
        dest = "runs_on" if system == "github" else "tag"
        gen.add_argument(flag, action="append", default=[], metavar=what.upper(), dest=dest,
                         help=f"the runner {what}(s) of every job that builds or boots "
                              "(repeatable; default: " + ("ubuntu-latest" if system ==
                                                          "github" else "any runner") + ")")
        gen.add_argument(f"--test-{flag[2:]}", action="append", default=[],
                         metavar=what.upper(), dest=f"test_{dest}",
                         help=f"the runner {what}(s) of the test jobs apart (runners with "
                              "/dev/kvm, say; repeatable; default: as the build jobs')")
        if system == "github":
            gen.add_argument("--container-options", default=None, metavar="OPTS",
                             help="docker options of the test jobs' debian:12 container "
                                  "(default --device /dev/kvm, none with --accel tcg)")
        gen.add_argument("--runner-disk", type=int, default=None, metavar="GB",
                         help="the runners' free disk, which sizes ccache and the harness "
                              "cache (default 14, a GitHub-hosted runner's)")
        gen.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                         help="write the file here (default: stdout)")
    key = ci_sub.add_parser("cache-key", help="the cache keys of the cells' build jobs")
    key.add_argument("--cell", action="append", default=[], metavar="NAME",
                     help="the cells whose kernels the keys cover (repeatable)")
    an = ci_sub.add_parser("annotate", help="runs' failures as GitHub annotations")
    an.add_argument("runs", nargs="*", type=Path, metavar="RUN",
                    help="the runs (directories or results.json) whose failures to annotate")
    an.add_argument("--summary", type=Path, default=None, metavar="FILE",
                    help="also append a markdown summary of the runs to FILE "
                         "(\"$GITHUB_STEP_SUMMARY\")")
    mi = ci_sub.add_parser("minutes", help="what the matrix costs in runner-minutes, from "
                           "runs that measured its cells")
    mi.add_argument("runs", nargs="*", type=Path, metavar="RUN",
                    help="earlier runs measuring the cells")
    mi.add_argument("--tier", choices=[t.value for t in Tier], default="ci")
    mi.add_argument("--setup-minutes", type=float, default=1.5, metavar="M",
                    help="a job's set-up before the harness runs (bootstrap, cache restore "
                         "and save; 1.5: bootstrap measured on a fresh machine, see README)")
    ex = sub.add_parser("export", help="a run's results in a format CI systems read "
                        "(junit, kcidb)")
    ex_sub = ex.add_subparsers(dest="format", required=True, metavar="FORMAT")
    for fmt, what in (("junit", "JUnit XML"), ("kcidb", "KCIDB JSON (schema 4)")):
        e = ex_sub.add_parser(fmt, help=f"the run as {what}")
        e.add_argument("run", metavar="RUN", help="a run directory (or its results.json)")
        e.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                       help="write it here (default: stdout)")
        if fmt == "kcidb":
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
    mg.add_argument("--builds", nargs="+", type=Path, default=[], metavar="DIR",
                    help="CI build jobs' --build-only runs: a cell no run holds takes the "
                         "build error that kept it from its test job, not MISSING")

    for name, parser in sub.choices.items():
        shown = "\n".join(f"  {e}" for e in EXAMPLES[name])
        parser.epilog = (f"{textwrap.fill(parser.epilog, 88)}\n\n" if parser.epilog
                         else "") + f"examples:\n{shown}"
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


# One or two commands each `--help` ends with (tests/unit/test_cli.py parses them all).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": ("harness run --series memcg-kfuncs --test memcg_kfuncs",
            "harness run --cell 6.12 --retry-failed 2"),
    "shell": ("harness shell --kernel debian:6.12 --series memcg-kfuncs",),
    "check": ("harness check --series memcg-kfuncs",),
    "compare": ("harness compare results/A results/B --markdown diff.md",),
    "bisect": ("harness bisect --series memcg-kfuncs-broken --test memcg_kfuncs",),
    "mutate": ("harness mutate --series memcg-kfuncs --max 20",),
    "explain": ("harness explain results/RUN", "harness explain results/RUN:6.12 --json"),
    "report": ("harness report results/RUN",),
    "history": ("harness history memcg_kfuncs --last 20", "harness history --flakes",
                "harness history import results/RUN"),
    "parse": ("harness parse guest/memcg_kfuncs.out",),
    "matrix": ("harness matrix --tier full",),
    "doctor": ("harness doctor",),
    "cache": ("harness cache prune --dry-run --max-size 20G",
              "harness cache export --run results/RUN -o kernels.tar"),
    "ci": ("harness ci github -o .github/workflows/harness.yml",
           "harness ci annotate results/RUN --summary summary.md"),
    "export": ("harness export junit results/RUN -o junit.xml",),
    "merge": ("harness merge results/shard-1 results/shard-2 --out results/all --tier ci",),
    "mcp": ("harness mcp",),
}


def selection(args: argparse.Namespace) -> run.Selection:
    """What `harness run`'s options select (run.plan turns it into cells)."""
    return run.Selection(
        kernels=tuple(args.kernel), series=tuple(args.series), configs=tuple(args.config),
        tests=tuple(args.test), patches=tuple(args.patch), boot_only=args.boot_only,
        build_only=args.build_only, coverage=args.coverage, append=args.append,
        tier=args.tier, cells=tuple(args.cell), matrix=args.matrix, memory=args.memory,
        cpus=args.cpus, arch=args.arch, toolchain=args.toolchain,
        guest_command=tuple(args.guest_command), cwd=args.cwd, timeout=args.timeout,
        shard=args.shard, costs=args.costs, baseline=args.baseline, prebuilt=args.prebuilt)


def planned(args: argparse.Namespace) -> tuple[list[Cell], str]:
    """The cells `harness run` with these options runs, and what it says first: the plan
    alone, nothing built or run (CI job generation and tests read it)."""
    return run.plan(selection(args), here=Path.cwd())


def cmd_run(args: argparse.Namespace) -> int:
    return run.command(selection(args), out=args.out, here=Path.cwd(), accel=Accel(args.accel),
                       strict=args.strict, repeat=args.repeat, bisect_exit=args.bisect_exit,
                       argv=_argv(), retry_failed=args.retry_failed, host_root=args.host_root)


def cmd_shell(args: argparse.Namespace) -> int:
    from harness.drivers import shell

    request = shell.Request(
        kernel=args.kernel, series=tuple(args.series), configs=tuple(args.config),
        tests=tuple(args.test), patches=tuple(args.patch), append=args.append,
        memory=args.memory, cpus=args.cpus, arch=args.arch, toolchain=args.toolchain,
        accel=Accel(args.accel), host_root=args.host_root)
    return shell.command(request, args.out, here=Path.cwd(), interactive=sys.stdin.isatty())


def cmd_parse(args: argparse.Namespace) -> int:
    return runs.parse_log(args.file, name=args.name, out=args.out, argv=_argv())


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
        scope=args.scope, coverage=args.coverage), out)


def cmd_bisect(args: argparse.Namespace) -> int:
    from harness.drivers import bisect

    request = bisect.Request(series=args.series, test=args.test, cell=args.cell,
                             good=args.good or bisect.DEFAULT_GOOD,
                             bad=args.bad or bisect.DEFAULT_BAD, accel=Accel(args.accel))
    out = results.out_dir(args.out, "bisect", marker="bisect.json")
    return bisect.command(request, out)


def cmd_compare(args: argparse.Namespace) -> int:
    return runs.compare(runs.CompareRequest(before=args.before, after=args.after,
                                            json=args.json, markdown=args.markdown,
                                            html=args.html))


def cmd_explain(args: argparse.Namespace) -> int:
    return runs.explain_command(args.run, as_json=args.json)


def cmd_report(args: argparse.Namespace) -> int:
    return runs.write_report(args.run, args.out)


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
    options = runs.KcidbOptions()
    if args.format == "kcidb":
        options = runs.KcidbOptions(run_id=args.run_id, origin=args.origin or options.origin,
                                    include_broken=args.include_broken)
    return runs.export(args.run, args.format, args.output, options)


def cmd_merge(args: argparse.Namespace) -> int:
    return runs.merge(runs.MergeRequest(runs=tuple(args.runs), out=args.out, tier=args.tier,
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
    return runs.history(tuple(args.what), last=args.last, as_json=args.json,
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


def _deepest(parser: argparse.ArgumentParser,
             args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)subcommand's parser the arguments reached, e.g. `harness ci github`'s."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                return _deepest(chosen, args)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """argparse, with what follows the first `--` kept apart as the guest's command."""
    parser = build_parser()
    cmd: list[str] = []
    separated = "--" in argv
    if separated:
        at = argv.index("--")
        argv, cmd = argv[:at], argv[at + 1:]
    args, extra = parser.parse_known_args(argv)
    if extra:  # told by the subcommand that was given them, with its own usage
        _deepest(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if separated and args.command not in TAKE_A_COMMAND:
        parser.error(f"harness {args.command} takes no -- CMD; harness run [OPTIONS] -- CMD "
                     "runs a command in the guest")
    if separated and not cmd:
        parser.error("-- is followed by no command: harness run [OPTIONS] -- CMD [ARGS...]")
    args.guest_command = cmd
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse told the user (usage, or --help): its exit code
        return exc.code if isinstance(exc.code, int) else 2
    _setup_logging(args.verbose)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "run": cmd_run, "parse": cmd_parse, "doctor": cmd_doctor, "matrix": cmd_matrix,
        "check": cmd_check, "mutate": cmd_mutate, "compare": cmd_compare,
        "bisect": cmd_bisect, "report": cmd_report, "explain": cmd_explain,
        "shell": cmd_shell, "cache": cmd_cache,
        "merge": cmd_merge, "ci": cmd_ci, "export": cmd_export, "history": cmd_history,
        "mcp": cmd_mcp}
    try:
        if args.command not in USE_THE_CACHE:
            return handlers[args.command](args)
        with cache.in_use(), sandbox.using(_sandbox_policy(args)):
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
