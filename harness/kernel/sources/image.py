"""`image:PATH`: a kernel image built elsewhere (bzImage, vmlinuz, arm64 Image), booted as
it is: no source, so nothing to patch or build (build.image_from_file reads it)."""

from __future__ import annotations

from pathlib import Path

from harness.base.model import KernelSpec, PreparedSource, SourceKind
from harness.kernel.sources.base import SourceError


class Image:
    kind = SourceKind.IMAGE
    has_tree = False
    usage = "image:PATH (a built kernel image; vmlinux with BTF beside it for BPF tests)"

    def parse(self, value: str) -> KernelSpec:
        return KernelSpec(kind=self.kind, value=str(Path(value).expanduser()))

    def prepare(self, spec: KernelSpec, *, log_dir: Path) -> PreparedSource:
        raise SourceError(f"{spec.text} is a prebuilt image and has no source tree")

    def check(self, spec: KernelSpec) -> None:
        """Nothing to look up before the work: prepare says what is missing."""

    def base_name(self, spec: KernelSpec) -> str | None:
        return None

    def version(self, spec: KernelSpec) -> str:
        path = Path(spec.value)
        return f"{path.stat().st_size}-{path.stat().st_mtime_ns}" if path.is_file() else "?"


KIND = Image()
