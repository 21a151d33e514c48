"""test_progs output -> the same result model as KTAP (pure parsing, no I/O).

test_progs (tools/testing/selftests/bpf) prints one line per test and subtest:

    #55/3    cgroup_iter/cgroup_iter__preorder:OK
    #55      cgroup_iter:OK (SKIP: 1/9)
    Summary: 1/8 PASSED, 0 SKIPPED, 0 FAILED

(after "All error logs:" failed tests' logs and result lines come again: not counted twice)

and with -J writes a JSON summary that lists only the failed tests and subtests, with
their log messages. Statuses come from the lines; the JSON adds the failure messages and
its counts are cross-checked (a disagreement is reported as a parse error, so a
truncated output cannot pass for a clean run).
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.base.model import KtapResult, Status, TestCase

_TEST = re.compile(r"^#(\d+)\s+([^/\s:]+):(OK|SKIP|FAIL)(?: \(SKIP: (\d+)/(\d+)\))?\s*$")
_SUBTEST = re.compile(r"^#(\d+)/(\d+)\s+([^/\s:]+)/(.+?):(OK|SKIP|FAIL)\s*$")
_SUMMARY = re.compile(r"^Summary: (\d+)/(\d+) PASSED, (\d+) SKIPPED, (\d+) FAILED\s*$")
_STATUS = {"OK": Status.PASS, "SKIP": Status.SKIP, "FAIL": Status.FAIL}


def parse(stdout: str, summary_json: str | None) -> KtapResult:
    subtests: dict[int, list[TestCase]] = {}
    tests: list[TestCase] = []
    errors: list[str] = []
    summary: tuple[int, ...] | None = None
    repeat = False  # after "All error logs:" the failed tests are printed a second time
    for line in stdout.splitlines():
        if line.startswith("All error logs:"):
            repeat = True
        elif m := _SUMMARY.match(line):
            summary = tuple(int(g) for g in m.groups())
        elif repeat:
            continue
        elif m := _SUBTEST.match(line):
            num, sub = int(m.group(1)), int(m.group(2))
            subtests.setdefault(num, []).append(TestCase(
                name=m.group(4), number=sub, status=_STATUS[m.group(5)],
                directive="SKIP" if m.group(5) == "SKIP" else ""))
        elif m := _TEST.match(line):
            num = int(m.group(1))
            directive = ""
            if m.group(4):
                directive = f"SKIP {m.group(4)}/{m.group(5)} subtests"
            elif m.group(3) == "SKIP":
                directive = "SKIP"
            tests.append(TestCase(name=m.group(2), number=num, status=_STATUS[m.group(3)],
                                  directive=directive,
                                  subtests=tuple(subtests.pop(num, []))))
    if subtests:
        errors.append("subtest results without their test's line (test_progs stopped?): "
                      + ", ".join(f"#{n}" for n in sorted(subtests)))
    if summary is None:
        errors.append("no 'Summary:' line: test_progs did not finish")
    failures = _json_failures(summary_json, errors)
    tests = [_with_messages(t, failures) for t in tests]
    if summary is not None and failures is not None:
        failed_json = failures.get("__count__", {}).get("failed")
        if isinstance(failed_json, int) and failed_json != summary[3]:
            errors.append(f"-J summary says {failed_json} failed, stdout says {summary[3]}")
    return KtapResult(version="test_progs", plan=len(tests), cases=tuple(tests),
                      errors=tuple(errors))


def _json_failures(text: str | None, errors: list[str]) -> dict[str, Any] | None:
    """name -> {"message": ..., "subtests": {name: message}} from the -J file."""
    if text is None:
        errors.append("no -J summary file (test_progs crashed or was killed)")
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        errors.append(f"-J summary is not JSON: {exc}")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("results", []), list):
        errors.append("-J summary is not a test_progs summary object")
        return None
    out: dict[str, Any] = {"__count__": {"failed": data.get("failed")}}
    for res in data.get("results", []):
        if not isinstance(res, dict):
            errors.append(f"-J summary: a result is not an object: {res!r:.80}")
            continue
        subs = {s.get("name", ""): str(s.get("message", ""))
                for s in res.get("subtests", []) if s.get("failed")}
        out[str(res.get("name", ""))] = {"message": str(res.get("message", "")),
                                         "subtests": subs}
    return out


def _with_messages(test: TestCase, failures: dict[str, Any] | None) -> TestCase:
    if not failures or test.name not in failures:
        return test
    info = failures[test.name]
    subs = tuple(
        TestCase(name=s.name, number=s.number, status=s.status, directive=s.directive,
                 diagnostic=_failures(info["subtests"].get(s.name, "")))
        for s in test.subtests)
    return TestCase(name=test.name, number=test.number, status=test.status,
                    directive=test.directive, diagnostic=_failures(str(info["message"])),
                    subtests=subs)


def _failures(message: str, limit: int = 2000) -> str:
    """The log's failed checks ("func:FAIL:what ..."), not its hundred PASS lines."""
    lines = message.strip().splitlines()
    failed = [ln for ln in lines if ":FAIL:" in ln]
    text = "\n".join(dict.fromkeys(failed)) if failed else "\n".join(lines[-20:])
    return text[:limit]
