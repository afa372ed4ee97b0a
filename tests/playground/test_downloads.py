"""Downloads of a run's outputs and images are sent as they are read: under ASGI a bounded chunk at
a time (never the whole file in the web process first), with the headers they always had; and the
web server sends no faster than its client reads."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import time
import warnings
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

import psutil
import pytest
from asgiref.sync import sync_to_async
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage

from playground.asgi import application
from playground.downloads import CHUNK_BYTES
from playground.models import Run, RunOutputFile
from playground.services.accounts import token_create
from tests.playground.conftest import serve_web, session_cookie
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

MIB = 1 << 20
SYNC_BODY_WARNING = "must consume synchronous iterators"


def _output(name: str, data: bytes) -> RunOutputFile:
    owner: Any = UserFactory()
    run = Run.objects.create(owner=owner, runtime="python", code="1", state="finished", outcome="succeeded")
    output = RunOutputFile.objects.create(run=run, name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    output.file.save(name, ContentFile(data))
    return output


class _ReadCounter:
    """Counts the bytes read from every file the storage opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read = 0
        opened = FileSystemStorage._open  # type: ignore[attr-defined]
        counter = self

        def counting_open(storage: FileSystemStorage, name: str, mode: str = "rb") -> Any:
            handle = opened(storage, name, mode)
            real_read = handle.file.read

            def read(size: int = -1) -> bytes:
                data: bytes = real_read(size)
                counter.read += len(data)
                return data

            handle.file.read = read
            return handle

        monkeypatch.setattr(FileSystemStorage, "_open", counting_open)


async def _asgi_get(
    path: str, cookie: bytes, files: _ReadCounter
) -> tuple[dict[str, str], list[bytes], int, list[str]]:
    """The application's answer to a GET, as an ASGI server gets it: headers, each body message,
    the bytes read from files when the first body message was sent, and the warnings raised."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"cookie", cookie)], "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }  # fmt: skip
    requested = asyncio.Event()
    start: dict[str, Any] = {}
    bodies: list[bytes] = []
    read_at_first_send: list[int] = []

    async def receive() -> dict[str, Any]:
        if not requested.is_set():
            requested.set()
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message.get("body"):
            if not bodies:
                read_at_first_send.append(files.read)
            bodies.append(message["body"])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await cast(Any, application)(scope, receive, send)
    headers = {name.decode().lower(): value.decode() for name, value in start["headers"]}
    assert start["status"] == 200, (start, b"".join(bodies)[:300])
    return headers, bodies, read_at_first_send[0], [str(w.message) for w in caught]


@pytest.mark.asyncio
async def test_an_output_is_downloaded_under_asgi_a_bounded_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(3 * MIB + 5)
    output = await sync_to_async(_output)("results/table.bin", data)
    cookie = await sync_to_async(session_cookie)(await sync_to_async(lambda: output.run.owner)())
    files = _ReadCounter(monkeypatch)
    headers, bodies, read_first, said = await _asgi_get(
        f"/api/runs/{output.run_id}/outputs/{output.name}", cookie, files
    )
    assert not [message for message in said if SYNC_BODY_WARNING in message]
    assert b"".join(bodies) == data
    assert max(len(body) for body in bodies) <= CHUNK_BYTES
    assert read_first <= 2 * CHUNK_BYTES  # its first bytes went out before the rest was read
    assert headers["content-length"] == str(len(data))
    assert headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"] == 'attachment; filename="table.bin"'
    assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.asyncio
async def test_an_image_output_is_streamed_under_asgi_with_its_sandboxing_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = b"\x89PNG\r\n\x1a\n" + os.urandom(MIB)
    output = await sync_to_async(_output)("plot.png", data)
    cookie = await sync_to_async(session_cookie)(await sync_to_async(lambda: output.run.owner)())
    files = _ReadCounter(monkeypatch)
    headers, bodies, read_first, said = await _asgi_get(f"/api/runs/{output.run_id}/images/plot.png", cookie, files)
    assert not [message for message in said if SYNC_BODY_WARNING in message]
    assert b"".join(bodies) == data and read_first <= 2 * CHUNK_BYTES
    assert headers["content-type"] == "image/png" and headers["content-length"] == str(len(data))
    assert headers["content-disposition"] == "inline"
    assert headers["content-security-policy"] == "default-src 'none'; img-src data:; style-src 'unsafe-inline'; sandbox"
    assert headers["cross-origin-resource-policy"] == "same-origin"
    assert headers["cache-control"] == "private, max-age=3600"


# --- the web server: a client that does not read holds the download back -----------------------


@pytest.fixture
def site(worker_env: dict[str, str]) -> Iterator[tuple[str, int, psutil.Process]]:
    with serve_web(worker_env) as base:
        parts = urlsplit(base)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        [server] = [p for p in psutil.process_iter(["cmdline"])
                    if "playground.server" in (p.info["cmdline"] or []) and str(port) in p.info["cmdline"]]  # fmt: skip
        yield host, port, server


def _request(path: str, token: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode()


def _read_bytes(process: psutil.Process) -> int:
    return int(process.io_counters().read_chars)


def test_the_web_server_reads_a_download_no_faster_than_its_client_takes_it(
    site: tuple[str, int, psutil.Process],
) -> None:
    host, port, server = site
    data = os.urandom(64 * MIB)
    output = _output("big.bin", data)
    token = token_create(user=output.run.owner)
    path = f"/api/runs/{output.run_id}/outputs/big.bin"
    with socket.create_connection((host, port), timeout=30) as warm:  # the API's code loaded, as in use
        warm.sendall(_request(f"/api/runs/{output.run_id}", token))
        warm.recv(65536)
    rss_before, read_before = server.memory_info().rss, _read_bytes(server)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.settimeout(30)
        sock.connect((host, port))
        sock.sendall(_request(path, token))
        head = sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        rss_peak, read_ahead = rss_before, 0
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # the client reads nothing meanwhile
            rss_peak = max(rss_peak, server.memory_info().rss)
            read_ahead = _read_bytes(server) - read_before
            time.sleep(0.1)
        # Sent as the client takes it: a few socket buffers' worth ahead, never the file.
        assert read_ahead < 16 * MIB, read_ahead
        assert rss_peak - rss_before < 24 * MIB, (rss_before, rss_peak)
        received = bytearray(head.partition(b"\r\n\r\n")[2])
        while len(received) < len(data):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            received += chunk
    assert hashlib.sha256(received).hexdigest() == output.sha256
