"""`harness reproduce` and `harness export --bundle` as a user runs them: real harness
processes on the fake kernel tree packaged as a Debian source package in a signed archive
of our own (tests/helpers/debarchive.py, read through the harness's own apt configuration
as Debian's sid is) and booted by the fake vng (tests/fakes/bin/vng). The test `t` fails
when the booted kernel holds BAD-MARK: a mutant patch, or another package version of the
source, makes it fail. Real: the CLI, apt, git, the series, kconfig, the kernel store, the
carried inputs, the bundle, the comparison. (tests/e2e/test_reproduce.py: a real kernel.)"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import debarchive
from tests.helpers.faketree import FAKES, fake_vng_env

REPO = Path(__file__).resolve().parents[2]
# the test fails on a kernel image that holds BAD-MARK
CHECK = ("echo 'TAP version 13'; echo 1..1; if grep -q BAD-MARK \"$FAKE_VNG_KERNEL\"; then "
         "echo 'not ok 1 - kernel_is_good'; else echo 'ok 1 - kernel_is_good'; fi")
TEST_TOML = f'name = "t"\n[run]\ncommand = ["sh", "-c", {json.dumps(CHECK)}]\ntimeout = 10\n'


@dataclass(frozen=True)
class World:
    root: Path
    env: dict[str, str]
    archive: Path
    gnupg: Path
    run: Path  # the producer's run, moved away from where it was made
    comment: Path  # the --patch it applied (a copy: the one it was given is deleted)
    mutant: Path  # the same file name, another content: BAD-MARK in the kernel

    def harness(self, *args: str, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd or self.root,
                              env={**self.env, **(env or {}), "PYTHONPATH": str(REPO)},
                              text=True, capture_output=True, timeout=600)


def _patch(tree: Path, line: str, subject: str, dest: Path) -> Path:
    """A git format-patch of one line added to kernel/fake.c, at `dest`."""
    with (tree / "kernel" / "fake.c").open("a") as f:
        f.write(line + "\n")
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", subject], check=True)
    out = subprocess.run([*git, "format-patch", "-1", "--stdout"], check=True,
                         capture_output=True).stdout
    subprocess.run([*git, "reset", "-q", "--hard", "HEAD~1"], check=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(out)
    return dest


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        h.update(str(p.relative_to(directory)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The producer's run: debian:9.9 (the fake tree, package 9.9.1-1) + a --patch file +
    the fake config + the test `t` by its directory; then its patch file and test directory
    deleted, and its results directory moved elsewhere."""
    if shutil.which("dpkg-scanpackages") is None:
        pytest.fail("dpkg-scanpackages is missing: apt-get install -y dpkg-dev")
    root = tmp_path_factory.mktemp("reproduce")
    home, keyring = root / "gnupg", root / "archive.gpg"
    debarchive.signing_key(home, keyring)
    archive, work = root / "archive", root / "work"
    (archive / "pool").mkdir(parents=True)
    work.mkdir()
    debarchive.package(archive / "pool", "9.9", "9.9.1-1", work)
    debarchive.publish(archive, "fakesid", debarchive.gnupg_env(home))
    table = debarchive.suite_table(root / "suites.toml", archive, keyring, refresh_hours=0)
    env = fake_vng_env(root / "cache", HARNESS_DEBIAN_SUITES=str(table),
                       HARNESS_HISTORY=str(root / "history.sqlite"))
    tree = root / "tree"
    shutil.copytree(FAKES / "kernel-tree", tree)
    for step in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "b"]):
        subprocess.run(["git", "-C", str(tree), *step], check=True, capture_output=True)
    producer = root / "producer"
    given = _patch(tree, "/* a comment */", "fake: a comment", producer / "extra.patch")
    (root / "kept").mkdir()
    comment = shutil.copyfile(given, root / "kept" / "extra.patch")
    mutant = _patch(tree, 'const char *mark = "BAD-MARK";', "fake: DELIBERATELY BROKEN",
                    root / "mutant" / "extra.patch")
    (producer / "t").mkdir()
    (producer / "t" / "test.toml").write_text(TEST_TOML)
    w = World(root=root, env=env, archive=archive, gnupg=home, run=root / "moved" / "run",
              comment=comment, mutant=mutant)
    made = w.harness("run", "--kernel", "debian:9.9", "--config",
                     str(FAKES / "fake.config"), "--test", "t", "--patch", "extra.patch",
                     "--out", "run", cwd=producer)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    (root / "moved").mkdir()
    shutil.move(producer / "run", w.run)
    shutil.rmtree(producer)  # the patch file, the test directory: gone
    yield w


def test_the_run_carries_its_inputs(world: World) -> None:
    data = json.loads((world.run / "results.json").read_text())
    inputs = data["cells"][0]["inputs"]
    assert inputs["source"]["package_version"] == "9.9.1-1"
    assert inputs["source"]["package"] == "linux-source-9.9"
    assert inputs["kernel"] == "debian:9.9" and inputs["tests"] == ["t"]
    [group] = inputs["patches"]
    [patch] = group["patches"]
    carried = world.run / patch["path"]
    assert patch["name"] == "extra.patch" and carried.read_bytes() == world.comment.read_bytes()
    assert patch["sha256"] == hashlib.sha256(carried.read_bytes()).hexdigest()
    assert (world.run / group["directory"] / "series").read_text().splitlines()[-1] == \
        "extra.patch"
    [config] = inputs["configs"]
    assert (world.run / config["path"]).read_bytes() == (FAKES / "fake.config").read_bytes()
    [test_dir] = inputs["test_dirs"]
    assert (world.run / test_dir["path"] / "test.toml").read_text() == TEST_TOML
    assert data["harness_rev"] and isinstance(data["harness_dirty"], bool)
    # reproduce.sh: a thin call of harness reproduce on its own directory
    script = (world.run / "reproduce.sh").read_text()
    assert 'set -- reproduce "$run"' in script and "\ncd " not in script
    # no kernel image in it
    assert not [p for p in world.run.rglob("*") if p.name in ("bzImage", "vmlinux")]


def test_the_moved_run_is_reproduced_from_another_directory(world: World) -> None:
    elsewhere = world.root / "elsewhere"
    elsewhere.mkdir()
    before = _digest(world.run)
    got = world.harness("reproduce", str(world.run), cwd=elsewhere)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    assert "verdicts match: 4 result(s) in 1 cell(s)" in got.stdout
    assert "Debian linux-source-9.9 9.9.1-1" in got.stdout  # the inputs, listed
    flat = " ".join(got.stdout.split())
    assert "--patch " in flat and "extra.patch (" in flat
    assert "inputs that differ: none" in got.stdout or "harness checkout" in got.stdout
    assert _digest(world.run) == before  # nothing written into the run reproduced
    [out] = (elsewhere / "results").iterdir()
    judged = json.loads((out / "reproduction.json").read_text())
    assert judged["verdicts_match"] is True and judged["exit_code"] == 0
    again = json.loads((out / "results.json").read_text())["cells"][0]["inputs"]
    assert again["source"]["package_version"] == "9.9.1-1"
    assert again["patches"][0]["patches"][0]["sha256"] == hashlib.sha256(
        world.comment.read_bytes()).hexdigest()


def test_reproduce_sh_works_wherever_the_directory_is(world: World) -> None:
    moved = world.root / "copies" / "somewhere" / "run"
    shutil.copytree(world.run, moved)
    harness = Path(sys.executable).parent / "harness"
    got = subprocess.run(["sh", str(moved / "adhoc" / "reproduce.sh"), "--out",
                          str(world.root / "via-script")], cwd="/",
                         env={**world.env, "HARNESS": str(harness)}, text=True,
                         capture_output=True, timeout=600)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    assert "verdicts match" in got.stdout
    assert f"reproducing {moved} (1 cell(s): adhoc)" in got.stdout


def test_the_bundle_is_one_archive_that_reproduces(world: World) -> None:
    archive = world.root / "mail" / "run.tar.gz"
    made = world.harness("export", "--bundle", str(world.run), "-o", str(archive))
    assert made.returncode == 0, made.stderr[-2000:]
    assert f"bundle: {archive}" in made.stdout
    got = world.harness("reproduce", str(archive), "--out", str(world.root / "from-bundle"))
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    assert "verdicts match" in got.stdout
    assert not list(Path("/tmp").glob("harness-bundle-*/run/results.json"))  # unpacked, gone


def test_another_patch_under_the_same_name_differs_and_is_named(world: World) -> None:
    got = world.harness("reproduce", str(world.run), "--patch", str(world.mutant),
                        "--out", str(world.root / "mutant-out"))
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-3000:]
    assert "adhoc: patch extra.patch: sha256 " in got.stdout
    assert "adhoc/t: PASS -> FAIL" in got.stdout
    assert "check kernel_is_good: PASS -> FAIL" in got.stdout


def test_a_carried_patch_changed_in_the_directory_is_an_input_that_differs(
        world: World) -> None:
    changed = world.root / "changed" / "run"
    shutil.copytree(world.run, changed)
    [carried] = changed.glob("adhoc/inputs/patches/*/extra.patch")
    shutil.copyfile(world.mutant, carried)
    got = world.harness("reproduce", str(changed), "--out", str(world.root / "changed-out"))
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-3000:]
    assert "adhoc: patch extra.patch: sha256" in got.stdout and "adhoc/t: PASS -> FAIL" \
        in got.stdout


def test_another_package_version_differs_and_then_cannot_be_had(world: World) -> None:
    """Debian moves the package: 9.9.2-1 (another kernel: BAD-MARK) is served. The pinned
    9.9.1-1 still reproduces; --kernel debian:9.9 takes the new one and names it; once
    9.9.1-1 is no longer served, another machine (an empty cache) cannot have it: exit 2,
    with the cause and the fix."""
    debarchive.package(world.archive / "pool", "9.9", "9.9.2-1", world.root / "work",
                       fake_c='const char *mark = "BAD-MARK";')
    debarchive.publish(world.archive, "fakesid", debarchive.gnupg_env(world.gnupg))
    pinned = world.harness("reproduce", str(world.run), "--out", str(world.root / "pinned"))
    assert pinned.returncode == 0, pinned.stdout[-3000:] + pinned.stderr[-3000:]
    newer = world.harness("reproduce", str(world.run), "--kernel", "debian:9.9",
                          "--out", str(world.root / "newer"))
    assert newer.returncode == 1, newer.stdout[-3000:] + newer.stderr[-3000:]
    flat = " ".join(newer.stdout.split())
    assert ("adhoc: kernel source: Debian linux-source-9.9 9.9.1-1, base" in flat
            and "-> Debian linux-source-9.9 9.9.2-1, base" in flat)
    assert "adhoc/t: PASS -> FAIL" in newer.stdout
    (world.archive / "pool" / "linux-source-9.9_9.9.1-1_all.deb").unlink()
    debarchive.publish(world.archive, "fakesid", debarchive.gnupg_env(world.gnupg))
    here = world.harness("reproduce", str(world.run), "--out", str(world.root / "here"))
    assert here.returncode == 0, "this cache imported 9.9.1-1 already: it has it"
    other = world.harness("reproduce", str(world.run), "--out", str(world.root / "other"),
                          env={"HARNESS_CACHE": str(world.root / "another-machine")})
    assert other.returncode == 2, other.stdout[-3000:] + other.stderr[-3000:]
    said = other.stderr
    assert "adhoc: the run's kernel source debian:9.9=9.9.1-1 cannot be had here" in said
    assert "no Debian suite serves linux-source-9.9 version 9.9.1-1" in said
    assert "--kernel debian:9.9 (another source, said as an input that differs)" in said
    assert "Traceback" not in said and not (world.root / "other").exists()


def test_what_cannot_be_reproduced_is_told_with_its_fix(world: World, tmp_path: Path) -> None:
    no_cell = world.harness("reproduce", str(world.run), "--cell", "nope")
    assert no_cell.returncode == 2 and "the run has no cell nope" in no_cell.stderr
    assert "fix: name one of its cells: adhoc" in no_cell.stderr
    unknown = world.harness("reproduce", str(world.run), "--patch", str(FAKES / "fake.config"))
    assert unknown.returncode == 2
    assert "the run applied no patch of that name in cell adhoc" in unknown.stderr
    old = tmp_path / "old"
    shutil.copytree(world.run, old)
    data = json.loads((old / "results.json").read_text())
    del data["cells"][0]["inputs"]
    (old / "results.json").write_text(json.dumps(data))
    got = world.harness("reproduce", str(old))
    assert got.returncode == 2 and "record no inputs" in got.stderr and "fix: " in got.stderr
    gone = tmp_path / "gone"
    shutil.copytree(world.run, gone)
    shutil.rmtree(next(gone.glob("adhoc/inputs/patches")))
    got = world.harness("reproduce", str(gone))
    assert got.returncode == 2 and "is missing from" in got.stderr
    assert "harness export --bundle RUN" in got.stderr
    junk = tmp_path / "junk.tar.gz"
    junk.write_text("not an archive")
    got = world.harness("reproduce", str(junk))
    assert got.returncode == 2 and "neither a run directory nor a bundle" in got.stderr
    inside = world.harness("reproduce", str(world.run), "--out", str(world.run / "again"))
    assert inside.returncode == 2 and "inside the run it reproduces" in inside.stderr
    assert not (world.run / "again").exists()


def test_at_revision_runs_the_runs_own_harness_revision(world: World, tmp_path: Path) -> None:
    """A clone of the harness at a commit; a run made by it; reproduced with --at-revision
    from that clone: the commit checked out in a temporary worktree, run, compared."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)],
                   check=True, timeout=300)
    rev = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True,
                         capture_output=True, text=True).stdout.strip()
    data = json.loads((world.run / "results.json").read_text())
    run = tmp_path / "run"
    shutil.copytree(world.run, run)
    data["harness_rev"] = rev
    (run / "results.json").write_text(json.dumps(data))
    env = {**world.env, "PYTHONPATH": str(clone)}
    got = subprocess.run([sys.executable, "-m", "harness", "reproduce", str(run),
                          "--at-revision", "--out", str(tmp_path / "out")], cwd=clone,
                         env=env, text=True, capture_output=True, timeout=600)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    assert f"the run's harness revision {rev[:12]} checked out" in got.stderr
    assert "verdicts match" in got.stdout
    listed = subprocess.run(["git", "-C", str(clone), "worktree", "list"], check=True,
                            capture_output=True, text=True).stdout
    assert len(listed.splitlines()) == 1  # the temporary worktree is gone
    missing = dict(data, harness_rev="0" * 40)
    (run / "results.json").write_text(json.dumps(missing))
    got = subprocess.run([sys.executable, "-m", "harness", "reproduce", str(run),
                          "--at-revision"], cwd=clone, env=env, text=True,
                         capture_output=True, timeout=600)
    assert got.returncode == 2
    assert "does not have the run's revision 000000000000" in got.stderr


def test_the_kernel_source_is_pinned_to_what_the_run_built() -> None:
    from harness.base.model import CellInputs, SourceIdentity
    from harness.drivers import reproduce

    def pinned(spec: str, **source: object) -> str:
        return reproduce.pinned_kernel(CellInputs(kernel=spec, source=SourceIdentity(
            spec=spec, **source)), "adhoc")  # type: ignore[arg-type]

    assert pinned("debian:6.12", package="linux-source-6.12",
                  package_version="6.12.117-1~deb12u1") == "debian:6.12=6.12.117-1~deb12u1"
    assert pinned("debian:sid", package="linux-source-7.2",
                  package_version="7.2.13-1") == "debian:7.2=7.2.13-1"
    assert pinned("git:/src/linux", commit="c" * 40) == f"git:/src/linux@{'c' * 40}"
    assert pinned("tarball:/x/linux-6.12.tar.xz", sha256="d" * 64) == \
        "tarball:/x/linux-6.12.tar.xz"
    with pytest.raises(reproduce.ReproduceError) as err:
        pinned("git:/src/linux", commit="c" * 40, uncommitted=True)
    assert "uncommitted changes, which a run does not carry" in str(err.value)
    assert err.value.fix.startswith("commit them and run again")


def test_a_source_named_by_a_path_must_be_here(tmp_path: Path) -> None:
    from harness.drivers import reproduce
    from harness.drivers.matrix import Cell, Tier

    cells = [Cell(name="a", tier=Tier.DEFAULT, kernel=f"git:{tmp_path / 'linux'}@{'c' * 40}"),
             Cell(name="b", tier=Tier.DEFAULT, kernel=f"tarball:{tmp_path / 'l.tar.xz'}")]
    with pytest.raises(reproduce.ReproduceError) as err:
        reproduce.preflight(cells, kernel_given=False)
    told = str(err.value)
    assert f"a: the run's kernel source git:{tmp_path / 'linux'}@" in told
    assert f"fix: give a clone of that tree that has the commit: --kernel git:PATH@{'c' * 40}" \
        in told
    assert "b: the run's kernel source tarball:" in told and "carries no kernel tarball" in told


def test_a_cell_stopped_before_its_inputs_were_read_is_told_as_such(tmp_path: Path) -> None:
    from harness.base.model import CellResult, Status
    from harness.drivers import reproduce

    def stopped(status: Status, error: str) -> str:
        cell = CellResult(cell="a", kernel="debian:9.9", kernel_version="", status=status,
                          patches=(), config=None, stages=(), tests=(), error=error,
                          arch="x86_64", toolchain="gcc")
        with pytest.raises(reproduce.ReproduceError) as err:
            reproduce.cell_of(cell, tmp_path, reproduce.Request(source=tmp_path), tmp_path)
        return f"{err.value}\nfix: {err.value.fix}"

    told = stopped(Status.SETUP_ERROR, "series nope: no such directory\nmore")
    assert "a: the run stopped it before its inputs were read (series nope: no such " \
        "directory)" in told
    assert "fix: reproduce the other cells (--cell NAME)" in told
    assert "record no inputs" in stopped(Status.PASS, "")
