"""`harness export kcidb RUN`: a run's results.json as KCIDB I/O data (schema v5, the
major version KernelCI's KCIDB accepts; tests validate it with kcidb-io's v5.3 schema).
Pure: results.json in, a JSON document out.

Per cell: one checkout (the source, its package version, the series and patches applied,
with Message-Ids when they came from the list), one build (configs, compiler, duration,
status), and one test per result and per KTAP/test_progs subtest, at the path
`harness.<test>[.<subtest>...]` (names cut to KCIDB's path alphabet: [A-Za-z0-9_-]).

Status mapping (KCIDB: FAIL, ERROR, MISS, PASS, DONE, SKIP): PASS and XPASS -> PASS; FAIL,
XFAIL (a known failure is still a failure of the code; `misc.known` says why it is
accepted), FLAKY and CRASHED -> FAIL; TIMEOUT -> ERROR (it did not complete); SKIP and
NO_TESTS -> SKIP; SETUP_ERROR and INTERRUPTED -> MISS (the harness, not the code). Build:
PASS when the build stage passed (or the kernel came from the store), FAIL on a
BUILD_ERROR or CONFIG_ERROR, MISS when an earlier stage stopped the cell (a patch conflict,
a set-up error). `misc.harness_status` keeps our own status and `misc.declared` the status
a broken-variant cell declares.

Submitting needs KernelCI credentials and the network: `harness export kcidb RUN -o
run.json`, then `kcidb-submit -p PROJECT -t TOPIC < run.json` (kcidb's own tool).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

ORIGIN = "harness"
VERSION = {"major": 5, "minor": 3}
_TEST_STATUS = {"PASS": "PASS", "XPASS": "PASS", "FAIL": "FAIL", "XFAIL": "FAIL",
                "FLAKY": "FAIL", "CRASHED": "FAIL", "TIMEOUT": "ERROR", "SKIP": "SKIP",
                "NO_TESTS": "SKIP", "SETUP_ERROR": "MISS", "INTERRUPTED": "MISS",
                "PATCH_CONFLICT": "MISS", "CONFIG_ERROR": "MISS", "BUILD_ERROR": "MISS",
                "BOOT_ERROR": "FAIL"}


def test_status(status: str) -> str:
    return _TEST_STATUS[status]


def _part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name) or "_"


def _id(*parts: str) -> str:
    return f"{ORIGIN}:" + ":".join(parts)


def _build_status(cell: dict[str, Any]) -> str:
    stages = {s["stage"]: s["status"] for s in cell.get("stages", [])}
    if stages.get("build") == "PASS":
        return "PASS"
    if cell["status"] in ("BUILD_ERROR", "CONFIG_ERROR"):
        return "FAIL"
    return "MISS"


def _leaves(cases: list[dict[str, Any]], path: tuple[str, ...] = ()
            ) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    for c in cases:
        here = (*path, _part(str(c["name"])))
        if c.get("subtests"):
            yield from _leaves(c["subtests"], here)
        else:
            yield here, c


def export(doc: dict[str, Any]) -> dict[str, Any]:
    run = _part(str(doc.get("run_id") or "run"))
    compiler = str((doc.get("tools") or {}).get("gcc") or "") or None
    checkouts, builds, tests = [], [], []
    for cell in doc.get("cells", []):
        name = _part(str(cell["cell"]))
        checkout_id = _id(run, name)
        build_id = _id(run, name, "build")
        patches = cell.get("patches", [])
        checkouts.append({
            "id": checkout_id, "origin": ORIGIN,
            "tree_name": _part(str(cell.get("kernel") or "")),
            "comment": str(cell.get("source") or cell.get("kernel") or ""),
            **({"message_id": patches[0]["message_id"].strip("<>")}
               if patches and patches[0].get("message_id") else {}),
            "valid": not any(p.get("state") == "conflict" for p in patches),
            "misc": {"kernel": cell.get("kernel"),
                     "package_version": cell.get("package_version"),
                     "patches": [{k: p.get(k) for k in ("name", "subject", "state",
                                                        "message_id")} for p in patches]},
        })
        build_stage = next((s for s in cell.get("stages", []) if s["stage"] == "build"), None)
        builds.append({
            "id": build_id, "checkout_id": checkout_id, "origin": ORIGIN,
            "architecture": "x86_64",
            "config_name": "+".join((cell.get("config") or {}).get("fragments", [])
                                    ) or "base",
            **({"compiler": compiler} if compiler else {}),
            **({"duration": float(build_stage["duration_s"])} if build_stage else {}),
            "status": _build_status(cell),
            "misc": {"kernel_version": cell.get("kernel_version"), "image": cell.get("image")},
        })
        for t in cell.get("tests", []):
            test = _part(str(t["name"]))
            tests.append({
                "id": _id(run, name, test), "build_id": build_id, "origin": ORIGIN,
                "path": f"{ORIGIN}.{test}", "status": test_status(str(t["status"])),
                "duration": float(t.get("duration_s") or 0.0),
                **({"log_excerpt": str(t["reason"])[:16384]} if t.get("reason") else {}),
                "misc": {"harness_status": t["status"], "declared": t.get("expected_status"),
                         "log": t.get("log"),
                         "splats": [s.get("title") for s in t.get("splats", [])]},
            })
            for path, leaf in _leaves((t.get("ktap") or {}).get("subtests", [])):
                tests.append({
                    "id": _id(run, name, test, *path), "build_id": build_id,
                    "origin": ORIGIN, "path": ".".join((ORIGIN, test, *path)),
                    "status": test_status(str(leaf["status"])),
                    **({"log_excerpt": str(leaf["diagnostic"])[:16384]}
                       if leaf.get("diagnostic") else {}),
                    "misc": {"harness_status": leaf["status"]},
                })
    return {"version": VERSION, "checkouts": checkouts, "builds": builds, "tests": tests}
