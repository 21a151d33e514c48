"""Base + fragments -> merge_config.sh -> olddefconfig -> a verified .config.

Parsing (`parse_config`, `requested_symbols`, `verify`, `explain_dependency`) is pure
text in, data out; `generate` runs the kernel's own tools in a scratch O= directory and
`install` writes the build's .config only when it changed, so incremental builds stay
incremental.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness import target as target_data
from harness.base import atomic, paths, proc, sandbox
from harness.base.errors import HarnessError
from harness.base.gitcmd import git, git_run
from harness.base.model import ConfigResult, DroppedSymbol, Status
from harness.kernel import pahole
from harness.target import Target
from harness.target import default as default_target

log = logging.getLogger(__name__)

BASE = "tinyconfig"  # the make target every test config starts from
_SET = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")
_IDENT = re.compile(r"\b([A-Z][A-Z0-9_]+)\b")
# What a value can be in a .config: bool/tristate, int, hex, string.
_VALUE = re.compile(r'^(?:[ymn]|-?\d+|0[xX][0-9a-fA-F]+|"(?:[^"\\]|\\.)*")$')
# A fragment line that limits the option lines after it (up to the next blank line) to
# some kernels: "# harness: kernel < 6.18", "# harness: kernel >= 6.2, < 6.18". An option
# that exists only in some kernels is requested only there; the strict check stays strict
# for everything requested.
_DIRECTIVE = re.compile(r"^#\s*harness:\s*(.*)$")
_BOUND = re.compile(r"^kernel\s*(<|<=|>=|>|==)\s*(\d+)\.(\d+)$")
# kconfig's own complaints about a merged .config (scripts/kconfig/confdata.c).
_KCONFIG_INVALID = re.compile(r"warning: symbol value '(.*)' invalid for (\w+)")


class ConfigError(HarnessError):
    """Requested options did not survive olddefconfig, or a fragment is unusable."""

    status = Status.CONFIG_ERROR

    def __init__(self, message: str, dropped: tuple[DroppedSymbol, ...] = (), *,
                 fix: str = "", log: Path | None = None) -> None:
        super().__init__(message, fix=fix, log=log)
        self.dropped = dropped


def parse_config(text: str) -> dict[str, str]:
    """CONFIG_X -> value ('n' for '# CONFIG_X is not set'), as in a .config or fragment."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if m := _SET.match(line):
            values[m.group(1)] = m.group(2)
        elif m := _UNSET.match(line):
            values[m.group(1)] = "n"
    return values


def fragment_problems(text: str) -> list[tuple[int, str]]:
    """(line number, what is wrong) for each line of a fragment that kconfig would not
    take: anything but blank lines, comments, `CONFIG_X=VALUE` and `# CONFIG_X is not set`,
    and values that no symbol type has (`CONFIG_BPF=maybe`)."""
    problems = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if m := _DIRECTIVE.match(line):
            if (bad := version_bounds(m.group(1))[1]) is not None:
                problems.append((n, f"{line!r}: {bad} (write '# harness: kernel < 6.18' or "
                                    "'# harness: kernel >= 6.2, < 6.18')"))
            continue
        if not line or (line.startswith("#") and not _UNSET.match(line)):
            if line.startswith("#") and re.match(r"^#\s*CONFIG_\w+\s+is\s+not\s+set", line) \
                    and not _UNSET.match(line):
                problems.append((n, f"{line!r}: write it exactly '# CONFIG_X is not set'"))
            continue
        if _UNSET.match(line):
            continue
        m = _SET.match(line)
        if m is None:
            problems.append((n, f"{line!r} is neither CONFIG_X=VALUE nor "
                                "'# CONFIG_X is not set'"))
        elif not _VALUE.match(m.group(2)):
            problems.append((n, f"{m.group(1)}={m.group(2)}: invalid value (y, m, n, a "
                                'number, 0xHEX or a "string")'))
    return problems


Bound = tuple[str, tuple[int, int]]


def version_bounds(text: str) -> tuple[tuple[Bound, ...], str | None]:
    """"kernel >= 6.2, < 6.18" -> ((">=", (6, 2)), ("<", (6, 18))), and what is wrong."""
    bounds = []
    for part in (p.strip() for p in text.split(",")):
        part = part if part.startswith("kernel") else f"kernel {part}"
        if not (m := _BOUND.match(part)):
            return (), f"not a kernel version bound: {part!r}"
        bounds.append((m.group(1), (int(m.group(2)), int(m.group(3)))))
    return tuple(bounds), None


def _holds(bounds: tuple[Bound, ...], version: tuple[int, int]) -> bool:
    ops = {"<": version.__lt__, "<=": version.__le__, ">": version.__gt__,
           ">=": version.__ge__, "==": version.__eq__}
    return all(ops[op](v) for op, v in bounds)


def for_kernel(text: str, version: tuple[int, int]) -> str:
    """The fragment as this kernel takes it: an option line under a directive whose bounds
    this version is outside becomes a comment that says why (line numbers stay, so
    file:line in errors is the fragment's own)."""
    out: list[str] = []
    bounds: tuple[Bound, ...] = ()
    for raw in text.splitlines():
        line = raw.strip()
        if m := _DIRECTIVE.match(line):
            bounds = version_bounds(m.group(1))[0]
        elif not line:
            bounds = ()
        elif bounds and (_SET.match(line) or _UNSET.match(line)) \
                and not _holds(bounds, version):
            raw = f"# harness: not for {version[0]}.{version[1]}: {line}"
        out.append(raw)
    return "\n".join(out) + "\n"


def kernel_release(tree: Path, commit: str = "") -> tuple[int, int] | None:
    """(VERSION, PATCHLEVEL) from the tree's top Makefile (as `commit` has it, when given:
    a worktree shared by revisions may be at another); None when it says neither."""
    text = git(tree, "show", f"{commit}:Makefile", what="git show Makefile", timeout=60) \
        if commit else (tree / "Makefile").read_text(errors="replace")
    head = "\n".join(text.splitlines()[:10])
    fields = dict(re.findall(r"^(VERSION|PATCHLEVEL) = (\d+)", head, re.M))
    if len(fields) != 2:
        return None
    return int(fields["VERSION"]), int(fields["PATCHLEVEL"])


def rendered(fragments: list[Path], version: tuple[int, int] | None) -> tuple[
        list[Path], dict[Path, Path]]:
    """Each fragment as this kernel takes it (the file itself when no line is limited to
    other kernels), and rendered copy -> the fragment it came from, for errors. A tree
    whose Makefile names no version takes every line, as the kernel's own tools would."""
    out: list[Path] = []
    origin: dict[Path, Path] = {}
    if version is None:
        return list(fragments), origin
    for frag in fragments:
        text = frag.read_text()
        mine = for_kernel(text, version)
        if mine == text or mine == text + "\n":
            out.append(frag)
            continue
        digest = hashlib.sha256(mine.encode()).hexdigest()[:12]
        path = paths.sub("kconfig") / "for-kernel" / digest / frag.name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(path, mine)
        out.append(path)
        origin[path] = frag
    return out, origin


def check_fragment(path: Path, display: str | None = None) -> None:
    """CONFIG_ERROR naming file:line for every line kconfig would reject or ignore."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config fragment {path}: {exc}",
                          fix="pass a readable text file of CONFIG_X=VALUE lines") from None
    problems = fragment_problems(text)
    if problems:
        name = display or str(path)
        shown = "\n".join(f"  {name}:{n}: {what}" for n, what in problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ConfigError(f"config fragment {name} has {len(problems)} line(s) kconfig would "
                          f"reject or ignore:\n{shown}{more}",
                          fix="correct those lines (CONFIG_X=VALUE or '# CONFIG_X is not set')")


def request_line(fragments: list[Path], symbol: str,
                 origin: Mapping[Path, Path] | None = None) -> str:
    """"file:line" of the request that stands for symbol (the last fragment naming it);
    a fragment rendered for one kernel is named by the file it came from."""
    found = ""
    for frag in fragments:
        for n, raw in enumerate(frag.read_text(errors="replace").splitlines(), 1):
            line = raw.strip()
            if line.startswith(f"{symbol}=") or line == f"# {symbol} is not set":
                found = f"{paths.display((origin or {}).get(frag, frag))}:{n}"
    return found


def requested_symbols(fragments: list[Path]) -> dict[str, str]:
    """What the fragments ask for; later fragments override earlier ones (as merge_config does)."""
    wanted: dict[str, str] = {}
    for frag in fragments:
        wanted.update(parse_config(frag.read_text()))
    return wanted


@dataclass(frozen=True, kw_only=True)
class KconfigEntry:
    symbol: str
    file: str
    depends: tuple[str, ...]
    selects: tuple[str, ...] = ()


def index_kconfig(tree: Path) -> dict[str, KconfigEntry]:
    """`config SYM` -> its `depends on` lines, with those of every enclosing `if`, `menu`
    and `choice` block, through `source` lines too (net/Kconfig sources net/ipv6/Kconfig
    inside `if INET`: IPV6 depends on INET). Walked from the tree's top Kconfig; files it
    does not reach (an excerpt of a tree) are read on their own."""
    index: dict[str, KconfigEntry] = {}
    visited: set[Path] = set()
    root = tree / "Kconfig"
    if root.is_file():
        _walk_kconfig(tree, root, [], index, visited)
    for kfile in sorted(tree.rglob("Kconfig*")):
        if kfile.is_file() and kfile not in visited:
            _walk_kconfig(tree, kfile, [], index, visited)
    return index


_SOURCE = re.compile(r'^(o?r?source)\s+"([^"]+)"')
_KCONFIG_VARS = {"SRCARCH": "x86", "ARCH": "x86", "HEADER_ARCH": "x86"}


def _walk_kconfig(tree: Path, kfile: Path, outer: list[str], index: dict[str, KconfigEntry],
                  visited: set[Path]) -> None:
    visited.add(kfile)
    try:
        # A line ending in a backslash goes on on the next one.
        lines = kfile.read_text(errors="replace").replace("\\\n", " ").splitlines()
    except OSError:
        return
    rel = str(kfile.relative_to(tree))
    scopes: list[tuple[str, list[str]]] = []  # ("if"|"menu"|"choice", its conditions)
    current: str | None = None  # the config entry being read; "" for a comment's
    deps: list[str] = []
    selects: list[str] = []

    def inherited() -> list[str]:
        return outer + [d for _, conds in scopes for d in conds]

    def flush() -> None:
        if current:
            _record(index, current, rel, inherited() + deps, selects)

    help_indent: int | None = None  # inside a help text: its keyword's indentation
    for raw in lines:
        line = raw.strip()
        words = line.split(None, 1)
        if not words or line.startswith("#"):
            continue
        indent = len(raw.expandtabs(8)) - len(raw.expandtabs(8).lstrip())
        if help_indent is not None:
            # Help text runs while it is indented deeper than `help`; its prose
            # ("if you don't need IR, ...") must not be read as Kconfig.
            if indent > help_indent:
                continue
            help_indent = None
        head = words[0]
        if head in ("help", "---help---") and len(words) == 1:
            help_indent = indent
            continue
        if head in ("config", "menuconfig") and len(words) == 2:
            flush()
            current, deps, selects = words[1].strip(), [], []
        elif head in ("select", "imply") and current and len(words) == 2:
            selects.append(words[1].split()[0])
        elif head == "depends" and line.startswith("depends on"):
            expr = line[len("depends on"):].strip()
            if current is not None:
                if current:
                    deps.append(expr)
            elif scopes and scopes[-1][0] in ("menu", "choice"):
                scopes[-1][1].append(expr)  # a menu's or choice's own condition
        elif head in ("if", "menu", "choice"):
            flush()
            current = None
            scopes.append((head, [words[1]] if head == "if" and len(words) == 2 else []))
        elif head in ("endif", "endmenu", "endchoice"):
            flush()
            current = None
            if scopes:
                scopes.pop()
        elif head == "comment":
            flush()
            current = ""
        elif (m := _SOURCE.match(line)) is not None:
            flush()
            current = None
            path = re.sub(r"\$\((\w+)\)", lambda v: _KCONFIG_VARS.get(v.group(1), v.group(0)),
                          m.group(2))
            child = (kfile.parent / path) if m.group(1).endswith("rsource") else tree / path
            if child.is_file() and child not in visited:
                _walk_kconfig(tree, child, inherited(), index, visited)
        elif head in ("endmenu", "mainmenu"):
            flush()
            current = None
    flush()


def _record(index: dict[str, KconfigEntry], symbol: str, rel: str, deps: list[str],
            selects: list[str]) -> None:
    """A symbol may be defined in several places; their conditions add up."""
    old = index.get(symbol)
    merged = tuple(dict.fromkeys((*(old.depends if old else ()), *deps)))
    sel = tuple(dict.fromkeys((*(old.selects if old else ()), *selects)))
    index[symbol] = KconfigEntry(symbol=symbol, file=rel, depends=merged, selects=sel)


def explain_dependency(symbol: str, config: dict[str, str],
                       index: dict[str, KconfigEntry]) -> str:
    """Why SYMBOL is not what was asked: its unmet `depends on` terms with their values."""
    name = symbol.removeprefix("CONFIG_")
    entry = index.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, index, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        return (f"unknown symbol: no Kconfig file defines {name} (a typo, or not in this "
                f"kernel){hint}")
    if config.get(symbol, "n") != "n":
        by = sorted(e.symbol for e in index.values()
                    if name in e.selects and config.get("CONFIG_" + e.symbol, "n") != "n")
        if by:
            return f"{name} ({entry.file}) is selected by " + ", ".join(
                f"{s}={config.get('CONFIG_' + s)}" for s in by)
    unmet: list[str] = []
    for expr in entry.depends:
        terms = []
        for ident in _IDENT.findall(expr):
            if ident in ("if", "on", "y", "m", "n"):
                continue
            terms.append(f"{ident}={config.get('CONFIG_' + ident, 'n')}")
        if any(t.endswith("=n") for t in terms) or "!" in expr:
            unmet.append(f"depends on {expr} ({', '.join(terms)})")
    if not unmet:
        if entry.depends:
            return f"{name} ({entry.file}) depends on " + " && ".join(entry.depends)
        return f"{name} ({entry.file}) has no unmet depends; check its choice group or range"
    return f"{name} ({entry.file}): unmet " + "; ".join(unmet)


def unmet_symbols(symbol: str, config: dict[str, str],
                  index: dict[str, KconfigEntry]) -> list[str]:
    """The symbols of SYMBOL's `depends on` that are off (and not negated): what to add."""
    entry = index.get(symbol.removeprefix("CONFIG_"))
    if entry is None:
        return []
    out: list[str] = []
    for expr in entry.depends:
        for m in re.finditer(r"(!?)\s*\b([A-Z][A-Z0-9_]+)\b", expr):
            ident = m.group(2)
            if not m.group(1) and config.get("CONFIG_" + ident, "n") == "n" \
                    and ident in index and ident not in out:
                out.append(ident)
    return out


def verify(final: dict[str, str], wanted: dict[str, str],
           index: dict[str, KconfigEntry] | None) -> tuple[DroppedSymbol, ...]:
    dropped = []
    for sym, want in wanted.items():
        have = final.get(sym, "n")
        if want == have or (want == "n" and sym not in final):
            continue
        reason = explain_dependency(sym, final, index) if index is not None else ""
        dropped.append(DroppedSymbol(symbol=sym, requested=want, actual=have, reason=reason))
    return tuple(dropped)


TREE_PREFIX = "tree:"  # a fragment shipped in the kernel tree, e.g. its bpf selftests' config


def is_tree_fragment(name: str) -> bool:
    return name.startswith(TREE_PREFIX)


def config_slug(names: tuple[str, ...] | list[str]) -> str:
    """A directory-name-safe label for a list of fragments (worktree and build dir names)."""
    parts = [re.sub(r"[^A-Za-z0-9._-]+", "_",
                    n.removeprefix(TREE_PREFIX).removeprefix("tools/testing/selftests/"))
             for n in names]
    return "+".join(parts)


def checked_fragment(name: str) -> Path:
    """One of our fragments (not tree:PATH) by name or path, every line checked; the path
    the build then uses, so a fragment is resolved once per run."""
    path = resolve_fragment(name)
    check_fragment(path, name)
    return path


def resolve_fragment(name: str, tree: Path | None = None) -> Path:
    """A fragment by name (kconfigs/NAME.config), by path, or tree:PATH inside the kernel tree.

    Tree fragments are the tree's own (e.g. tools/testing/selftests/bpf/config): they are
    written for a full distro-like config, so what olddefconfig drops from them is reported,
    not fatal (see `configure`).
    """
    if is_tree_fragment(name):
        if tree is None:
            raise ConfigError(f"{name}: a fragment from the kernel tree needs a kernel source "
                              "tree (not a prebuilt image)")
        path = tree / name.removeprefix(TREE_PREFIX)
        if not path.is_file():
            raise ConfigError(f"{name}: this kernel tree has no {path.relative_to(tree)}; "
                              "fix: check the path, or drop the fragment for this base")
        # the harness reads it itself: a file of the tree, not a link out of it
        return sandbox.regular_file(path, tree)
    candidate = Path(name)
    if candidate.suffix == ".config" and candidate.exists():
        return candidate.resolve()
    in_repo = paths.repo_root() / "kconfigs" / f"{name}.config"
    if in_repo.exists():
        return in_repo
    known = sorted(p.stem for p in (paths.repo_root() / "kconfigs").glob("*.config"))
    raise ConfigError(f"config fragment {name!r} not found; known: {', '.join(known)} "
                      "(or pass a path to a .config fragment)")


# What `make tinyconfig`, merge_config.sh and olddefconfig read from a tree: every Kconfig
# file, the config fragments under configs/, the Makefiles that define the config targets,
# and scripts/ (kconfig itself, and the helpers Kconfig's $(shell,...) macros run).
_KCONFIG_INPUT = re.compile(r"(?:^|/)Kconfig[^/]*$|^scripts/|^Makefile$|^arch/[^/]+/Makefile"
                            r"|^(?:arch/[^/]+|kernel)/configs/")


def kconfig_inputs(tree: Path) -> str:
    """An id of the tree's kconfig inputs: a patch to mm/memcontrol.c leaves it alone, so
    the .config of the tree before it is reused without running Kconfig again.

    Remembered per tree object: a commit whose diff from its parent touches no input
    has its parent's id (a developer's one-line patch on a series: one `git diff-tree`,
    where listing the tree's 87,000 paths took 0.2 s of every run)."""
    head = git(tree, "rev-parse", "HEAD^{tree}", what="git rev-parse").strip()
    memo_file = paths.sub("kconfig") / _INPUTS_MEMO
    memo: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError, TypeError):
        memo = {str(k): str(v) for k, v in json.loads(memo_file.read_text()).items()}
    if head in memo:
        return memo[head]
    parent = git_run(tree, "rev-parse", "--verify", "-q", "HEAD^^{tree}", timeout=60)
    known = memo.get(parent.output.strip()) if parent.ok else None
    if known is not None and not any(_KCONFIG_INPUT.search(path) for path in git(
            tree, "diff-tree", "-r", "--name-only", "--no-commit-id", "HEAD^", "HEAD",
            what="git diff-tree").splitlines()):
        found = known
    else:
        listing = git(tree, "ls-tree", "-r", "HEAD", what="git ls-tree", timeout=120)
        h = hashlib.sha256()
        for line in listing.splitlines():
            meta, _, path = line.partition("\t")
            if _KCONFIG_INPUT.search(path):
                h.update(f"{meta.split()[-1]} {path}\n".encode())
        found = h.hexdigest()
    memo[head] = found
    # the newest _INPUTS_KEPT: a memo, so losing it (or a race) costs a listing, no more
    with contextlib.suppress(OSError):
        atomic.write_text(memo_file, json.dumps(dict(list(memo.items())[-_INPUTS_KEPT:])))
    return found


# tree object -> kconfig_inputs(), under the kconfig cache; named with what decides an
# input, so that a harness that reads other paths as inputs remembers anew
_INPUTS_MEMO = f"inputs-{hashlib.sha256(_KCONFIG_INPUT.pattern.encode()).hexdigest()[:8]}.json"
_INPUTS_KEPT = 512


def make_vars(target: Target) -> list[str]:
    """What Kconfig must be told of the target: the arch, and the compiler it tests
    (CC_IS_CLANG, CC_VERSION_TEXT, the toolchain's features), and the pahole the build
    uses (PAHOLE_VERSION: HARNESS_PAHOLE's, else the target's, else the host's)."""
    return [*target.kbuild_vars(), *pahole.chosen(target.pahole).make_vars]


def within(bounds: str, version: tuple[int, int]) -> bool:
    """Whether the kernel is within bounds written as a fragment directive writes them
    (">= 6.13, < 8.0"); bounds that do not parse are an error of the data that has them."""
    parsed, problem = version_bounds(bounds)
    if problem:
        raise ConfigError(f"{bounds!r}: {problem}",
                          fix='write bounds as ">= 6.13" or ">= 6.13, < 8.0"')
    return _holds(parsed, version)


def with_needed_pahole(tgt: Target, tree: Path, configs: Sequence[str],
                       commit: str = "") -> Target:
    """The target with the pahole harness/target/pahole.toml's first holding rule names for
    this tree (its version at `commit`, else as checked out) and these fragments, said on
    the terminal; else as it was."""
    release = kernel_release(tree, commit)
    if release is None:
        return tgt
    for need in target_data.pahole_needs():
        if set(need.configs) <= set(configs) and within(need.kernels, release):
            override = os.environ.get(pahole.ENV, "").strip()
            log.info("pahole: %s for this kernel's BTF (harness/target/pahole.toml: %s)%s",
                     need.pahole, " ".join(need.why.split()),
                     f"; {pahole.ENV}={override} given, which wins" if override else "")
            return replace(tgt, pahole=need.pahole)
    return tgt


def arch_fragment(target: Target) -> Path:
    """The arch's own config lines (harness/target/arches/ARCH.toml) as a fragment file, applied
    before every other fragment so that any of them may override a line."""
    text = f"# the {target.arch.name} lines of harness/target/arches/{target.arch.name}.toml\n" \
        + target.arch.config.lstrip("\n")
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = paths.sub("kconfig") / f"arch-{target.arch.name}-{digest}.config"
    if not path.exists():
        atomic.write_text(path, text)
    return path


def generate(tree: Path, fragments: list[Path], *, log_dir: Path,
             target: Target | None = None,
             origin: Mapping[Path, Path] | None = None) -> tuple[Path, str]:
    """Produce the merged, olddefconfig'd config in the cache; returns (path, its sha256).

    Cached by (the tree's kconfig inputs, the compiler, the fragments' contents): the same
    inputs never run Kconfig twice.
    """
    target = target or default_target()
    variables = make_vars(target)
    # Kconfig records the tools' versions (CC, LD, AS, PAHOLE_VERSION) and tests them.
    for t in target.version_commands():
        if proc.which(t) is None:  # a cross compiler: its arch's packages, said as such
            raise proc.ToolMissingError(t, target.install_fix())
    tools = [(proc.version_output(t) or "").splitlines()[:1]
             for t in (*target.version_commands(), "pahole")]
    h = hashlib.sha256(f"{BASE}\n{kconfig_inputs(tree)}\n{tools}\n".encode())
    if variables:
        h.update(" ".join(variables).encode() + b"\n")
    for frag in fragments:
        h.update(frag.name.encode() + b"\n" + frag.read_bytes())
    key = h.hexdigest()[:16]
    out = paths.sub("kconfig") / f"{key}.config"
    if out.exists():
        return out, hashlib.sha256(out.read_bytes()).hexdigest()
    scratch = paths.sub("kconfig-scratch") / tree.name
    scratch.mkdir(parents=True, exist_ok=True)
    klog = log_dir / "kconfig.log"
    # the tree's Kconfig scripts and merge_config.sh: its code, sandboxed
    reach = sandbox.for_tree(tree, write=(scratch,),
                             read=(*fragments, *pahole.chosen(target.pahole).reads))
    proc.check(["make", "-s", "-C", str(tree), f"O={scratch}", *variables, BASE],
               what=f"make {BASE}", timeout=600, log_path=klog, sandbox=reach)
    proc.check([str(tree / "scripts/kconfig/merge_config.sh"), "-m", "-O", str(scratch),
                str(scratch / ".config"), *map(str, fragments)],
               what="merge_config.sh", timeout=600, cwd=tree, log_path=klog, sandbox=reach)
    done = proc.check(["make", "-s", "-C", str(tree), f"O={scratch}", *variables,
                       "olddefconfig"],
                      what="make olddefconfig", timeout=600, log_path=klog, sandbox=reach)
    invalid = _KCONFIG_INVALID.findall(done.output)
    if invalid:
        lines = "\n".join(
            f"  CONFIG_{sym}={value}: kconfig: symbol value '{value}' invalid for {sym}"
            + (f" (requested at {at})"
               if (at := request_line(fragments, f"CONFIG_{sym}", origin)) else "")
            for value, sym in invalid)
        raise ConfigError(f"kconfig rejected {len(invalid)} requested value(s):\n{lines}",
                          fix="give each option a value of its type (see its Kconfig "
                              "entry: bool y/n, tristate y/m/n, int, hex, string)",
                          log=klog)
    atomic.copy_file(sandbox.regular_file(scratch / ".config", scratch), out)
    return out, hashlib.sha256(out.read_bytes()).hexdigest()


def request_owners(fragments: list[Path]) -> dict[str, Path]:
    """CONFIG_X -> the fragment whose request stands (the last one that names it)."""
    return {sym: frag for frag in fragments for sym in parse_config(frag.read_text())}


def split_dropped(dropped: tuple[DroppedSymbol, ...], owner: dict[str, Path],
                  lenient: Collection[Path]) -> tuple[tuple[DroppedSymbol, ...],
                                                      tuple[DroppedSymbol, ...]]:
    """(fatal, tolerated): a drop is tolerated when a lenient fragment made the request."""
    fatal = tuple(d for d in dropped if owner.get(d.symbol) not in lenient)
    return fatal, tuple(d for d in dropped if owner.get(d.symbol) in lenient)


def dropped_error(dropped: tuple[DroppedSymbol, ...], fragments: list[Path],
                  final: dict[str, str], index: dict[str, KconfigEntry], *,
                  log: Path | None, origin: Mapping[Path, Path] | None = None) -> ConfigError:
    """What the terminal says of options olddefconfig dropped: each with the fragment line
    that asked for it and why it is off, then the fix (the symbols to add, by name)."""
    lines = "\n".join(
        f"  {d.symbol}: asked {d.requested}, got {d.actual}"
        + (f" (requested at {at})" if (at := request_line(fragments, d.symbol, origin))
           else "")
        + f"\n    {d.reason}" for d in dropped
    )
    needed = [f"CONFIG_{s}=y" for d in dropped if d.requested != "n"
              for s in unmet_symbols(d.symbol, final, index)]
    fixes = []
    if needed:
        fixes.append(f"add {' '.join(dict.fromkeys(needed))} to the fragment (the unmet "
                     "dependencies), or drop the options that need them")
    if any(d.reason.startswith("unknown symbol") for d in dropped):
        fixes.append("correct each unknown symbol's name, or drop it")
    if any(" is selected by " in d.reason for d in dropped):
        fixes.append("for an option forced on, drop the option that selects it")
    return ConfigError(
        f"{len(dropped)} requested config option(s) did not survive olddefconfig:\n{lines}",
        dropped,
        fix="; ".join(fixes) or "check each option's dependencies in its Kconfig entry",
        log=log,
    )


def configure(tree: Path, build_dir: Path, fragments: list[Path], *,
              log_dir: Path, lenient: Collection[Path] = (),
              target: Target | None = None) -> ConfigResult:
    """Generate, verify, and install the .config into build_dir only if it changed.

    A requested option that olddefconfig dropped is an error, unless the fragment that
    asked for it last is in `lenient` (the tree's own fragments): then it is reported in
    the result's `dropped`, with the reason, and the build goes on.
    """
    target = target or default_target()
    asked = fragments  # what results name: the arch's own lines are the arch's, not a fragment
    # each fragment as this kernel takes it: lines limited to other kernels left out
    fragments, origin = rendered([arch_fragment(target), *fragments], kernel_release(tree))
    lenient = [f for f in fragments if origin.get(f, f) in lenient]
    generated, _ = generate(tree, fragments, log_dir=log_dir, target=target, origin=origin)
    final = parse_config(generated.read_text())
    wanted = requested_symbols(fragments)
    owner = request_owners(fragments)
    dropped = verify(final, wanted, None)
    tolerated: tuple[DroppedSymbol, ...] = ()
    if dropped:
        index = index_kconfig(tree)
        dropped, tolerated = split_dropped(verify(final, wanted, index), owner, lenient)
        if tolerated:
            log.warning("%d option(s) of the tree's own config fragments did not survive "
                        "olddefconfig (not fatal; each with its reason in results.json and "
                        "kconfig-dropped.txt): %s", len(tolerated),
                        " ".join(d.symbol.removeprefix("CONFIG_") for d in tolerated))
            came = {d.symbol: origin.get(owner[d.symbol], owner[d.symbol]) for d in tolerated}
            (log_dir / "kconfig-dropped.txt").write_text("".join(
                f"{d.symbol} (from {came[d.symbol].relative_to(tree)}): asked {d.requested}, "
                f"got {d.actual}: {d.reason}\n" for d in tolerated))
        if dropped:
            raise dropped_error(dropped, fragments, final, index, log=log_dir / "kconfig.log",
                                origin=origin)
    build_dir.mkdir(parents=True, exist_ok=True)
    installed = build_dir / ".config"
    changed = not installed.exists() or installed.read_bytes() != generated.read_bytes()
    if changed:
        shutil.copyfile(generated, installed)
        log.info("wrote new .config to %s", installed)
    return ConfigResult(
        config_path=installed,
        requested=tuple(sorted(wanted)),
        dropped=tolerated,
        fragments=tuple(str(f) for f in asked),
        changed=changed,
    )
