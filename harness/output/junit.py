"""`harness export junit RUN`: a run's results as JUnit XML, for the CI systems that
read it (Jenkins, GitLab, GitHub test reporters). Pure: the run in, text out.

One testsuite per cell, named after the cell; every testcase of a cell has the classname
`harness.<cell>` with the cell's dots made underscores (Jenkins splits a classname at its
last dot into package and class: "6.12" would become package "6").

Testcases, each result counted once:
- a result without subtests (boot, set-up, shutdown, a test) is one testcase, its name;
- a test with KTAP or test_progs subtests is its leaves, flat, named `test/sub/subsub`;
  the test itself is a testcase too only when its own outcome is bad or a known failure
  and no leaf shows it (the same outcome and status): a TIMEOUT or CRASHED after its
  subtests passed, a FAIL whose leaves all pass, a status other than the one the cell
  declares, so nothing is lost;
- `verdict`: the cell's own status, when its exit code is not 0 and none of its testcases
  is a failure or an error (a broken-variant cell whose declared check or result is
  missing, a cell in which nothing was tested, a MISSING cell of a merged run that no run
  holds), or when the cell has no result at all (a cell stopped before its tests): a
  failure for exit code 1, an error for 2; its text is the cell's error.
Statuses map to:
- passed: PASS, XPASS (unless the run was --strict);
- failure: FAIL, FLAKY, TIMEOUT, CRASHED, MISSING (message: the reason; text: the failing
  checks' diagnostics, the splats, the log path); `verdict` of a cell whose exit code is 1
  (nothing tested: SKIP, NO_TESTS);
- error: the stage errors (SETUP_ERROR, PATCH_CONFLICT, CONFIG_ERROR, BUILD_ERROR,
  BOOT_ERROR) and INTERRUPTED;
- skipped: SKIP and NO_TESTS, with the reason; XFAIL as `known failure: REASON` (a leaf
  of a test that is a known failure as a whole is one too).
A result a broken-variant cell declares (`expected_status`, e.g. FAIL on a kernel broken
on purpose) passes when it has that status, and so do its subtests (their failures are
what the cell asks for; system-out says "as declared"); with another status it is a
failure that says what was expected.

Benchmarks: every measurement in a test's `extra.metrics` (an object with median, unit
and direction) is a property of its cell's testsuite, `<test>.<path>` = "MEDIAN UNIT"
(harness/output/schemas/junit.xsd, like the Ant/Jenkins schemas, has no properties in a
testcase).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from harness.base.model import CellResult, RunResult, Status, TestResult, leaves
from harness.output.compare import measurements

FAILURE = frozenset({"FAIL", "FLAKY", "TIMEOUT", "CRASHED", "MISSING"})
SKIPPED = frozenset({"SKIP", "NO_TESTS", "XFAIL"})
BAD = frozenset({"failure", "error"})
_PLURAL = {"failure": "failures", "error": "errors", "skipped": "skipped"}


def outcome(status: str, *, strict: bool = False) -> str:
    """passed | failure | error | skipped"""
    if status in FAILURE or (strict and status == "XPASS"):
        return "failure"
    if status in SKIPPED:
        return "skipped"
    if Status(status).is_stage_error:
        return "error"
    return "passed"


def classname(cell: str) -> str:
    return "harness." + cell.replace(".", "_")


@dataclass(frozen=True, kw_only=True)
class Case:
    """One testcase: what it says and how a CI system counts it."""

    cell: str
    name: str
    status: str  # ours (the element's type); XFAIL for a leaf of a known failure
    kind: str  # passed | failure | error | skipped
    seconds: float = 0.0
    detail: str = ""  # the element's text; its first line is the message
    out: str = ""  # system-out


def known_reason(test: TestResult, leaf: str) -> str:
    """Why a subtest is a known failure: its part of the test's reason
    ("a: expected failure: R1; b: declared flaky: R2"), else the whole reason."""
    for part in test.reason.split("; "):
        if part.startswith(f"{leaf}: "):
            return part.removeprefix(f"{leaf}: ")
    return test.reason


def _test_cases(cell: str, t: TestResult, strict: bool) -> list[Case]:
    status, name = t.status.value, t.name
    declared = t.expected_status.value if t.expected_status else ""
    as_declared = bool(declared) and declared == status
    found = [("/".join(path), leaf) for path, leaf in leaves(t.ktap.cases if t.ktap else ())]
    failing = [p for p, leaf in found if leaf.status.value in FAILURE]
    detail = [t.reason]
    if failing:
        detail.append("failing checks: " + ", ".join(failing))
    detail += [f"{s.kind}: {s.title}" for s in t.splats]
    log = f"log: {t.log}" if t.log else ""
    text = "\n".join(d for d in [*detail, log] if d)
    seconds = t.duration_s
    if as_declared:
        parent = Case(cell=cell, name=name, status=status, kind="passed", seconds=seconds,
                      out=f"{status} as the cell declares (a kernel broken on purpose)"
                      + (f"\n{text}" if text else ""))
    elif declared:
        parent = Case(cell=cell, name=name, status=status, kind="failure", seconds=seconds,
                      detail=f"expected {declared}, got {status}\n{text}")
    elif status == "XFAIL":
        parent = Case(cell=cell, name=name, status=status, kind="skipped", seconds=seconds,
                      detail=f"known failure: {t.reason}")
    else:
        parent = Case(cell=cell, name=name, status=status, kind=outcome(status, strict=strict),
                      seconds=seconds, detail=text)
    if not found:
        return [parent]
    cases = []
    for path, leaf in found:
        st, diag = leaf.status.value, leaf.diagnostic
        full = f"{name}/{path}"
        if as_declared:
            case = Case(cell=cell, name=full, status=st, kind="passed",
                        out=f"{st} as declared: its test is {status}, as the cell declares"
                        + (f"\n{diag}" if diag else ""))
        elif st == "XFAIL":
            case = Case(cell=cell, name=full, status=st, kind="skipped",
                        detail=f"known failure: {known_reason(t, leaf.name)}"
                        + (f"\n{diag}" if diag else ""))
        elif status == "XFAIL" and outcome(st, strict=strict) in BAD:
            case = Case(cell=cell, name=full, status="XFAIL", kind="skipped",
                        detail=f"known failure (its test {name} as a whole): "
                        f"{t.reason}" + (f"\n{st}: {diag}" if diag else ""))
        else:
            kind = outcome(st, strict=strict)
            case = Case(cell=cell, name=full, status=st, kind=kind,
                        detail="\n".join(x for x in [diag or st, log] if x)
                        if kind in BAD else diag)
        cases.append(case)
    shown = any(c.kind == parent.kind and c.status == parent.status for c in cases)
    if parent.kind != "passed" and (not shown or (declared and not as_declared)):
        cases.insert(0, parent)
    return cases


def _verdict(cell: CellResult, cases: list[Case]) -> Case | None:
    """The cell's own status as a testcase, when no other testcase says it."""
    status = cell.status.value
    if cases and (any(c.kind in BAD for c in cases) or cell.status.exit_code == 0):
        return None
    code = cell.status.exit_code
    kind = "error" if code >= 2 else "failure" if code == 1 else "passed"
    error = cell.error
    if cell.status is Status.MISSING and not error:
        error = "no run holds this cell"
    return Case(cell=cell.cell, name="verdict", status=status, kind=kind,
                detail=error or f"the cell is {status}",
                out="" if kind != "passed" else error)


def cases(run: RunResult) -> Iterator[Case]:
    """Every testcase of every cell, in order."""
    strict = bool(run.strict)
    for cell in run.cells:
        out: list[Case] = []
        for t in cell.tests:
            out += _test_cases(cell.cell, t, strict)
        verdict = _verdict(cell, out)
        yield from out
        if verdict is not None:
            yield verdict


def metrics(t: TestResult) -> Iterator[tuple[str, float, str]]:
    """(path, median, unit) of every measurement a test reports."""
    for m in measurements(t):
        if m.median is not None:
            yield m.path, float(m.median), m.unit or ""


def render(run: RunResult) -> str:
    root = ET.Element("testsuites", name="harness")
    totals: Counter[str] = Counter()
    suites: dict[str, tuple[ET.Element, Counter[str], list[float]]] = {}
    for cell in run.cells:
        suite = ET.SubElement(root, "testsuite", name=cell.cell)
        props = ET.SubElement(suite, "properties")
        for key, value in (("kernel", cell.kernel), ("kernel_version", cell.kernel_version),
                           ("status", cell.status.value), ("image", cell.image),
                           ("arch", cell.arch), ("toolchain", cell.toolchain)):
            ET.SubElement(props, "property", name=key, value=value)
        for t in cell.tests:
            for path, median, unit in metrics(t):
                ET.SubElement(props, "property", name=f"{t.name}.{path}",
                              value=f"{median:g} {unit}".strip())
        suites[cell.cell] = (suite, Counter(), [0.0])
    for case in cases(run):
        suite, counts, time = suites[case.cell]
        el = ET.SubElement(suite, "testcase", name=case.name, classname=classname(case.cell),
                           time=f"{case.seconds:.3f}")
        counts["tests"] += 1
        time[0] += case.seconds
        if case.kind != "passed":
            counts[_PLURAL[case.kind]] += 1
            what = ET.SubElement(el, case.kind, type=case.status,
                                 message=(case.detail.splitlines() or [case.status])[0][:500])
            what.text = case.detail
        if case.out:
            ET.SubElement(el, "system-out").text = case.out
    for suite, counts, time in suites.values():
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
            totals[key] += counts[key]
        suite.set("time", f"{time[0]:.3f}")
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(totals[key]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
