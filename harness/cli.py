"""The command line: a thin layer over the stages. Only main() maps errors to exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from . import doctor, ktap, matrix, paths, pipeline, proc, results, sources
from .matrix import Cell, Tier
from .model import Accel, CellResult, TestResult

log = logging.getLogger("harness")


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(message)s",
                                           "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # SIGTERM takes the same path as Ctrl-C: the wrapper's finally kills children.
    raise KeyboardInterrupt(f"signal {signum}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="source -> series -> config -> build -> boot -> selftests")
    r.add_argument("--kernel", action="append", default=[], metavar="SPEC",
                   help="debian:6.12, debian:6.1, git:PATH[@REV], image:PATH (repeatable)")
    r.add_argument("--series", action="append", default=[], metavar="NAME",
                   help="patch series under patches/ (repeatable)")
    r.add_argument("--config", action="append", default=[], metavar="FRAGMENT",
                   help="kconfig fragment name or path (repeatable; default: base)")
    r.add_argument("--test", action="append", default=[], metavar="NAME|PATH",
                   help="selftest name, test directory, or kselftest:TARGET (repeatable)")
    r.add_argument("--patch", action="append", default=[], metavar="FILE",
                   help="extra patch applied on top (repeatable)")
    r.add_argument("--accel", choices=[a.value for a in Accel], default="auto")
    r.add_argument("--out", type=Path, metavar="DIR", help="this run's results directory")
    r.add_argument("--tier", choices=[t.value for t in Tier], default=None,
                   help="run the matrix cells of this tier (default tier when no options)")
    r.add_argument("--cell", action="append", default=[], help="run only these matrix cells")
    r.add_argument("--matrix", type=Path, default=None, help="matrix file (default matrix.toml)")
    r.add_argument("--strict", action="store_true",
                   help="an unexpected pass (XPASS) fails the run")

    ps = sub.add_parser("parse", help="parse a saved KTAP log offline, like run does")
    ps.add_argument("file", help="log file, or - for stdin")
    ps.add_argument("--out", type=Path, metavar="DIR")
    ps.add_argument("--name", default=None, help="test name (default: the file name)")

    c = sub.add_parser("check", help="per patch: checkpatch, every prefix builds, no new W=1 "
                       "warnings")
    c.add_argument("--series", action="append", default=[], metavar="NAME",
                   help="patch series under patches/ (repeatable)")
    c.add_argument("--patch", action="extend", nargs="+", default=[], metavar="FILE",
                   help="loose patch files, checked after the series")
    c.add_argument("--kernel", default="debian:6.12", metavar="SPEC",
                   help="debian:6.12, debian:6.1, git:PATH[@REV] (default debian:6.12)")
    c.add_argument("--config", action="append", default=[], metavar="FRAGMENT",
                   help="kconfig fragment name or path (repeatable; default: base)")
    c.add_argument("--out", type=Path, metavar="DIR",
                   help="results directory (default results/check-<timestamp>)")

    sub.add_parser("doctor", help="check tools, disk and KVM, and say how to fix each")
    ls = sub.add_parser("matrix", help="list the matrix cells")
    ls.add_argument("--tier", choices=[t.value for t in Tier], default="full")
    return p


def _cells_from_args(args: argparse.Namespace) -> list[Cell]:
    explicit = args.kernel or args.series or args.config or args.test or args.patch
    if explicit and not (args.tier or args.cell):
        kernels = args.kernel or ["debian:6.12"]
        return [
            Cell(name=f"adhoc-{i}" if len(kernels) > 1 else "adhoc", tier=Tier.DEFAULT,
                 kernel=k, series=tuple(args.series), configs=tuple(args.config or ["base"]),
                 tests=tuple(args.test), patches=tuple(str(Path(p).resolve())
                                                       for p in args.patch))
            for i, k in enumerate(kernels)
        ]
    cells = matrix.select(matrix.load(args.matrix), Tier(args.tier or "default"),
                          tuple(args.cell))
    if explicit:
        raise matrix.MatrixError("--tier/--cell select matrix cells; do not combine them with "
                                 "--kernel/--series/--config/--test/--patch")
    return cells


def _run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"


def _harness_rev() -> str:
    res = proc.run(["git", "-C", str(paths.repo_root()), "rev-parse", "HEAD"], timeout=30)
    return res.output.strip() if res.ok else "unknown"


def cmd_run(args: argparse.Namespace) -> int:
    cells = _cells_from_args(args)
    accel = Accel(args.accel)
    out = (args.out or Path("results") / _run_id()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log.info("results: %s", out)
    meta = {
        "run_id": out.name,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": ["harness", *sys.argv[1:]],
        "harness_rev": _harness_rev(),
        "host": {"kernel": os.uname().release, "cpus": os.cpu_count()},
        "tools": doctor.tool_versions(),
        "strict": args.strict,
    }
    results.write_reproduce(out / "reproduce.sh", argv=sys.argv[1:] or ["run"],
                            repo=paths.repo_root(), harness_rev=meta["harness_rev"])
    done: list[CellResult] = []
    for cell in cells:
        cell_dir = out / cell.name
        cell_dir.mkdir(parents=True, exist_ok=True)
        results.write_reproduce(cell_dir / "reproduce.sh", argv=pipeline.cell_argv(cell, accel),
                                repo=paths.repo_root(), harness_rev=meta["harness_rev"])
        res = pipeline.run_cell(cell, cell_dir, accel=accel)
        if cell.has_expectations:
            res = matrix.check_expected(cell, res)
        done.append(res)
        # Written after every cell, so a killed run still leaves what it finished.
        results.write_json(out / "results.json", done, meta=meta)
    print(results.summary_table(done))
    code = results.exit_code(done, strict=args.strict)
    print(f"\nresults: {out / 'results.json'}  (exit {code})")
    return code


def cmd_parse(args: argparse.Namespace) -> int:
    if args.file == "-":
        text = sys.stdin.read()
        name = args.name or "stdin"
    else:
        path = Path(args.file)
        text = path.read_text(errors="replace")
        name = args.name or path.name
    parsed = ktap.parse(text)
    status = parsed.status
    reason = "; ".join(parsed.errors)
    test = TestResult(name=name, status=status, duration_s=0.0, exit_code=None, ktap=parsed,
                      reason=reason)
    cell = CellResult(cell="parse", kernel="", kernel_version="", status=status, patches=(),
                      config=None, stages=(), tests=(test,))
    print(results.summary_table([cell]))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        results.write_json(args.out / "results.json", [cell],
                           meta={"command": ["harness", *sys.argv[1:]], "source_log": args.file})
    return results.exit_code([cell])


def cmd_check(args: argparse.Namespace) -> int:
    from . import check

    request = check.CheckRequest(kernel=args.kernel, series=tuple(args.series),
                                 patches=tuple(Path(p).resolve() for p in args.patch),
                                 configs=tuple(args.config or ["base"]))
    out = (args.out or Path("results") / f"check-{_run_id()}").resolve()
    log.info("results: %s", out)
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": ["harness", *sys.argv[1:]], "harness_rev": _harness_rev()}
    report = check.run(request, out)
    check.write_json(out / "check.json", report, meta=meta)
    if report.error:
        log.error("%s", report.error)
    print(check.summary_table(report))
    print(f"\ncheck: {out / 'check.json'}  (exit {report.exit_code})")
    return report.exit_code


def cmd_doctor(args: argparse.Namespace) -> int:
    found = doctor.checks()
    print(doctor.render(found))
    return 0 if all(c.ok for c in found) else 2


def cmd_matrix(args: argparse.Namespace) -> int:
    for c in matrix.select(matrix.load(), Tier(args.tier)):
        expect = ""
        if c.has_expectations:
            parts = [f"all={c.expect_status}"] if c.expect_status else []
            expect = " expect=" + ",".join(parts + [f"{t}={s}" for t, s in c.expect])
        print(f"{c.name:<28} {c.tier.value:<8} {c.kernel:<14} series={','.join(c.series) or '-'}"
              f" configs={','.join(c.configs)} tests={','.join(c.tests)}{expect}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    signal.signal(signal.SIGTERM, _on_signal)
    handlers = {"run": cmd_run, "parse": cmd_parse, "doctor": cmd_doctor, "matrix": cmd_matrix,
                "check": cmd_check}
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        proc.kill_all()
        log.error("interrupted; child processes killed")
        return 130
    except (matrix.MatrixError, sources.SourceError, proc.ToolMissingError,
            FileNotFoundError) as exc:
        log.error("%s", exc)
        return 2
    finally:
        proc.kill_all()


if __name__ == "__main__":
    sys.exit(main())
