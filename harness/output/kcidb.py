"""`harness export kcidb RUN`: a run's results.json as KCIDB I/O data (schema v5, the
major version KernelCI's KCIDB accepts; tests validate it with kcidb-io's v5.3 schema).
Pure: results.json in, a JSON document out.

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

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from harness import target
from harness.base.errors import HarnessError
from harness.base.model import Status
from harness.output.compare import measurements_in

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


def derived_run_id(doc: Mapping[str, Any]) -> str:
    """A run id from results.json alone: its start time and a hash of the document."""
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"),
                                       default=str).encode()).hexdigest()[:16]
    started = _rfc3339(doc.get("started"))
    stamp = re.sub(r"[^0-9]", "", started[:19]) if started else "unstarted"
    return f"{stamp}_{digest}"


def resolve_run_id(doc: Mapping[str, Any], *, given: str | None = None,
                   env: Mapping[str, str] | None = None) -> str:
    """The RUN part of every id: `given`, the CI system's run id, or derived_run_id."""
    env = env or {}
    if given:
        return given
    if env.get("GITHUB_RUN_ID"):
        return f"github_{env['GITHUB_RUN_ID']}_{env.get('GITHUB_RUN_ATTEMPT') or '1'}"
    if env.get("CI_PIPELINE_ID"):
        return f"gitlab_{env['CI_PIPELINE_ID']}"
    return derived_run_id(doc)


def _part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name) or "_"


def hostless(text: str) -> str:
    """Absolute host paths cut to their last part ("/home/u/linux at v6.12" -> "linux at
    v6.12"); relative paths, words with slashes, URLs and the kernel's /sys, /proc and
    /dev paths (what a test in the guest reports) as they are."""
    return _ABS_PATH.sub(lambda m: m[0] if m[0].startswith(_KERNEL_FS) else m[1], text)


def _rfc3339(stamp: object) -> str | None:
    """results.json's "2026-11-24T01:05:06+0000" as KCIDB's date-time."""
    try:
        return datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S%z").isoformat()
    except ValueError:
        return None


def _log(path: object, cell: str) -> str | None:
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


def _image(image: object) -> dict[str, str]:
    """The kernel image without its host path: its kernel-store key, else its file name."""
    if not image:
        return {}
    p = PurePosixPath(str(image))
    if p.parent.parent.name == "kernels":
        return {"kernel_store_key": p.parent.name}
    return {"image": p.name}


def _kernel(spec: object) -> str:
    """A kernel spec without a host path: git:/home/u/linux@v6.12 -> git:linux@v6.12."""
    kind, _, value = str(spec or "").partition(":")
    if kind in ("git", "image") and value.startswith("/"):
        path, at, rev = value.partition("@")
        return f"{kind}:{PurePosixPath(path).name}{at}{rev}"
    return str(spec or "")


def _stage(cell: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((s for s in cell.get("stages", []) if s.get("stage") == name), None)


def _from_store(cell: Mapping[str, Any]) -> bool:
    """The run says so (`kernel_from_store`); a results.json older than that field says
    nothing, and nothing is claimed."""
    return cell.get("kernel_from_store") is True


def _build_status(cell: Mapping[str, Any]) -> str:
    build = _stage(cell, "build")
    if build is not None and build.get("status") == "PASS":
        return "PASS"
    if cell["status"] in ("BUILD_ERROR", "CONFIG_ERROR"):
        return "FAIL"
    return "MISS"


def boot_status(cell: Mapping[str, Any]) -> str | None:
    """The `boot` test's status (None: the cell stopped before booting)."""
    boot = next((t for t in cell.get("tests", []) if t.get("name") == "boot"
                 and t.get("phase", "boot") == "boot"), None)
    accel = _stage(cell, "accel")
    booted = [s for s in cell.get("stages", []) if str(s.get("stage")).startswith("boot")]
    if accel is not None and accel.get("status") != "PASS":
        return "MISS"  # KVM unusable or the host failing: the kernel was not tried
    if boot is None:
        if not booted:
            return None
        return "MISS" if booted[-1].get("status") in ("SETUP_ERROR", "INTERRUPTED") \
            else "ERROR"
    status = str(boot["status"])
    if status == "BOOT_ERROR":
        panicked = any(s.get("kind") == "PANIC" for s in boot.get("splats", []))
        return "FAIL" if panicked else "ERROR"
    return test_status(status)


def is_broken_variant(cell: Mapping[str, Any]) -> bool:
    return any(t.get("expected_status") for t in cell.get("tests", []))


def _leaves(cases: list[dict[str, Any]], path: tuple[str, ...] = ()
            ) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    for c in cases:
        here = (*path, _part(str(c["name"])))
        if c.get("subtests"):
            yield from _leaves(c["subtests"], here)
        else:
            yield here, c


def _number(m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"value": float(m["median"])}
    if m.get("unit"):
        out["unit"] = str(m["unit"])
    return out


def _metrics(t: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(p, m) for p, m in measurements_in((t.get("extra") or {}).get("metrics"))
            if isinstance(m.get("median"), int | float) and not isinstance(m["median"], bool)]


def _environment(cell: Mapping[str, Any]) -> dict[str, Any]:
    accel = str(cell.get("accel") or "")
    kind, _, why = accel.partition(" ")
    guest = cell.get("guest") or {}
    misc: dict[str, Any] = {"accel": kind or None}
    if why:
        misc["accel_detail"] = hostless(why.strip().removeprefix("(").removesuffix(")"))
    misc.update({k: guest[k] for k in ("memory", "cpus", "cpus_online", "memory_kb")
                 if k in guest})
    return {"comment": f"QEMU guest ({kind or 'accelerator unknown'})", "misc": misc}


def _runs(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """cell -> the run that holds it (a merged run's `runs`; else the run itself)."""
    by_cell: dict[str, Mapping[str, Any]] = {}
    for run in doc.get("runs") or []:
        for name in run.get("cells", []):
            by_cell.setdefault(str(name), run)
    return by_cell


def _checkout(cell: Mapping[str, Any], checkout_id: str, origin: str,
              run: Mapping[str, Any], broken: bool) -> dict[str, Any]:
    """`run`: the results.json (or merged run's entry) that holds the cell."""
    patches = cell.get("patches", [])
    missing = cell["status"] == Status.MISSING.value
    started = _rfc3339(run.get("started"))
    return {
        "id": checkout_id, "origin": origin,
        "tree_name": _kernel(cell.get("kernel")),
        "comment": hostless(str(cell.get("source") or _kernel(cell.get("kernel")))),
        **({"message_id": patches[0]["message_id"].strip("<>")}
           if patches and patches[0].get("message_id") else {}),
        **({} if missing else
           {"valid": not any(p.get("state") == "conflict" for p in patches)}),
        **({"start_time": started} if started and not missing else {}),
        **({"log_excerpt": hostless(str(cell.get("error")))[:16384]}
           if cell["status"] == "PATCH_CONFLICT" and cell.get("error") else {}),
        "misc": {"cell": cell["cell"], "kernel": _kernel(cell.get("kernel")),
                 "package_version": cell.get("package_version"),
                 "harness_run_id": run.get("run_id"), "harness_rev": run.get("harness_rev"),
                 "broken_variant": broken,
                 "patches": [{k: p.get(k) for k in ("name", "subject", "state", "message_id")}
                             for p in patches]},
    }


def _build(cell: Mapping[str, Any], build_id: str, checkout_id: str, origin: str,
           compiler: str) -> dict[str, Any]:
    build_stage = _stage(cell, "build")
    from_store = _from_store(cell)
    status = _build_status(cell)
    missing = cell["status"] == Status.MISSING.value
    fragments = (cell.get("config") or {}).get("fragments", [])
    return {
        "id": build_id, "checkout_id": checkout_id, "origin": origin,
        "architecture": target.arch(str(cell.get("arch") or target.DEFAULT_ARCH)).kcidb,
        **({} if missing else {"config_name": "+".join(_fragment(f) for f in fragments)
                               or "base"}),
        **({"compiler": compiler} if compiler else {}),
        **({"duration": float(build_stage["duration_s"])}
           if build_stage and not from_store else {}),
        "status": status,
        **({"log_excerpt": hostless(str(cell.get("error")))[:16384]}
           if status == "FAIL" and cell.get("error") else {}),
        **({"comment": hostless(str(cell.get("error")))} if missing else {}),
        "misc": {"kernel_version": cell.get("kernel_version"), "from_store": from_store,
                 "harness_status": cell["status"], **_image(cell.get("image"))},
    }


def _tests(cell: Mapping[str, Any], checkout_id: str, build_id: str, origin: str,
           broken: bool) -> list[dict[str, Any]]:
    """The `boot` test, a test per other result, per subtest and per measurement."""

    def test_id(*parts: str) -> str:
        return ":".join((checkout_id, *parts))

    env = _environment(cell)
    boot = boot_status(cell)
    common = {"build_id": build_id, "origin": origin, "environment": env}
    out: list[dict[str, Any]] = []
    for t in cell.get("tests", []):
        test = _part(str(t["name"]))
        is_boot = t["name"] == "boot" and t.get("phase", "boot") == "boot"
        declared = t.get("expected_status")
        as_declared = bool(declared) and declared == t["status"] != "PASS"
        misc: dict[str, Any] = {
            "harness_status": t["status"], "log": _log(t.get("log"), str(cell["cell"])),
            "splats": [hostless(str(s.get("title"))) for s in t.get("splats", [])]}
        if broken:
            misc.update(declared=declared, expected=as_declared)
        path = "boot" if is_boot else f"{SUITE}.{test}"
        metrics = _metrics(t)
        out.append({
            "id": test_id(test), **common, "path": path,
            "status": boot if is_boot and boot else test_status(str(t["status"])),
            "duration": float(t.get("duration_s") or 0.0),
            **({"number": _number(metrics[0][1])} if len(metrics) == 1 else {}),
            **({"log_excerpt": hostless(str(t["reason"]))[:16384]} if t.get("reason") else {}),
            "misc": misc,
        })
        for mpath, m in metrics if len(metrics) > 1 else []:
            parts = tuple(_part(p) for p in mpath.split("/"))
            out.append({
                "id": test_id(test, "metric", *parts), **common,
                "path": ".".join((path, *parts)), "status": "DONE", "number": _number(m),
                "misc": {"harness_status": t["status"],
                         **{k: m[k] for k in ("direction", "min", "max", "q1", "q3", "n")
                            if k in m}},
            })
        for sub, leaf in _leaves((t.get("ktap") or {}).get("subtests", [])):
            leaf_misc: dict[str, Any] = {"harness_status": leaf["status"]}
            if broken:
                leaf_misc["expected"] = as_declared and leaf["status"] not in ("PASS", "SKIP")
            out.append({
                "id": test_id(test, *sub), **common, "path": ".".join((path, *sub)),
                "status": test_status(str(leaf["status"])),
                **({"log_excerpt": hostless(str(leaf["diagnostic"]))[:16384]}
                   if leaf.get("diagnostic") else {}),
                "misc": leaf_misc,
            })
    if boot is not None and not any(t["name"] == "boot" for t in cell.get("tests", [])):
        out.append({"id": test_id("boot"), **common, "path": "boot", "status": boot,
                    **({"log_excerpt": hostless(str(cell["error"]))[:16384]}
                       if cell.get("error") else {}),
                    "misc": {"harness_status": cell["status"]}})
    return out


def export(doc: Mapping[str, Any], *, run_id: str | None = None, origin: str = ORIGIN,
           include_broken: bool = False) -> dict[str, Any]:
    origin = check_origin(origin)
    run = _part(run_id or derived_run_id(doc))
    held_by = _runs(doc)
    checkouts, builds, tests = [], [], []
    for cell in doc.get("cells", []):
        broken = is_broken_variant(cell)
        if broken and not include_broken:
            continue
        name = _part(str(cell["cell"]))
        source = held_by.get(str(cell["cell"]), doc)
        # the compiler the kernel was built with, as its build recorded it; a run older
        # than that record: the toolchain's compiler among the run's tool versions
        cc = target.toolchain(str(cell.get("toolchain") or target.DEFAULT_TOOLCHAIN)).cc
        compiler = str(cell.get("compiler")
                       or (source.get("tools") or doc.get("tools") or {}).get(cc) or "")
        checkout_id = f"{origin}:{run}:{name}"
        build_id = f"{checkout_id}:build"
        checkouts.append(_checkout(cell, checkout_id, origin, source, broken))
        builds.append(_build(cell, build_id, checkout_id, origin, compiler))
        tests += _tests(cell, checkout_id, build_id, origin, broken)
    return {"version": VERSION, "checkouts": checkouts, "builds": builds, "tests": tests}
