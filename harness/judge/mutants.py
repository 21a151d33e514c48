"""Mutants of kernel C code: pure functions from source text to one-line bugs.

The operators are data (mutation_operators.toml); each names an engine here that rewrites
one line (two adjacent ones for a move). A mutant never changes the number of lines, so
`__LINE__` and what follows stay put, and a mutant whose object file is unchanged is
equivalent. Which lines may be mutated is the caller's: the lines a series adds, or the
body of a function named with --target.
"""

from __future__ import annotations

import difflib
import hashlib
import random
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.base.errors import HarnessError
from harness.base.model import Status

OPERATORS_FILE = Path(__file__).resolve().parent / "mutation_operators.toml"


class MutantError(HarnessError):
    status = Status.SETUP_ERROR


@dataclass(frozen=True, kw_only=True)
class Operator:
    name: str
    engine: str
    description: str
    params: Mapping[str, object]


@dataclass(frozen=True, kw_only=True)
class Mutant:
    """Lines start..start+len(before)-1 of file (1-based) become `after` (as many lines)."""

    file: str  # relative to the tree
    start: int
    before: tuple[str, ...]
    after: tuple[str, ...]
    operator: str
    source: str  # where the line was chosen: "series NAME" or "target FILE:FUNCTION"

    @property
    def id(self) -> str:
        """Stable over runs: what changes, where and how."""
        text = "\n".join([self.file, str(self.start), self.operator, *self.before, *self.after])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def summary(self) -> str:
        old = " / ".join(line.strip() for line in self.before)
        new = " / ".join(line.strip() for line in self.after)
        return f"{self.file}:{self.start} {self.operator}: {old}  ->  {new}"

    def apply(self, text: str) -> str:
        lines = text.split("\n")
        got = tuple(lines[self.start - 1 : self.start - 1 + len(self.before)])
        if got != self.before:
            raise MutantError(f"mutant {self.id}: {self.file}:{self.start} is not what it "
                              "was made from (the tree moved)")
        lines[self.start - 1 : self.start - 1 + len(self.before)] = list(self.after)
        return "\n".join(lines)

    def patch(self, text: str) -> str:
        """A mail `git am` takes: the mutant as one commit."""
        diff = "".join(difflib.unified_diff(
            text.splitlines(keepends=True), self.apply(text).splitlines(keepends=True),
            fromfile=f"a/{self.file}", tofile=f"b/{self.file}", n=3))
        return (f"From: harness mutate <mutate@localhost>\n"
                f"Subject: [PATCH] MUTANT {self.id}: {self.operator} at "
                f"{self.file}:{self.start}\n\n{self.summary}\n---\n"
                f"diff --git a/{self.file} b/{self.file}\n{diff}")


def load_operators(path: Path = OPERATORS_FILE) -> tuple[Operator, ...]:
    try:
        data = tomllib.loads(path.read_text())
        ops = tuple(Operator(name=str(o["name"]), engine=str(o["engine"]),
                             description=str(o["description"]),
                             params={k: v for k, v in o.items()
                                     if k not in ("name", "engine", "description")})
                    for o in data["operator"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise MutantError(f"cannot read the mutation operators {path}: {exc}") from None
    unknown = [o.engine for o in ops if o.engine not in ENGINES]
    if unknown:
        raise MutantError(f"{path}: unknown engine(s) {', '.join(unknown)}; known: "
                          f"{', '.join(sorted(ENGINES))}")
    return ops


# ---- what a line is ----

_CALL = re.compile(r"^\s*(?:\(void\)\s*)?[A-Za-z_]\w*(?:(?:->|\.)\w+)*\s*\(.*\)\s*;\s*$")
# an assignment to a name, member or element; not a declaration (TYPE name = ...)
_ASSIGN = re.compile(r"^\s*\**[A-Za-z_]\w*(?:(?:->|\.)\w+|\[[^\]]*\])*\s*"
                     r"(?:[-+*/|&^]|<<|>>)?=(?!=)\s*.+;\s*$")
_CONTROL = re.compile(r"^\s*(?:if|while|for|switch|return|goto|break|continue|case|default|do)\b")
_DECL_START = re.compile(r"^\s*(?:static|const|struct|union|enum|unsigned|signed|int|long|"
                         r"short|char|bool|void|u8|u16|u32|u64|s8|s16|s32|s64|size_t|"
                         r"ssize_t)\b")
_COMPARISON = re.compile(r"(<<=|>>=|<<|>>|->|<=|>=|==|!=|<|>)")
_NEGATION = re.compile(r"(?<![!=<>])!(?!=)\s*(?=[A-Za-z_(])")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_RETURN = re.compile(r"^(\s*)return\s+(.+?)\s*;\s*$")
_LITERAL = re.compile(r"^(?:-?\d+[uUlL]*|-?0[xX][0-9a-fA-F]+|NULL|true|false|-?E[A-Z]+|"
                      r"-[A-Z]+)$")
_CLOSE = re.compile(r"^\s+}\s*$")
_SIMPLE_ARG = re.compile(r"^\s*&?[A-Za-z_]\w*(?:(?:->|\.)\w+)*\s*$")
_KEYWORDS = frozenset({"if", "while", "for", "switch", "return", "sizeof", "typeof",
                       "defined", "__builtin_expect", "likely", "unlikely"})


def code_lines(text: str) -> dict[int, str]:
    """1-based line number -> line, for lines that are code: not in a comment, not
    preprocessor, not blank. (Comments inside a code line are left as they are.)"""
    out: dict[int, str] = {}
    in_comment = False
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if in_comment:
            if "*/" in stripped:
                in_comment = False
            continue
        if stripped.startswith("/*") and "*/" not in stripped:
            in_comment = True
            continue
        if not stripped or stripped.startswith(("#", "//", "/*", "*")):
            continue
        out[n] = line
    return out


def _code_part(line: str) -> tuple[str, str]:
    """(code, trailing comment) of a line."""
    m = re.search(r"\s*(/\*.*\*/|//.*)$", line)
    return (line[: m.start()], line[m.start():]) if m else (line, "")


def _in_string(line: str, pos: int) -> bool:
    return line[:pos].count('"') % 2 == 1


# ---- engines: (operator, line, next line, context) -> replacement line tuples ----

Engine = Callable[[Operator, str, str | None, "Context"], list[tuple[str, ...]]]


@dataclass(frozen=True, kw_only=True)
class Context:
    functions: frozenset[str]  # functions the tree defines (for local twins)


def _delete_statement(op: Operator, line: str, _next: str | None,
                      _ctx: Context) -> list[tuple[str, ...]]:
    code, _ = _code_part(line)
    # statements are inside functions; at column 0 are file-scope macros (late_initcall)
    if not code[:1].isspace() or _CONTROL.match(code) or _DECL_START.match(code):
        return []
    pattern = _CALL if op.params.get("kind") == "call" else _ASSIGN
    if not pattern.match(code):
        return []
    # An empty block, not a bare ";": the line stays a statement wherever it was (under an
    # if without braces too) and the compiler has nothing to warn about (-Wempty-body).
    indent = code[: len(code) - len(code.lstrip())]
    return [(f"{indent}{{ }}",)]


def _replace_operator(op: Operator, line: str, _next: str | None,
                      _ctx: Context) -> list[tuple[str, ...]]:
    table = op.params.get("replace", {})
    assert isinstance(table, dict)
    code, comment = _code_part(line)
    out: list[tuple[str, ...]] = []
    for m in _COMPARISON.finditer(code):
        token = m.group(1)
        if token not in table or _in_string(code, m.start()):
            continue
        if token in ("<", ">") and re.search(r"#\s*include|<[A-Za-z_/.]+>", code):
            continue
        new = code[: m.start()] + str(table[token]) + code[m.end():]
        out.append((new + comment,))
    return out


def _drop_negation(_op: Operator, line: str, _next: str | None,
                   _ctx: Context) -> list[tuple[str, ...]]:
    code, comment = _code_part(line)
    if not re.match(r"^\s*(?:if|while|return|.*\?)", code) and "&&" not in code \
            and "||" not in code:
        return []
    return [(code[: m.start()] + code[m.end():] + comment,)
            for m in _NEGATION.finditer(code) if not _in_string(code, m.start())]


def _rename_call(op: Operator, line: str, _next: str | None,
                 ctx: Context) -> list[tuple[str, ...]]:
    if line[:1] not in (" ", "\t"):
        # kernel style: a line at column 0 declares or defines a function (calls sit in
        # a body, indented); renamed, it is a redefinition of the twin, not a bug
        return []
    code, comment = _code_part(line)
    twins = op.params.get("twins", [])
    assert isinstance(twins, list)
    out: list[tuple[str, ...]] = []
    for m in _CALLED.finditer(code):
        name = m.group(1)
        if name in _KEYWORDS:
            continue
        for pattern, replacement in twins:
            twin = re.sub(pattern, replacement, name) if re.match(pattern, name) else name
            if twin != name and twin in ctx.functions:
                out.append((code[: m.start(1)] + twin + code[m.end(1):] + comment,))
    return out


def _drop_flag(op: Operator, line: str, _next: str | None,
               _ctx: Context) -> list[tuple[str, ...]]:
    m = re.match(r"^(\s*BTF_ID_FLAGS\(\s*func\s*,\s*\w+)\s*,\s*(.+?)\s*\)(.*)$", line)
    if m is None:
        return []
    flags = [f.strip() for f in m.group(2).split("|")]
    pattern = re.compile(str(op.params.get("pattern", r"KF_\w+")))
    out: list[tuple[str, ...]] = []
    for i, flag in enumerate(flags):
        if not pattern.fullmatch(flag):
            continue
        rest = flags[:i] + flags[i + 1:]
        args = f", {' | '.join(rest)}" if rest else ""
        out.append((f"{m.group(1)}{args}){m.group(3)}",))
    return out


def _return_constant(op: Operator, line: str, _next: str | None,
                     _ctx: Context) -> list[tuple[str, ...]]:
    code, comment = _code_part(line)
    m = _RETURN.match(code)
    if m is None or _LITERAL.match(m.group(2)):
        return []
    constants = op.params.get("constants", ["0"])
    assert isinstance(constants, list)
    return [(f"{m.group(1)}return {c};{comment}",) for c in constants if c != m.group(2)]


def _substitute(op: Operator, line: str, _next: str | None,
                _ctx: Context) -> list[tuple[str, ...]]:
    """Each occurrence of each [pattern, replacement] pair, replaced alone."""
    code, comment = _code_part(line)
    pairs = op.params.get("pairs", [])
    assert isinstance(pairs, list)
    out: list[tuple[str, ...]] = []
    for pattern, replacement in pairs:
        for m in re.finditer(pattern, code):
            if _in_string(code, m.start()):
                continue
            out.append((code[: m.start()] + m.expand(replacement) + code[m.end():] + comment,))
    return out


def _alternatives(op: Operator, line: str, nxt: str | None,
                  ctx: Context) -> list[tuple[str, ...]]:
    """Each named flag of a group replaced by each other member of its group."""
    groups = op.params.get("groups", [])
    assert isinstance(groups, list)
    pairs = [[rf"\b{re.escape(a)}\b", b] for group in groups for a in group for b in group
             if a != b]
    return _substitute(Operator(name=op.name, engine="substitute",
                                description=op.description, params={"pairs": pairs}),
                       line, nxt, ctx)


def _drop_condition(op: Operator, line: str, _next: str | None,
                    _ctx: Context) -> list[tuple[str, ...]]:
    """`if (COND)` whose condition (on this line, parentheses balanced) mentions the
    operator's pattern: taken as false."""
    code, comment = _code_part(line)
    m = re.match(r"^(\s*(?:}\s*else\s+)?if\s*)\((.*)\)(\s*\{?\s*)$", code)
    if m is None or _split_args(m.group(2)) is None:
        return []
    if not re.search(str(op.params.get("pattern", "")), m.group(2)):
        return []
    return [(f"{m.group(1)}(0){m.group(3)}{comment}",)]


def _split_args(text: str) -> list[str] | None:
    """The top-level arguments of a call's parenthesised text, or None if unbalanced."""
    args, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
        else:
            cur += ch
    if depth != 0:
        return None
    args.append(cur)
    return args


def _swap_arguments(_op: Operator, line: str, _next: str | None,
                    _ctx: Context) -> list[tuple[str, ...]]:
    code, comment = _code_part(line)
    out: list[tuple[str, ...]] = []
    for m in _CALLED.finditer(code):
        if m.group(1) in _KEYWORDS or m.group(1).isupper():
            continue
        # the parenthesised arguments, if they close on this line
        depth, end = 0, None
        for i in range(m.end() - 1, len(code)):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            if depth == 0:
                end = i
                break
        if end is None:
            continue
        args = _split_args(code[m.end(): end])
        if args is None:
            continue
        for i in range(len(args) - 1):
            a, b = args[i], args[i + 1]
            if not (_SIMPLE_ARG.match(a) and _SIMPLE_ARG.match(b)) or a.strip() == b.strip():
                continue
            swapped = [*args[:i], f"{a[: len(a) - len(a.lstrip())]}{b.strip()}",
                       f"{b[: len(b) - len(b.lstrip())]}{a.strip()}", *args[i + 2:]]
            out.append((code[: m.end()] + ",".join(swapped) + code[end:] + comment,))
    return out


def _move_statement(op: Operator, line: str, nxt: str | None,
                    _ctx: Context) -> list[tuple[str, ...]]:
    if nxt is None:
        return []

    def statement(text: str) -> bool:
        code, _ = _code_part(text)
        return bool((_CALL.match(code) or _ASSIGN.match(code)) and not _CONTROL.match(code)
                    and not _DECL_START.match(code))

    if op.params.get("direction") == "out" and statement(line) and _CLOSE.match(nxt):
        # the brace first, then the statement at the brace's indentation: outside
        return [(nxt, _indented(line, _indent_of(nxt)))]
    if op.params.get("direction") == "in" and _CLOSE.match(line) and statement(nxt):
        # the statement first, one level deeper than the brace: inside
        return [(_indented(nxt, _indent_of(line) + "\t"), line)]
    return []


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _indented(line: str, indent: str) -> str:
    return indent + line.lstrip()


ENGINES: dict[str, Engine] = {
    "delete-statement": _delete_statement,
    "replace-operator": _replace_operator,
    "drop-negation": _drop_negation,
    "rename-call": _rename_call,
    "drop-flag": _drop_flag,
    "return-constant": _return_constant,
    "swap-arguments": _swap_arguments,
    "move-statement": _move_statement,
    "substitute": _substitute,
    "alternatives": _alternatives,
    "drop-condition": _drop_condition,
}


def generate(file: str, text: str, lines: Iterable[int], operators: Iterable[Operator], *,
             source: str, functions: frozenset[str] = frozenset()) -> list[Mutant]:
    """Every mutant the operators make of the given lines of a file (1-based numbers)."""
    code = code_lines(text)
    all_lines = text.split("\n")
    ctx = Context(functions=functions)
    out: list[Mutant] = []
    seen: set[str] = set()
    for n in sorted(set(lines)):
        line = code.get(n)
        if line is None:
            continue
        nxt = all_lines[n] if n < len(all_lines) else None
        for op in operators:
            for after in ENGINES[op.engine](op, line, nxt, ctx):
                before = tuple(all_lines[n - 1 : n - 1 + len(after)])
                if after == before:
                    continue
                m = Mutant(file=file, start=n, before=before, after=after, operator=op.name,
                           source=source)
                if m.id not in seen:
                    seen.add(m.id)
                    out.append(m)
    return out


# ---- which lines ----


def added_lines(diff: str) -> dict[str, set[int]]:
    """file -> line numbers (in the new file) that `git diff -U0` shows added."""
    out: dict[str, set[int]] = {}
    file = None
    new_line = 0
    for line in diff.split("\n"):
        if line.startswith("+++ "):
            file = line[6:] if line.startswith("+++ b/") else None
        elif (m := re.match(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", line)) is not None:
            new_line = int(m.group(1))
        elif file and line.startswith("+") and not line.startswith("+++"):
            out.setdefault(file, set()).add(new_line)
            new_line += 1
        elif file and line.startswith(" "):
            new_line += 1
    return out


def function_lines(text: str, function: str) -> range | None:
    """The lines of a function's definition (signature to closing brace at column 0)."""
    lines = text.split("\n")
    # the name after its type on one line, or at the start of the next (kernel style for a
    # long signature: `__bpf_kfunc struct mem_cgroup *` / `bpf_get_mem_cgroup(...)`)
    rx = re.compile(rf"^(?:[A-Za-z_].*\b)?{re.escape(function)}\s*\(")
    for i, line in enumerate(lines):
        if rx.match(line) and not line.rstrip().endswith(";"):
            for j in range(i + 1, len(lines)):
                if lines[j].startswith("}"):
                    return range(i + 1, j + 2)
            return None
    return None


def called_functions(text: str) -> frozenset[str]:
    """The names called in a piece of C (macros and keywords that look like calls
    included; the caller looks their definitions up)."""
    return frozenset(m.group(1) for m in _CALLED.finditer(text)
                     if m.group(1) not in _KEYWORDS)


def defined_functions(text: str) -> frozenset[str]:
    """Names of the functions a C file defines (a definition starts in column 0)."""
    return frozenset(re.findall(r"^[A-Za-z_][^;(]*?\b([A-Za-z_]\w*)\s*\([^;]*$", text,
                                re.MULTILINE))


def sample(mutants: list[Mutant], count: int | None, seed: int) -> list[Mutant]:
    """A reproducible draw of `count` mutants, taken in turn from each source (the series,
    each --target), so that every source is represented when count allows."""
    if count is None or count >= len(mutants):
        return sorted(mutants, key=lambda m: (m.source, m.file, m.start, m.operator))
    rng = random.Random(seed)
    by_source: dict[str, list[Mutant]] = {}
    for m in sorted(mutants, key=lambda m: m.id):
        by_source.setdefault(m.source, []).append(m)
    for group in by_source.values():
        rng.shuffle(group)
    picked: list[Mutant] = []
    while len(picked) < count:
        for group in by_source.values():
            if group and len(picked) < count:
                picked.append(group.pop())
    return picked
