"""The kernel-tree service: spec -> source -> worktree -> lock -> series -> kconfig -> build.

One object per (kernel spec, config list), shared by `run`, `check` and `mutate` as
kunit_tool's `LinuxSourceTree` is by its subcommands: the worktree, the build directory,
the locks and the config fragments are named and resolved here once, so the commands share
builds and stored kernels and cannot drift apart.

The worktree is persistent and moved by checkouts; hold `locked()` from the first checkout
to the last use of what it holds (a build, a compiled object), or another run may move it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import gitcmd, paths, proc
from harness.base.model import ConfigResult, KernelImage, KernelSpec, PatchResult, PreparedSource
from harness.kernel import build as kbuild
from harness.kernel import kconfig, series, sources
from harness.target import Target
from harness.target import default as default_target


@dataclass(frozen=True, kw_only=True)
class KernelTree:
    source: PreparedSource
    path: Path  # the worktree (ours, never the user's)
    build_dir: Path  # its O= directory
    configs: tuple[str, ...]  # fragment names as given (kconfigs/NAME, a path, tree:PATH)
    # our fragments as the caller already resolved and checked them (name -> path); the
    # tree's own (tree:PATH) are resolved here, in the worktree
    checked: Mapping[str, Path] = field(default_factory=dict)
    # what it is built for and with: each target has a worktree (and O= directory) of its
    # own, so that switching between them never rebuilds the other's objects
    target: Target = field(default_factory=lambda: default_target())

    @classmethod
    def open(cls, spec: KernelSpec, configs: Sequence[str], *, log_dir: Path,
             checked: Mapping[str, Path] | None = None,
             target: Target | None = None) -> KernelTree:
        """The source imported or cloned once, and the worktree for these configs."""
        tgt = target or default_target()
        source = sources.prepare(spec, log_dir=log_dir)
        path = sources.worktree(source, kconfig.config_slug(list(configs)) + tgt.slug,
                                log_dir=log_dir)
        # the version of the commit this run builds on, not of whatever revision the
        # shared worktree was left at
        tgt = kconfig.with_needed_pahole(tgt, path, configs, source.base_commit)
        return cls(source=source, path=path, build_dir=paths.build_dir(path),
                   configs=tuple(configs), checked=dict(checked or {}), target=tgt)

    @property
    def base_commit(self) -> str:
        return self.source.base_commit

    @contextmanager
    def locked(self) -> Iterator[None]:
        """No other run moves the worktree while the block runs."""
        with sources.locked(f"tree-{self.path.name}", wait_message=f"using {self.path}"):
            yield

    @contextmanager
    def build_locked(self, doing: str) -> Iterator[None]:
        """No other make runs in the build directory while the block runs."""
        with sources.locked(kbuild.lock_name(self.path),
                            wait_message=f"{doing} in {self.build_dir}"):
            yield

    def git(self, *args: str, what: str) -> str:
        return gitcmd.git(self.path, *args, what=what)

    def rev(self, rev: str = "HEAD") -> str:
        return self.git("rev-parse", rev, what="git rev-parse").strip()

    def tree_id(self, rev: str = "HEAD") -> str:
        return self.rev(f"{rev}^{{tree}}")

    def apply(self, patches: Sequence[series.Patch], *, log_dir: Path,
              in_base: Mapping[str, str] | None = None) -> tuple[PatchResult, ...]:
        """The worktree at the base plus these patches (a checkout when done before)."""
        return series.apply(self.path, self.base_commit, list(patches), log_dir=log_dir,
                            in_base=in_base)

    def reset_to(self, commit: str) -> None:
        series.reset_to(self.path, commit)

    def fragments(self) -> tuple[list[Path], list[Path]]:
        """(every fragment, in order; those from the tree itself): the tree's own are
        written for a full config, so what olddefconfig drops from them is not fatal."""
        resolved = [self.checked.get(c) or kconfig.resolve_fragment(c, self.path)
                    for c in self.configs]
        lenient = [f for c, f in zip(self.configs, resolved, strict=True)
                   if kconfig.is_tree_fragment(c)]
        return resolved, lenient

    def configure(self, *, log_dir: Path) -> ConfigResult:
        fragments, lenient = self.fragments()
        return kconfig.configure(self.path, self.build_dir, fragments, log_dir=log_dir,
                                 lenient=lenient, target=self.target)

    def build(self, *, log_dir: Path, tools: kbuild.Tools | None = None) -> KernelImage:
        """The kernel of HEAD and the installed .config, from the store when it is there."""
        return kbuild.build(self.path, self.build_dir, log_dir=log_dir,
                            tools=tools or kbuild.tools(self.target))

    def compile_object(self, source: str, *, tools: kbuild.Tools, log_path: Path,
                       extra: Sequence[str] = (), timeout: float = 1800) -> proc.Completed:
        """`make path/file.o` alone, the old object removed first so that it recompiles.
        Hold `build_locked` around it and whatever reads the object."""
        obj = source.removesuffix(".c") + ".o"
        (self.build_dir / obj).unlink(missing_ok=True)
        return proc.run(kbuild.make_argv(self.path, self.build_dir, tools, obj,
                                        extra=tuple(extra)),
                        env=kbuild.make_env(tools), timeout=timeout, log_path=log_path,
                        sandbox=kbuild.reach(self.path, tools))
