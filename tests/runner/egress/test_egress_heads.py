"""The egress proxy's reading of request heads (runner/egress/proxy.py, HTTP parsed by h11): what is
refused, and what may follow a head."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from runner.egress.proxy import MAX_HEAD_BYTES
from tests.runner.egress.test_egress import CountingResolver, _ask, _bounded_proxy

# --- request heads, parsed by h11: what is refused, and what follows a head -------------------
# PORT in a request stands for the port of the test's own destination on loopback (`origin`), which
# the policy allows: a well-formed request would reach it.


@pytest.fixture
def origin() -> Iterator[socket.socket]:
    """A listener on loopback standing for a destination: a test accepts what the proxy sent it,
    or finds that nothing came."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(5)
        yield listener


def _at(origin: socket.socket, *requests: bytes) -> list[bytes]:
    port = str(origin.getsockname()[1]).encode()
    return [request.replace(b"PORT", port) for request in requests]


@pytest.mark.parametrize(
    ("head", "status", "why"),
    [
        pytest.param(
            b"GET http://a.up.test:PORT/ HTTP/1.1\r\nHost: a.up.test\r\nX-Folded: one\r\n two\r\n\r\n",
            400,
            "obs-fold",
            id="a header folded onto the next line",
        ),
        pytest.param(
            b"GET http://a.up.test:PORT/ HTTP/1.1\r\nHost: a.up.test\r\nHost: elsewhere.test\r\n\r\n",
            400,
            "multiple Host",
            id="a duplicate Host",
        ),
        pytest.param(
            b"POST http://a.up.test:PORT/ HTTP/1.1\r\nHost: a.up.test\r\n"
            b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nx",
            400,
            "conflicting Content-Length",
            id="conflicting Content-Length",
        ),
        pytest.param(
            b"GET http://user:pass@a.up.test:PORT/ HTTP/1.1\r\nHost: a.up.test\r\n\r\n",
            400,
            "CONNECT host:port",
            id="userinfo in an absolute URL",
        ),
        pytest.param(
            b"CONNECT user@a.up.test:PORT HTTP/1.1\r\n\r\n", 400, "CONNECT host:port", id="userinfo in CONNECT"
        ),
        pytest.param(
            b"GET http://a.up.test:PORT/ HTTP/1.1\nHost: a.up.test\n\n", 400, "bare LF", id="bare LF line endings"
        ),
        pytest.param(
            b"GET http://a.up.test:PORT/ HTTP/1.1\r\nHost: a.up.test\nX-After: y\r\n\r\n",
            400,
            "bare LF",
            id="one bare LF among CRLFs",
        ),
        pytest.param(
            b"GET http://a.up.test:PORT/ HTTP/1.1\r\nX-Long: " + b"x" * MAX_HEAD_BYTES + b"\r\n\r\n",
            431,
            "too large",
            id="a line longer than a head may be",
        ),
        pytest.param(
            b"GET http://a.up.test:PORT/ HTTP/1.1\r\n" + b"X-Many: y\r\n" * (MAX_HEAD_BYTES // 11 + 1) + b"\r\n",
            431,
            "too large",
            id="a head longer than it may be",
        ),
        pytest.param(
            b"G3T http://a.up.test:PORT/ HTTP/1.1\r\nHost: a.up.test\r\n\r\n",
            400,
            "CONNECT host:port",
            id="a method with a digit",
        ),
        pytest.param(
            b"GE(T http://a.up.test:PORT/ HTTP/1.1\r\nHost: a.up.test\r\n\r\n",
            400,
            "illegal request line",
            id="a method with a bracket",
        ),
        pytest.param(
            b"GET  http://a.up.test:PORT/ HTTP/1.1\r\nHost: a.up.test\r\n\r\n",
            400,
            "illegal request line",
            id="two spaces in the request line",
        ),
        pytest.param(
            b"GET http://a.up.test:PORT/ HTTP/1.1 \r\nHost: a.up.test\r\n\r\n",
            400,
            "illegal request line",
            id="a space after the version",
        ),
        pytest.param(b"GET http://a.up.test:PORT/ HTTP/2.0\r\nHost: a.up.test\r\n\r\n", 400, "HTTP/2.0", id="HTTP/2.0"),
    ],
)
def test_a_malformed_request_head_is_refused_recorded_and_reaches_no_one(
    head: bytes, status: int, why: str, origin: socket.socket
) -> None:
    resolver = CountingResolver()
    egress, proxy = _bounded_proxy([f"a.up.test:{origin.getsockname()[1]}"], resolver, [])
    try:
        [request] = _at(origin, head)
        answer = _ask(proxy, request)
    finally:
        egress.close()
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()) and b"\r\nX-Cordon-Egress: refused\r\n" in answer, answer
    [attempt] = egress.record()
    assert (attempt["allowed"], attempt["host"], attempt["address"]) == (False, "", "")
    assert why in attempt["reason"], attempt["reason"]
    assert egress.refused == 1 and egress.connections == 0 and resolver.asked == []
    origin.settimeout(0.3)
    with pytest.raises(TimeoutError):
        origin.accept()  # nothing came to the destination the request named


@pytest.mark.parametrize(
    ("sent", "arrives"),
    [
        pytest.param(
            b"POST http://a.up.test:PORT/submit?x=1 HTTP/1.1\r\nHost: elsewhere.test\r\n"
            b"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nX-Kept: As Sent\r\n"
            b"Content-Length: 5\r\n\r\nhello",
            b"POST /submit?x=1 HTTP/1.1\r\nHost: a.up.test:PORT\r\nX-Kept: As Sent\r\nContent-Length: 5\r\n"
            b"Connection: close\r\n\r\nhello",
            id="a body; the checked Host, not the client's; no hop-by-hop headers",
        ),
        pytest.param(
            b"GET http://a.up.test:PORT/ HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a.up.test:PORT\r\nConnection: close\r\n\r\n",
            id="an HTTP/1.1 head without Host",
        ),
        pytest.param(
            b"CONNECT a.up.test:PORT HTTP/1.1\r\n\r\n\x16\x03\x01 a tunnel's first bytes",
            b"\x16\x03\x01 a tunnel's first bytes",
            id="a tunnel's first bytes, sent with its head",
        ),
    ],
)
def test_a_request_reaches_its_destination_with_what_followed_its_head(
    sent: bytes, arrives: bytes, origin: socket.socket
) -> None:
    sent, arrives = _at(origin, sent, arrives)
    egress, proxy = _bounded_proxy([f"a.up.test:{origin.getsockname()[1]}"], CountingResolver(), [])
    try:
        with socket.create_connection(proxy, timeout=5) as client:
            client.sendall(sent)
            upstream, _ = origin.accept()
            with upstream:
                upstream.settimeout(5)
                got = b""
                while len(got) < len(arrives) and (chunk := upstream.recv(4096)):
                    got += chunk
    finally:
        egress.close()
    assert got == arrives
    [attempt] = egress.record()
    assert attempt["allowed"] and attempt["bytes_out"] == len(arrives)
