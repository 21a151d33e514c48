"""`git:PATH[@REV]`: the user's kernel tree, as a shared clone in the cache (nothing is
ever written on their side); HEAD plus uncommitted changes to tracked files, or REV."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from harness.base import paths, proc
from harness.base.gitcmd import git, git_run
from harness.base.model import KernelSpec, PreparedSource, SourceKind
from harness.kernel.sources.base import IMPORT_ENV as _IMPORT_ENV
from harness.kernel.sources.base import SourceError, locked


def _prepare(spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
    user = Path(spec.value).resolve()
    # The top of a work tree: a subdirectory (or a tree that merely sits inside some other
    # repository) is not the kernel the user meant.
    top = git_run(user, "rev-parse", "--show-prefix", timeout=60) if user.is_dir() else None
    if top is None or not top.ok or top.output.strip():
        raise SourceError(f"{user} is not the top of a git work tree",
                          fix="pass git:PATH of a kernel checkout (the directory that holds "
                              ".git)")
    key = hashlib.sha256(str(user).encode()).hexdigest()[:12]
    clone = paths.sub("src") / f"git-{user.name}-{key}"
    with locked(f"src-{clone.name}", wait_message=f"cloning {user}"):
        if not (clone / ".git").exists():
            scratch = Path(tempfile.mkdtemp(prefix=".clone-", dir=clone.parent))
            try:
                # --shared borrows the user's objects through alternates: nothing is written
                # on their side.
                git(scratch, "clone", "-q", "--shared", "--no-checkout", str(user),
                    str(scratch / "repo"), what=f"cloning {user}", timeout=1800,
                    log_path=log_dir / "import.log")
                (scratch / "repo").rename(clone)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    if spec.rev:
        # Resolve in the user's repo (read-only); the object is reachable through alternates.
        found = git_run(user, "rev-parse", "--verify", "--quiet", f"{spec.rev}^{{commit}}",
                        timeout=60)
        if not found.ok:
            raise SourceError(f"{spec.rev!r} is not a commit in {user}",
                              fix=f"name a commit, branch or tag of {user} after @")
        commit = found.output.strip()
        describe = f"{user} at {spec.rev} ({commit[:12]})"
        return PreparedSource(spec=spec, repo=clone, base_commit=commit, describe=describe,
                              commit=commit)
    head = git(user, "rev-parse", "HEAD", what="git rev-parse").strip()
    snapshot = _snapshot_uncommitted(user, clone)
    if snapshot is None:
        return PreparedSource(spec=spec, repo=clone, base_commit=head, commit=head,
                              describe=f"{user} HEAD {head[:12]} (clean)")
    return PreparedSource(
        spec=spec, repo=clone, base_commit=snapshot, includes_uncommitted=True, commit=head,
        describe=f"{user} HEAD {head[:12]} + uncommitted changes to tracked files "
                 f"(snapshot {snapshot[:12]})",
    )


def _snapshot_uncommitted(user: Path, clone: Path) -> str | None:
    """Capture HEAD plus the user's uncommitted changes to tracked files as a commit in the clone.

    `git stash create` would write objects into the user's .git; here it runs with a copy of
    their index and the clone's object directory (theirs only as an alternate), so every new
    object lands in the cache.  Untracked files are not included.
    """
    user_git = Path(git(user, "rev-parse", "--absolute-git-dir", what="git rev-parse",
                        timeout=60).strip())
    with tempfile.TemporaryDirectory(prefix="harness-index-") as tmp:
        index_copy = Path(tmp) / "index"
        if (user_git / "index").exists():
            shutil.copyfile(user_git / "index", index_copy)
        env = {
            "GIT_INDEX_FILE": str(index_copy),
            "GIT_OBJECT_DIRECTORY": str(clone / ".git" / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(user_git / "objects"),
            "GIT_OPTIONAL_LOCKS": "0",
        }
        stash = git(user, "stash", "create", what="git stash create", timeout=600,
                    env=env).strip()
    if not stash:
        return None
    tree = git(clone, "rev-parse", f"{stash}^{{tree}}", what="git rev-parse").strip()
    head = git(clone, "rev-parse", f"{stash}^1", what="git rev-parse").strip()
    return git(clone, "commit-tree", tree, "-p", head, "-m", "harness: uncommitted changes",
               what="git commit-tree", env=_IMPORT_ENV).strip()


class Git:
    kind = SourceKind.GIT
    has_tree = True
    usage = "git:PATH[@REV] (your kernel tree: HEAD and uncommitted changes, or REV)"

    def parse(self, value: str) -> KernelSpec:
        if "@" in value:
            path, _, rev = value.rpartition("@")
            return KernelSpec(kind=self.kind, value=str(Path(path).expanduser()),
                              rev=rev or None)
        return KernelSpec(kind=self.kind, value=str(Path(value).expanduser()))

    def prepare(self, spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
        return _prepare(spec, log_dir=log_dir)

    def check(self, spec: KernelSpec) -> None:
        """Nothing to look up before the work: prepare says what is missing."""

    def base_name(self, spec: KernelSpec) -> str | None:
        return None

    def version(self, spec: KernelSpec) -> str:
        head = proc.run(["git", "-C", spec.value, "rev-parse",
                         f"{spec.rev or 'HEAD'}^{{tree}}"], timeout=60)
        return head.output.strip() if head.ok else "unknown"


KIND = Git()
