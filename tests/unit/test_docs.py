"""Every `harness ...` command the README and docs/ show is one the parser accepts (a
command a user copies must run), and the docs build with mkdocs in strict mode (no
broken link, no page left out: tox's lint step runs it as well)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMANDS = {c.name for c in cli.COMMANDS}


def commands_in(text: str) -> list[str]:
    """Inline `harness ...` code, and the lines of code blocks that start with harness
    (a trailing backslash continues a line; a # starts a comment)."""
    found = [" ".join(c.split()) for c in re.findall(r"`(harness [^`]+)`", text)]
    for block in re.findall(r"(?ms)^```[^\n]*\n(.*?)^```", text):
        joined = re.sub(r"\\\n\s*", " ", block)
        found += [ln.strip() for ln in joined.splitlines() if ln.strip().startswith("harness ")]
    return [c.split(" #")[0].strip() for c in found]


def synopsis(command: str) -> bool:
    """A usage line (alternatives, optional parts, placeholders the parser cannot take)
    or a bare command name: what it shows is checked by the command's --help."""
    words = command.split()
    return (any(x in command for x in ("[", "|", "...")) or "COMMAND" in words
            or (len(words) == 2 and words[1] in COMMANDS)
            or (len(words) == 3 and words[1] in ("cache", "ci", "export")))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_command_shown_is_one_the_parser_takes(page: Path) -> None:
    shown = [c for c in commands_in(page.read_text()) if not synopsis(c)]
    for command in shown:
        argv = shlex.split(command)[1:]
        assert argv and argv[0] in COMMANDS, command
        try:
            cli.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{page.name}: the parser refuses `{command}`")


def test_the_docs_build_in_strict_mode(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO, text=True, capture_output=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_example_selftest_in_the_docs_is_one_the_harness_takes(tmp_path: Path) -> None:
    """docs/selftests.md's complete example (test.toml and C), read as a test the way a run
    reads it (it ran for real on 6.12 + memcg-kfuncs: 3 checks, PASS)."""
    import shutil

    from harness import testkinds

    text = (REPO / "docs" / "selftests.md").read_text()
    toml = re.search(r'```toml\n(name = "hello_cgroup".*?)```', text, re.S)
    source = re.search(r"```c\n(// SPDX.*?)```", text, re.S)
    assert toml and source
    tests = tmp_path / "selftests"
    shutil.copytree(REPO / "selftests" / "lib", tests / "lib")
    (tests / "hello_cgroup").mkdir()
    (tests / "hello_cgroup" / "test.toml").write_text(toml.group(1))
    (tests / "hello_cgroup" / "hello_cgroup.c").write_text(source.group(1))
    ref = testkinds.resolve(str(tests / "hello_cgroup"))
    assert ref.name == "hello_cgroup" and ref.requires == ("cgroup",)
    checks = re.findall(r"CHECK\((\w+)", source.group(1))
    assert checks == ["root_found", "child_made_and_removed", "cleanup"]
    assert all(f"static int check_{c}(void)" in source.group(1) for c in checks)


ALL_PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# A path of the machine a page was written on: a home, the root user's, a checkout's.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:root|home/[\w.-]+|work/[\w.-]+)/")


@pytest.mark.parametrize("page", ALL_PAGES, ids=[p.name for p in ALL_PAGES])
def test_no_page_names_a_path_of_the_machine_it_was_written_on(page: Path) -> None:
    found = [line for line in page.read_text().splitlines() if MACHINE_PATH.search(line)]
    assert found == [], f"{page.relative_to(REPO)}: {found}"
