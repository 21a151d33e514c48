"""Boot a kernel under virtme-ng and run the guest runner; probe whether KVM really works.

The guest boots on a root of its own and sees only what isolation.py lets it see (the
host's root only with --host-root); what it leaves behind is made safe before the
harness reads it.

The KVM probe is a short real boot with QEMU alone (`-accel kvm`, no root fs: the
kernel reaches "Linux version" then panics on the missing root and `-no-reboot` ends
QEMU). On a host whose /dev/kvm opens but cannot run a kernel, QEMU says so on stderr
at once and the probe kills it instead of waiting. The verdict is remembered per
(host kernel, QEMU version).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness import target
from harness.base import atomic, paths, proc
from harness.base.errors import HarnessError
from harness.base.model import Accel, GuestSpec, KernelImage, Status
from harness.guest import isolation

log = logging.getLogger(__name__)

# Under working KVM the banner comes within a second or two of "Booting from ROM"; here
# (nested PVM) nothing ever comes and QEMU says nothing either.
PROBE_TIMEOUT_S = 20.0
# What QEMU prints when KVM exists but cannot run the guest (seen here: a nested,
# paravirtual KVM) or cannot be opened at all.
KVM_FAILURE_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"emulation failure",
        r"KVM internal error",
        r"kvm run failed",
        r"failed to initialize kvm",
        r"Could not access KVM kernel module",
        r"KVM_CREATE_VM",
        r"KVM: entry failed",
        r"kvm_init_vcpu",
    )
)
_KVM_SUCCESS = re.compile(r"Linux version \d")


class BootError(HarnessError):
    """The guest did not come up, or the VM could not be started."""

    status = Status.BOOT_ERROR


@dataclass(frozen=True, kw_only=True)
class AccelVerdict:
    kvm_works: bool
    reason: str
    cached: bool = False


def _verdict_key(qemu: str) -> str:
    qemu_version = (proc.version_output(qemu) or "").splitlines()
    return f"{os.uname().release}|{qemu_version[0] if qemu_version else '?'}"


def probe_kvm(kernel: Path, *, qemu: str | None = None, timeout: float = PROBE_TIMEOUT_S,
              cache_file: Path | None = None, log_path: Path | None = None) -> AccelVerdict:
    """Does KVM really boot a kernel here? A short real boot decides; the verdict is cached."""
    if not Path("/dev/kvm").exists():
        return AccelVerdict(kvm_works=False, reason="/dev/kvm does not exist")
    qemu = qemu or target.host_arch().qemu  # KVM boots the host's arch only
    cache_file = cache_file or paths.cache_root() / "kvm-verdict.json"
    key = _verdict_key(qemu)
    cache: dict[str, dict[str, object]] = {}
    if cache_file.exists():
        try:
            cache = json.loads(cache_file.read_text())
        except ValueError:
            cache = {}
    if key in cache:
        entry = cache[key]
        return AccelVerdict(kvm_works=bool(entry["kvm_works"]), reason=str(entry["reason"]),
                            cached=True)
    argv = [qemu, "-accel", "kvm", "-cpu", "host", "-m", "256", "-smp", "1", "-nographic",
            "-no-reboot", "-kernel", str(kernel),
            "-append", "console=ttyS0 panic=-1 root=/dev/nonexistent loglevel=7"]
    res = proc.run(argv, timeout=timeout, stop_patterns=(*KVM_FAILURE_PATTERNS, _KVM_SUCCESS),
                   log_path=log_path)
    if res.stopped_by and res.stopped_by == _KVM_SUCCESS.pattern:
        verdict = AccelVerdict(kvm_works=True,
                               reason=f"a kernel booted under KVM in {res.duration_s:.1f}s")
    elif res.stopped_by:
        line = next((ln for ln in res.output.splitlines()
                     if re.search(res.stopped_by, ln)), res.stopped_by)
        verdict = AccelVerdict(kvm_works=False,
                               reason=f"QEMU reported a KVM failure: {line.strip()[:200]}")
    elif res.timed_out:
        verdict = AccelVerdict(kvm_works=False,
                               reason=f"no kernel output under KVM within {timeout:.0f}s")
    else:
        verdict = AccelVerdict(kvm_works=False,
                               reason=f"QEMU exited {res.returncode} before the kernel printed "
                                      f"its banner: {res.tail(3).strip()[:200]}")
    cache[key] = {"kvm_works": verdict.kvm_works, "reason": verdict.reason,
                  "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    atomic.write_text(cache_file, json.dumps(cache, indent=2) + "\n")
    return verdict


def choose_accel(requested: Accel, kernel: Path, *, log_path: Path | None = None,
                 arch: str = target.DEFAULT_ARCH) -> tuple[Accel, str]:
    """auto -> kvm if the probe boots a kernel, else tcg (saying why)."""
    if requested is Accel.TCG:
        return Accel.TCG, "TCG requested"
    if is_foreign(arch):
        if requested is Accel.KVM:
            raise BootError(f"--accel kvm requested for an {arch} kernel on an "
                            f"{os.uname().machine} host: KVM runs only the host's arch",
                            fix="use --accel tcg (or auto)")
        return Accel.TCG, f"an {arch} guest on an {os.uname().machine} host: TCG"
    verdict = probe_kvm(kernel, log_path=log_path)
    if verdict.kvm_works:
        return Accel.KVM, verdict.reason
    if requested is Accel.KVM:
        raise BootError(f"--accel kvm requested but KVM does not work here: {verdict.reason}; "
                        "fix: use --accel tcg (or auto)")
    # one line on the terminal (results.json keeps the whole reason); a verdict this host
    # already gave is no news, so it is told quietly
    first = verdict.reason.splitlines()[0][:160] if verdict.reason else "?"
    if verdict.cached:
        log.info("KVM unusable here (cached verdict: %s); TCG", first)
    else:
        log.warning("KVM unusable here: %s; using TCG, slower (--accel tcg skips this probe)",
                    first)
    return Accel.TCG, f"KVM unusable: {verdict.reason}; TCG"


def is_foreign(arch: str) -> bool:
    """A guest of another arch than the host's (it cannot boot on the host's root)."""
    return target.foreign(arch)


@contextmanager
def guest_root(kernel: KernelImage, shared: list[Path], *, host_root: bool,
               log_dir: Path) -> Iterator[isolation.OwnRoot | None]:
    """The root the guest boots on, for the time of one boot: a root of its own (None:
    the host's, as vng exports it, when the user asked for it with --host-root)."""
    if host_root and not is_foreign(kernel.arch):
        yield None
        return
    with isolation.own_root(kernel.arch, shared, log_dir=log_dir) as own:
        yield own


@dataclass(frozen=True, kw_only=True)
class Boot:
    """One boot of a kernel in a guest: what it boots, how, the guest's size and command
    line, and the host directories it sees."""

    kernel: KernelImage
    accel: Accel
    guest: GuestSpec
    rwdirs: tuple[Path, ...] = ()  # the host directories it writes
    # the host directories it reads: the guest sees only these (read-only), `rwdirs` and
    # its own root
    shared: tuple[Path, ...] = ()
    # the host's root, as vng exports it (--host-root; the host's arch only): the guest
    # sees every file of the host
    host_root: bool = False


@dataclass(frozen=True, kw_only=True)
class GuestRun:
    returncode: int | None
    timed_out: bool
    duration_s: float
    console_log: Path
    argv: tuple[str, ...]
    root: isolation.OwnRoot | None = None  # the guest's root; None: the host's
    removed: tuple[isolation.Removed, ...] = ()  # what the guest left that is not a file
    # ended before its timeout because it made no progress (`run_guest`'s quiet): why
    stopped_by: str | None = None


# A boot that prints nothing for this long before its command is ready is a hang, not a
# slow boot: under TCG on a loaded host the longest quiet stretch of a good boot seen was
# ~5 s of guest time (virtme-ng-init's set-up), 10-15 s of the host's.
BOOT_SILENCE_S = 30.0


def vng_argv(boot: Boot, *, command: list[str] | None, cwd: Path | None = None,
             own: isolation.OwnRoot | None = None) -> list[str]:
    """vng's command line; `command` None: an interactive shell on the console."""
    kernel, guest = boot.kernel, boot.guest
    # --force-9p: virtiofsd is not usable here and vng would retry it for seconds first.
    argv = [proc.require("vng"), "--run", str(kernel.boot_image), "--verbose", "--force-9p",
            "--memory", guest.memory, "--cpus", str(guest.cpus),
            # The kernel must tell us it is broken: panic ends the VM; the hung-task and
            # soft-lockup detectors stay on.
            "--append", "panic=-1 panic_on_warn=0 hung_task_panic=0 "
                        "softlockup_panic=0 printk.devkmsg=on"]
    if guest.append:
        # After ours, so that the user's value of the same parameter wins; except what
        # judging the kernel needs: every message on the console (the shutdown is only
        # there) and the runner's markers never rate-limited.
        argv += ["--append", guest.append, "--append", "printk.devkmsg=on ignore_loglevel"]
    if boot.accel is Accel.TCG:
        argv.append("--disable-kvm")
    rwdirs = list(boot.rwdirs)
    if own is not None:
        argv += [*(["--arch", own.arch] if own.arch else []), "--root", str(own.root)]
        # GUEST=HOST: the same path in a root that is not the host's. virtme mounts
        # every --rwdir before every --rodir, so a shared directory that holds a results
        # directory (a command's --cwd above its --out) would hide it read-only: such a
        # directory is shared writable; each kind is mounted parents first.
        ro = [(Path(seen), Path(host)) for seen, host in own.rodirs]
        above = {seen for seen, _ in ro if any(d.is_relative_to(seen) for d in rwdirs)}
        rw = sorted([(d, d) for d in rwdirs] + [m for m in ro if m[0] in above],
                    key=lambda m: len(m[0].parts))
        for flag, mounts in (("--rwdir", rw), ("--rodir", sorted(
                (m for m in ro if m[0] not in above), key=lambda m: len(m[0].parts)))):
            for seen_at, host_at in mounts:
                argv += [flag, f"{seen_at}={host_at}"]
        rwdirs = []
    for d in rwdirs:
        argv += ["--rwdir", str(d)]
    if cwd is not None:
        # vng takes the guest's directory as a host path inside the root it exports
        where = own.root / cwd.relative_to("/") if own is not None else cwd
        argv += ["--cwd", str(where)]
    return argv if command is None else [*argv, "--", *command]


def shell(boot: Boot, *, cwd: Path, console_log: Path) -> int | None:
    """Boot into an interactive shell on this terminal until the user leaves it; the
    console (the kernel's messages and the session) is saved to `console_log` too.
    It boots on the host's root on the host's arch: vng's interactive shell logs in with
    su, which the guest's own root (no PAM) cannot run ("su: Critical error")."""
    host_root = boot.host_root or not is_foreign(boot.kernel.arch)
    if host_root and not boot.host_root:
        log.warning("the shell boots on the host's root (it sees the host's files, as "
                    "vng does): vng logs in with su, which the guest's own root cannot run")
    with guest_root(boot.kernel, [*boot.shared, *([] if cwd in boot.rwdirs else [cwd])],
                    host_root=host_root, log_dir=console_log.parent) as own:
        if own is not None:
            own.mount_points(list(boot.rwdirs))
        argv = vng_argv(boot, command=None, cwd=cwd, own=own)
        log.info("booting %s under %s: a shell (exit or Ctrl-D leaves it)",
                 boot.kernel.version, boot.accel.value.upper())
        bindir = str(Path(argv[0]).parent)
        code = proc.interactive(argv, log_path=console_log,
                                env={"PATH": f"{bindir}:{os.environ.get('PATH', '')}"})
    for d in boot.rwdirs:
        isolation.sanitize(d)
    return code


def run_guest(boot: Boot, *, command: list[str], timeout: float,
              console_log: Path, quiet: proc.Quiet | None = None) -> GuestRun:
    """Boot, run the command, power off. Killed (whole process group) at the timeout, or
    earlier when `quiet` says it makes no progress before its command is ready.
    The guest sees only its own root, `boot.shared` (read-only) and `boot.rwdirs`; with
    `boot.host_root` (the host's arch only) it boots on the host's root and sees all its
    files, as vng does. What the guest left in `rwdirs` is made safe to read before this
    returns (isolation.sanitize)."""
    with guest_root(boot.kernel, list(boot.shared), host_root=boot.host_root,
                    log_dir=console_log.parent) as own:
        if own is not None:
            own.mount_points(list(boot.rwdirs))
        argv = vng_argv(boot, command=command, cwd=Path("/"), own=own)
        log.info("booting %s under %s", boot.kernel.version, boot.accel.value.upper())
        # vng runs its helpers (virtme-run, virtme-ng-init) from its own bin directory.
        bindir = str(Path(argv[0]).parent)
        res = proc.run(argv, timeout=timeout, log_path=console_log, keep_output=False,
                       env={"TERM": "dumb", "PATH": f"{bindir}:{os.environ.get('PATH', '')}"},
                       quiet=quiet)
    removed = tuple(r for d in boot.rwdirs for r in isolation.sanitize(d))
    return GuestRun(returncode=res.returncode, timed_out=res.timed_out,
                    duration_s=res.duration_s, console_log=console_log, argv=res.argv,
                    root=own, removed=removed, stopped_by=res.stopped_by)

