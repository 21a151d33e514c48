"""Feature probe: C sources in real git repositories, BTF from a real kernel's dump."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.base.model import Feature, FeatureKind, FeatureState, PatchState
from harness.kernel import features, series

from .test_series_sources import format_patch, git

# source_definitions caches its results: in a private cache, never ~/.cache/harness.
pytestmark = pytest.mark.usefixtures("cache")

GOLDEN = Path(__file__).parent.parent / "golden" / "btf"

RSTAT_C = """\
// SPDX-License-Identifier: GPL-2.0-only
void cgroup_rstat_flush(struct cgroup *cgrp);

__bpf_kfunc void cgroup_rstat_updated(struct cgroup *cgrp, int cpu)
{
}

__weak noinline void bpf_rstat_flush(struct cgroup *cgrp,
\t\t\t\t     struct cgroup *parent, int cpu)
{
}

static void flush_one(struct cgroup *pos, int cpu)
{
\tbpf_rstat_flush(pos, cgroup_parent(pos), cpu);
}

BTF_ID_FLAGS(func, cgroup_rstat_updated)
"""

ITER_C = ("DEFINE_BPF_ITER_FUNC(cgroup, struct bpf_iter_meta *meta,\n"
          "\t\t     struct cgroup *cgroup)\n")

MEMCG_KFUNCS = (Feature(name="bpf_memcg_stat_fetch", kind=FeatureKind.KFUNC,
                        declared_by=("s",)),)


def make_kernel(path: Path) -> str:
    path.mkdir()
    git(path, "init", "-q", "-b", "master")
    (path / "kernel" / "cgroup").mkdir(parents=True)
    (path / "kernel" / "bpf").mkdir(parents=True)
    (path / "kernel" / "cgroup" / "rstat.c").write_text(RSTAT_C)
    (path / "kernel" / "bpf" / "cgroup_iter.c").write_text(ITER_C)
    # A header prototype and a later kfunc with a longer name must not count.
    (path / "include").mkdir()
    (path / "include" / "bpf_memcg.h").write_text("s64 bpf_memcg_stat_fetch(void *c, int i);\n")
    (path / "mm").mkdir()
    (path / "mm" / "memcontrol.c").write_text("BTF_ID_FLAGS(func, bpf_memcg_stat_fetch_all)\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return git(path, "rev-parse", "HEAD").strip()


def test_definitions_found_where_defined_not_where_called(tmp_path: Path) -> None:
    repo = tmp_path / "k"
    base = make_kernel(repo)
    found = features.source_definitions(repo, base,
                                        features.KERNEL_FEATURES + MEMCG_KFUNCS)
    assert found == {
        "bpf_rstat_flush": "kernel/cgroup/rstat.c:8",
        "cgroup_rstat_updated": "kernel/cgroup/rstat.c:18",
        "cgroup": "kernel/bpf/cgroup_iter.c:1",
    }
    # cgroup_rstat_flush: only a prototype (";") in this tree; a real kernel registers it.
    assert "cgroup_rstat_flush" not in found


def test_series_adds_a_kfunc_and_btf_confirms(tmp_path: Path) -> None:
    repo = tmp_path / "k"
    base = make_kernel(repo)
    text = (repo / "mm" / "memcontrol.c").read_text()
    patch = format_patch(repo, tmp_path / "p", {
        "mm/memcontrol.c": text + "BTF_ID_FLAGS(func, bpf_memcg_stat_fetch, KF_RCU)\n"},
        "mm: add a kfunc")
    series.apply(repo, base, [series.Patch(path=patch, series="s")], log_dir=tmp_path)
    known = features.KERNEL_FEATURES + MEMCG_KFUNCS
    reports = features.from_sources(known, features.source_definitions(repo, base, known),
                                    features.source_definitions(repo, "HEAD", known))
    by_name = {r.feature.name: r for r in reports}
    assert by_name["bpf_rstat_flush"].state is FeatureState.IN_BASE
    assert by_name["bpf_memcg_stat_fetch"].state is FeatureState.ADDED_BY_SERIES
    assert by_name["bpf_memcg_stat_fetch"].where == "mm/memcontrol.c:2"
    assert by_name["cgroup_rstat_flush"].state is FeatureState.ABSENT

    funcs = features.parse_btf((GOLDEN / "6.12-series-excerpt.raw").read_text())
    confirmed = {r.feature.name: r for r in features.confirm_with_btf(reports, funcs)}
    assert confirmed["bpf_memcg_stat_fetch"].state is FeatureState.ADDED_BY_SERIES
    assert confirmed["bpf_memcg_stat_fetch"].btf is True
    assert confirmed["cgroup"].btf is True  # bpf_iter_cgroup
    # Only a prototype in these sources, no registration: BTF has a function of that
    # name (any non-inlined function does), which does not make it a kfunc.
    assert confirmed["cgroup_rstat_flush"].state is FeatureState.ABSENT
    assert confirmed["cgroup_rstat_flush"].btf is True
    assert "register no kfunc" in confirmed["cgroup_rstat_flush"].note
    # A hook or iterator is its function: BTF alone makes it present.
    hook_only = features.from_sources(features.KERNEL_FEATURES, {}, {})
    by = {r.feature.name: r for r in features.confirm_with_btf(hook_only, funcs)}
    assert by["bpf_rstat_flush"].state is FeatureState.PRESENT


def test_btf_overrules_a_definition_that_was_compiled_out() -> None:
    report = features.from_sources(MEMCG_KFUNCS, {"bpf_memcg_stat_fetch": "mm/x.c:3"}, {})
    out = features.confirm_with_btf(report, features.KernelBtf(frozenset({"cgroup_rstat_flush"})))
    assert out[0].state is FeatureState.ABSENT
    assert out[0].btf is False
    assert "mm/x.c:3" in out[0].note and "config" in out[0].note


def test_real_btf_dump_functions() -> None:
    funcs = features.parse_btf((GOLDEN / "6.12-series-excerpt.raw").read_text()).funcs
    for name in ("bpf_rstat_flush", "cgroup_rstat_updated", "cgroup_rstat_flush",
                 "bpf_iter_cgroup", "bpf_memcg_flush_stats", "bpf_memcg_node_stat_fetch",
                 "bpf_memcg_stat_fetch", "bpf_memcg_vm_event_fetch"):
        assert name in funcs
    assert "cgroup" not in funcs  # the iterator is known by its bpf_iter_ FUNC


def test_series_declared_in_base_is_not_applied(tmp_path: Path) -> None:
    """A base with its own (different) version of the series: reported, not a conflict."""
    repo = tmp_path / "k"
    make_kernel(repo)
    text = (repo / "mm" / "memcontrol.c").read_text()
    ours = format_patch(repo, tmp_path / "p", {
        "mm/memcontrol.c": text + "BTF_ID_FLAGS(func, bpf_memcg_stat_fetch, KF_RCU)\n"},
        "mm: our kfunc")
    # Upstream took a different version of it: our patch no longer applies.
    (repo / "mm" / "memcontrol.c").write_text(
        text + "/* upstream */\nBTF_ID_FLAGS(func, bpf_memcg_stat_fetch, KF_TRUSTED_ARGS)\n")
    git(repo, "commit", "-q", "-am", "upstream kfunc")
    base = git(repo, "rev-parse", "HEAD").strip()
    sdir = tmp_path / "patches" / "s"
    sdir.mkdir(parents=True)
    (sdir / "provides.toml").write_text('kfuncs = ["bpf_memcg_stat_fetch"]\n')
    patches = [series.Patch(path=ours, series="s")]
    with pytest.raises(series.PatchConflictError):
        series.apply(repo, base, patches, log_dir=tmp_path)

    known = features.known_features([sdir])
    in_base = features.series_in_base({"s": sdir},
                                      features.source_definitions(repo, base, known))
    assert in_base == {"s": "the base already defines bpf_memcg_stat_fetch "
                            "(mm/memcontrol.c:3)"}
    res = series.apply(repo, base, patches, log_dir=tmp_path, in_base=in_base)
    assert res[0].state is PatchState.ALREADY_IN_BASE
    assert "mm/memcontrol.c:3" in res[0].detail
    assert git(repo, "rev-parse", "HEAD").strip() == base
    assert git(repo, "status", "--porcelain") == ""


def test_series_in_base_needs_every_declared_feature(tmp_path: Path) -> None:
    sdir = tmp_path / "s"
    sdir.mkdir()
    (sdir / "provides.toml").write_text('kfuncs = ["a_fetch", "b_fetch"]\n')
    assert features.series_in_base({"s": sdir}, {"a_fetch": "x.c:1"}) == {}
    empty = tmp_path / "e"
    empty.mkdir()
    assert features.series_in_base({"e": empty}, {"a_fetch": "x.c:1"}) == {}


def test_repo_series_declarations_are_valid() -> None:
    known = {f.name: f for f in features.known_features()}
    kf = known["bpf_mem_cgroup_page_state"]
    assert kf.kind is FeatureKind.KFUNC
    assert "memcg-kfuncs" in kf.declared_by
    assert known["bpf_rstat_flush"].declared_by == ()


def test_bad_provides_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "provides.toml").write_text('kfunc = ["x"]\n')
    with pytest.raises(features.FeatureError, match=r"unknown keys.*kfuncs"):
        features.declared_by_series(tmp_path)


def test_definitions_after_a_series_grep_only_what_it_changed(tmp_path: Path) -> None:
    repo = tmp_path / "k"
    base = make_kernel(repo)
    known = (*features.KERNEL_FEATURES, *MEMCG_KFUNCS)
    base_defs = features.source_definitions(repo, base, known)
    # the series adds a kfunc to mm/memcontrol.c and removes the hook from rstat.c
    rstat = (repo / "kernel/cgroup/rstat.c").read_text()
    git(repo, "checkout", "-q", "-b", "s")
    (repo / "mm/memcontrol.c").write_text("// memcg\n\nBTF_ID_FLAGS(func, bpf_memcg_stat_fetch)\n")
    (repo / "kernel/cgroup/rstat.c").write_text(rstat.replace("__weak noinline void "
                                                              "bpf_rstat_flush", "void gone"))
    git(repo, "commit", "-q", "-am", "series")
    after = features.definitions_after(repo, base, base_defs, "HEAD", known)
    assert after == features.source_definitions(repo, "HEAD", known)  # what a full grep says
    assert after["bpf_memcg_stat_fetch"] == "mm/memcontrol.c:3"
    assert "bpf_rstat_flush" not in after
    assert after["cgroup"] == base_defs["cgroup"]  # from a file it did not touch


def test_a_feature_its_series_declares_but_the_kernel_lacks_is_named() -> None:
    """BTF overruled the sources (compiled out, registration lost): the tests that need it
    would be skipped and the cell could pass, so the pipeline stops with BUILD_ERROR."""
    kfunc = MEMCG_KFUNCS[0]
    added = features.from_sources((kfunc,), {}, {kfunc.name: "mm/memcontrol.c:3"})
    lacking = features.confirm_with_btf(added, features.KernelBtf(frozenset()))
    assert lacking[0].state is FeatureState.ABSENT and "BTF has no" in lacking[0].note
    assert features.declared_but_absent(lacking, {"s"}) == list(lacking)
    assert features.declared_but_absent(lacking, {"other"}) == []  # not applied here
    present = features.confirm_with_btf(added, features.KernelBtf(frozenset({kfunc.name})))
    assert features.declared_but_absent(present, {"s"}) == []


# ---- helpers and map types (cgroup local storage) ----

CGRP_STORAGE = tuple(f for f in features.KERNEL_FEATURES
                     if f.kind in (FeatureKind.HELPER, FeatureKind.MAP_TYPE))
BPF_TYPES_H = "BPF_MAP_TYPE(BPF_MAP_TYPE_CGROUP_ARRAY, cgroup_array_map_ops)\n"
STORAGE_C = ("static int cgrp_storage_ptr(void *owner);\n"
             "BPF_CALL_5(bpf_cgrp_storage_get, struct bpf_map *, map, struct cgroup *, cgroup,\n"
             "\t   void *, value, u64, flags, gfp_t, gfp_flags)\n{\n}\n\n"
             "BPF_CALL_2(bpf_cgrp_storage_delete, struct bpf_map *, map, struct cgroup *, cgroup)\n"
             "{\n\treturn bpf_cgrp_storage_get(map, cgroup, NULL, 0, 0);\n}\n")


def test_cgroup_local_storage_is_known_by_mainline_numbers() -> None:
    assert {(f.name, f.kind, f.uapi_value, f.uapi_name) for f in CGRP_STORAGE} == {
        ("BPF_MAP_TYPE_CGRP_STORAGE", FeatureKind.MAP_TYPE, 32, "BPF_MAP_TYPE_CGRP_STORAGE"),
        ("bpf_cgrp_storage_get", FeatureKind.HELPER, 210, "BPF_FUNC_cgrp_storage_get"),
        ("bpf_cgrp_storage_delete", FeatureKind.HELPER, 211, "BPF_FUNC_cgrp_storage_delete"),
    }


def test_a_series_adding_a_map_type_and_helpers_is_found_in_the_header_and_c(
        tmp_path: Path) -> None:
    repo = tmp_path / "k"
    make_kernel(repo)
    (repo / "include" / "linux").mkdir()
    (repo / "include" / "linux" / "bpf_types.h").write_text(BPF_TYPES_H)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "bpf_types.h")
    base = git(repo, "rev-parse", "HEAD").strip()
    base_defs = features.source_definitions(repo, base, CGRP_STORAGE)
    assert base_defs == {}
    (repo / "include" / "linux" / "bpf_types.h").write_text(
        BPF_TYPES_H + "BPF_MAP_TYPE(BPF_MAP_TYPE_CGRP_STORAGE, cgrp_storage_map_ops)\n")
    (repo / "kernel" / "bpf" / "bpf_cgrp_storage.c").write_text(STORAGE_C)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "bpf: cgroup local storage")
    after = features.definitions_after(repo, base, base_defs, "HEAD", CGRP_STORAGE)
    assert after == {"BPF_MAP_TYPE_CGRP_STORAGE": "include/linux/bpf_types.h:2",
                     "bpf_cgrp_storage_get": "kernel/bpf/bpf_cgrp_storage.c:2",
                     "bpf_cgrp_storage_delete": "kernel/bpf/bpf_cgrp_storage.c:7"}
    assert after == features.source_definitions(repo, "HEAD", CGRP_STORAGE)
    reports = features.from_sources(CGRP_STORAGE, base_defs, after)
    assert {r.state for r in reports} == {FeatureState.ADDED_BY_SERIES}


def test_real_btf_uapi_enumerators_6_12_and_6_1() -> None:
    """6.12 has cgroup local storage under mainline's numbers; 6.1 has neither."""
    new = features.parse_btf((GOLDEN / "6.12-cgrp-storage-excerpt.raw").read_text())
    assert new.enumerators["BPF_MAP_TYPE_CGRP_STORAGE"] == 32
    assert new.enumerators["BPF_FUNC_cgrp_storage_get"] == 210
    assert new.enumerators["BPF_FUNC_cgrp_storage_delete"] == 211
    assert "BPF_PROG_TYPE_KPROBE" not in new.enumerators  # only the two UAPI enums
    assert {"bpf_cgrp_storage_get", "bpf_cgrp_storage_delete"} <= new.funcs
    in_base = features.from_sources(CGRP_STORAGE, {f.name: "x:1" for f in CGRP_STORAGE}, {})
    confirmed = features.confirm_with_btf(in_base, new)
    assert [(r.state, r.btf, r.note) for r in confirmed] == [
        (FeatureState.IN_BASE, True, "")] * 3

    old = features.parse_btf((GOLDEN / "6.1-uapi-excerpt.raw").read_text())
    assert old.enumerators["BPF_MAP_TYPE_USER_RINGBUF"] == 31
    assert "BPF_MAP_TYPE_CGRP_STORAGE" not in old.enumerators
    absent = features.confirm_with_btf(features.from_sources(CGRP_STORAGE, {}, {}), old)
    assert [(r.state, r.btf) for r in absent] == [(FeatureState.ABSENT, False)] * 3
    image = features.from_btf_only(CGRP_STORAGE, new)
    assert [r.state for r in image] == [FeatureState.PRESENT] * 3


def test_a_backport_under_another_uapi_number_is_not_the_feature() -> None:
    """The map type renumbered (say, after a map type mainline does not have): BTF has
    it, but a program built against mainline's bpf.h would ask for another one."""
    text = (GOLDEN / "6.12-cgrp-storage-excerpt.raw").read_text()
    renumbered = features.parse_btf(text.replace("'BPF_MAP_TYPE_CGRP_STORAGE' val=32",
                                                 "'BPF_MAP_TYPE_CGRP_STORAGE' val=33"))
    added = features.from_sources(CGRP_STORAGE, {}, {f.name: "x:1" for f in CGRP_STORAGE})
    by_name = {r.feature.name: r for r in features.confirm_with_btf(added, renumbered)}
    wrong = by_name["BPF_MAP_TYPE_CGRP_STORAGE"]
    assert wrong.state is FeatureState.ABSENT and wrong.btf is True
    assert "is 33 in this kernel but 32 in mainline" in wrong.note
    assert by_name["bpf_cgrp_storage_get"].state is FeatureState.ADDED_BY_SERIES
    image = {r.feature.name: r for r in features.from_btf_only(CGRP_STORAGE, renumbered)}
    assert image["BPF_MAP_TYPE_CGRP_STORAGE"].state is FeatureState.ABSENT


def test_provides_toml_declares_helpers_and_map_types(tmp_path: Path) -> None:
    (tmp_path / "provides.toml").write_text(
        'helpers = ["bpf_cgrp_storage_get"]\nmap_types = ["BPF_MAP_TYPE_CGRP_STORAGE"]\n')
    assert [(f.name, f.kind) for f in features.declared_by_series(tmp_path)] == [
        ("bpf_cgrp_storage_get", FeatureKind.HELPER),
        ("BPF_MAP_TYPE_CGRP_STORAGE", FeatureKind.MAP_TYPE)]
    merged = {f.name: f for f in features.known_features([tmp_path])}
    # merged with the kernel's own entry: mainline's number stays
    assert merged["bpf_cgrp_storage_get"].uapi_value == 210
    assert merged["bpf_cgrp_storage_get"].declared_by == (tmp_path.name,)


def elf_with_sections(sections: dict[str, bytes], *, wide: bool = True,
                      little: bool = True) -> bytes:
    """An ELF file holding these sections (and its section name table): the layout
    btf_id reads, in each class and byte order."""
    import struct

    end = "<" if little else ">"
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [".shstrtab", *sections])
    header_size, entsize = (64, 64) if wide else (52, 40)
    blobs = [names, *sections.values()]
    offsets, at = [], header_size
    for blob in blobs:
        offsets.append(at)
        at += len(blob)
    shoff = at
    header = bytearray(header_size)
    header[:6] = b"\x7fELF" + bytes([2 if wide else 1, 1 if little else 2])
    struct.pack_into(end + ("Q" if wide else "I"), header, 40 if wide else 32, shoff)
    struct.pack_into(end + "HHH", header, 58 if wide else 46, entsize, len(blobs) + 1, 1)
    table = bytearray(entsize)  # the null section
    name_at = 1
    for name, offset, blob in zip([".shstrtab", *sections], offsets, blobs, strict=True):
        entry = bytearray(entsize)
        layout = end + ("I20xQQ" if wide else "I12xII")
        struct.pack_into(layout, entry, 0, name_at, offset, len(blob))
        table += entry
        name_at += len(name) + 1
    return bytes(header) + b"".join(blobs) + bytes(table)


@pytest.mark.parametrize(("wide", "little"), [(True, True), (False, False), (True, False)])
def test_the_btf_id_is_the_digest_of_the_btf_section(tmp_path: Path, wide: bool,
                                                     little: bool) -> None:
    import hashlib
    import struct

    path = tmp_path / "vmlinux"
    path.write_bytes(elf_with_sections({".text": b"code", ".BTF": b"\x9f\xeb types",
                                        ".BTF_ids": b"ids"}, wide=wide, little=little))
    assert features.btf_id(path) == hashlib.sha256(b"\x9f\xeb types").hexdigest()[:20]
    path.write_bytes(elf_with_sections({".text": b"code"}, wide=wide, little=little))
    assert features.btf_id(path) is None
    path.write_bytes(b"#!/bin/sh\n")
    assert features.btf_id(path) is None
    # a damaged table (.BTF's size far past the file's end): no digest, no crash
    damaged = bytearray(elf_with_sections({".BTF": b"types"}, wide=wide, little=little))
    entsize = 64 if wide else 40
    shoff = len(damaged) - 3 * entsize
    struct.pack_into(("<" if little else ">") + ("Q" if wide else "I"), damaged,
                     shoff + 2 * entsize + (32 if wide else 20), 2**31)
    path.write_bytes(bytes(damaged))
    assert features.btf_id(path) is None


def test_a_kernels_btf_is_read_once_per_btf(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel rebuilt after a change inside a function has its predecessor's BTF: the
    report is read from what that one's dump gave; another BTF is dumped anew."""
    from harness.base import proc

    dumps: list[str] = []
    raw = (GOLDEN / "6.12-series-excerpt.raw").read_text()

    def fake_check(argv: list[str], **kw: object) -> proc.Completed:
        dumps.append(argv[-3])
        return proc.Completed(argv=tuple(argv), returncode=0, output=raw, duration_s=0.0)

    monkeypatch.setattr(proc, "check", fake_check)
    monkeypatch.setattr(proc, "require", lambda tool: tool)
    first, second, other = (tmp_path / n for n in ("a", "b", "c"))
    first.write_bytes(elf_with_sections({".text": b"one", ".BTF": b"same"}))
    second.write_bytes(elf_with_sections({".text": b"two", ".BTF": b"same"}))
    other.write_bytes(elf_with_sections({".BTF": b"another"}))
    want = features.parse_btf(raw)
    assert features.read_btf(first) == want == features.read_btf(second)
    assert dumps == [str(first)]
    assert features.read_btf(other) == want and dumps == [str(first), str(other)]
    monkeypatch.setattr(features, "BTF_MEMOS_KEPT", 1)  # each memory about 1.5 MB
    third = tmp_path / "d"
    third.write_bytes(elf_with_sections({".BTF": b"a third"}))
    features.read_btf(third)
    from harness.base import paths
    assert len(list(paths.sub("features").glob("btf-*.json"))) == 1
