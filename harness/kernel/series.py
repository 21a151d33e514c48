"""Patch series -> `git am -3` in the worktree -> per-patch status.

A series is `patches/<name>/` with a `series` file listing format-patch files in order;
`series-<base>` (e.g. `series-6.1`) is a per-base variant chosen when the kernel spec
names that base. Each patch is reported applied, already in base, or conflicting. A
conflict stops the cell, names the patch, files and rejected hunks, and the worktree is
reset to the base commit: no half-applied state survives.
"""

from __future__ import annotations

import email
import email.policy
import functools
import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.base import atomic, paths, proc
from harness.base.errors import HarnessError
from harness.base.gitcmd import git, git_run
from harness.base.model import KernelSpec, PatchResult, PatchState, Status
from harness.kernel import mbox, sources

log = logging.getLogger(__name__)

_AM_ENV = {
    "GIT_COMMITTER_NAME": "harness",
    "GIT_COMMITTER_EMAIL": "harness@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


class SeriesError(HarnessError):
    """A series or a patch file cannot be found or read, or is not a patch."""

    status = Status.SETUP_ERROR


class PatchConflictError(HarnessError):
    status = Status.PATCH_CONFLICT

    def __init__(self, message: str, results: tuple[PatchResult, ...], *, fix: str = "",
                 log: Path | None = None) -> None:
        super().__init__(message, fix=fix, log=log)
        self.results = results


@dataclass(frozen=True, kw_only=True)
class Patch:
    path: Path
    series: str  # the series it belongs to, or "--patch"

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def message_id(self) -> str:
        """The Message-Id of the mail it came in (a series from the list), else ""."""
        return message_id_of(self.path)


@dataclass(frozen=True, kw_only=True)
class Series:
    name: str
    directory: Path
    patches: tuple[Patch, ...]
    variant: str  # which series file was used


def from_the_list(name: str) -> bool:
    """mbox:FILE or lore:MSGID: a thread, not a directory under patches/ (no provides.toml,
    no per-base variants)."""
    return name.startswith(("mbox:", "lore:"))


def series_dir(name: str) -> Path:
    candidate = Path(name)
    if candidate.is_dir() and (candidate / "series").exists():
        return candidate.resolve()
    d = paths.repo_root() / "patches" / name
    if not d.is_dir():
        known = sorted(p.name for p in (paths.repo_root() / "patches").iterdir() if p.is_dir())
        raise SeriesError(f"patch series {name!r} not found; known: {', '.join(known) or 'none'}")
    return d


def load(name: str, base: str | None, directory: Path | None = None) -> Series:
    """Read a series, picking `series-<base>` when present for that base (e.g. 6.1); a
    thread from the list (mbox:FILE, lore:MSGID) through b4. `directory`: a copy of it
    to read instead (a results directory's, for `harness reproduce`): its `series` file
    lists the patches as they were applied."""
    if directory is not None:
        return _listed(name, directory, directory / "series")
    if from_the_list(name):
        found = (mbox.from_mbox(Path(name[5:]).expanduser().resolve())
                 if name.startswith("mbox:") else mbox.from_lore(name[5:]))
        for path in found:
            check_patch_file(path)
        return Series(name=name, directory=found[0].parent,
                      patches=tuple(Patch(path=p, series=name) for p in found), variant="b4")
    d = series_dir(name)
    chosen = d / "series"
    if base:
        variant = d / f"series-{base}"
        if variant.exists():
            chosen = variant
    return _listed(name, d, chosen)


def _listed(name: str, d: Path, chosen: Path) -> Series:
    """The patches a series file lists, in order, each checked."""
    if not chosen.exists():
        raise SeriesError(f"{d} has no series file; fix: list the patches, one per line, in "
                          f"{d / 'series'}")
    patches = []
    for raw in chosen.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        path = d / line
        if not path.exists():
            raise SeriesError(f"{chosen}: lists {line!r} but {path} does not exist",
                              fix=f"add the file, or remove the line from {chosen}")
        check_patch_file(path)
        patches.append(Patch(path=path, series=name))
    return Series(name=name, directory=d, patches=tuple(patches), variant=chosen.name)


def base_name(spec: KernelSpec) -> str | None:
    """The base a per-base series variant is named after: debian:6.1 -> "6.1"."""
    return sources.base_name(spec)


@dataclass(frozen=True, kw_only=True)
class PatchGroup:
    """One --series or --patch as given, and the patches it applies, in order."""

    given: str  # the series' name (memcg-kfuncs, mbox:FILE, lore:MSGID), or the --patch path
    series: bool  # a --series; False: a --patch file
    patches: tuple[Patch, ...]
    variant: str = ""  # the series file read (series, series-6.1), b4 for a thread
    directory: Path | None = None  # a series under patches/ (or given as a directory)
    source: Path | None = None  # the file as given: mbox:FILE's thread, a --patch file


def groups(names: tuple[str, ...] | list[str], extra: list[Path], base: str | None,
           directories: Mapping[str, Path] | None = None) -> list[PatchGroup]:
    """The named series (per-base variants chosen; mbox:FILE and lore:MSGID through b4;
    a series in `directories` read from there), then loose --patch files (an mbox among
    them split into its patches): each as given, with its patches in order."""
    found: list[PatchGroup] = []
    for name in names:
        carried = (directories or {}).get(name)
        s = load(name, base, carried)
        thread = Path(name[5:]).expanduser().resolve() \
            if name.startswith("mbox:") and carried is None else None
        found.append(PatchGroup(given=name, series=True, patches=s.patches, variant=s.variant,
                                directory=None if from_the_list(name) else s.directory,
                                source=thread))
    for path in extra:
        if not path.is_file():
            raise SeriesError(f"--patch {path}: no such file",
                              fix="give the path of a patch made by git format-patch")
        if mbox.is_mbox(path):  # several mails: a thread, one row per patch
            parts = tuple(Patch(path=p, series=f"--patch {path.name}")
                          for p in mbox.from_mbox(path))
            found.append(PatchGroup(given=str(path), series=False, patches=parts,
                                    variant="b4", source=path))
            continue
        check_patch_file(path)
        found.append(PatchGroup(given=str(path), series=False, source=path,
                                patches=(Patch(path=path, series="--patch"),)))
    return found


def collect(names: tuple[str, ...] | list[str], extra: list[Path],
            base: str | None) -> list[Patch]:
    """The patches of the named series, then loose --patch files, in order (`groups`)."""
    return [p for g in groups(names, extra, base) for p in g.patches]


_DIFF = re.compile(rb"^(?:diff --git |--- \S|\+\+\+ \S|@@ -\d)", re.MULTILINE)
_MAIL = re.compile(rb"^(?:From [0-9a-f]{7,}|From:|Subject:)", re.MULTILINE)


def check_patch_file(path: Path) -> None:
    """Before any tree is touched: a patch must be a mail with a diff (git format-patch),
    not empty, binary or plain text, or `git am` fails later and looks like a conflict."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SeriesError(f"cannot read patch {path}: {exc.strerror}",
                          fix="check the path and its permissions") from None
    fix = "make it with `git format-patch` (one commit per file), or check the path"
    if not data.strip():
        raise SeriesError(f"patch {path} is empty", fix=fix)
    if b"\0" in data[:65536]:
        raise SeriesError(f"patch {path} is a binary file, not a patch", fix=fix)
    if not _DIFF.search(data):
        raise SeriesError(f"{path} is not a patch: it has no diff (no 'diff --git', '---', "
                          "'+++' or '@@' lines)", fix=fix)
    if not _MAIL.search(data[:4096]):
        raise SeriesError(f"{path} is a plain diff, not a mail: git am needs the From: and "
                          "Subject: headers of git format-patch",
                          fix="commit the change and run `git format-patch -1`, or add "
                              "'From: NAME <EMAIL>' and 'Subject: ...' lines above the diff")


def message_id_of(patch: Path) -> str:
    with patch.open("rb") as f:
        head = f.read(16384).split(b"\n\n", 1)[0]
    m = re.search(rb"^Message-Id:\s*(<[^>\s]+>)", head, re.MULTILINE | re.IGNORECASE)
    return m.group(1).decode(errors="replace") if m else ""


def subject_of(patch: Path) -> str:
    msg = email.message_from_bytes(patch.read_bytes(), policy=email.policy.default)
    subject = str(msg.get("Subject", "")).replace("\n", " ")
    return re.sub(r"^\[[^]]*\]\s*", "", subject).strip() or patch.name


def files_of(tree: Path, patch: Path) -> tuple[str, ...]:
    res = git_run(tree, "apply", "--numstat", str(patch), timeout=60)
    files = []
    for line in res.output.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            files.append(parts[2])
    return tuple(files)


def reset_to(tree: Path, commit: str) -> None:
    """Move the worktree to commit; only files that differ are rewritten (mtimes kept)."""
    if (_git_dir(tree) / "rebase-apply").exists():
        git_run(tree, "am", "--abort", timeout=120)
    _split_index(tree)
    git(tree, "checkout", "-q", "-f", "--detach", commit, what="git checkout")
    # -x: the Debian import ignores every untracked path, and a file a patch added must
    # not outlive it (nor the test_progs build copy). The build directory is inside the
    # worktree (paths.build_dir) and stays: -e still applies under -x.
    git(tree, "clean", "-q", "-ffdx", "-e", f"/{paths.build_dir(tree).name}/",
        what="git clean")


def _split_index(tree: Path) -> None:
    """The worktree's index split in two (once, under the tree's lock as every caller
    of reset_to holds it): its ~90,000 entries in a shared file written again only when
    a fifth of them changed, beside a small file of what did. Every checkout and `git
    am` of a run writes the index and hashes all of it otherwise: 0.1 s of the 0.5 s a
    one-patch series takes to apply (measured on 6.12). An index git cannot split stays
    whole (only slower). A shared index file can outlive a split: asked, not looked for."""
    if not git_run(tree, "rev-parse", "--shared-index-path", timeout=60).output.strip():
        git_run(tree, "update-index", "--split-index", timeout=600)


def _git_dir(tree: Path) -> Path:
    out = git(tree, "rev-parse", "--absolute-git-dir", what="git rev-parse", timeout=60).strip()
    return Path(out)


def _applied_cache(tree: Path) -> Path:
    """One record per source repository (its worktrees share the commits)."""
    common = git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir",
                 what="git rev-parse", timeout=60).strip()
    return paths.sub("applied") / f"{Path(common).parent.name}.json"


def _load_applied(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data: dict[str, dict[str, Any]] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return {}


def _has_commit(tree: Path, commit: str) -> bool:
    return git_run(tree, "cat-file", "-e", f"{commit}^{{commit}}",
                    timeout=60).ok


def apply(tree: Path, base_commit: str, patches: list[Patch], *,
          log_dir: Path, in_base: Mapping[str, str] | None = None) -> tuple[PatchResult, ...]:
    """Reset to base and apply the patches in order; PatchConflictError on the first conflict.

    in_base: series name -> why the base already has it (everything its provides.toml
    declares is defined there); that series' patches are not applied, reported in base.

    `git am` with a fixed committer makes the same commit of the same patch on the same
    parent, so what a patch made once is remembered (parent + patch content -> commit):
    a series applied before, or all but its last patch, is only checked out again.
    """
    results: list[PatchResult] = []
    am_log = log_dir / "git-am.log"
    in_base = in_base or {}
    cache_file = _applied_cache(tree)
    known = _load_applied(cache_file)
    learnt: dict[str, dict[str, Any]] = {}
    current = base_commit
    moved = False  # whether the worktree was reset to `current` to apply for real
    for i, patch in enumerate(patches):
        subject = subject_of(patch.path)
        row = functools.partial(PatchResult, name=patch.name, subject=subject,
                                message_id=patch.message_id)
        if patch.series in in_base:
            log.info("%s: base already provides series %s (%s); not applied",
                     patch.name, patch.series, in_base[patch.series])
            results.append(row(state=PatchState.ALREADY_IN_BASE,
                               files=files_of(tree, patch.path),
                               detail=in_base[patch.series]))
            continue
        key = f"{current}:{hashlib.sha256(patch.path.read_bytes()).hexdigest()}"
        seen = known.get(key)
        if seen is not None and not moved and _has_commit(tree, seen["commit"]):
            current = seen["commit"]
            results.append(row(state=PatchState(seen["state"]), files=tuple(seen["files"])))
            continue
        if not moved:
            reset_to(tree, current)
            moved = True
        files = files_of(tree, patch.path)
        # Already in base: the reverse applies cleanly and the forward does not.
        # -v names each hunk that fails, with its line (kept for a conflict report).
        fwd = git_run(tree, "apply", "--check", "-v", str(patch.path),
                       timeout=60)
        if not fwd.ok:
            rev = git_run(tree, "apply", "--check", "--reverse",
                            str(patch.path), timeout=60)
            if rev.ok:
                log.info("%s: already in base, skipped", patch.name)
                results.append(row(state=PatchState.ALREADY_IN_BASE, files=files))
                learnt[key] = {"commit": current, "state": PatchState.ALREADY_IN_BASE.value,
                               "files": list(files)}
                continue
        res = git_run(tree, "am", "-3", "--keep-cr", "--no-gpg-sign",
                        str(patch.path), env=_AM_ENV, timeout=300, log_path=am_log)
        if res.ok:
            current = git(tree, "rev-parse", "HEAD", what="git rev-parse").strip()
            results.append(row(state=PatchState.APPLIED, files=files))
            learnt[key] = {"commit": current, "state": PatchState.APPLIED.value,
                           "files": list(files)}
            continue
        proc.check_space(res, f"git am {patch.name}", am_log)
        unmerged = git_run(tree, "diff", "--name-only",
                             "--diff-filter=U", timeout=60).output.split()
        detail = conflict_detail(fwd.output, unmerged, res.output)
        reset_to(tree, base_commit)
        results.append(row(state=PatchState.CONFLICT, files=files, detail=detail))
        results.extend(PatchResult(name=p.name, subject=subject_of(p.path),
                                   message_id=p.message_id,
                                   state=PatchState.NOT_TRIED) for p in patches[i + 1:])
        raise conflict_error(patch, i + 1, len(patches), base_commit, detail,
                             tuple(results), log=am_log)
    if not moved:
        reset_to(tree, current)
    if learnt:
        atomic.write_text(cache_file, json.dumps({**_load_applied(cache_file), **learnt},
                                                 indent=1))
    return tuple(results)


def conflict_error(patch: Patch, number: int, total: int, base_commit: str, detail: str,
                   results: tuple[PatchResult, ...], *, log: Path | None) -> PatchConflictError:
    """What the terminal says of a patch that does not apply: which, to what, each failed
    hunk as file:line with the lines git looked for, and the fix."""
    return PatchConflictError(
        f"patch {number}/{total} {paths.display(patch.path)} ({patch.series}) does not apply "
        f"to the base {base_commit[:12]}:\n" + "\n".join(f"  {ln}" for ln in detail.splitlines()),
        results,
        fix="rebase the patch onto this base" + (
            "" if patch.series == "--patch" else
            f", or add a per-base variant (series-<base>) to {paths.display(patch.path.parent)}"),
        log=log,
    )


_HUNK_LINES = 6  # of the context git searched for, per failed hunk


def conflict_detail(apply_output: str, unmerged: list[str], am_output: str = "") -> str:
    """What failed, from `git apply --check -v`: each hunk as file:line with the first lines
    git searched for, then the files left in conflict by the 3-way merge."""
    lines: list[str] = []
    searched: list[str] = []
    searching = False
    for raw in apply_output.splitlines():
        if raw.startswith("error: while searching for:"):
            searching, searched = True, []
            continue
        m = re.match(r"error: patch failed: (\S+:\d+)$", raw)
        if m is not None:
            shown = [ln for ln in searched if ln.strip()][:_HUNK_LINES]
            more = len([ln for ln in searched if ln.strip()]) - len(shown)
            lines.append(f"{m.group(1)}: hunk does not apply" +
                         ("; the base has no lines matching:" if shown else ""))
            lines += [f"    | {ln}" for ln in shown]
            if more > 0:
                lines.append(f"    | ... ({more} more lines)")
            searching = False
            continue
        if searching:
            searched.append(raw)
        elif raw.startswith("error:") and "patch does not apply" not in raw:
            lines.append(raw.removeprefix("error: "))
    if unmerged:
        lines.append("files left in conflict by the 3-way merge: " + ", ".join(unmerged))
    if not lines:
        lines = [ln for ln in am_output.splitlines() if ln.strip()][-8:]
    return "\n".join(lines)
