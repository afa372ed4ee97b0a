"""Request bodies are capped by the web server itself, before they are read: by Content-Length at
once, by counting while a chunked body streams; the answer is the API's JSON 413. Raw sockets,
so the test controls exactly what is sent and when."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

import pytest

from playground.services.accounts import token_create
from runner.units import size_words
from tests.playground.conftest import serve_web
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

DATASET_CAP = 100_000
REQUEST_CAP = 8192


@pytest.fixture
def site(worker_env: dict[str, str]) -> Iterator[tuple[str, int]]:
    env = {**worker_env, "CORDON_DATASET_MAX_BYTES": str(DATASET_CAP), "CORDON_REQUEST_MAX_BYTES": str(REQUEST_CAP)}
    with serve_web(env) as base:
        parts = urlsplit(base)
        yield parts.hostname or "127.0.0.1", parts.port or 80


def _connect(site: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(site, timeout=10)
    return sock


def _read_response(sock: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def _head(method: str, path: str, extra: list[str]) -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *extra, "", ""]).encode()


def _assert_413(status: int, headers: dict[str, str], body: bytes, cap: int) -> None:
    assert status == 413, (status, body[:200])
    assert headers["content-type"].startswith("application/json")
    error = json.loads(body)
    assert error["code"] == "too_large" and f"over the {size_words(cap)} limit" in error["message"], error
    assert str(cap) not in error["message"]  # a person reads "64.1 MiB", not 67174400


def test_an_announced_body_over_the_cap_is_answered_413_before_any_of_it_is_sent(site: tuple[str, int]) -> None:
    with _connect(site) as sock:
        sock.sendall(_head("POST", "/api/datasets", ["Content-Length: 80000000",
                                                       "Content-Type: multipart/form-data; boundary=x"]))  # fmt: skip
        _assert_413(*_read_response(sock), DATASET_CAP + 64 * 1024)


def test_a_client_waiting_for_100_continue_gets_the_413_instead(site: tuple[str, int]) -> None:
    with _connect(site) as sock:
        sock.sendall(_head("POST", "/api/runs", ["Content-Length: 50000", "Expect: 100-continue",
                                                   "Content-Type: application/json"]))  # fmt: skip
        status, headers, body = _read_response(sock)
        _assert_413(status, headers, body, REQUEST_CAP)


def test_a_client_that_sends_its_oversize_body_anyway_still_reads_the_413(site: tuple[str, int]) -> None:
    with _connect(site) as sock:
        sock.sendall(_head("POST", "/api/runs", ["Content-Length: 3000000", "Content-Type: application/json"]))
        for _ in range(30):  # the whole body, discarded by the server as it arrives
            sock.sendall(b"x" * 100_000)
        _assert_413(*_read_response(sock), REQUEST_CAP)


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_cap(site: tuple[str, int]) -> None:
    with _connect(site) as sock:
        sock.sendall(_head("POST", "/api/datasets", ["Transfer-Encoding: chunked",
                                                       "Content-Type: multipart/form-data; boundary=x"]))  # fmt: skip
        sent = 0
        sock.settimeout(0.05)
        answer = b""
        # Keep streaming (never ending the body) until the server answers: it must not wait for the end.
        deadline = time.monotonic() + 20
        while not answer and time.monotonic() < deadline:
            try:
                sock.sendall(b"8000\r\n" + b"y" * 0x8000 + b"\r\n")
                sent += 0x8000
            except OSError:
                break
            try:
                answer = sock.recv(65536, socket.MSG_PEEK)
            except (TimeoutError, BlockingIOError):
                pass
        assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
        assert sent < 4 * DATASET_CAP, sent
        _assert_413(*_read_response(sock), DATASET_CAP + 64 * 1024)


def _chunked(data: bytes, size: int = 1000) -> bytes:
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


def test_a_chunked_upload_within_the_cap_is_parsed_and_stored(site: tuple[str, int], redis_server: Any) -> None:
    token = token_create(user=cast(Any, UserFactory()))
    boundary = "cordonboundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="chunked.csv"\r\n'
        f"Content-Type: text/csv\r\n\r\na,b\n1,2\n\r\n--{boundary}--\r\n"
    ).encode()
    with _connect(site) as sock:
        headers = ["Transfer-Encoding: chunked", f"Authorization: Bearer {token}",
                   f"Content-Type: multipart/form-data; boundary={boundary}"]  # fmt: skip
        sock.sendall(_head("POST", "/api/datasets", headers))
        sock.sendall(_chunked(body, 16))
        status, _, answer = _read_response(sock)
    assert status == 201, answer
    assert json.loads(answer)["name"] == "chunked.csv"


def test_bodies_within_the_cap_are_served_as_before(site: tuple[str, int], redis_server: Any) -> None:
    token = token_create(user=cast(Any, UserFactory()))
    payload = json.dumps({"runtime": "python", "code": "print(1)", "limits": {"bogus": 1}}).encode()
    with _connect(site) as sock:
        sock.sendall(_head("POST", "/api/runs", [f"Content-Length: {len(payload)}", f"Authorization: Bearer {token}",
                                                   "Content-Type: application/json"]) + payload)  # fmt: skip
        status, _, answer = _read_response(sock)
    assert status == 422 and json.loads(answer)["field"] == "limits.bogus"


def test_a_malformed_multipart_body_reaches_django_and_gets_the_json_error(
    site: tuple[str, int], redis_server: Any
) -> None:
    token = token_create(user=cast(Any, UserFactory()))
    body = b"--B--\r\n"
    with _connect(site) as sock:
        headers = [f"Content-Length: {len(body)}", f"Authorization: Bearer {token}",
                   "Content-Type: multipart/form-data; boundary=B"]  # fmt: skip
        sock.sendall(_head("POST", "/api/datasets", headers) + body)
        status, response_headers, answer = _read_response(sock)
    assert 400 <= status < 500 and response_headers["content-type"].startswith("application/json"), (status, answer)
    assert set(json.loads(answer)) == {"code", "message", "field"}
