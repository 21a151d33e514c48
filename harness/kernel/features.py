"""Which BPF/cgroup features a kernel provides, from its source and then from its BTF.

Never inferred from a version number: a feature is "in base" when the base commit's C
sources define it, "added by series" when only the patched tree does, "absent" otherwise;
after the build the kernel's BTF must agree (a definition behind a config option that is
off compiles to nothing, and BTF says so).

Features are the kernel's own (the rstat hook and kfuncs, the cgroup iterator, cgroup
local storage, and the config options perf's cgroup counting needs) plus what each series
under patches/ declares in its `provides.toml`:

    # patches/<series>/provides.toml
    kfuncs = ["bpf_get_mem_cgroup", "bpf_mem_cgroup_page_state"]
    hooks = []
    iterators = []
    helpers = ["bpf_cgrp_storage_get"]
    map_types = ["BPF_MAP_TYPE_CGRP_STORAGE"]
    configs = ["CGROUP_PERF"]

A config option is "in base" when a Kconfig of the base defines it (`config NAME`), and
the built kernel's .config, not BTF, decides whether it is there (`confirm_with_config`).
A helper or map type is also checked against mainline's UAPI number where the kernel's
list below gives it: the BTF's enumerator must carry that value.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import re
import struct
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.base import atomic, paths, proc
from harness.base.errors import HarnessError
from harness.base.gitcmd import git, git_run
from harness.base.model import (
    Feature,
    FeatureKind,
    FeatureReport,
    FeatureState,
    KernelImage,
    Status,
)
from harness.kernel import kconfig

log = logging.getLogger(__name__)


class FeatureError(HarnessError):
    """A provides.toml that cannot be read; a built kernel without what its series declare
    (raised with BUILD_ERROR)."""

    status = Status.SETUP_ERROR


KERNEL_FEATURES = (
    Feature(name="bpf_rstat_flush", kind=FeatureKind.HOOK),
    Feature(name="cgroup_rstat_updated", kind=FeatureKind.KFUNC),
    Feature(name="cgroup_rstat_flush", kind=FeatureKind.KFUNC),
    # mainline's names since the 2025 rstat rework (6.16), taking a css
    Feature(name="css_rstat_updated", kind=FeatureKind.KFUNC),
    Feature(name="css_rstat_flush", kind=FeatureKind.KFUNC),
    Feature(name="cgroup", kind=FeatureKind.ITERATOR),
    # cgroup local storage (mainline 6.2), with mainline's UAPI numbers
    Feature(name="BPF_MAP_TYPE_CGRP_STORAGE", kind=FeatureKind.MAP_TYPE, uapi_value=32),
    Feature(name="bpf_cgrp_storage_get", kind=FeatureKind.HELPER, uapi_value=210),
    Feature(name="bpf_cgrp_storage_delete", kind=FeatureKind.HELPER, uapi_value=211),
    # perf's cgroup counting (`perf stat --for-each-cgroup`, with or without BPF counters):
    # cgroup perf events and the cgroup-switch event, and name_to_handle_at() for perf to
    # read a cgroup's id
    Feature(name="CGROUP_PERF", kind=FeatureKind.CONFIG),
    Feature(name="FHANDLE", kind=FeatureKind.CONFIG),
    # fentry/fexit programs on kernel functions: BPF trampolines attach through ftrace's
    # direct calls (x86 has them in every kernel we build; 6.1's arm64 selects no
    # HAVE_DYNAMIC_FTRACE_WITH_DIRECT_CALLS; 6.12's arm64 has them with gcc only when not
    # optimizing for size). Without them the attach fails with -ENOTSUPP.
    Feature(name="DYNAMIC_FTRACE_WITH_DIRECT_CALLS", kind=FeatureKind.CONFIG),
)

# What a test may require by what it does, met by any of the names kernels have given it
# (`requires = ["rstat_flush_kfunc"]`); a requirement may also name one API's names itself
# ("a|b").
CAPABILITIES = {
    "rstat_updated_kfunc": ("cgroup_rstat_updated", "css_rstat_updated"),
    "rstat_flush_kfunc": ("cgroup_rstat_flush", "css_rstat_flush"),
}


def alternatives(wanted: str) -> tuple[str, ...]:
    """The feature names that each meet a requirement: a capability's, or "a|b"'s."""
    return CAPABILITIES.get(wanted) or tuple(wanted.split("|"))


_KEYS = {"hooks": FeatureKind.HOOK, "kfuncs": FeatureKind.KFUNC,
         "iterators": FeatureKind.ITERATOR, "helpers": FeatureKind.HELPER,
         "map_types": FeatureKind.MAP_TYPE, "configs": FeatureKind.CONFIG}
# Where definitions are looked for: the C files, the header that registers map types, and
# the Kconfig files (config options).
_BPF_TYPES_H = "include/linux/bpf_types.h"
_SOURCES = ("*.c", _BPF_TYPES_H, "*Kconfig")


def declared_by_series(series_dir: Path) -> tuple[Feature, ...]:
    """The features a series says it adds (its provides.toml); () without one."""
    path = series_dir / "provides.toml"
    if not path.exists():
        return ()
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise FeatureError(f"{path}: {exc}") from exc
    unknown = set(data) - set(_KEYS)
    if unknown:
        raise FeatureError(f"{path}: unknown keys {sorted(unknown)}; "
                           f"known: {', '.join(sorted(_KEYS))}")
    out = []
    for key, kind in _KEYS.items():
        names = data.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise FeatureError(f"{path}: {key} must be a list of names")
        out += [Feature(name=n, kind=kind, declared_by=(series_dir.name,)) for n in names]
    return tuple(out)


def known_features(series_dirs: Iterable[Path] | None = None) -> tuple[Feature, ...]:
    """The kernel's features, then every series' declared ones (merged by name)."""
    if series_dirs is None:
        root = paths.repo_root() / "patches"
        series_dirs = sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    merged: dict[str, Feature] = {f.name: f for f in KERNEL_FEATURES}
    for d in series_dirs:
        for f in declared_by_series(d):
            old = merged.get(f.name)
            merged[f.name] = f if old is None else replace(
                old, declared_by=old.declared_by + f.declared_by)
    return tuple(merged.values())


def _pattern(f: Feature) -> str:
    name = re.escape(f.name)
    if f.kind is FeatureKind.KFUNC:
        return rf"BTF_ID_FLAGS\(func, {name}[,)]"
    if f.kind is FeatureKind.ITERATOR:
        return rf"^DEFINE_BPF_ITER_FUNC\({name},"
    if f.kind is FeatureKind.HELPER:
        return rf"^BPF_CALL_\d\({name},"
    if f.kind is FeatureKind.MAP_TYPE:
        return rf"^BPF_MAP_TYPE\({name},"
    if f.kind is FeatureKind.CONFIG:
        return rf"^(?:menu)?config {name}\s*$"
    # A definition starts in column 0 (kernel style); a call or prototype does not
    # match: calls are indented, prototypes end with ';' (filtered below).
    return rf"^[a-zA-Z_].*[ *]{name}\("


def source_definitions(repo: Path, commit: str,
                       features: tuple[Feature, ...]) -> dict[str, str]:
    """feature name -> "file:line" of its definition in commit's C sources (absent: missing).

    Cached per source tree id: a base is grepped once, not on every run.
    """
    if not features:
        return {}
    tree = git(repo, "rev-parse", f"{commit}^{{tree}}", what="git rev-parse", timeout=60).strip()
    patterns = [_pattern(f) for f in features]
    key = hashlib.sha256("\n".join([tree, *patterns]).encode()).hexdigest()[:20]
    cached = paths.sub("features") / f"{key}.json"
    if cached.exists():
        data: dict[str, str] = json.loads(cached.read_text())
        return data
    found = _grep(repo, tree, features, _SOURCES)
    atomic.write_text(cached, json.dumps(found))
    return found


def definitions_after(repo: Path, base_commit: str, base: Mapping[str, str], head: str,
                      features: tuple[Feature, ...]) -> dict[str, str]:
    """`source_definitions` of head, from those of its base and the C files it changed:
    only those are grepped (a series touches a few files; the whole tree takes seconds)."""
    # --no-renames: a renamed file's old path must count as changed too
    changed = git(repo, "diff", "--name-only", "--no-renames", base_commit, head, "--",
                  *_SOURCES, what="git diff", timeout=120).split()
    kept = {name: where for name, where in base.items()
            if where.rsplit(":", 1)[0] not in changed}
    return {**kept, **(_grep(repo, head, features, tuple(changed)) if changed else {})}


def _grep(repo: Path, treeish: str, features: tuple[Feature, ...],
          pathspec: tuple[str, ...]) -> dict[str, str]:
    # A fixed-string pass is fast; the regexes then run on its few lines.
    argv = ["grep", "-n", "-w", "-F", "--no-color"]
    for f in features:
        argv += ["-e", "DEFINE_BPF_ITER_FUNC" if f.kind is FeatureKind.ITERATOR else f.name]
    argv += [treeish, "--", *pathspec]
    res = git_run(repo, *argv, timeout=300)
    if res.returncode not in (0, 1):  # 1: nothing matched
        raise FeatureError(f"git grep in {repo} at {treeish[:12]} failed: {res.tail(3)}")
    found: dict[str, str] = {}
    compiled = [(f, re.compile(_pattern(f))) for f in features]
    for line in res.output.splitlines():
        # TREE:path:line:text
        parts = line.split(":", 3)
        if len(parts) != 4:
            continue
        _, path, lineno, text = parts
        if text.rstrip().endswith(";"):
            continue
        for f, rx in compiled:
            if f.name not in found and rx.search(text):
                found[f.name] = f"{path}:{lineno}"
    return found


def from_sources(features: tuple[Feature, ...], base: Mapping[str, str],
                 patched: Mapping[str, str]) -> tuple[FeatureReport, ...]:
    reports = []
    for f in features:
        if f.name in base:
            reports.append(FeatureReport(feature=f, state=FeatureState.IN_BASE,
                                         where=base[f.name]))
        elif f.name in patched:
            reports.append(FeatureReport(feature=f, state=FeatureState.ADDED_BY_SERIES,
                                         where=patched[f.name]))
        else:
            reports.append(FeatureReport(feature=f, state=FeatureState.ABSENT))
    return tuple(reports)


@dataclass(frozen=True)
class KernelBtf:
    """What the feature report reads from a kernel's BTF."""

    funcs: frozenset[str]
    # enumerators of the UAPI enums that number helpers and map types -> their values
    enumerators: Mapping[str, int] = field(default_factory=dict)

    def has(self, f: Feature) -> bool:
        if f.kind is FeatureKind.MAP_TYPE:
            return f.btf_name in self.enumerators
        return f.btf_name in self.funcs


def read_btf(vmlinux: Path) -> KernelBtf:
    """The FUNCs and UAPI enumerators of a kernel's BTF (bpftool btf dump ... format raw),
    remembered per BTF (btf_id): a kernel rebuilt after a change inside a function has
    its predecessor's BTF, and dumping and parsing it took 0.2 s of every run."""
    ident = btf_id(vmlinux)
    # the parser's own patterns in the name: a harness that reads BTF otherwise reads anew
    memo = paths.sub("features") / f"btf-{ident}-{_PARSER_ID}.json" if ident else None
    if memo is not None and memo.is_file():
        try:
            data = json.loads(memo.read_text())
            paths.touch(memo)
            return KernelBtf(funcs=frozenset(str(f) for f in data["funcs"]),
                             enumerators={str(k): int(v) for k, v in
                                          data["enumerators"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # read again below
    res = proc.check([proc.require("bpftool"), "btf", "dump", "file", str(vmlinux),
                      "format", "raw"], what="bpftool btf dump", timeout=300)
    btf = parse_btf(res.output)
    # a memory only: a cache that cannot be written costs the next run a dump
    with contextlib.suppress(OSError):
        if memo is not None:
            atomic.write_text(memo, json.dumps({"funcs": sorted(btf.funcs),
                                                "enumerators": dict(btf.enumerators)}))
            # about 1.5 MB each (a kernel's every FUNC name): the most recently used kept
            for old in sorted(memo.parent.glob("btf-*.json"),
                              key=lambda p: p.stat().st_mtime)[:-BTF_MEMOS_KEPT]:
                old.unlink(missing_ok=True)
    return btf


BTF_MEMOS_KEPT = 16


def btf_id(vmlinux: Path) -> str | None:
    """A digest of the .BTF section of an ELF file (vmlinux): what a vmlinux.h and the
    feature report are made from. None when the file is no ELF or has no .BTF. Read once
    per file in a command (the feature report and the selftests' build both ask)."""
    try:
        st = vmlinux.stat()
    except OSError:
        return None
    return _btf_id(str(vmlinux), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _btf_id(vmlinux: str, _inode: int, limit: int, _mtime_ns: int) -> str | None:
    """btf_id of the file at this path with this inode, size and mtime."""
    try:
        with open(vmlinux, "rb") as f:
            ident = f.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) \
                    or ident[5] not in (1, 2):
                return None
            wide, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
            # e_shoff, e_shentsize, e_shnum, e_shstrndx (ELF64 or ELF32 header layout)
            shoff, = struct.unpack_from(end + ("Q" if wide else "I"), ident, 40 if wide else 32)
            entsize, count, strndx = struct.unpack_from(end + "HHH", ident, 58 if wide else 46)
            f.seek(shoff)
            table = f.read(entsize * count)
            # sh_name, sh_offset, sh_size of section i
            layout = end + ("I20xQQ" if wide else "I12xII")

            def section(i: int) -> tuple[int, int, int]:
                name, offset, size = struct.unpack_from(layout, table, i * entsize)
                if offset + size > limit:  # a damaged table: no section past the file
                    raise ValueError(f"section {i} ends past the file")
                return int(name), int(offset), int(size)

            _, str_off, str_size = section(strndx)
            f.seek(str_off)
            names = f.read(str_size)
            for i in range(count):
                name, offset, size = section(i)
                if names[name:names.find(b"\0", name)] == b".BTF":
                    f.seek(offset)
                    return hashlib.sha256(f.read(size)).hexdigest()[:20]
    except (OSError, struct.error, IndexError, ValueError, OverflowError):
        return None
    return None


_FUNC_RE = re.compile(r"^\[\d+\] FUNC '([^']+)'", re.MULTILINE)
_ENUM_RE = re.compile(r"^\[\d+\] ENUM(?:64)? '([^']*)'")
_ENUMERATOR_RE = re.compile(r"^\s+'([^']+)' val=(-?\d+)")
_UAPI_ENUMS = frozenset({"bpf_map_type", "bpf_func_id"})
# what parse_btf reads a dump with: read_btf's memories are named with it
_PARSER_ID = hashlib.sha256("\n".join([_FUNC_RE.pattern, _ENUM_RE.pattern,
                                       _ENUMERATOR_RE.pattern, *sorted(_UAPI_ENUMS)])
                            .encode()).hexdigest()[:8]


def parse_btf(raw_dump: str) -> KernelBtf:
    enumerators: dict[str, int] = {}
    in_uapi_enum = False
    for line in raw_dump.splitlines():
        if line.startswith("["):
            m = _ENUM_RE.match(line)
            in_uapi_enum = m is not None and m.group(1) in _UAPI_ENUMS
        elif in_uapi_enum and (e := _ENUMERATOR_RE.match(line)):
            enumerators[e.group(1)] = int(e.group(2))
    return KernelBtf(funcs=frozenset(_FUNC_RE.findall(raw_dump)), enumerators=enumerators)


def _wrong_uapi_number(f: Feature, btf: KernelBtf) -> str:
    """Why a helper's or map type's UAPI number is not mainline's; "" when it is (or when
    there is no number to compare)."""
    if f.uapi_value is None or f.uapi_name is None or f.uapi_name not in btf.enumerators:
        return ""
    value = btf.enumerators[f.uapi_name]
    if value == f.uapi_value:
        return ""
    return (f"{f.uapi_name} is {value} in this kernel but {f.uapi_value} in mainline: a "
            "program built against mainline's bpf.h would ask for something else")


def confirm_with_btf(reports: tuple[FeatureReport, ...],
                     btf: KernelBtf) -> tuple[FeatureReport, ...]:
    """Check each source verdict against the built kernel's BTF; BTF wins."""
    out = []
    for r in reports:
        if r.feature.kind is FeatureKind.CONFIG:
            out.append(r)  # not in BTF: the .config says (confirm_with_config)
            continue
        in_btf = btf.has(r.feature)
        wrong_number = _wrong_uapi_number(r.feature, btf)
        if r.state is FeatureState.ABSENT and in_btf and r.feature.kind is FeatureKind.KFUNC:
            # Any non-inlined function has a BTF FUNC; being a kfunc is its registration,
            # which this BTF (pahole 1.24: no bpf_kfunc decl tags) cannot show.
            r = replace(r, note=f"BTF has a function {r.feature.btf_name}, but the sources "
                                "register no kfunc of that name")
        elif wrong_number and in_btf:
            r = replace(r, state=FeatureState.ABSENT, note=wrong_number)
        elif r.state is FeatureState.ABSENT and in_btf:
            r = replace(r, state=FeatureState.PRESENT,
                        note=f"not found in the C sources, but BTF has {r.feature.btf_name}")
        elif r.state is not FeatureState.ABSENT and not in_btf:
            r = replace(r, state=FeatureState.ABSENT,
                        note=f"defined at {r.where} but the kernel's BTF has no "
                             f"{r.feature.btf_name}: compiled out by the config?")
        out.append(replace(r, btf=in_btf))
    return tuple(out)


def from_btf_only(features: tuple[Feature, ...],
                  btf: KernelBtf | None) -> tuple[FeatureReport, ...]:
    """A prebuilt image: only its BTF can tell, and only whether, not where from."""
    if btf is None:
        return tuple(FeatureReport(feature=f, state=FeatureState.ABSENT, btf=None,
                                   note="prebuilt image without vmlinux: not checked")
                     for f in features)
    out = []
    for f in features:
        if f.kind is FeatureKind.CONFIG:
            out.append(FeatureReport(feature=f, state=FeatureState.ABSENT, btf=None,
                                     note="a prebuilt image: its .config decides "
                                          "(confirm_with_config), none known yet"))
            continue
        present, wrong_number = btf.has(f), _wrong_uapi_number(f, btf)
        note = wrong_number or ("from BTF only (a prebuilt image has no sources)"
                                + ("; a kfunc's registration is not visible in BTF"
                                   if f.kind is FeatureKind.KFUNC else ""))
        out.append(FeatureReport(
            feature=f, btf=present, note=note,
            state=FeatureState.PRESENT if present and not wrong_number else FeatureState.ABSENT))
    return tuple(out)


def confirm_with_config(reports: tuple[FeatureReport, ...],
                        config_text: str) -> tuple[FeatureReport, ...]:
    """Config-option features against the built kernel's .config: an option the sources
    define (or a prebuilt image's config sets) is there only when it is y or m."""
    values = kconfig.parse_config(config_text)
    out = []
    for r in reports:
        if r.feature.kind is not FeatureKind.CONFIG:
            out.append(r)
            continue
        value = values.get(f"CONFIG_{r.feature.name}")
        if value in ("y", "m"):
            state = r.state
            if state is FeatureState.ABSENT:  # an image: no sources to say where from
                state = FeatureState.PRESENT
            out.append(replace(r, state=state, note=f"CONFIG_{r.feature.name}={value}"))
        else:
            out.append(replace(r, state=FeatureState.ABSENT,
                               note=f"CONFIG_{r.feature.name} is not set in the kernel's "
                                    ".config"))
    return tuple(out)


def declared_but_absent(reports: tuple[FeatureReport, ...],
                        applied: set[str]) -> list[FeatureReport]:
    """Features a series applied in this kernel declares, that the built kernel lacks."""
    return [r for r in reports if r.state is FeatureState.ABSENT and r.btf is not None
            and set(r.feature.declared_by) & applied]


def series_in_base(series_dirs: Mapping[str, Path],
                   base: Mapping[str, str]) -> dict[str, str]:
    """Series whose declared features the base defines, all of them -> why we say so.

    Such a series is not applied (it would conflict with its own upstream version);
    a series that declares nothing, or only part of which is in base, is applied.
    """
    out = {}
    for name, directory in series_dirs.items():
        declared = declared_by_series(directory)
        if declared and all(f.name in base for f in declared):
            out[name] = "the base already defines " + ", ".join(
                f"{f.name} ({base[f.name]})" for f in declared)
    return out


def _kernel_btf(image: KernelImage) -> tuple[KernelBtf | None, str]:
    """The kernel's BTF; None (and why) when it has none next to it or it is unreadable."""
    if image.vmlinux is None:
        return None, ""
    try:
        return read_btf(image.vmlinux), ""
    except (proc.CommandError, proc.ToolMissingError) as exc:
        # Not a reason to stop the cell: the selftests will say what BTF lacks.
        log.warning("cannot read the kernel's BTF: %s", exc)
        return None, f"BTF unreadable, source verdict only: {exc}"


def _with_config(reports: tuple[FeatureReport, ...],
                 image: KernelImage) -> tuple[FeatureReport, ...]:
    """Config-option features decided by the kernel's .config, when it has one."""
    if image.config is None or not image.config.is_file():
        return reports
    return confirm_with_config(reports, image.config.read_text(errors="replace"))


def _noted(reports: tuple[FeatureReport, ...], note: str) -> tuple[FeatureReport, ...]:
    return tuple(replace(r, note=note) for r in reports) if note else reports


def of_image(image: KernelImage) -> tuple[FeatureReport, ...]:
    """A kernel without its source (image:PATH): what its BTF and .config say."""
    btf, note = _kernel_btf(image)
    return _with_config(_noted(from_btf_only(known_features(), btf), note), image)


def of_built_kernel(from_source: tuple[FeatureReport, ...],
                    image: KernelImage) -> tuple[FeatureReport, ...]:
    """What the sources said, confirmed or overruled by the built kernel's BTF and .config."""
    btf, note = _kernel_btf(image)
    if btf is None:
        return _with_config(_noted(from_source, note), image)
    return _with_config(confirm_with_btf(from_source, btf), image)


def check_declared(reports: tuple[FeatureReport, ...], applied: Iterable[str], *,
                   log_path: Path | None) -> None:
    """FeatureError when a series in `applied` declares what the built kernel lacks: the
    tests that need it would be skipped and the cell could pass on a kernel without it."""
    if lacking := declared_but_absent(reports, set(applied)):
        raise FeatureError(
            "the built kernel lacks what its series declare (patches/*/provides.toml):\n"
            + "\n".join(f"  {r.feature.label} of {', '.join(r.feature.declared_by)}: {r.note}"
                        for r in lacking),
            fix="check that the series still defines and registers them, and that the "
                "config enables the code they are in",
            log=log_path, status=Status.BUILD_ERROR)


def missing_for(requires: Iterable[str], reports: tuple[FeatureReport, ...]) -> list[str]:
    """What a test requires that the probe found absent, each with the probe's why. A
    requirement "a|b" (one API under two names), or a capability, is met by any of its
    names."""
    by_name = {r.feature.name: r for r in reports}
    out = []
    for wanted in requires:
        names = alternatives(wanted)
        absent = []
        for name in names:
            r = by_name.get(name)
            if r is None or r.state is FeatureState.ABSENT:
                note = f": {r.note}" if r is not None and r.note else ""
                absent.append(f"{name} ({r.feature.kind.value if r else 'feature'}{note})")
        if len(absent) == len(names):
            out.append((f"{wanted}: " if wanted in CAPABILITIES else "") + " nor ".join(absent))
    return out
