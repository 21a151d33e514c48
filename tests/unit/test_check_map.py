"""The selftests' rewrite (kselftest.h, selftests/lib, half the size) kept every check.

`selftests/check-map.toml` maps every check our selftests had before the rewrite to the check
that does its job now. Both sides come from real runs of the same cells
(`tests/golden/checks/before.json`: harness rev cd8dd77, before the rewrite;
`after.json`: after it; each says the command), so this proves from results, not from
reading code:
- every old check is mapped, and nothing else is;
- every check it maps to exists in a real run;
- every test has the status it had in every cell (the broken kernels and broken BPF variants
  still fail their tests, the good cells still pass), and every check that failed on a broken
  kernel maps to a check that fails there too.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "selftests" / "check-map.toml"
GOLDEN = ROOT / "tests" / "golden" / "checks"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / name).read_text())
    return data


def _base(test: str) -> str:
    return test.partition("@")[0]


def _generic(check: str) -> str:
    """One process used to loop over runs (run_N/check); each run is one check now."""
    return re.sub(r"^run_\d+/", "run_*/", check)


def _mapping() -> dict[tuple[str, str], tuple[str, str]]:
    raw = tomllib.loads(MAP.read_text())
    out = {}
    for test, checks in raw.items():
        for old, new in checks.items():
            new_test, _, new_check = str(new).partition(":")
            out[(test, old)] = (new_test, new_check)
    return out


def test_every_old_check_is_mapped_and_nothing_else() -> None:
    before = _load("before.json")
    old = {(_base(t), _generic(c)) for cell in before["cells"].values()
           for t, res in cell.items() for c in res["checks"]}
    assert old, "the before.json extract has no checks"
    mapped = set(_mapping())
    assert sorted(old - mapped) == [], "old checks without a new home"
    assert sorted(mapped - old) == [], "mapping entries for checks that never existed"


def test_every_new_check_of_the_mapping_exists_in_a_real_run() -> None:
    after = _load("after.json")
    new = {(_base(t), c) for cell in after["cells"].values() for t, res in cell.items()
           for c in res["checks"]}
    assert sorted(set(_mapping().values()) - new) == []


def test_every_test_keeps_its_status_and_failing_checks_stay_failing() -> None:
    before, after = _load("before.json"), _load("after.json")
    mapping = _mapping()
    compared = 0
    for cell, tests in before["cells"].items():
        assert cell in after["cells"], f"cell {cell} was not rerun after the rewrite"
        for test, res in tests.items():
            now = after["cells"][cell].get(test)
            assert now is not None, f"{cell}: {test} was not rerun"
            assert now["status"] == res["status"], (cell, test)
            for check, status in res["checks"].items():
                if status != "FAIL":
                    continue
                new_test, new_check = mapping[(_base(test), _generic(check))]
                # the same variant of the new test in that cell (e.g. @broken_propagation)
                variant = test.partition("@")[2]
                target = after["cells"][cell][f"{new_test}@{variant}" if variant else new_test]
                assert target["checks"].get(new_check) == "FAIL", (cell, test, check, new_check)
                compared += 1
    assert compared > 5, "no failing check was compared: the broken cells are missing"
