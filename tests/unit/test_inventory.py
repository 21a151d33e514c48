"""The inventory of what our features expose (selftests/inventory/*.toml) is complete.

Each feature's file lists, per kernel, the items the kernel exposes ([[list]]: memory.stat
keys, cpu.stat keys, the kfuncs of a set and their flags, the program types the set is
registered for, the iterator's orders, bpf_link_info's fields, ...) and has a row
([[row]]) for each: the check that reads it (TEST:CHECK, which must exist in that test's
table of checks), the oracle it is compared with (never the code under test, never a
reader both sides share), the tolerance and why. An item no row can check yet is a
declared gap ([[gap]]: why, and what a check would need), never a silent hole.

The lists are not trusted either: each must equal the golden list captured from a real
kernel (tests/golden/inventory/KERNEL/NAME.txt, README.md there says how; KERNEL+FRAGMENT,
e.g. 6.12+thp: the items a kernel built with kconfigs/FRAGMENT.config adds), so a kernel
that exposes a new item fails here until the inventory has it, and a row or an item
removed fails here too (the negative cases below prove it on the real files).
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "selftests" / "inventory"
GOLDEN = ROOT / "tests" / "golden" / "inventory"
SELFTESTS = ROOT / "selftests"

FEATURES = ("memcg_kfuncs", "rstat", "cgroup_iter", "css_iter", "cgrp_storage", "perf_cgroup")
KERNELS = ("6.1", "6.12", "7.2")
KINDS = ("file-field", "kfunc-return", "kfunc-refusal", "link-info", "map-info",
         "attr-refusal", "prog-type", "hook-call", "object-life")
ROW_FIELDS = ("item", "kind", "kernels", "check", "oracle", "tolerance", "why", "freed_by")
GAP_FIELDS = ("item", "kernels", "why", "needs")
# the feature whose inventory must hold each golden list, by the list name's first part
LIST_FEATURE = {"memcg_kfuncs": "memcg_kfuncs", "memory": "memcg_kfuncs", "rstat": "rstat",
                "cpu": "rstat", "cgroup_iter": "cgroup_iter", "css_iter": "css_iter",
                "cgrp_storage": "cgrp_storage"}

Inventories = dict[str, dict[str, Any]]
Goldens = dict[tuple[str, str], set[str]]


def tokens(text: str) -> set[str]:
    """The words of @text an item may be named by: identifiers, keys and dotted or
    colon-joined names (memory.stat, bpf_get_mem_cgroup:KF_RCU, order:self_only)."""
    return {t.rstrip(".:") for t in re.findall(r"[A-Za-z0-9_.:\-]+", text)} - {""}


def load_inventories(directory: Path = INVENTORY) -> Inventories:
    return {p.stem: tomllib.loads(p.read_text()) for p in sorted(directory.glob("*.toml"))}


def golden_items(path: Path) -> set[str]:
    """A golden list's items: a kfunc line 'NAME FLAG|FLAG' gives NAME and NAME:FLAG for
    each flag; any other line is one item."""
    items = set()
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, flags = line.partition(" ")
        items.add(name)
        items |= {f"{name}:{f}" for f in flags.split("|") if f and f != "-"}
    return items


def load_goldens(directory: Path = GOLDEN) -> Goldens:
    return {(p.parent.name, p.stem): golden_items(p) for p in directory.glob("*/*.txt")}


def _c_checks(path: Path) -> set[str]:
    """The names in a C test's table of checks: CHECK(name, ...), CHECK_BY(name, fn, ...)."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    table = text[text.rfind("struct check checks[]"):]
    return set(re.findall(r"\bCHECK(?:_BY)?\(\s*(\w+)", table))


def _py_checks(path: Path) -> set[str]:
    """perf_cgroup.py's results: results.append(("name", ...)), {mode} both modes."""
    names = set()
    for name in re.findall(r'results\.append\(\(\s*f?"([^"]+)"', path.read_text()):
        names |= {name.replace("{mode}", m) for m in ("plain", "bpf")}
    return names


def load_checks(directory: Path = SELFTESTS) -> dict[str, set[str]]:
    out = {}
    for d in sorted(p for p in directory.iterdir() if (p / "test.toml").exists()):
        c, py = d / f"{d.name}.c", d / f"{d.name}.py"
        out[d.name] = _c_checks(c) if c.exists() else _py_checks(py) if py.exists() else set()
    return out


def covers(entry: dict[str, Any], name: str, kernel: str, item: str) -> bool:
    """Does a row or gap name @item of the list @name of @kernel? By the item's word in
    its item text, for that kernel. A key of a cgroup file (lists FILE.leaf, FILE.cpuleaf,
    FILE.root) must come with the file's name (memory.events high is not
    memory.swap.events high), and a key of the cgroup2 root's file is another item than a
    leaf's (another reader fills it): only an entry that says root covers it, and only one
    that does not covers a leaf's."""
    words = tokens(str(entry.get("item", "")))
    # a config variant's list ("6.12+thp": what kconfigs/thp.config adds) is its kernel's
    if item not in words or kernel.partition("+")[0] not in entry.get("kernels", []):
        return False
    base, _, where = name.rpartition(".")
    if where in ("leaf", "cpuleaf", "root") and base.startswith(("memory.", "cpu.")):
        return base in words and ("root" in words) == (where == "root")
    return True


def _row_problems(where: str, row: dict[str, Any], inv: dict[str, Any],
                  checks: dict[str, set[str]]) -> list[str]:
    out = []
    for f in ROW_FIELDS:
        if f not in row:
            out.append(f"{where}: no {f}")
    if out:
        return out
    if bad := set(row) - set(ROW_FIELDS):
        out.append(f"{where}: unknown fields {sorted(bad)}")
    if row["kind"] not in KINDS:
        out.append(f"{where}: kind {row['kind']!r} is not one of {', '.join(KINDS)}")
    if not row["kernels"] or set(row["kernels"]) - set(KERNELS):
        out.append(f"{where}: kernels {row['kernels']} (from {', '.join(KERNELS)})")
    test, _, check = str(row["check"]).partition(":")
    if test not in inv.get("tests", []):
        out.append(f"{where}: check {row['check']!r}: {test!r} is not one of this feature's "
                   f"tests {inv.get('tests')}")
    elif check not in checks.get(test, set()):
        out.append(f"{where}: check {row['check']!r}: no check {check!r} in "
                   f"selftests/{test}'s table of checks")
    for f in ("oracle", "tolerance", "why"):
        if not str(row[f]).strip():
            out.append(f"{where}: empty {f}")
    oracle = tokens(str(row["oracle"]))
    if hit := oracle & set(inv.get("under_test", [])):
        out.append(f"{where}: the oracle names the code under test: {sorted(hit)}")
    item = tokens(str(row["item"]))
    for shared in inv.get("shared", []):
        if item & set(shared["with"]) and shared["reader"] in oracle:
            out.append(f"{where}: the oracle is {shared['reader']}, a reader the item's code "
                       f"shares ({shared['why']})")
    tol = str(row["tolerance"]).lower()
    if "estimate" in tol and not ("measured" in tol and "spread" in tol):
        out.append(f"{where}: a tolerance that is an estimate must say it was measured over "
                   "repeated good runs and its observed spread")
    if (row["kind"] == "object-life") != bool(str(row["freed_by"]).strip()):
        out.append(f"{where}: freed_by is for object-life rows, and required there: the "
                   "event that frees it and how the test sees it freed")
    return out


def problems(invs: Inventories, goldens: Goldens, checks: dict[str, set[str]]) -> list[str]:
    """Everything that keeps the inventories from being complete and checked."""
    out = []
    for feature in FEATURES:
        if feature not in invs:
            out.append(f"selftests/inventory/{feature}.toml is missing")
    for feature, inv in invs.items():
        at = f"selftests/inventory/{feature}.toml"
        for f in ("feature", "tests"):
            if not inv.get(f):
                out.append(f"{at}: no {f}")
        for t in inv.get("tests", []):
            if t not in checks:
                out.append(f"{at}: test {t!r} is not in selftests/")
        rows, gaps = inv.get("row", []), inv.get("gap", [])
        for i, row in enumerate(rows):
            out += _row_problems(f"{at} row {i + 1} ({row.get('item', '?')!r})", row, inv, checks)
        for i, gap in enumerate(gaps):
            for f in GAP_FIELDS:
                if not str(gap.get(f, "")).strip():
                    out.append(f"{at} gap {i + 1} ({gap.get('item', '?')!r}): no {f}")
        lists: dict[tuple[str, str], set[str]] = {}
        for lst in inv.get("list", []):
            key = (str(lst.get("kernel")), str(lst.get("name")))
            if key in lists:
                out.append(f"{at}: two lists {key[1]} of {key[0]}")
            lists[key] = set(lst.get("items", []))
            if not str(lst.get("source", "")).strip():
                out.append(f"{at}: list {key[1]} of {key[0]} says not where it comes from")
            if key not in goldens and not lst.get("hand"):
                out.append(f"{at}: list {key[1]} of {key[0]} has no golden "
                           f"(tests/golden/inventory/{key[0]}/{key[1]}.txt) and is not "
                           "declared hand = true")
        for (kernel, name), items in lists.items():
            for item in sorted(items):
                by_row = [r for r in rows if covers(r, name, kernel, item)]
                by_gap = [g for g in gaps if covers(g, name, kernel, item)]
                if not by_row and not by_gap:
                    out.append(f"{at}: {name} of {kernel}: {item} has no row and no gap")
                elif by_row and by_gap:
                    out.append(f"{at}: {name} of {kernel}: {item} has a row and a gap (drop "
                               "the gap)")
    for (kernel, name), items in sorted(goldens.items()):
        feature = LIST_FEATURE.get(name.split(".")[0])
        if feature is None:
            out.append(f"golden {kernel}/{name}: no feature holds lists named {name}")
            continue
        have = {str(lst.get("name")) + "@" + str(lst.get("kernel")): set(lst.get("items", []))
                for lst in invs.get(feature, {}).get("list", [])}
        listed = have.get(f"{name}@{kernel}")
        if listed is None:
            out.append(f"selftests/inventory/{feature}.toml: no list {name} of {kernel} "
                       "(its golden exists)")
            continue
        for item in sorted(items - listed):
            out.append(f"selftests/inventory/{feature}.toml: {name} of {kernel}: the kernel "
                       f"exposes {item}, the list does not have it")
        for item in sorted(listed - items):
            out.append(f"selftests/inventory/{feature}.toml: {name} of {kernel}: {item} is "
                       "listed, the kernel does not expose it")
    return out


@pytest.fixture(scope="module")
def real() -> tuple[Inventories, Goldens, dict[str, set[str]]]:
    return load_inventories(), load_goldens(), load_checks()


def test_the_inventories_are_complete_and_every_row_is_checked(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    assert problems(*real) == []


def test_every_golden_list_was_captured_with_its_source(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    _, goldens, _ = real
    assert {k.partition("+")[0] for k, _ in goldens} == set(KERNELS)
    for path in GOLDEN.glob("*/*.txt"):
        head = path.read_text().splitlines()[:2]
        assert all(h.startswith("# ") for h in head), f"{path}: no header saying its source"
        assert golden_items(path), f"{path} is empty"


def test_the_checks_are_read_from_the_tests_own_tables() -> None:
    checks = load_checks()
    assert {"usage_matches_memory_current", "prog_types_registered",
            "oom_events_counted"} <= checks["memcg_kfuncs"]
    assert "leaf_a1_pages_vs_pgsteal" in checks["hierarchical_stats"]  # CHECK_BY
    assert "bpf_counts_match_per_cgroup_events" in checks["perf_cgroup"]
    assert {"plain_counts_match_cgroup_accounting",
            "bpf_counts_match_cgroup_accounting"} <= checks["perf_cgroup"]  # {mode}
    assert "check_fail" not in checks["memcg_kfuncs"]


def _row_covered(inv: dict[str, Any]) -> tuple[str, str, str, list[int]]:
    """(kernel, list, item, the rows covering it) for a listed item rows cover and no gap
    does, the one with the fewest rows."""
    found = []
    for lst in inv.get("list", []):
        for item in lst["items"]:
            rows = [i for i, r in enumerate(inv.get("row", []))
                    if covers(r, lst["name"], lst["kernel"], item)]
            gaps = [g for g in inv.get("gap", []) if covers(g, lst["name"], lst["kernel"], item)]
            if rows and not gaps:
                found.append((lst["kernel"], lst["name"], item, rows))
    if not found:
        raise LookupError("no item covered by rows alone")
    return min(found, key=lambda f: len(f[3]))


@pytest.mark.parametrize("feature", [f for f in FEATURES if f != "perf_cgroup"])
def test_a_row_removed_fails(feature: str,
                             real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    invs, goldens, checks = copy.deepcopy(real)
    kernel, name, item, rows = _row_covered(invs[feature])
    for i in reversed(rows):
        del invs[feature]["row"][i]
    assert any(f"{name} of {kernel}: {item} has no row and no gap" in p
               for p in problems(invs, goldens, checks))


@pytest.mark.parametrize("feature", [f for f in FEATURES if f != "perf_cgroup"])
def test_an_item_removed_from_a_list_fails(
        feature: str, real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    invs, goldens, checks = copy.deepcopy(real)
    lst = next(lst for lst in invs[feature]["list"] if (lst["kernel"], lst["name"]) in goldens)
    item = lst["items"].pop()
    assert any(f"the kernel exposes {item}, the list does not have it" in p
               for p in problems(invs, goldens, checks))


def test_a_kernel_that_exposes_a_new_item_fails(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    invs, goldens, checks = copy.deepcopy(real)
    goldens[("6.12", "memory.stat.leaf")].add("new_key")
    goldens[("7.2", "cgroup_iter.orders")].add("BPF_CGROUP_ITER_SIDEWAYS")
    found = problems(invs, goldens, checks)
    assert any("memory.stat.leaf of 6.12: the kernel exposes new_key" in p for p in found)
    assert any("exposes BPF_CGROUP_ITER_SIDEWAYS" in p for p in found)


def test_a_golden_list_no_inventory_holds_fails(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    invs, goldens, checks = copy.deepcopy(real)
    goldens[("6.12", "memcg_kfuncs.new_list")] = {"x"}
    goldens[("6.12", "unknown.list")] = {"x"}
    found = problems(invs, goldens, checks)
    assert any("no list memcg_kfuncs.new_list of 6.12" in p for p in found)
    assert any("no feature holds lists named unknown.list" in p for p in found)


def _row(invs: Inventories, feature: str, check: str) -> dict[str, Any]:
    row: dict[str, Any] = next(r for r in invs[feature]["row"] if r["check"] == check)
    return row


def test_a_row_whose_check_is_missing_fails(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    invs, goldens, checks = copy.deepcopy(real)
    _row(invs, "memcg_kfuncs", "memcg_kfuncs:usage_matches_memory_current")["check"] = (
        "memcg_kfuncs:no_such_check")
    checks["rstat_propagation"].discard("cpu_stat_user_system_nice")
    found = problems(invs, goldens, checks)
    assert any("no check 'no_such_check' in selftests/memcg_kfuncs" in p for p in found)
    assert any("no check 'cpu_stat_user_system_nice'" in p for p in found)


def test_a_row_without_an_independent_oracle_fails(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    invs, goldens, checks = copy.deepcopy(real)
    row = next(r for r in invs["memcg_kfuncs"]["row"]
               if "bpf_mem_cgroup_page_state" in tokens(r["item"]))
    row["oracle"] = "memory.stat of the same cgroup"
    shared = next(r for r in invs["memcg_kfuncs"]["row"]
                  if r["check"] == "memcg_kfuncs:usage_matches_memory_current")
    shared["oracle"] = "what bpf_mem_cgroup_usage returns"
    empty = _row(invs, "rstat", "rstat_propagation:cpu_stat_user_system_nice")
    empty["tolerance"] = " "
    found = problems(invs, goldens, checks)
    assert any("the oracle is memory.stat, a reader the item's code shares" in p for p in found)
    assert any("the oracle names the code under test: ['bpf_mem_cgroup_usage']" in p
               for p in found)
    assert any("empty tolerance" in p for p in found)


def test_an_estimate_must_say_its_measured_spread(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    invs, goldens, checks = copy.deepcopy(real)
    _row(invs, "memcg_kfuncs", "memcg_kfuncs:usage_matches_memory_current")["tolerance"] = (
        "an estimate of what the kernel frees")
    assert any("must say it was measured" in p for p in problems(invs, goldens, checks))


def test_object_life_rows_say_what_frees_the_object(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    invs, goldens, checks = copy.deepcopy(real)
    life = next(r for r in invs["memcg_kfuncs"]["row"] if r["kind"] == "object-life")
    life["freed_by"] = ""
    assert any("freed_by is for object-life rows" in p for p in problems(invs, goldens, checks))


def test_the_gaps_are_few_and_each_says_what_a_check_needs(
        real: tuple[Inventories, Goldens, dict[str, set[str]]]) -> None:
    """Gaps are debt in plain sight: each says why no check reads it yet and what one
    would need; their count per feature can only be lowered here, never raised."""
    invs, _, _ = real
    ceiling = {"memcg_kfuncs": 15, "rstat": 1, "cgroup_iter": 0, "css_iter": 2,
               "cgrp_storage": 2, "perf_cgroup": 2}
    for feature, inv in invs.items():
        assert len(inv.get("gap", [])) <= ceiling[feature], feature
