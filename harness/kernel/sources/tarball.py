"""`tarball:PATH`: a kernel release tarball the user has (kernel.org's linux-6.12.tar.xz,
a stable release, a vendor's), imported once per content: the way to test a mainline or
stable release that no Debian package carries. Any compression tar reads; one top-level
directory, as kernel.org packs them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from harness.base import paths
from harness.base.gitcmd import git
from harness.base.model import KernelSpec, PreparedSource, SourceKind
from harness.base.paths import is_kernel_tree
from harness.kernel.sources.base import SourceError, import_tarball, locked

_SUFFIX = re.compile(r"\.tar(?:\.[a-z0-9]+)?$|\.t[gbx]z$")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _release(tree: Path) -> str:
    """VERSION.PATCHLEVEL.SUBLEVEL from the tree's top Makefile."""
    head = (tree / "Makefile").read_text(errors="replace").splitlines()[:10]
    fields = dict(re.findall(r"^(VERSION|PATCHLEVEL|SUBLEVEL) = (\d*)", "\n".join(head), re.M))
    return ".".join(v for v in (fields.get("VERSION"), fields.get("PATCHLEVEL"),
                                fields.get("SUBLEVEL")) if v)


def _kernel_check(path: Path) -> Callable[[Path], None]:
    """What the import runs on the unpacked tarball: a kernel tree, or an error naming it."""
    def check(tree: Path) -> None:
        if not is_kernel_tree(tree):
            raise SourceError(f"{path} does not hold a Linux source tree (no Kconfig, kernel/ "
                              "and a Makefile with VERSION under its top directory)",
                              fix="pass tarball:PATH of a kernel source release, e.g. "
                                  "linux-6.12.tar.xz")
    return check


class Tarball:
    kind = SourceKind.TARBALL
    has_tree = True
    usage = "tarball:PATH (a kernel release tarball, e.g. linux-6.12.tar.xz)"

    def parse(self, value: str) -> KernelSpec:
        return KernelSpec(kind=self.kind, value=str(Path(value).expanduser().resolve()))

    def prepare(self, spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
        path = Path(spec.value)
        if not path.is_file():
            raise SourceError(f"kernel tarball {path} does not exist",
                              fix="pass tarball:PATH of a kernel release tarball you have")
        digest = _digest(path)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", _SUFFIX.sub("", path.name))
        dest = paths.sub("src") / f"tarball-{name}-{digest[:12]}"
        with locked(f"src-{dest.name}", wait_message=f"importing {path}"):
            if not (dest / ".git" / "harness-imported").exists():
                import_tarball(path, dest, message=f"tarball {path.name} sha256 {digest}",
                               log_dir=log_dir, check=_kernel_check(path))
        base = git(dest, "rev-parse", "HEAD", what="git rev-parse").strip()
        return PreparedSource(spec=spec, repo=dest, base_commit=base,
                              describe=f"Linux {_release(dest)} from {path.name} "
                                       f"(sha256 {digest[:12]})", digest=digest)

    def check(self, spec: KernelSpec) -> None:
        """Nothing to look up before the work: prepare says what is missing."""

    def base_name(self, spec: KernelSpec) -> str | None:
        m = re.search(r"(?<![\d.])(\d+\.\d+)(?:\.\d+)?(?:-rc\d+)?(?=\.t)", Path(spec.value).name)
        return m.group(1) if m else None

    def version(self, spec: KernelSpec) -> str:
        path = Path(spec.value)
        return _digest(path) if path.is_file() else "missing"


KIND = Tarball()
