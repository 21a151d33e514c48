"""The build's compiler environment, checked against the real ccache and gcc."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness import build


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


@pytest.mark.skipif(not build.toolchain().ccache, reason="ccache is not installed")
def test_a_host_tool_object_compiled_in_one_worktree_hits_in_another(cache: Path) -> None:
    env = {**os.environ, **build.make_env(build.toolchain())}
    _compile_like_the_tools(cache / "work" / "tree-a", env)
    assert _ccache_hits(env) == 0
    _compile_like_the_tools(cache / "work" / "tree-b", env)
    assert _ccache_hits(env) == 1
