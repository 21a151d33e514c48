"""The sandbox the kernel tree's code runs in (harness/base/sandbox.py): its command line,
its refusal when bubblewrap cannot run, and real bubblewrap against a fake kernel tree
whose Makefile tries what a hostile series would: read a file in the home, write one
there, connect to a listener on the host's loopback. The same tree run without the
sandbox reaches all three: the checks can fail."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.base import proc, sandbox
from harness.base.model import RunResult, Status
from harness.guest import isolation
from tests.helpers.faketree import FAKES, committed_tree
from tests.helpers.hostile import MAKEFILE_PROBE, Listener

OFF = sandbox.Policy(enabled=False, why_off="--no-sandbox")


def fake_host(tmp_path: Path) -> sandbox.Host:
    return sandbox.Host(bwrap="/usr/bin/bwrap", top={"usr": None, "bin": "usr/bin"},
                        etc={"ld.so.cache": None, "localtime": "/usr/share/zoneinfo/UTC"},
                        home=Path("/home/me"), passwd=tmp_path / "passwd",
                        group=tmp_path / "group")


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_the_command_line_isolates_and_binds_each_path_at_its_own_path(tmp_path: Path) -> None:
    tree = Path("/cache/work/t")
    reach = sandbox.Reach(write=(tree, Path("/cache/ccache")), read=(Path("/cache/src/r/.git"),
                                                                    Path("/repo/kconfigs/a")),
                          protect=(tree / ".git",))
    argv = sandbox.command_line(reach, ["make", "-C", str(tree)], env={"PATH": "/usr/bin"},
                                cwd=tree, host=fake_host(tmp_path))
    cmd, inner = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    assert inner == ["make", "-C", str(tree)]
    # no network, no other process, no capability, no inherited environment
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in cmd
    assert "--share-net" not in cmd and cmd[cmd.index("--cap-drop") + 1] == "ALL"
    assert pairs(cmd, "--setenv") == [("PATH", "/usr/bin")]
    # the system read-only, as the host has it; of /etc only what was named, and our passwd
    assert ("/usr", "/usr") in pairs(cmd, "--ro-bind") and ("usr/bin", "/bin") in pairs(
        cmd, "--symlink")
    assert ("/etc/ld.so.cache", "/etc/ld.so.cache") in pairs(cmd, "--ro-bind")
    assert (str(tmp_path / "passwd"), "/etc/passwd") in pairs(cmd, "--ro-bind")
    assert not any("shadow" in a for a in cmd) and ("/etc", "/etc") not in pairs(cmd,
                                                                                 "--ro-bind")
    assert ("/", "/") not in pairs(cmd, "--ro-bind") + pairs(cmd, "--bind")
    # the home an empty tmpfs; /tmp a fresh one
    assert cmd[cmd.index("--tmpfs") + 1] == "/tmp" and "/home/me" in cmd
    # written only where the reach says; read-only what it reads; .git read-only inside
    assert sorted(pairs(cmd, "--bind")) == [("/cache/ccache", "/cache/ccache"),
                                            (str(tree), str(tree))]
    ro = pairs(cmd, "--ro-bind-try")
    assert ("/cache/src/r/.git", "/cache/src/r/.git") in ro and (
        "/repo/kconfigs/a", "/repo/kconfigs/a") in ro
    binds = [a for a in cmd if a.startswith("--") and "bind" in a]
    where = [cmd[i + 2] for i, a in enumerate(cmd) if a in ("--bind", "--ro-bind-try")]
    assert where.index(str(tree / ".git")) > where.index(str(tree))  # after: on top
    assert binds and cmd[cmd.index("--chdir") + 1] == str(tree)


def test_a_path_reached_through_a_symlink_keeps_the_link_and_is_bound_where_it_is(
        tmp_path: Path) -> None:
    real = tmp_path / "disk" / "cache"
    (real / "work").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "cache").symlink_to(real)
    given = tmp_path / "home" / "cache" / "work"
    links = sandbox.links_on_the_way([given])
    assert links == {str(tmp_path / "home" / "cache"): str(real)}
    host = sandbox.Host(**{**fake_host(tmp_path).__dict__, "links": links})
    cmd = sandbox.command_line(sandbox.Reach(write=(given,)), ["true"], env={}, cwd=None,
                               host=host)
    assert (str(real), str(tmp_path / "home" / "cache")) in pairs(cmd, "--symlink")
    assert pairs(cmd, "--bind") == [(str(real / "work"), str(real / "work"))]


def test_the_environment_is_an_allow_list_and_the_commands_own() -> None:
    outer = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "GITHUB_TOKEN": "ghp_x",
             "AWS_SECRET_ACCESS_KEY": "k", "SSH_AUTH_SOCK": "/tmp/agent", "HOME": "/root",
             "CCACHE_MAXSIZE": "5G"}
    env = sandbox.environment({"KBUILD_BUILD_USER": "harness", "PATH": "/bin"}, outer)
    assert env == {"PATH": "/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "HOME": "/root",
                   "CCACHE_MAXSIZE": "5G", "KBUILD_BUILD_USER": "harness"}


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    sandbox.forget()
    yield
    sandbox.forget()


def test_without_bubblewrap_the_run_stops_with_the_cause_and_the_fix(
        monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    monkeypatch.setattr(sandbox, "_which", lambda program: None)
    with pytest.raises(sandbox.SandboxError) as err:
        sandbox.require()
    text = str(err.value)
    assert err.value.status is Status.SETUP_ERROR
    assert "not installed" in text and "apt-get install -y bubblewrap" in text
    assert "--no-sandbox" in text
    from harness.drivers import doctor

    check = doctor.sandbox_check()
    assert not check.ok and "apt-get install -y bubblewrap" in check.fix
    # and a sandboxed command refuses to run unconfined
    with pytest.raises(sandbox.SandboxError):
        proc.run(["true"], timeout=10, sandbox=sandbox.Reach())
    # --no-sandbox: it runs as it is
    with sandbox.using(OFF):
        assert proc.run(["true"], timeout=10, sandbox=sandbox.Reach()).ok


def test_a_bubblewrap_that_cannot_make_namespaces_is_told_with_how_to_allow_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, "
                    "likely because the kernel does not allow non-privileged user "
                    "namespaces.' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "_which", lambda program: str(fake))
    assert "No permissions to creating new namespace" in sandbox.problem()
    with pytest.raises(sandbox.SandboxError) as err:
        sandbox.require()
    assert "unprivileged_userns_clone=1" in err.value.fix and "--privileged" in err.value.fix
    assert "--no-sandbox" in err.value.fix
    from harness.drivers import doctor

    check = doctor.sandbox_check()
    assert not check.ok and "No permissions to creating new namespace" in check.detail
    assert "sysctl" in check.fix and "--no-sandbox" in check.fix



@pytest.fixture
def hostile_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[
        tuple[Path, Path, Path, Listener, str]]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    secret_text = "s3cr3t-" + os.urandom(6).hex()
    secret = home / ".ssh-key"
    secret.write_text(secret_text + "\n")
    written = home / "planted"
    listener = Listener()
    tree = committed_tree(tmp_path / "cache" / "work" / "linux")
    with (tree / "Makefile").open("a") as f:
        f.write(MAKEFILE_PROBE.format(secret=secret, written=written, port=listener.port))
    try:
        yield tree, secret, written, listener, secret_text
    finally:
        listener.close()


def test_a_hostile_makefile_reaches_nothing_in_the_sandbox_and_everything_without(
        hostile_tree: tuple[Path, Path, Path, Listener, str], tmp_path: Path) -> None:
    tree, _secret, written, listener, secret_text = hostile_tree
    argv = ["make", "-C", str(tree), f"O={tree / 'out'}", "tinyconfig"]
    boxed = proc.run(argv, timeout=60, sandbox=sandbox.for_tree(tree),
                     log_path=tmp_path / "boxed.log")
    assert boxed.ok, boxed.output
    assert (tree / "out" / ".config").exists()  # it built, in its own directory
    assert secret_text not in boxed.output and "No such file" in boxed.output
    assert not written.exists() and listener.connections == 0
    assert "connected" not in boxed.output
    assert secret_text not in (tmp_path / "boxed.log").read_text()
    with sandbox.using(OFF):  # the control: the same line, with the user's rights
        bare = proc.run(argv, timeout=60, sandbox=sandbox.for_tree(tree))
    assert secret_text in bare.output and written.exists()
    assert listener.connections >= 1 and "connected-by-python" in bare.output


def test_the_worktrees_git_is_read_only_in_the_sandbox_and_the_tree_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the tree runs cannot plant a hook or a config that the harness's own git,
    outside, would then run; the kernel's setlocalversion still reads the repository."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    repo = committed_tree(tmp_path / "src")
    tree = tmp_path / "work"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(tree)], check=True)
    reach = sandbox.for_tree(tree)
    assert repo / ".git" in reach.read and tree / ".git" in reach.protect
    res = proc.run(["sh", "-c", "git rev-parse --verify HEAD && echo x > made && "
                    "echo '[core] hooksPath=/tmp' >> .git; mkdir -p ../src/.git/hooks/x"],
                   cwd=tree, timeout=60, sandbox=reach)
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout
    assert head in res.output and (tree / "made").read_text() == "x\n"
    assert "Read-only file system" in res.output
    assert (tree / ".git").read_text().startswith("gitdir: ")
    assert "hooksPath" not in (tree / ".git").read_text()
    assert not (repo / ".git" / "hooks" / "x").exists()


def test_the_same_tree_builds_the_same_bytes_with_and_without_the_sandbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    tree = committed_tree(tmp_path / "cache" / "work" / "linux")
    out = {}
    for name, policy in (("boxed", sandbox.Policy()), ("bare", OFF)):
        with sandbox.using(policy):
            for target in ("tinyconfig", "bzImage"):
                proc.check(["make", "-C", str(tree), f"O={tree / name}", target],
                           what="make", timeout=120, sandbox=sandbox.for_tree(tree))
        out[name] = (tree / name / "arch/x86/boot/bzImage").read_bytes()
    assert out["boxed"] == out["bare"] and out["boxed"]


def test_the_harness_reads_back_only_regular_files_of_the_directory(tmp_path: Path) -> None:
    build = tmp_path / "build"
    (build / "arch").mkdir(parents=True)
    (build / "arch" / "bzImage").write_bytes(b"image")
    assert sandbox.regular_file(build / "arch" / "bzImage", build) == build / "arch/bzImage"
    (tmp_path / "secret").write_text("s")
    (build / ".config").symlink_to(tmp_path / "secret")
    (build / "out").symlink_to(tmp_path)
    os.mkfifo(build / "fifo")
    for bad in (build / ".config", build / "fifo", build / "out" / "secret"):
        with pytest.raises(sandbox.SandboxError, match="not a regular file"):
            sandbox.regular_file(bad, build)
    with pytest.raises(FileNotFoundError):
        sandbox.regular_file(build / "absent", build)


def test_what_a_guest_leaves_is_taken_back_as_regular_files_only(tmp_path: Path) -> None:
    guest = tmp_path / "guest"
    (guest / "gcov" / "t").mkdir(parents=True)
    (guest / "t.out").write_text("TAP version 13\n")
    (guest / "t.metrics.json").symlink_to("/root/.ssh/id_rsa")
    (guest / "gcov" / "t" / "x.gcda").symlink_to("/etc/shadow")
    (guest / "gcov" / "up").symlink_to("/")
    os.mkfifo(guest / "status.tsv")
    (guest / "suid").write_text("#!/bin/sh\n")
    (guest / "suid").chmod(0o4755)
    removed = isolation.sanitize(guest)
    assert sorted((r.path, r.what) for r in removed) == [
        ("gcov/t/x.gcda", "symlink to /etc/shadow"), ("gcov/up", "symlink to /"),
        ("status.tsv", "fifo"), ("suid", "set-user/group-ID bit"),
        ("t.metrics.json", "symlink to /root/.ssh/id_rsa")]
    assert sorted(p.relative_to(guest).as_posix() for p in guest.rglob("*")) == [
        "gcov", "gcov/t", "suid", "t.out"]
    assert not (guest / "suid").stat().st_mode & stat.S_ISUID
    assert isolation.sanitize(guest) == ()


def test_the_fake_tree_builds_in_the_sandbox_as_the_harness_runs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kbuild's own arguments, environment and reach (build.reach), on the fake tree."""
    from harness.kernel import build

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    tree = committed_tree(tmp_path / "cache" / "work" / "linux")
    tools = build.tools()
    reach = build.reach(tree, tools)
    assert tmp_path / "cache" / "ccache" in reach.write and tree in reach.write
    res = proc.run(["sh", "-c", "touch $CCACHE_DIR/ok && touch /root/x 2>&1; "
                    "echo $KBUILD_BUILD_TIMESTAMP; ls ~ | wc -l"], timeout=60,
                   env=build.make_env(tools), sandbox=reach)
    assert (tmp_path / "cache" / "ccache" / "ok").exists()
    assert "1970" in res.output
    assert FAKES.exists()


def test_every_make_of_a_tree_the_harness_runs_goes_through_the_sandbox() -> None:
    """Each `proc.run`/`proc.check` whose command is make (a literal list starting with
    "make", or kbuild's make_argv) passes a sandbox reach: a new make of the tree cannot
    slip past it unnoticed. (The tree's scripts and tools run so as well: checkpatch,
    decode_stacktrace, perf, bpftool; those are named below.)"""
    import ast

    root = Path(__file__).resolve().parents[2] / "harness"
    unconfined = []
    calls = 0
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("run", "check")
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "proc" and node.args):
                continue
            first = node.args[0]
            is_make = (isinstance(first, ast.List) and first.elts
                       and isinstance(first.elts[0], ast.Constant)
                       and first.elts[0].value == "make") or (
                isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute)
                and first.func.attr == "make_argv") or (
                isinstance(first, ast.Name) and first.id == "argv"
                and path.name in ("build.py", "test_progs.py", "perf.py"))
            if is_make:
                calls += 1
                if not any(k.arg == "sandbox" for k in node.keywords):
                    unconfined.append(f"{path.relative_to(root)}:{node.lineno}")
    assert calls >= 9 and unconfined == []
    text = {p.name: p.read_text() for p in root.rglob("*.py")}
    for module, call in (("check.py", "*CHECKPATCH_ARGS, str(patch)"),
                         ("decode.py", "str(kernel.source_dir)],"),
                         ("perf.py", '"--build-options"'), ("own.py", '"btf", "dump"')):
        at = text[module].index(call)
        assert "sandbox=" in text[module][at:at + 600], (module, call)


def test_a_hostile_git_tree_reaches_nothing_through_the_whole_pipeline(
        hostile_tree: tuple[Path, Path, Path, Listener, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`--kernel git:TREE` whose uncommitted Makefile reaches for the home and the network:
    the real pipeline (kconfig, build, the tests, the fake vng's boot) in the sandbox.
    The secret is in no file of the results, nothing was written, nothing connected, and
    the build log shows the line ran."""
    from harness.base.model import Accel
    from harness.drivers import pipeline
    from harness.drivers.matrix import Cell, Tier
    from harness.output import results, terminal
    from tests.unit.test_pipeline import KTAP_PASS, own_test

    tree, _secret, written, listener, secret_text = hostile_tree
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_VNG", raising=False)
    monkeypatch.setenv("FAKE_VNG_STATE", str(tmp_path / "vng-state"))
    cell = Cell(name="hostile", tier=Tier.DEFAULT, kernel=f"git:{tree}",
                configs=(str(FAKES / "fake.config"),),
                tests=(own_test(tmp_path, "fake_pass", KTAP_PASS),))
    out = tmp_path / "out"
    result = pipeline.run_cell(cell, out, accel=Accel.TCG)
    results.write_json(out / "results.json", RunResult(cells=(result,), command=("test",)))
    assert result.status is Status.PASS, result.error
    assert "uncommitted" in result.source  # the Makefile line is an uncommitted change
    assert result.isolation is not None and result.isolation.sandbox
    build_log = (out / "build.log").read_text()
    assert "harness-probe: cat: " in build_log and "No such file" in build_log
    for p in out.rglob("*"):
        assert not p.is_file() or secret_text.encode() not in p.read_bytes(), p
    assert secret_text not in terminal.summary([result])
    assert not written.exists() and listener.connections == 0


def _fake_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}:{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_VNG", raising=False)
    monkeypatch.setenv("FAKE_VNG_STATE", str(tmp_path / "vng-state"))


def test_what_a_guest_plants_in_its_results_is_removed_before_it_is_read_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that leaves links to a host file where the harness reads a test's metrics
    and output, a link to /, and a FIFO: none is followed (the harness would read the
    host's file into results.json, or block on the FIFO); the boot's result says what
    was removed; the cell line says how the cell was kept in."""
    from harness.base.model import Accel
    from harness.drivers import pipeline
    from harness.drivers.matrix import Cell, Tier
    from harness.output import results, terminal
    from tests.unit.test_pipeline import KTAP_PASS, own_test

    _fake_world(tmp_path, monkeypatch)
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t-planted\n")
    plant = own_test(tmp_path, "planter", KTAP_PASS + (
        f'ln -s {secret} "$HARNESS_METRICS"; ln -s / "$HARNESS_OUT/up"; '
        f'mkfifo "$HARNESS_OUT/fifo"; ln -s {secret} "$HARNESS_OUT/planter.json"\n'))
    tree = committed_tree(tmp_path / "linux")
    cell = Cell(name="planted", tier=Tier.DEFAULT, kernel=f"git:{tree}",
                configs=(str(FAKES / "fake.config"),), tests=(plant,))
    out = tmp_path / "out"
    result = pipeline.run_cell(cell, out, accel=Accel.TCG)
    results.write_json(out / "results.json", RunResult(cells=(result,), command=("test",)))
    assert result.status is Status.PASS, result.error
    boot = next(t for t in result.tests if t.name == "boot")
    said = " ".join(boot.notes)
    assert "planter.metrics.json (symlink to" in said and "fifo (fifo)" in said
    assert "up (symlink to /)" in said and "planter.json" in said
    text = (out / "results.json").read_text()
    assert "s3cr3t-planted" not in text and next(
        t for t in result.tests if t.name == "planter").metrics is None
    assert not [p for p in out.rglob("*") if p.is_symlink() or not (p.is_file() or p.is_dir())]
    # the guest booted on its own root and saw the cache through a view of its own
    iso = result.isolation
    assert iso is not None and iso.sandbox and iso.guest_root and not iso.host_root
    assert "guest-view/view-" in (out / "guest" / "console.log").read_text()
    assert f"sandboxed build, guest root {iso.guest_root}" in " ".join(
        terminal.summary([result]).split())


def test_no_sandbox_and_host_root_are_honoured_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.base.model import Accel
    from harness.drivers import pipeline
    from harness.drivers.matrix import Cell, Tier
    from harness.output import results, terminal
    from tests.unit.test_pipeline import KTAP_PASS, own_test

    _fake_world(tmp_path, monkeypatch)
    tree = committed_tree(tmp_path / "linux")
    cell = Cell(name="open", tier=Tier.DEFAULT, kernel=f"git:{tree}",
                configs=(str(FAKES / "fake.config"),),
                tests=(own_test(tmp_path, "fake_pass", KTAP_PASS),))
    out = tmp_path / "out"
    with sandbox.using(OFF):
        result = pipeline.run_cell(cell, out, accel=Accel.TCG,
                                   options=pipeline.RunOptions(host_root=True))
    assert result.status is Status.PASS, result.error
    assert "[sandbox]" not in (out / "build.log").read_text()
    assert "guest-view" not in (out / "guest" / "console.log").read_text()
    iso = result.isolation
    assert iso is not None and not iso.sandbox and iso.sandbox_off == "--no-sandbox"
    assert iso.host_root == "--host-root" and iso.guest_root == ""
    line = " ".join(terminal.summary([result]).split())
    assert "build NOT sandboxed (--no-sandbox), guest on the host's root (--host-root)" in line
    data = results.cell_json(result)["isolation"]
    assert data["sandbox"]["enabled"] is False and data["guest_root"]["host_root"]
    # and the default: in the sandbox, on its own root
    again = pipeline.run_cell(cell, tmp_path / "out2", accel=Accel.TCG)
    assert again.status is Status.PASS and again.kernel_from_store  # the same key
    assert again.isolation is not None and again.isolation.sandbox and \
        again.isolation.guest_root


def test_what_a_run_and_its_cells_were_kept_in_is_read_back_as_written(
        tmp_path: Path) -> None:
    """The one reader gives back each cell's Isolation and the run's, from a real run's
    results.json (tests/golden/recorded-runs/README.md) and from a run with both off."""
    from dataclasses import replace

    from harness.base.model import Isolation, RunIsolation
    from harness.output import results

    golden = Path(__file__).resolve().parents[1] / "golden/recorded-runs"
    run, _, _ = results.load_run(str(golden / "recorded-lkdtm-6.12.json"))
    assert run.isolation == RunIsolation(sandbox="sandboxed build", guest="a root of its own")
    iso = run.cells[0].isolation
    assert iso is not None and iso.sandbox and iso.sandbox_tool.startswith("bubblewrap ")
    assert iso.guest_root == "4ece22e7cc4977dc" and iso.guest_root_packages > 0
    off = Isolation(sandbox=False, sandbox_off="--no-sandbox", host_root="--host-root")
    turned = replace(run, cells=(replace(run.cells[0], isolation=off),),
                     isolation=RunIsolation(sandbox="build NOT sandboxed (--no-sandbox)",
                                            guest="the host's root (--host-root)"))
    results.write_json(tmp_path / "results.json", turned)
    again, _, _ = results.load_run(str(tmp_path / "results.json"))
    assert again.isolation == turned.isolation and again.cells[0].isolation == off


def test_a_host_where_bubblewrap_cannot_run_stops_the_cell_in_its_plan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    from harness.base.model import Accel
    from harness.drivers import pipeline
    from harness.drivers.matrix import Cell, Tier

    _fake_world(tmp_path, monkeypatch)
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "_which", lambda program: str(fake))
    tree = committed_tree(tmp_path / "linux")
    cell = Cell(name="refused", tier=Tier.DEFAULT, kernel=f"git:{tree}",
                configs=(str(FAKES / "fake.config"),), tests=())
    result = pipeline.run_cell(cell, tmp_path / "out", accel=Accel.TCG)
    assert result.status is Status.SETUP_ERROR
    assert [(s.stage, s.status) for s in result.stages] == [("plan", Status.SETUP_ERROR)]
    assert "setting up uid map: Permission denied" in result.error
    assert "--no-sandbox" in result.error and "sysctl" in result.error


def test_a_cells_reproduce_command_keeps_what_the_run_turned_off() -> None:
    from harness.drivers import run

    argv = ["run", "--kernel", "debian:6.12", "--accel", "tcg", "--", "uname", "-r"]
    assert run._isolation_flags(argv, False) == argv
    with sandbox.using(OFF):
        assert run._isolation_flags(argv, True) == [
            "run", "--kernel", "debian:6.12", "--accel", "tcg", "--no-sandbox", "--host-root",
            "--", "uname", "-r"]


def test_a_file_the_harness_writes_in_the_tree_is_never_a_link_out_of_it(
        tmp_path: Path) -> None:
    """mutate writes mutants into the series' files and --coverage appends to Makefiles:
    a series that committed a symlink there must not make the harness write elsewhere."""
    tree = tmp_path / "tree"
    (tree / "mm").mkdir(parents=True)
    (tree / "mm" / "a.c").write_text("int a;\n")
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / ".bashrc").write_text("mine\n")
    (tree / "mm" / "Makefile").symlink_to(outside / ".bashrc")
    (tree / "lib").symlink_to(outside)
    assert sandbox.tree_file(tree / "mm" / "a.c", tree) == tree / "mm" / "a.c"
    assert sandbox.tree_file(tree / "mm" / "new.c", tree) == tree / "mm" / "new.c"
    for bad in (tree / "mm" / "Makefile", tree / "lib" / "Makefile", tree / "lib" / "x.c"):
        with pytest.raises(sandbox.SandboxError):
            sandbox.tree_file(bad, tree)
    assert (outside / ".bashrc").read_text() == "mine\n"
