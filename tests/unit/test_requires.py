"""A test's `requires`: one name, or one API under two names ("a|b"), met by either."""

from __future__ import annotations

from pathlib import Path

from harness.base.model import Feature, FeatureKind, FeatureReport, FeatureState
from harness.kernel.features import missing_for
from harness.testkinds.base import Manifest, TestRef
from harness.testkinds.own import load_manifest


def _ref(*requires: str) -> TestRef:
    m = Manifest(name="t", directory=Path("/nonexistent"), description="", bpf=(),
                 userspace=(), command=("./t",), timeout_s=1, fmt="ktap", requires=requires)
    return TestRef(kind="own", name="t", manifest=m)


def _report(name: str, state: FeatureState) -> FeatureReport:
    return FeatureReport(feature=Feature(name=name, kind=FeatureKind.KFUNC), state=state,
                         note="not in the tree" if state is FeatureState.ABSENT else "")


OLD_API = (_report("cgroup_rstat_flush", FeatureState.IN_BASE),
           _report("css_rstat_flush", FeatureState.ABSENT))
NEW_API = (_report("cgroup_rstat_flush", FeatureState.ABSENT),
           _report("css_rstat_flush", FeatureState.IN_BASE))
NEITHER = (_report("cgroup_rstat_flush", FeatureState.ABSENT),
           _report("css_rstat_flush", FeatureState.ABSENT))


def test_either_name_of_an_api_meets_the_requirement() -> None:
    ref = _ref("cgroup_rstat_flush|css_rstat_flush")
    assert missing_for(ref.requires, OLD_API) == []
    assert missing_for(ref.requires, NEW_API) == []


def test_neither_name_is_one_missing_requirement_naming_both() -> None:
    missing = missing_for(_ref("cgroup_rstat_flush|css_rstat_flush").requires, NEITHER)
    assert len(missing) == 1
    assert "cgroup_rstat_flush" in missing[0] and "css_rstat_flush" in missing[0]
    assert "not in the tree" in missing[0]


def test_a_plain_requirement_is_unchanged() -> None:
    assert missing_for(_ref("cgroup_rstat_flush").requires, NEW_API) == [
        "cgroup_rstat_flush (kfunc: not in the tree)"]
    assert missing_for(_ref("css_rstat_flush").requires, NEW_API) == []


def test_a_variants_requires_adds_to_the_tests(tmp_path: Path) -> None:
    (tmp_path / "test.toml").write_text(
        'name = "t"\nrequires = ["cgroup_rstat_flush"]\n[run]\ncommand = ["./t"]\n'
        '[variants.storage]\ncommand = ["./t", "--storage"]\n'
        'requires = ["BPF_MAP_TYPE_CGRP_STORAGE"]\n')
    assert load_manifest(tmp_path).requires == ("cgroup_rstat_flush",)
    variant = load_manifest(tmp_path, "storage")
    assert variant.requires == ("cgroup_rstat_flush", "BPF_MAP_TYPE_CGRP_STORAGE")
    assert variant.command == ("./t", "--storage")


def test_a_capability_is_met_by_any_name_kernels_gave_it() -> None:
    """rstat_flush_kfunc: what the test does, whichever name the kernel has for it."""
    ref = _ref("rstat_flush_kfunc")
    assert missing_for(ref.requires, OLD_API) == []
    assert missing_for(ref.requires, NEW_API) == []
    assert missing_for(ref.requires, NEITHER) == [
        "rstat_flush_kfunc: cgroup_rstat_flush (kfunc: not in the tree) nor css_rstat_flush "
        "(kfunc: not in the tree)"]


def test_our_tests_require_the_rstat_kfuncs_by_what_they_do() -> None:
    """No test names one kernel's rstat kfunc alone: it would be skipped on the other."""
    from harness.testkinds import own

    for name in own.own_tests():
        requires = own.resolve(name).requires
        assert not [r for r in requires if r in (
            "cgroup_rstat_flush", "css_rstat_flush", "cgroup_rstat_updated",
            "css_rstat_updated")], (name, requires)
