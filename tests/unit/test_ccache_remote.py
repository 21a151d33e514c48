"""HARNESS_CCACHE_REMOTE: ccache's own remote storage, so that CI runners and new machines
share compiled objects. Real ccache and gcc against a real HTTP server started here on
localhost (ccache's HTTP backend: GET, PUT, DELETE), on a few objects, not a kernel.

An http: or redis: storage needs the network, which a sandboxed build has not: these
tests compile as a --no-sandbox build does; the last ones say what the sandbox does
with each kind of storage."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from harness.base import sandbox
from harness.base.errors import HarnessError
from harness.drivers import doctor
from harness.kernel import build


class Store(BaseHTTPRequestHandler):
    """A storage server as ccache's HTTP backend wants one: GET, HEAD, PUT, DELETE."""

    blobs: ClassVar[dict[str, bytes]] = {}
    puts: ClassVar[int] = 0

    def do_GET(self) -> None:
        blob = self.blobs.get(self.path)
        self.send_response(200 if blob is not None else 404)
        self.send_header("Content-Length", str(len(blob or b"")))
        self.end_headers()
        if blob is not None and self.command == "GET":
            self.wfile.write(blob)

    do_HEAD = do_GET

    def do_PUT(self) -> None:
        self.blobs[self.path] = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).puts += 1
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_DELETE(self) -> None:
        self.blobs.pop(self.path, None)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args: object) -> None:  # quiet
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Store.blobs, Store.puts = {}, 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Store)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/cache"
    httpd.shutdown()
    httpd.server_close()


def _sources(where: Path) -> list[Path]:
    where.mkdir()
    files = []
    for i in range(3):
        f = where / f"unit{i}.c"
        f.write_text(f"int unit{i}(int x) {{ return x * {i + 2} + {i}; }}\n")
        files.append(f)
    return files


def _compile(files: list[Path], cache: Path, monkeypatch: pytest.MonkeyPatch,
             ) -> dict[str, int]:
    """Each file through ccache as the kernel build runs it (the harness's build
    environment for this cache); the ccache counters of this cache afterwards."""
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    with sandbox.using(sandbox.Policy(enabled=False, why_off="--no-sandbox")):
        env = {**os.environ, **build.make_env(build.tools())}
    for f in files:
        subprocess.run(["ccache", "gcc", "-O2", "-c", f.name, "-o", f.stem + ".o"],
                       cwd=f.parent, env=env, check=True, capture_output=True)
    stats = subprocess.run(["ccache", "--print-stats"], env=env, text=True, check=True,
                           capture_output=True).stdout
    return {k: int(v) for k, v in (ln.split("\t") for ln in stats.splitlines()
                                   if "\t" in ln and ln.split("\t")[1].isdigit())}


def test_a_new_machine_takes_what_another_compiled_from_the_remote(
        server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CCACHE_REMOTE", server)
    files = _sources(tmp_path / "src")
    first = _compile(files, tmp_path / "machine-a", monkeypatch)
    assert first.get("cache_miss", 0) == 3 and Store.puts >= 3  # compiled, and shared
    built = {f.stem: (f.parent / f"{f.stem}.o").read_bytes() for f in files}
    for f in files:
        (f.parent / f"{f.stem}.o").unlink()
    second = _compile(files, tmp_path / "machine-b", monkeypatch)  # an empty local cache
    assert second.get("remote_storage_hit", 0) == 3, second
    assert second.get("cache_miss", 0) == 0, second
    assert {f.stem: (f.parent / f"{f.stem}.o").read_bytes() for f in files} == built


def test_a_remote_that_does_not_answer_is_a_miss_never_a_failed_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HARNESS_CCACHE_REMOTE", f"http://127.0.0.1:{port}/cache")
    files = _sources(tmp_path / "src")
    stats = _compile(files, tmp_path / "machine", monkeypatch)
    assert stats.get("cache_miss", 0) == 3
    assert all((f.parent / f"{f.stem}.o").is_file() for f in files)
    [check] = doctor.remote_cache_checks()
    assert not check.ok and "unset HARNESS_CCACHE_REMOTE" in check.fix


def test_doctor_says_a_remote_answers(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CCACHE_REMOTE", server)
    [check] = doctor.remote_cache_checks()
    assert check.ok and "answers" in check.detail
    assert "not used by sandboxed builds" in check.detail  # no network in the sandbox
    monkeypatch.delenv("HARNESS_CCACHE_REMOTE")
    assert doctor.remote_cache_checks() == []


@pytest.mark.parametrize("url", ["ftp://host/cache", "localhost:8080", "s3://bucket"])
def test_a_remote_ccache_cannot_use_is_refused_with_the_forms_it_can(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CCACHE_REMOTE", url)
    with pytest.raises(HarnessError, match="is not a storage ccache can use") as exc:
        build.make_env(build.tools())
    assert "redis://HOST" in exc.value.fix and "unset it" in exc.value.fix
    [check] = doctor.remote_cache_checks()
    assert not check.ok


def test_unset_means_the_local_cache_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_CCACHE_REMOTE", raising=False)
    assert "CCACHE_REMOTE_STORAGE" not in build.make_env(build.tools())


def test_in_the_sandbox_a_network_storage_is_left_out_and_a_file_storage_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No network in the sandbox: ccache would try an http: storage for every compile and
    miss; it is left out (a warning says so). A file: storage is a directory: bound
    writable at its own path, and used."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_CCACHE_REMOTE", "http://127.0.0.1:9/cache")
    tools = build.tools()
    assert "CCACHE_REMOTE_STORAGE" not in build.make_env(tools)
    with sandbox.using(sandbox.Policy(enabled=False, why_off="--no-sandbox")):
        assert build.make_env(tools)["CCACHE_REMOTE_STORAGE"] == "http://127.0.0.1:9/cache"
    remote = tmp_path / "shared"
    monkeypatch.setenv("HARNESS_CCACHE_REMOTE", f"file:{remote}|update-mtime=true")
    assert build.make_env(tools)["CCACHE_REMOTE_STORAGE"] == f"file:{remote}|update-mtime=true"
    reach = build.reach(tmp_path / "tree", tools)
    assert remote in reach.write and tmp_path / "cache" / "ccache" in reach.write
