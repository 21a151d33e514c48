"""The build's compiler environment, checked against the real ccache and gcc."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.base.model import KernelImage
from harness.kernel import build


def _ccache_hits(env: dict[str, str]) -> int:
    out = subprocess.run(["ccache", "--print-stats"], env=env, text=True,
                         capture_output=True, check=True).stdout
    stats = dict(line.split("\t") for line in out.splitlines() if "\t" in line)
    return int(stats["direct_cache_hit"]) + int(stats["preprocessed_cache_hit"])


def _compile_like_the_tools(worktree: Path, env: dict[str, str]) -> None:
    """One object compiled the way tools/build compiles objtool's and resolve_btfids'."""
    src = worktree / "tools" / "objtool"
    src.mkdir(parents=True)
    (src / "weak.c").write_text("int weak_fn(void) { return 1; }\n")
    obj = worktree / ".harness-build" / "tools" / "objtool" / "weak.o"
    obj.parent.mkdir(parents=True)
    subprocess.run(["ccache", "gcc", f"-Wp,-MD,{obj.parent}/.weak.o.d", f"-Wp,-MT,{obj}",
                    "-g", "-O2", "-c", "-o", str(obj), "weak.c"],
                   cwd=src, env=env, check=True)


@pytest.mark.skipif(not build.tools().ccache, reason="ccache is not installed")
def test_a_host_tool_object_compiled_in_one_worktree_hits_in_another(cache: Path) -> None:
    env = {**os.environ, **build.make_env(build.tools())}
    _compile_like_the_tools(cache / "work" / "tree-a", env)
    assert _ccache_hits(env) == 0
    _compile_like_the_tools(cache / "work" / "tree-b", env)
    assert _ccache_hits(env) == 1


def _built(build_dir: Path, config: str) -> Path:
    """The files a finished kernel build leaves that the store copies, and two notes files."""
    for rel in ("arch/x86/boot/bzImage", "vmlinux", "System.map", "mm/memcontrol.gcno",
                "kernel/cgroup/rstat.gcno", "include/config/kernel.release"):
        (build_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (build_dir / rel).write_text(f"{rel} as built\n")
    (build_dir / ".config").write_text(config)
    return build_dir


def test_a_gcov_kernel_keeps_the_notes_files_it_was_built_with(cache: Path) -> None:
    """The counters of a stored gcov kernel are read against its own .gcno files: a later
    build in the same directory (a mutant, another revision) rewrites the build's."""
    build_dir = _built(cache / "b", "CONFIG_BPF=y\nCONFIG_GCOV_KERNEL=y\n")
    stored = cache / "kernels" / "k"
    stored.parent.mkdir(parents=True, exist_ok=True)
    build._store(build_dir, stored, key="k", tree_id="t", tools=build.tools(), seconds=1)
    (build_dir / "mm/memcontrol.gcno").write_text("a later build's notes\n")
    image = KernelImage(boot_image=stored / "bzImage", vmlinux=None, config=None, version="v",
                        arch="x86_64", toolchain="gcc")
    notes = build.gcno_dir(image)
    assert notes == stored / "gcno"
    assert (notes / "mm/memcontrol.gcno").read_text() == "mm/memcontrol.gcno as built\n"
    assert (notes / "kernel/cgroup/rstat.gcno").exists()
    assert not build._gcov_without_notes(stored)


def test_a_kernel_without_gcov_stores_no_notes(cache: Path) -> None:
    build_dir = _built(cache / "b", "CONFIG_BPF=y\n# CONFIG_GCOV_KERNEL is not set\n")
    stored = cache / "kernels" / "k"
    stored.parent.mkdir(parents=True, exist_ok=True)
    build._store(build_dir, stored, key="k", tree_id="t", tools=build.tools(), seconds=1)
    image = KernelImage(boot_image=stored / "bzImage", vmlinux=None, config=None, version="v",
                        arch="x86_64", toolchain="gcc")
    assert build.gcno_dir(image) is None
    assert not build._gcov_without_notes(stored)


def test_a_gcov_kernel_stored_without_its_notes_is_built_again(cache: Path) -> None:
    stored = cache / "kernels" / "k"
    stored.mkdir(parents=True)
    (stored / "bzImage").write_text("")
    (stored / "config").write_text("CONFIG_BPF=y\nCONFIG_GCOV_KERNEL=y\n")
    assert build._gcov_without_notes(stored)
