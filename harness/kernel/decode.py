"""A splat's stack decoded to file:line with the kernel tree's own
scripts/decode_stacktrace.sh, against the vmlinux the kernel was built as (the binutils of
its arch and toolchain); the paths then made relative to the tree (judge/splat.py).
"""

from __future__ import annotations

from dataclasses import replace

from harness import target
from harness.base import proc, sandbox
from harness.base.model import KernelImage, Splat
from harness.judge import splat


def decoded(s: Splat, kernel: KernelImage) -> Splat:
    """file:line for each frame, with the tree's own scripts/decode_stacktrace.sh."""
    if kernel.vmlinux is None or kernel.source_dir is None or s.decoded:
        return s
    script = kernel.source_dir / "scripts" / "decode_stacktrace.sh"
    if not script.exists():
        return s
    built = target.select(kernel.arch, kernel.toolchain or target.DEFAULT_TOOLCHAIN)
    # the tree's decode_stacktrace.sh: its code, sandboxed (it reads the tree and vmlinux)
    res = proc.run([str(script), str(kernel.vmlinux), str(kernel.source_dir)],
                   stdin_data=s.text.encode(), timeout=120, env=built.script_env(),
                   sandbox=sandbox.for_tree(kernel.source_dir, tree_writable=False,
                                            read=(kernel.vmlinux,)))
    if not res.ok:
        return replace(s, decoded=f"decode failed: {res.tail(5)}")
    return splat.relative_to_tree(replace(s, decoded=res.output), kernel.source_dir.name)
