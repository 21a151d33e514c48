"""Base + fragments -> merge_config.sh -> olddefconfig -> a verified .config.

Parsing (`parse_config`, `requested_symbols`, `verify`, `explain_dependency`) is pure
text in, data out; `generate` runs the kernel's own tools in a scratch O= directory and
`install` writes the build's .config only when it changed, so incremental builds stay
incremental.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import re
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from . import atomic, paths, proc
from .errors import HarnessError
from .model import ConfigResult, DroppedSymbol, Status

log = logging.getLogger(__name__)

BASE = "tinyconfig"  # the make target every test config starts from
_SET = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")
_IDENT = re.compile(r"\b([A-Z][A-Z0-9_]+)\b")
# What a value can be in a .config: bool/tristate, int, hex, string.
_VALUE = re.compile(r'^(?:[ymn]|-?\d+|0[xX][0-9a-fA-F]+|"(?:[^"\\]|\\.)*")$')
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


def request_line(fragments: list[Path], symbol: str) -> str:
    """"file:line" of the request that stands for symbol (the last fragment naming it)."""
    found = ""
    for frag in fragments:
        for n, raw in enumerate(frag.read_text(errors="replace").splitlines(), 1):
            line = raw.strip()
            if line.startswith(f"{symbol}=") or line == f"# {symbol} is not set":
                found = f"{_display(frag)}:{n}"
    return found


def _display(path: Path) -> str:
    root = paths.repo_root()
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


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
    """`config SYM` -> its `depends on` lines (plus those of enclosing `if` and `menu` blocks)."""
    index: dict[str, KconfigEntry] = {}
    for kfile in tree.rglob("Kconfig*"):
        if not kfile.is_file():
            continue
        try:
            lines = kfile.read_text(errors="replace").splitlines()
        except OSError:
            continue
        rel = str(kfile.relative_to(tree))
        block_deps: list[list[str]] = []  # stack of `if EXPR` / `menu ... depends on` scopes
        current: str | None = None
        deps: list[str] = []
        selects: list[str] = []

        def flush(current: str | None, deps: list[str], selects: list[str],
                  block_deps: list[list[str]] = block_deps, rel: str = rel) -> None:
            if current is not None:
                _record(index, current, rel, [d for scope in block_deps for d in scope] + deps,
                        selects)

        help_indent: int | None = None  # inside a help text: its keyword's indentation
        for raw in lines:
            line = raw.strip()
            words = line.split(None, 1)
            if not words:
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
                flush(current, deps, selects)
                current, deps, selects = words[1].strip(), [], []
            elif head in ("select", "imply") and current is not None and len(words) == 2:
                selects.append(words[1].split()[0])
            elif head == "depends" and line.startswith("depends on") and current is not None:
                deps.append(line[len("depends on"):].strip())
            elif head == "if" and len(words) == 2:
                flush(current, deps, selects)
                current = None
                block_deps.append([words[1]])
            elif head == "endif":
                flush(current, deps, selects)
                current = None
                if block_deps:
                    block_deps.pop()
            elif head in ("menu", "choice", "endmenu", "endchoice", "comment", "source"):
                flush(current, deps, selects)
                current = None
        flush(current, deps, selects)
    return index


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
        return path
    candidate = Path(name)
    if candidate.suffix == ".config" and candidate.exists():
        return candidate.resolve()
    in_repo = paths.repo_root() / "kconfigs" / f"{name}.config"
    if in_repo.exists():
        return in_repo
    known = sorted(p.stem for p in (paths.repo_root() / "kconfigs").glob("*.config"))
    raise ConfigError(f"config fragment {name!r} not found; known: {', '.join(known)} "
                      "(or pass a path to a .config fragment)")


def generate(tree: Path, tree_id: str, fragments: list[Path], *, log_dir: Path) -> tuple[Path, str]:
    """Produce the merged, olddefconfig'd config in the cache; returns (path, its sha256).

    Cached by (tree id, fragment contents): the same inputs never run Kconfig twice.
    """
    h = hashlib.sha256(f"{BASE}\n{tree_id}\n".encode())
    for frag in fragments:
        h.update(frag.name.encode() + b"\n" + frag.read_bytes())
    key = h.hexdigest()[:16]
    out = paths.sub("kconfig") / f"{key}.config"
    if out.exists():
        return out, hashlib.sha256(out.read_bytes()).hexdigest()
    scratch = paths.sub("kconfig-scratch") / tree.name
    scratch.mkdir(parents=True, exist_ok=True)
    klog = log_dir / "kconfig.log"
    proc.check(["make", "-s", "-C", str(tree), f"O={scratch}", BASE],
               what=f"make {BASE}", timeout=600, log_path=klog)
    proc.check([str(tree / "scripts/kconfig/merge_config.sh"), "-m", "-O", str(scratch),
                str(scratch / ".config"), *map(str, fragments)],
               what="merge_config.sh", timeout=600, cwd=tree, log_path=klog)
    done = proc.check(["make", "-s", "-C", str(tree), f"O={scratch}", "olddefconfig"],
                      what="make olddefconfig", timeout=600, log_path=klog)
    invalid = _KCONFIG_INVALID.findall(done.output)
    if invalid:
        lines = "\n".join(
            f"  CONFIG_{sym}={value}: kconfig: symbol value '{value}' invalid for {sym}"
            + (f" (requested at {at})" if (at := request_line(fragments, f"CONFIG_{sym}"))
               else "")
            for value, sym in invalid)
        raise ConfigError(f"kconfig rejected {len(invalid)} requested value(s):\n{lines}",
                          fix="give each option a value of its type (see its Kconfig "
                              "entry: bool y/n, tristate y/m/n, int, hex, string)",
                          log=klog)
    atomic.copy_file(scratch / ".config", out)
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


def configure(tree: Path, tree_id: str, build_dir: Path, fragments: list[Path], *,
              log_dir: Path, lenient: Collection[Path] = ()) -> ConfigResult:
    """Generate, verify, and install the .config into build_dir only if it changed.

    A requested option that olddefconfig dropped is an error, unless the fragment that
    asked for it last is in `lenient` (the tree's own fragments): then it is reported in
    the result's `dropped`, with the reason, and the build goes on.
    """
    generated, _ = generate(tree, tree_id, fragments, log_dir=log_dir)
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
            (log_dir / "kconfig-dropped.txt").write_text("".join(
                f"{d.symbol} (from {owner[d.symbol].relative_to(tree)}): asked {d.requested}, "
                f"got {d.actual}: {d.reason}\n" for d in tolerated))
    if dropped:
        lines = "\n".join(
            f"  {d.symbol}: asked {d.requested}, got {d.actual}"
            + (f" (requested at {at})" if (at := request_line(fragments, d.symbol)) else "")
            + f"\n    {d.reason}" for d in dropped
        )
        unknown = all(d.reason.startswith("unknown symbol") for d in dropped)
        raise ConfigError(
            f"{len(dropped)} requested config option(s) did not survive olddefconfig:\n{lines}",
            dropped,
            fix="correct the symbol's name, or drop it from the fragment" if unknown else
                "add the unmet dependencies to the fragment (or drop the option); "
                "for a symbol forced on, drop the option that selects it",
            log=log_dir / "kconfig.log",
        )
    build_dir.mkdir(parents=True, exist_ok=True)
    target = build_dir / ".config"
    changed = not target.exists() or target.read_bytes() != generated.read_bytes()
    if changed:
        shutil.copyfile(generated, target)
        log.info("wrote new .config to %s", target)
    return ConfigResult(
        config_path=target,
        requested=tuple(sorted(wanted)),
        dropped=tolerated,
        fragments=tuple(str(f) for f in fragments),
        changed=changed,
    )
