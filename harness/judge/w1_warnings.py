"""The W=1 warnings of one object before and after a patch (pure: text in, data out).

`harness check` compiles every .c file a patch touches alone with W=1, before the patch and
after it (drivers/check.py). This cuts make's output down to that object's lines, keeps
its warnings and normalises them (no line or column: code that only moved is no new
warning; paths relative to the tree; hex offsets masked), and compares them as multisets:
a warning the patch adds fails it.
"""

from __future__ import annotations

import enum
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ERROR_LINES = 12  # a failed compile's or build's error lines kept
# Sources that are not kernel objects: kbuild cannot compile them as `make path/file.o`.
NOT_KERNEL_OBJECTS = ("tools/", "scripts/", "usr/", "Documentation/")

_QUIET_CMD = re.compile(r"^  ([A-Z][A-Z0-9_-]*)(?: \[M\])?\s+(\S+)\s*$")
_WARNING = re.compile(r"^(?P<path>[^\s:][^:]*?)(?::(?P<line>\d+))?(?::(?P<col>\d+))?: "
                      r"warning: (?P<msg>.*)$")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_ERROR_LINE = re.compile(r"\berror:|\bError \d+|undefined reference|No rule to make target")


class CompileState(enum.Enum):
    COMPILED = "compiled"
    FAILED = "failed"
    ABSENT = "absent"  # the file does not exist at this prefix
    NOT_BUILT = "not-built"  # make compiled nothing: not part of this configuration


@dataclass(frozen=True, kw_only=True)
class ObjectCompile:
    source: str  # path in the tree, e.g. mm/memcontrol.c
    prefix: int  # how many patches were applied
    state: CompileState
    warnings: tuple[str, ...] = ()  # as the compiler printed them
    normalised: tuple[str, ...] = ()
    detail: str = ""  # one line: why it failed or was not compiled
    error_lines: tuple[str, ...] = ()
    log: Path | None = None
    duration_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class WarningDelta:
    source: str
    before: ObjectCompile
    after: ObjectCompile
    new: tuple[str, ...]  # normalised warnings the patch added (with multiplicity)
    gone: tuple[str, ...]  # normalised warnings the patch removed
    compared: bool
    note: str = ""

    @property
    def failed(self) -> bool:
        broke = (self.after.state is CompileState.FAILED
                 and self.before.state is not CompileState.FAILED)
        return bool(self.new) or broke


def object_output(lines: list[str], obj: str) -> list[str] | None:
    """The lines make printed while compiling obj (after its `  CC  obj` line), or None.

    Anything before it (prepare steps that W=1 also rebuilds, e.g. asm-offsets) belongs to
    other objects.
    """
    start = None
    for i, line in enumerate(lines):
        m = _QUIET_CMD.match(line)
        if m and m.group(1) == "CC" and m.group(2) == obj:
            start = i + 1
    if start is None:
        return None
    out = []
    for line in lines[start:]:
        if _QUIET_CMD.match(line):
            break
        out.append(line)
    return out


def extract_warnings(lines: list[str]) -> tuple[str, ...]:
    return tuple(ln.rstrip() for ln in lines if _WARNING.match(ln.rstrip()))


def _relative_path(path: str, tree: Path, build_dir: Path) -> str:
    # kbuild runs the compiler in the build directory: relative paths are relative to it
    # (../mm/x.c: the build directory is inside the tree; see paths.build_dir).
    p = Path(os.path.normpath(build_dir / path)) if not os.path.isabs(path) \
        else Path(os.path.normpath(path))
    for root in (build_dir, tree):  # the build directory is inside the tree
        if p.is_relative_to(root):
            return str(p.relative_to(root))
    return str(p)


def normalise_warning(line: str, tree: Path, build_dir: Path) -> str:
    """`../../work/T/mm/x.c:12:5: warning: M [-Wf]` -> `mm/x.c: warning: M [-Wf]`.

    Line and column go (moved code is not a new warning), paths become tree-relative, hex
    offsets (objtool's `func+0x1a`) are masked. Lines that are not warnings come back as
    they are.
    """
    m = _WARNING.match(line.rstrip())
    if not m:
        return line.rstrip()
    path = _relative_path(m.group("path"), tree, build_dir)
    msg = _HEX.sub("0x?", m.group("msg").strip())
    return f"{path}: warning: {msg}"


def warning_delta(before: tuple[str, ...], after: tuple[str, ...]
                  ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(added, removed) between two lists of normalised warnings, counted as multisets."""
    added = Counter(after) - Counter(before)
    removed = Counter(before) - Counter(after)
    return tuple(added.elements()), tuple(removed.elements())


def compare(before: ObjectCompile, after: ObjectCompile) -> WarningDelta:
    """What a patch did to one file's W=1 warnings."""
    def delta(compared: bool, note: str = "", new: tuple[str, ...] = (),
              gone: tuple[str, ...] = ()) -> WarningDelta:
        return WarningDelta(source=after.source, before=before, after=after, new=new,
                            gone=gone, compared=compared, note=note)

    if after.state is CompileState.ABSENT:
        return delta(True, "deleted by this patch", gone=before.normalised)
    if after.state is CompileState.FAILED:
        if before.state is CompileState.FAILED:
            return delta(False, "does not compile before or after this patch")
        return delta(False, f"does not compile with W=1 after this patch ({after.detail})")
    if before.state is CompileState.FAILED:
        return delta(False, "did not compile before this patch; warnings not compared")
    if after.state is CompileState.NOT_BUILT:
        return delta(False, "not compiled in this configuration")
    # before may be ABSENT (a new file: all its warnings are new) or NOT_BUILT (the patch
    # made it part of the configuration).
    new, gone = warning_delta(before.normalised, after.normalised)
    note = "new file" if before.state is CompileState.ABSENT else ""
    return delta(True, note, new=new, gone=gone)


def error_lines(text: str) -> list[str]:
    """A build log's error lines (the compiler's, make's, the linker's), in order."""
    return [ln.rstrip() for ln in text.splitlines() if _ERROR_LINE.search(ln)]


def first_errors(text: str, limit: int = ERROR_LINES) -> tuple[str, ...]:
    """The first error lines of a build log (the root cause under -j), else its last lines:
    what a failed build's message shows."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return tuple((error_lines(text) or lines[-limit:])[:limit])


def c_sources(files: tuple[str, ...]) -> tuple[str, ...]:
    """The files of a patch that kbuild compiles as kernel objects."""
    return tuple(f for f in files
                 if f.endswith(".c") and " => " not in f and not f.startswith(NOT_KERNEL_OBJECTS))
