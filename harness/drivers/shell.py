"""`harness shell`: the kernel of a run (built or taken from the store) booted into an
interactive shell on the user's terminal, with the run's selftests built and a results
directory the guest can write.

The guest sees the host's files read-only; the results directory is writable and is the
shell's working directory. `tests.sh` there lists the selftests and runs one by name, with
the environment the runner gives them. When the shell is left, what the kernel printed
on the console is judged as a run judges it: a splat is told, kept in shell.json, and
makes the exit code 1.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import atomic
from harness.base.errors import EnvironmentProblem
from harness.base.model import Accel, GuestOptions, GuestSpec, Splat
from harness.drivers import matrix, pipeline
from harness.drivers.matrix import Cell, Tier
from harness.guest import protocol, vm
from harness.judge import splat
from harness.kernel import sources
from harness.output import results, terminal


@dataclass(frozen=True, kw_only=True)
class Session:
    kernel_version: str
    image: str
    accel: str
    exit_code: int | None  # vng's
    splats: tuple[Splat, ...]
    console_log: Path

    @property
    def code(self) -> int:
        return 1 if self.splats else 0


def tests_script(planned: tuple[protocol.GuestTest, ...], out: Path) -> str:
    """`sh tests.sh` lists the tests; `sh tests.sh NAME` runs one as the runner would."""
    cases = "".join(
        f"{shlex.quote(t.name)})\n\tcd {shlex.quote(str(t.cwd))} && exec sh -c "
        f"{shlex.quote(t.command)} ;;\n" for t in planned)
    names = " ".join(shlex.quote(t.name) for t in planned) or "(none)"
    return (
        "#!/bin/sh\n"
        "# The selftests of this shell's kernel, run as the harness's guest runner runs them.\n"
        f"export HARNESS_OUT={shlex.quote(str(out))} HARNESS_SCRATCH=/tmp\n"
        'export HARNESS_METRICS="$HARNESS_OUT/${1:-none}.metrics.json"\n'
        f'[ $# -gt 0 ] || {{ echo "tests: {names}"; echo "run one: sh $0 NAME"; exit 0; }}\n'
        'case "$1" in\n'
        f"{cases}"
        '*)\techo "no test $1; tests: ' + names.replace('"', "") + '" >&2; exit 2 ;;\n'
        "esac\n")


@dataclass(frozen=True, kw_only=True)
class Request:
    """What `harness shell`'s options name: the kernel (None: the tree you are in, else
    the default), what goes on it, the tests built for it, and the guest."""

    kernel: str | None = None
    series: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()  # default: the kernel's default tests, as run
    patches: tuple[str, ...] = ()
    guest: GuestOptions = field(default_factory=GuestOptions)
    arch: str | None = None
    toolchain: str | None = None
    accel: Accel = Accel.AUTO
    out: Path | None = None  # the shell's results directory (default results/shell-<id>)
    here: Path = field(default_factory=Path.cwd)  # inside a kernel tree: that tree
    interactive: bool = True  # its input is a terminal (a shell needs one)
    host_root: bool = False  # the guest on the host's root (your tools), not its own


def cell_of(request: Request) -> tuple[Cell, str]:
    """The cell a shell boots, and how to name its kernel."""
    guest = request.guest.over(GuestSpec())
    matrix.check_guest_size(guest)
    kernel, where = sources.kernel_or_yours(request.kernel, request.here)
    tests = request.tests or matrix.default_tests(kernel, matrix.load())[0]
    cell = Cell(name="shell", tier=Tier.DEFAULT, kernel=kernel, series=request.series,
                configs=request.configs or ("base",), tests=tests,
                patches=tuple(str(Path(p).resolve()) for p in request.patches),
                guest=guest,
                arch=request.arch or Cell.arch, toolchain=request.toolchain or Cell.toolchain)
    return cell, where


def command(request: Request) -> int:
    """`harness shell`: the session, shell.json, and what the kernel logged meanwhile."""
    if not request.interactive:
        raise EnvironmentProblem("harness shell needs a terminal: its input is not one",
                                 fix="run it from a terminal; to run a command in the "
                                     "guest without one: harness run [OPTIONS] -- CMD")
    cell, where = cell_of(request)
    where_to = results.out_dir(request.out, "shell", marker="shell.json")
    print(f"shell on {where}" + (f" + series {', '.join(cell.series)}" if cell.series else "")
          + f"; results: {where_to}", flush=True)
    session = run(cell, where_to, accel=request.accel, host_root=request.host_root)
    atomic.write_json(where_to / "shell.json", to_json(session))
    print(summary(session))
    return session.code


def run(cell: Cell, out: Path, *, accel: Accel, host_root: bool = False) -> Session:
    built, tests, facts = pipeline.prepare_shell(cell, out)
    chosen, why = vm.choose_accel(accel, built.image.boot_image, log_path=out / "kvm-probe.log",
                                  arch=built.image.arch)
    atomic.write_text(out / "tests.sh", tests_script(tests.planned, out))
    skipped = [f"{t.name} ({t.reason})" for t in tests.skipped]
    sees = (f"the host's files read-only (--host-root); {out} writable"
            if host_root and not vm.is_foreign(built.image.arch) else
            f"an {built.image.arch} root of its own (Debian's bash, coreutils, busybox...; "
            f"--host-root for yours), the selftests and {out} (writable) at their host paths")
    print(f"kernel {built.image.version} ({built.image.boot_image}), {chosen.value} ({why})\n"
          f"in the guest: {sees}, the shell starts there\n"
          f"  sh tests.sh         lists the selftests built for this kernel: "
          f"{', '.join(t.name for t in tests.planned) or 'none'}\n"
          f"  sh tests.sh NAME    runs one"
          + (f"\n  not built (the kernel lacks what they need): {'; '.join(skipped)}"
             if skipped else "")
          + "\nleave with exit (or Ctrl-D)", flush=True)
    console = out / "console.log"
    code = vm.shell(vm.Boot(kernel=built.image, accel=chosen, guest=cell.guest, rwdirs=(out,),
                            shared=tuple(t.cwd for t in tests.planned), host_root=host_root),
                    cwd=out, console_log=console)
    text = protocol.read_bounded(console) if console.exists() else ""
    return Session(kernel_version=facts.kernel_version, image=facts.image,
                   accel=f"{chosen.value} ({why})", exit_code=code,
                   splats=tuple(splat.find_splats(text)), console_log=console)


def summary(s: Session) -> str:
    if not s.splats:
        return (f"shell closed; kernel log: no splat on the console "
                f"(console: {s.console_log})")
    lines = [f"shell closed; the kernel logged {len(s.splats)} splat(s):"]
    lines += [line for x in s.splats for line in terminal.splat_lines(x, "  ")]
    return "\n".join([*lines, f"console: {s.console_log}"])


def to_json(s: Session) -> dict[str, object]:
    return {"kernel_version": s.kernel_version, "image": s.image, "accel": s.accel,
            "vng_exit": s.exit_code, "console": str(s.console_log),
            "splats": [results.splat_json(x) for x in s.splats]}
