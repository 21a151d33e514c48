#!/usr/bin/env python3
"""Capture the item lists of tests/golden/inventory/ from real kernels (see README.md there).

  capture.py source KERNEL TREE CONFIG [--series DIR]... OUT_DIR
      the source-level lists of a kernel tree (pristine, with the series' patches applied
      in a scratch copy of the files they touch), #ifdefs decided by CONFIG (the .config
      of a build of that kernel with our fragments)
  capture.py guest KERNEL CAPTURE_LOG OUT_DIR
      the keys of the cgroup files, from the output of capture.sh run in the guest

Each list is written to OUT_DIR/KERNEL/NAME.txt, one item per line, sorted, after a header
of comment lines saying what it was captured from.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path


def read_config(path: Path) -> set[str]:
    """The options set to y or m."""
    on = set()
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"(CONFIG_\w+)=[ym]", line.strip())
        if m:
            on.add(m.group(1))
    return on


def _cond_true(expr: str, on: set[str]) -> bool:
    """A preprocessor condition over CONFIG_ options: defined(), IS_ENABLED(), !, &&, ||."""
    py = re.sub(r"(?:defined|IS_ENABLED|IS_BUILTIN)\s*\(\s*(CONFIG_\w+)\s*\)",
                lambda m: str(m.group(1) in on), expr)
    py = re.sub(r"\bdefined\s+(CONFIG_\w+)", lambda m: str(m.group(1) in on), py)
    py = re.sub(r"\bCONFIG_\w+\b", lambda m: str(m.group(0) in on), py)
    py = py.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
    if not re.fullmatch(r"[\s()]*(?:(?:True|False|and|or|not)[\s()]*)*", py):
        raise ValueError(f"cannot decide #if {expr!r}")
    return bool(eval(py, {"__builtins__": {}}))


def preprocess(text: str, on: set[str]) -> str:
    """@text with the lines of #if/#ifdef branches not taken under @on removed (only
    CONFIG_ conditions; any other #if keeps both branches), comments dropped."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"\\\n", " ", text)  # continued lines
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch taken, some branch was taken)
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"#\s*(ifdef|ifndef|if|elif|else|endif)\b\s*(.*)", s)
        if not m:
            if all(t for t, _ in stack):
                out.append(line)
            continue
        kw, arg = m.groups()
        decided = kw in ("ifdef", "ifndef") or "CONFIG_" in arg
        if kw == "ifdef":
            stack.append((arg.strip() in on, arg.strip() in on))
        elif kw == "ifndef":
            stack.append((arg.strip() not in on, arg.strip() not in on))
        elif kw == "if":
            t = _cond_true(arg, on) if decided else True
            stack.append((t, t))
        elif kw == "elif":
            _, any_taken = stack.pop()
            t = not any_taken and (_cond_true(arg, on) if decided else True)
            stack.append((t, any_taken or t))
        elif kw == "else":
            _, any_taken = stack.pop()
            stack.append((not any_taken, True))
        else:
            stack.pop()
    return "\n".join(out)


def block(text: str, start: str, end: str = r"\n\}") -> str:
    """The text from the regex @start to the first @end after it."""
    m = re.search(start, text)
    if not m:
        raise LookupError(f"no {start!r}")
    e = re.search(end, text[m.end():])
    if not e:
        raise LookupError(f"no end {end!r} after {start!r}")
    return text[m.end():m.end() + e.start()]


def kfunc_set(text: str, name: str) -> list[str]:
    """'NAME FLAG|FLAG' (or 'NAME -') of each BTF_ID_FLAGS(func, ...) of the set @name."""
    body = block(text, rf"BTF_(?:KFUNCS|SET8)_START\({name}\)",
                 rf"BTF_(?:KFUNCS|SET8)_END\({name}\)")
    out = []
    for m in re.finditer(r"BTF_ID_FLAGS\(\s*func\s*,\s*(\w+)\s*(?:,([^)]*))?\)", body):
        flags = sorted(f.strip() for f in (m.group(2) or "").split("|") if f.strip())
        out.append(f"{m.group(1)} {'|'.join(flags) or '-'}")
    return out


def prog_types(text: str, func: str) -> list[str]:
    """The BPF_PROG_TYPE_ names in the body of the function @func (its registrations)."""
    body = block(text, rf"\b{func}\s*\([^)]*\)\s*\{{")
    return sorted(set(re.findall(r"BPF_PROG_TYPE_\w+", body)))


def enumerators(text: str, enum: str, stop: str | None = None) -> list[str]:
    """The enumerators of `enum @enum`, up to (not including) @stop."""
    out = []
    for part in block(text, rf"enum\s+{enum}\s*\{{", r"\n\};").split(","):
        name = part.split("=")[0].strip()
        if not re.fullmatch(r"\w+", name):
            continue
        if name == stop:
            break
        out.append(name)
    return out


def array_items(text: str, name: str) -> list[str]:
    """The identifiers listed in `static const ... @name[] = { ... };`."""
    body = block(text, rf"\b{name}\[\]\s*=\s*\{{", r"\n\};")
    return re.findall(r"\b([A-Z][A-Z0-9_]+)\b", body)


def struct_members(text: str, name: str) -> list[str]:
    """The members set in the initializer `... @name = { .member = ..., }`."""
    return re.findall(r"\.(\w+)\s*=", block(text, rf"\b{name}\s*=\s*\{{", r"\n\};"))


def fdinfo_keys(text: str, func: str) -> list[str]:
    """'KEY' of each 'KEY:\\t...' line a show_fdinfo function prints, and 'KEY:VALUE' of
    each fixed 'KEY: VALUE' line (the cgroup iterator's order)."""
    body = block(text, rf"\b{func}\s*\([^)]*\)\s*\{{")
    out: list[str] = []
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', body):
        for line in lit.split("\\n"):
            m = re.match(r"(\w+):\\t", line)
            if m:
                out.append(m.group(1))
            m = re.fullmatch(r"(\w+): (\w+)", line)
            if m:
                out.append(f"{m.group(1)}:{m.group(2)}")
    return list(dict.fromkeys(out))


def link_info_iter_fields(uapi: str) -> list[str]:
    """struct bpf_link_info's fields a cgroup iterator link fills: the common ones, the
    iterator's and its cgroup struct's."""
    info = block(uapi, r"struct bpf_link_info \{", r"\n\} __attribute__")
    common = re.findall(r"^\t__u\d+\s+(\w+);", info, flags=re.M)
    it = block(info, r"\n\t\tstruct \{\n\t\t\t__aligned_u64 target_name;", r"\n\t\t\} iter;")
    cg = re.search(r"struct \{([^{}]*)\} cgroup;", it)
    if not cg:
        raise LookupError("no cgroup struct in bpf_link_info.iter")
    return ([*common, "iter.target_name", "iter.target_name_len"] +
            [f"iter.cgroup.{f}" for f in re.findall(r"\b(\w+);", cg.group(1))])


def hook_args(text: str) -> list[str]:
    """The parameters of bpf_rstat_flush()."""
    m = re.search(r"void bpf_rstat_flush\(([^)]*)\)", text)
    if not m:
        raise LookupError("no bpf_rstat_flush()")
    return [f"bpf_rstat_flush.{p.split()[-1].lstrip('*')}" for p in m.group(1).split(",")]


class Tree:
    """A pristine tree with a series applied to a scratch copy of the files it touches."""

    def __init__(self, root: Path, patches: Iterable[Path]) -> None:
        self.root = root
        self.scratch = Path(tempfile.mkdtemp(prefix="inventory-"))
        for patch in patches:
            text = patch.read_text()
            for rel in set(re.findall(r"^--- a/(\S+)", text, flags=re.M)):
                dst = self.scratch / rel
                if not dst.exists():
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(root / rel, dst)
            subprocess.run(["patch", "-s", "-p1", "-d", str(self.scratch), "-i",
                            str(patch.resolve())], check=True)

    def read(self, rel: str) -> str:
        p = self.scratch / rel
        return (p if p.exists() else self.root / rel).read_text()

    def has(self, rel: str) -> bool:
        return (self.scratch / rel).exists() or (self.root / rel).exists()

    def close(self) -> None:
        shutil.rmtree(self.scratch)


def series_patches(series_dir: Path, kernel: str) -> list[Path]:
    """The patches a series applies on @kernel (series-6.1 on 6.1, where there is one)."""
    listing = series_dir / f"series-{kernel}"
    if not listing.exists():
        listing = series_dir / "series"
    return [series_dir / line.strip() for line in listing.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def source_lists(tree: Tree, on: set[str]) -> dict[str, tuple[str, list[str]]]:
    """name -> (what it was read from, items)."""
    lists: dict[str, tuple[str, list[str]]] = {}

    def pp(rel: str) -> str:
        return preprocess(tree.read(rel), on)

    if tree.has("mm/bpf_memcontrol.c"):
        bm = pp("mm/bpf_memcontrol.c")
        lists["memcg_kfuncs.kfuncs"] = (
            "mm/bpf_memcontrol.c: BTF_ID_FLAGS of the set bpf_memcontrol_kfuncs",
            kfunc_set(bm, "bpf_memcontrol_kfuncs"))
        lists["memcg_kfuncs.registration"] = ("mm/bpf_memcontrol.c: the program types "
                                              "bpf_memcontrol_init() registers the set for",
                                              prog_types(bm, "bpf_memcontrol_init"))
    mc = pp("mm/memcontrol.c")
    mh = pp("include/linux/memcontrol.h")
    if "memcg_node_stat_items[]" in mc:
        items = array_items(mc, "memcg_node_stat_items") + array_items(mc, "memcg_stat_items")
        how = ("mm/memcontrol.c: memcg_node_stat_items[] + memcg_stat_items[] (memcg tracks "
               "only these)")
    else:
        mz = pp("include/linux/mmzone.h")
        items = (enumerators(mz, "node_stat_item", "NR_VM_NODE_STAT_ITEMS") +
                 enumerators(mh, "memcg_stat_item", "MEMCG_NR_STAT"))
        how = ("include/linux/mmzone.h enum node_stat_item + include/linux/memcontrol.h enum "
               "memcg_stat_item (memcg tracks every item below MEMCG_NR_STAT)")
        items = [i for i in items if not i.endswith("_BASE")]
    lists["memcg_kfuncs.page_state_items"] = (how, items)
    lists["memcg_kfuncs.vm_event_items"] = ("mm/memcontrol.c: memcg_vm_event_stat[]",
                                            array_items(mc, "memcg_vm_event_stat"))
    lists["memcg_kfuncs.memory_events"] = ("include/linux/memcontrol.h: enum memcg_memory_event",
                                           enumerators(mh, "memcg_memory_event",
                                                       "MEMCG_NR_MEMORY_EVENTS"))
    rs = pp("kernel/cgroup/rstat.c")
    lists["rstat.kfuncs"] = (
        "kernel/cgroup/rstat.c: BTF_ID_FLAGS of the set bpf_rstat_kfunc_ids",
        kfunc_set(rs, "bpf_rstat_kfunc_ids"))
    lists["rstat.registration"] = (
        "kernel/cgroup/rstat.c: the program types bpf_rstat_kfunc_init() registers the set for",
        prog_types(rs, "bpf_rstat_kfunc_init"))
    lists["rstat.hook"] = ("kernel/cgroup/rstat.c: the parameters of bpf_rstat_flush()",
                           hook_args(rs))
    uapi = pp("include/uapi/linux/bpf.h")
    lists["cgroup_iter.orders"] = ("include/uapi/linux/bpf.h: enum bpf_cgroup_iter_order",
                                   enumerators(uapi, "bpf_cgroup_iter_order"))
    lists["cgroup_iter.link_info"] = ("include/uapi/linux/bpf.h: struct bpf_link_info, common "
                                      "fields, iter and iter.cgroup", link_info_iter_fields(uapi))
    lists["cgroup_iter.fdinfo"] = (
        "kernel/bpf/syscall.c bpf_link_show_fdinfo(), kernel/bpf/bpf_iter.c "
        "bpf_iter_link_show_fdinfo(), kernel/bpf/cgroup_iter.c bpf_iter_cgroup_show_fdinfo(): "
        "the keys they print",
        list(dict.fromkeys(
            fdinfo_keys(pp("kernel/bpf/syscall.c"), "bpf_link_show_fdinfo") +
            fdinfo_keys(pp("kernel/bpf/bpf_iter.c"), "bpf_iter_link_show_fdinfo") +
            fdinfo_keys(pp("kernel/bpf/cgroup_iter.c"), "bpf_iter_cgroup_show_fdinfo"))))
    helpers = pp("kernel/bpf/helpers.c")
    if "bpf_iter_css_new" in helpers:
        lists["css_iter.kfuncs"] = ("kernel/bpf/helpers.c: BTF_ID_FLAGS of bpf_iter_css_{new,next,"
                                    "destroy} in the set common_btf_ids",
                                    [k for k in kfunc_set(helpers, "common_btf_ids")
                                     if re.match(r"bpf_iter_css_(new|next|destroy) ", k)])
        lists["css_iter.registration"] = ("kernel/bpf/helpers.c: the program types kfunc_init() "
                                          "registers common_kfunc_set for",
                                          sorted(set(re.findall(
                                              r"register_btf_kfunc_id_set\((BPF_PROG_TYPE_\w+),\s*"
                                              r"&common_kfunc_set", helpers))))
    if tree.has("kernel/bpf/bpf_cgrp_storage.c"):
        cs = pp("kernel/bpf/bpf_cgrp_storage.c")
        lists["cgrp_storage.map_ops"] = ("kernel/bpf/bpf_cgrp_storage.c: the members of "
                                         "cgrp_storage_map_ops",
                                         struct_members(cs, "cgrp_storage_map_ops"))
        lists["cgrp_storage.helpers"] = (
            "kernel/bpf/bpf_cgrp_storage.c: the helpers' bpf_func_protos",
            re.findall(r"const struct bpf_func_proto (\w+)_proto\s*=", cs))
    return lists


def guest_lists(log: str) -> dict[str, tuple[str, list[str]]]:
    """The keys of each '== FILE (where)' section of capture.sh's output."""
    sections: dict[str, list[str]] = {}
    cur = None
    for line in log.splitlines():
        m = re.match(r"== (\S+) \((\w+)\)$", line.strip())
        if m:
            cur = f"{m.group(1)}.{m.group(2)}"
            sections[cur] = []
        elif cur and line.strip():
            sections[cur].append(line.strip())
    out = {}
    where_is = {"leaf": "a leaf cgroup with the memory controller (not cpu)",
                "cpuleaf": "a leaf cgroup with the memory and cpu controllers",
                "root": "the cgroup2 root"}
    # the files of the features: memcg's of a leaf (the root's memory.stat is the root
    # memcg's, read by the kfuncs per item), cpu.stat of each kind of cgroup
    wanted = [("memory.stat", "leaf"), ("memory.events", "leaf"), ("memory.swap.events", "leaf"),
              ("cpu.stat", "leaf"), ("cpu.stat", "cpuleaf"), ("cpu.stat", "root"),
              ("cpu.stat.local", "leaf"), ("cpu.stat.local", "cpuleaf")]
    for f, where in wanted:
        keys = sections.get(f"{f}.{where}", [])
        if keys and keys != ["(absent)"]:  # a file that prints nothing gives no list
            out[f"{f}.{where}"] = (f"capture.sh in the guest: the keys of {f} of "
                                   f"{where_is[where]}", keys)
    return out


def write(out: Path, kernel: str, lists: dict[str, tuple[str, list[str]]], origin: str) -> None:
    d = out / kernel
    d.mkdir(parents=True, exist_ok=True)
    for name, (how, items) in lists.items():
        if len(set(items)) != len(items):
            raise ValueError(f"{name}: duplicate items {items}")
        (d / f"{name}.txt").write_text(f"# {how}\n# {origin}\n" + "".join(
            f"{i}\n" for i in sorted(items)))


MARKER = "# ---- lists: written by tests/golden/inventory/capture.py lists (from the goldens) ----"

# the feature whose inventory holds each golden list, by the list name's first part
LIST_FEATURE = {"memcg_kfuncs": "memcg_kfuncs", "memory": "memcg_kfuncs", "rstat": "rstat",
                "cpu": "rstat", "cgroup_iter": "cgroup_iter", "css_iter": "css_iter",
                "cgrp_storage": "cgrp_storage"}


def golden_items(path: Path) -> list[str]:
    """The items of a golden list file: a kfunc line 'NAME FLAG|FLAG' gives NAME and
    NAME:FLAG for each flag; any other line is an item."""
    items: list[str] = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, flags = line.partition(" ")
        items.append(name)
        items += [f"{name}:{f}" for f in flags.split("|") if f and f != "-"]
    return items


def golden_source(path: Path) -> str:
    return path.read_text().splitlines()[0].lstrip("# ")


def feature_lists(golden: Path, feature: str) -> str:
    """The [[list]] tables of @feature's inventory, from every golden list it holds."""
    out = [MARKER, ""]
    for path in sorted(golden.glob("*/*.txt"), key=lambda p: (p.stem, p.parent.name)):
        if LIST_FEATURE.get(path.stem.split(".")[0]) != feature:
            continue
        items = golden_items(path)
        out += ["[[list]]", f'name = "{path.stem}"', f'kernel = "{path.parent.name}"',
                f'source = "{golden_source(path)}"', "items = ["]
        line = "\t"
        for item in items:
            word = f'"{item}", '
            if len(line) + len(word) > 96:
                out.append(line.rstrip())
                line = "\t"
            line += word
        out += [line.rstrip(), "]", ""]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("source")
    s.add_argument("kernel")
    s.add_argument("tree", type=Path)
    s.add_argument("config", type=Path)
    s.add_argument("--series", type=Path, action="append", default=[])
    s.add_argument("out", type=Path)
    li = sub.add_parser("lists")
    li.add_argument("feature")
    li.add_argument("--inventory", type=Path,
                    default=Path(__file__).resolve().parents[3] / "selftests" / "inventory")
    g = sub.add_parser("guest")
    g.add_argument("kernel")
    g.add_argument("log", type=Path)
    g.add_argument("out", type=Path)
    a = ap.parse_args()
    if a.cmd == "lists":
        inv = a.inventory / f"{a.feature}.toml"
        head = inv.read_text().split(MARKER)[0].rstrip() + "\n\n" if inv.exists() else ""
        inv.write_text(head + feature_lists(Path(__file__).resolve().parent, a.feature))
        return 0
    if a.cmd == "source":
        patches = [p for s in a.series for p in series_patches(s, a.kernel)]
        tree = Tree(a.tree, patches)
        try:
            lists = source_lists(tree, read_config(a.config))
        finally:
            tree.close()
        series = ", ".join(s.name for s in a.series) or "none"
        write(a.out, a.kernel, lists, f"from {a.tree} with series {series}, #ifdefs as in "
                                      f"the .config of that kernel's build")
    else:
        write(a.out, a.kernel, guest_lists(a.log.read_text()),
              "from a guest run of that kernel (see README.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
