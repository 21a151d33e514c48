"""`harness export kcidb RUN`: a run's results as KCIDB I/O data (schema v5, the
major version KernelCI's KCIDB accepts; tests validate it with kcidb-io's v5.3 schema).
Pure: the run in, a JSON document out.

Per cell: one checkout (the source, its package version, the series and patches applied,
with Message-Ids when they came from the list; `start_time`: when the run holding the cell
started), one build (configs by fragment name, compiler, duration, status), a `boot` test
(the boot stage's status), and one test per other result and per KTAP/test_progs subtest,
at the path `harness.<test>[.<subtest>...]` (names cut to KCIDB's path alphabet:
[A-Za-z0-9_-]). Each test's `environment.misc` says how the guest ran: `accel` kvm or tcg.

Ids are `ORIGIN:RUN:CELL[:...]`, RUN unique per run: the CI system's run id (`--run-id`,
else GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT, else CI_PIPELINE_ID), else one derived from
the run's start time and a hash of its results.json. The `run_id` results.json holds is
not used: `harness run` sets it to the name of its --out directory, which CI jobs share
(a merged run's is unique, and is part of the hashed document). The origin is
`--origin` (KCIDB's alphabet: [a-z0-9_]; default "harness").

Nothing local goes out: config fragments by name (base, 6.1), not path; the kernel image
as its kernel-store key; a git kernel's path as its directory's name; log paths relative
to the run directory; in free text (reasons, diagnostics, errors) an absolute path is cut
to its last part, except the kernel's own /sys, /proc and /dev paths. Left out, because
results.json does not hold them: start times of builds and tests (it records each stage's
duration, not when it began), the checkout's `patchset_hash` (it records the patches'
names and subjects, not their contents or hashes) and its git commit hash.

Status mapping (KCIDB: FAIL, ERROR, MISS, PASS, DONE, SKIP): PASS and XPASS -> PASS; FAIL,
XFAIL (a known failure is still a failure of the code; `misc.harness_status` says which),
FLAKY and CRASHED -> FAIL; TIMEOUT -> ERROR (it did not complete); SKIP and NO_TESTS ->
SKIP; the harness or the host failing -> MISS: SETUP_ERROR, INTERRUPTED, the stage errors
that stopped a cell before its tests, BOOT_ERROR of a test that never started, and MISSING
(a merged run's cell no run holds). The `boot` test: PASS, FAIL when the kernel panicked or
crashed while booting, ERROR when the guest never reached the test runner without a panic
(the cause is unknown), MISS when the accelerator or the host stopped it (KVM unusable with
--accel kvm, a set-up error); a cell stopped before it boots has none. Build: PASS when the
build stage passed (`misc.from_store`: the kernel came from the kernel store, as
results.json's `kernel_from_store` says; such a build has no duration), FAIL on a BUILD_ERROR or
CONFIG_ERROR, MISS when an earlier stage stopped the cell (a patch conflict, a set-up
error) and for a MISSING cell.

A broken-variant cell (its results declare `expected_status`: a kernel or a test broken on
purpose) is left out: its declared failures are not regressions of a kernel anyone ships.
With `include_broken` (`--include-broken`) it is exported, each result with `misc.declared`
and, when it has the status its cell declares, `misc.expected: true` (the status kept).

Benchmarks: a test that reports measurements (median, unit: `extra.metrics`) carries one
as its `number` {value: the median, unit}; a test with several gets a test object per
measurement at `harness.<test>.<measurement path>`, status DONE.

Submitting needs KernelCI credentials and the network: `harness export kcidb RUN -o
run.json`, then `kcidb-submit -p PROJECT -t TOPIC < run.json` (kcidb's own tool).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from harness import target
from harness.base.errors import HarnessError
from harness.base.model import (
    CellResult,
    Measurement,
    MergedRun,
    PatchState,
    Phase,
    RunResult,
    StageTiming,
    Status,
    TestResult,
    leaves,
)
from harness.output.compare import measurements

ORIGIN = "harness"
SUITE = "harness"  # the first part of every test path but boot's
VERSION = {"major": 5, "minor": 3}
_ORIGIN = re.compile(r"[a-z0-9_]+")
_TEST_STATUS = {"PASS": "PASS", "XPASS": "PASS", "FAIL": "FAIL", "XFAIL": "FAIL",
                "FLAKY": "FAIL", "CRASHED": "FAIL", "TIMEOUT": "ERROR", "SKIP": "SKIP",
                "NO_TESTS": "SKIP", "SETUP_ERROR": "MISS", "INTERRUPTED": "MISS",
                "PATCH_CONFLICT": "MISS", "CONFIG_ERROR": "MISS", "BUILD_ERROR": "MISS",
                "BOOT_ERROR": "MISS", "MISSING": "MISS"}
# an absolute path (two parts at least), not inside a word or a URL
_ABS_PATH = re.compile(r"(?<![\w./:~-])/(?:[^\s/:'\"()]+/)+([^\s/:'\"()]+)")
# the kernel's own file systems: what a test says of them is not a path of the host
_KERNEL_FS = ("/sys/", "/proc/", "/dev/")


class ExportError(HarnessError):
    status = Status.SETUP_ERROR


def test_status(status: str) -> str:
    return _TEST_STATUS[status]


def check_origin(origin: str) -> str:
    if not _ORIGIN.fullmatch(origin):
        raise ExportError(f"--origin {origin!r}: KCIDB origins are lower-case letters, "
                          "digits and underscores", fix="e.g. --origin my_lab")
    return origin


def derived_run_id(run: RunResult) -> str:
    """A run id from results.json alone: its start time and a hash of the document (the
    one the reader read it from: RunResult.digest)."""
    started = _rfc3339(run.started)
    stamp = re.sub(r"[^0-9]", "", started[:19]) if started else "unstarted"
    return f"{stamp}_{run.digest[:16]}"


def resolve_run_id(run: RunResult, *, given: str | None = None,
                   env: Mapping[str, str] | None = None) -> str:
    """The RUN part of every id: `given`, the CI system's run id, or derived_run_id."""
    env = env or {}
    if given:
        return given
    if env.get("GITHUB_RUN_ID"):
        return f"github_{env['GITHUB_RUN_ID']}_{env.get('GITHUB_RUN_ATTEMPT') or '1'}"
    if env.get("CI_PIPELINE_ID"):
        return f"gitlab_{env['CI_PIPELINE_ID']}"
    return derived_run_id(run)


def _part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name) or "_"


def hostless(text: str) -> str:
    """Absolute host paths cut to their last part ("/home/u/linux at v6.12" -> "linux at
    v6.12"); relative paths, words with slashes, URLs and the kernel's /sys, /proc and
    /dev paths (what a test in the guest reports) as they are."""
    return _ABS_PATH.sub(lambda m: m[0] if m[0].startswith(_KERNEL_FS) else m[1], text)


def _rfc3339(stamp: str | None) -> str | None:
    """results.json's "2026-11-24T01:05:06+0000" as KCIDB's date-time."""
    try:
        return datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S%z").isoformat()
    except ValueError:
        return None


def _log(path: Path | None, cell: str) -> str | None:
    """A log path relative to the run directory (results.json writes them so), or None
    for a path outside it."""
    if not path:
        return None
    text = str(path)
    if not text.startswith("/"):
        return text
    at = text.find(f"/{cell}/")
    return text[at + 1:] if at >= 0 else None


def _fragment(path: str) -> str:
    name = PurePosixPath(path).name
    return name.removesuffix(".config") or name


def _image(image: str) -> dict[str, str]:
    """The kernel image without its host path: its kernel-store key, else its file name."""
    if not image:
        return {}
    p = PurePosixPath(image)
    if p.parent.parent.name == "kernels":
        return {"kernel_store_key": p.parent.name}
    return {"image": p.name}


def _kernel(spec: str) -> str:
    """A kernel spec without a host path: git:/home/u/linux@v6.12 -> git:linux@v6.12."""
    kind, _, value = spec.partition(":")
    if kind in ("git", "image") and value.startswith("/"):
        path, at, rev = value.partition("@")
        return f"{kind}:{PurePosixPath(path).name}{at}{rev}"
    return spec


def _stage(cell: CellResult, name: str) -> StageTiming | None:
    return next((s for s in cell.stages if s.stage == name), None)


def _from_store(cell: CellResult) -> bool:
    """The run says so (`kernel_from_store`); a results.json older than that field says
    nothing, and nothing is claimed."""
    return cell.kernel_from_store is True


def _build_status(cell: CellResult) -> str:
    build = _stage(cell, "build")
    if build is not None and build.status is Status.PASS:
        return "PASS"
    if cell.status in (Status.BUILD_ERROR, Status.CONFIG_ERROR):
        return "FAIL"
    return "MISS"


def boot_status(cell: CellResult) -> str | None:
    """The `boot` test's status (None: the cell stopped before booting)."""
    boot = next((t for t in cell.tests if t.name == "boot" and t.phase is Phase.BOOT), None)
    accel = _stage(cell, "accel")
    booted = [s for s in cell.stages if s.stage.startswith("boot")]
    if accel is not None and accel.status is not Status.PASS:
        return "MISS"  # KVM unusable or the host failing: the kernel was not tried
    if boot is None:
        if not booted:
            return None
        return "MISS" if booted[-1].status in (Status.SETUP_ERROR, Status.INTERRUPTED) \
            else "ERROR"
    if boot.status is Status.BOOT_ERROR:
        panicked = any(s.kind == "PANIC" for s in boot.splats)
        return "FAIL" if panicked else "ERROR"
    return test_status(boot.status.value)


def is_broken_variant(cell: CellResult) -> bool:
    return any(t.expected_status for t in cell.tests)


def _number(m: Measurement) -> dict[str, Any]:
    out: dict[str, Any] = {"value": float(m.median or 0)}
    if m.unit:
        out["unit"] = m.unit
    return out


def _metrics(t: TestResult) -> list[Measurement]:
    return [m for m in measurements(t) if m.median is not None]


def _environment(cell: CellResult) -> dict[str, Any]:
    kind, _, why = cell.accel.partition(" ")
    misc: dict[str, Any] = {"accel": kind or None}
    if why:
        misc["accel_detail"] = hostless(why.strip().removeprefix("(").removesuffix(")"))
    if cell.guest is not None:
        misc.update(memory=cell.guest.memory, cpus=cell.guest.cpus)
    if cell.guest_seen is not None:
        misc.update(cpus_online=cell.guest_seen.cpus, memory_kb=cell.guest_seen.memory_kb)
    return {"comment": f"QEMU guest ({kind or 'accelerator unknown'})", "misc": misc}


def _runs(run: RunResult) -> dict[str, MergedRun]:
    """cell -> the run that holds it (a merged run's `runs`)."""
    by_cell: dict[str, MergedRun] = {}
    for held in run.merge.runs if run.merge else ():
        for name in held.cells:
            by_cell.setdefault(name, held)
    return by_cell


def _checkout(cell: CellResult, checkout_id: str, origin: str,
              run: RunResult | MergedRun, broken: bool) -> dict[str, Any]:
    """`run`: the run (or merged run's entry) that holds the cell."""
    patches = cell.patches
    missing = cell.status is Status.MISSING
    started = _rfc3339(run.started)
    return {
        "id": checkout_id, "origin": origin,
        "tree_name": _kernel(cell.kernel),
        "comment": hostless(cell.source or _kernel(cell.kernel)),
        **({"message_id": patches[0].message_id.strip("<>")}
           if patches and patches[0].message_id else {}),
        **({} if missing else
           {"valid": not any(p.state is PatchState.CONFLICT for p in patches)}),
        **({"start_time": started} if started and not missing else {}),
        **({"log_excerpt": hostless(cell.error)[:16384]}
           if cell.status is Status.PATCH_CONFLICT and cell.error else {}),
        "misc": {"cell": cell.cell, "kernel": _kernel(cell.kernel),
                 "package_version": cell.package_version,
                 "harness_run_id": run.run_id, "harness_rev": run.harness_rev,
                 "broken_variant": broken,
                 "patches": [{"name": p.name, "subject": p.subject, "state": p.state.value,
                              "message_id": p.message_id} for p in patches]},
    }


def _build(cell: CellResult, build_id: str, checkout_id: str, origin: str,
           compiler: str) -> dict[str, Any]:
    build_stage = _stage(cell, "build")
    from_store = _from_store(cell)
    status = _build_status(cell)
    missing = cell.status is Status.MISSING
    fragments = cell.config.fragments if cell.config else ()
    return {
        "id": build_id, "checkout_id": checkout_id, "origin": origin,
        "architecture": target.arch(cell.arch or target.DEFAULT_ARCH).kcidb,
        **({} if missing else {"config_name": "+".join(_fragment(f) for f in fragments)
                               or "base"}),
        **({"compiler": compiler} if compiler else {}),
        **({"duration": build_stage.duration_s}
           if build_stage and not from_store else {}),
        "status": status,
        **({"log_excerpt": hostless(cell.error)[:16384]}
           if status == "FAIL" and cell.error else {}),
        **({"comment": hostless(cell.error)} if missing else {}),
        "misc": {"kernel_version": cell.kernel_version, "from_store": from_store,
                 "harness_status": cell.status.value, **_image(cell.image)},
    }


def _tests(cell: CellResult, checkout_id: str, build_id: str, origin: str,
           broken: bool) -> list[dict[str, Any]]:
    """The `boot` test, a test per other result, per subtest and per measurement."""

    def test_id(*parts: str) -> str:
        return ":".join((checkout_id, *parts))

    env = _environment(cell)
    boot = boot_status(cell)
    common = {"build_id": build_id, "origin": origin, "environment": env}
    out: list[dict[str, Any]] = []
    for t in cell.tests:
        test = _part(t.name)
        is_boot = t.name == "boot" and t.phase is Phase.BOOT
        declared = t.expected_status.value if t.expected_status else None
        as_declared = bool(declared) and declared == t.status.value != "PASS"
        misc: dict[str, Any] = {
            "harness_status": t.status.value, "log": _log(t.log, cell.cell),
            "splats": [hostless(s.title) for s in t.splats]}
        if broken:
            misc.update(declared=declared, expected=as_declared)
        path = "boot" if is_boot else f"{SUITE}.{test}"
        metrics = _metrics(t)
        out.append({
            "id": test_id(test), **common, "path": path,
            "status": boot if is_boot and boot else test_status(t.status.value),
            "duration": t.duration_s,
            **({"number": _number(metrics[0])} if len(metrics) == 1 else {}),
            **({"log_excerpt": hostless(t.reason)[:16384]} if t.reason else {}),
            "misc": misc,
        })
        for m in metrics if len(metrics) > 1 else []:
            parts = tuple(_part(p) for p in m.path.split("/"))
            said = (("direction", m.direction), ("min", m.min), ("max", m.max),
                    ("q1", m.q1), ("q3", m.q3), ("n", m.n))
            out.append({
                "id": test_id(test, "metric", *parts), **common,
                "path": ".".join((path, *parts)), "status": "DONE", "number": _number(m),
                "misc": {"harness_status": t.status.value,
                         **{k: v for k, v in said if v is not None}},
            })
        for names, leaf in leaves(t.ktap.cases if t.ktap else ()):
            sub = tuple(_part(n) for n in names)
            leaf_misc: dict[str, Any] = {"harness_status": leaf.status.value}
            if broken:
                leaf_misc["expected"] = as_declared and leaf.status not in (Status.PASS,
                                                                             Status.SKIP)
            out.append({
                "id": test_id(test, *sub), **common, "path": ".".join((path, *sub)),
                "status": test_status(leaf.status.value),
                **({"log_excerpt": hostless(leaf.diagnostic)[:16384]}
                   if leaf.diagnostic else {}),
                "misc": leaf_misc,
            })
    if boot is not None and not any(t.name == "boot" for t in cell.tests):
        out.append({"id": test_id("boot"), **common, "path": "boot", "status": boot,
                    **({"log_excerpt": hostless(cell.error)[:16384]} if cell.error else {}),
                    "misc": {"harness_status": cell.status.value}})
    return out


def export(run: RunResult, *, run_id: str | None = None, origin: str = ORIGIN,
           include_broken: bool = False) -> dict[str, Any]:
    origin = check_origin(origin)
    name_of_run = _part(run_id or derived_run_id(run))
    held_by = _runs(run)
    checkouts, builds, tests = [], [], []
    for cell in run.cells:
        broken = is_broken_variant(cell)
        if broken and not include_broken:
            continue
        name = _part(cell.cell)
        source: RunResult | MergedRun = held_by.get(cell.cell, run)
        # the compiler the kernel was built with, as its build recorded it; a run older
        # than that record: the toolchain's compiler among the run's tool versions
        cc = target.toolchain(cell.toolchain or target.DEFAULT_TOOLCHAIN).cc
        compiler = cell.compiler or dict(source.tools or run.tools or ()).get(cc) or ""
        checkout_id = f"{origin}:{name_of_run}:{name}"
        build_id = f"{checkout_id}:build"
        checkouts.append(_checkout(cell, checkout_id, origin, source, broken))
        builds.append(_build(cell, build_id, checkout_id, origin, compiler))
        tests += _tests(cell, checkout_id, build_id, origin, broken)
    return {"version": VERSION, "checkouts": checkouts, "builds": builds, "tests": tests}
