"""The egress proxy (runner/egress/proxy.py): its policy, which addresses it refuses, and the proxy itself
against a test host of the test's own, in a network namespace the test makes (198.18.7.2, reached
over a veth pair). No traffic goes anywhere else: forbidden addresses come from a test resolver,
and are refused before any connection is made."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runner.egress.policy import Policy, PolicyError, Rule
from runner.egress.proxy import Caps, EgressProxy, Resolver, StaticResolver, refusal
from tests.runner.egress_net import HOST_SIDE, RESOLVER, TEST_HOST, TEST_NET, EgressTestHost


def test_a_policy_names_hosts_and_ports_and_a_run_stays_within_the_ceiling() -> None:
    policy = Policy.parse(["api.example.org:443", "*.data.example.org:443", "API.example.org:443"])
    assert policy.to_json() == ["api.example.org:443", "*.data.example.org:443"]
    assert policy.allows("api.example.org", 443) and not policy.allows("api.example.org", 80)
    assert policy.allows("eu.data.example.org", 443) and not policy.allows("data.example.org", 443)
    assert not policy.allows("evil-api.example.org", 443) and not Policy()
    ceiling = Policy.parse(["*.example.org:443"])
    assert policy.outside(ceiling) == []
    assert Policy.parse(["example.org:443", "x.example.org:80"]).outside(ceiling) == [
        Rule("example.org", 443),
        Rule("x.example.org", 80),
    ]
    assert Policy.parse(["*.example.org:443"]).outside(Policy.parse(["a.example.org:443"])) == [
        Rule("*.example.org", 443)
    ]  # a wildcard is never within a single name
    for bad in (
        "1.2.3.4:443",
        "[::1]:443",
        "localhost:80",
        "example.org",
        "example.org:0",
        "a.*.org:443",
        "exa mple.org:443",
        "-x.org:443",
        "example.org:99999",
    ):
        with pytest.raises(PolicyError):
            Rule.parse(bad)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("::ffff:127.0.0.1", "a loopback address"),
        ("10.1.2.3", "a private address"),
        ("172.16.0.1", "a private address"),
        ("192.168.1.1", "a private address"),
        ("100.64.0.1", "not a public address"),
        ("169.254.169.254", "the cloud metadata address"),
        ("169.254.1.1", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("fd00::1", "a private address"),
        ("224.0.0.1", "a multicast address"),
        ("0.0.0.0", "the unspecified address"),  # noqa: S104 - classified, never bound
        ("203.0.113.5", "a private address"),  # documentation range
        ("192.0.2.10", "an address of this host"),
        ("93.184.215.14", ""),
        ("2606:4700::1111", ""),
    ],
)
def test_only_public_addresses_that_are_not_the_hosts_own_pass(address: str, why: str) -> None:
    assert refusal(address, own=frozenset({"192.0.2.10"})) == why


# --- the proxy, against a test host in its own network namespace -----------------------------


LOOPBACK = socket.socket()  # a listener on loopback: were the proxy to connect there, it would see it
LOOPBACK.bind(("127.0.0.1", 0))
LOOPBACK.listen()
LOOPBACK.settimeout(0.2)
LOOP_PORT = LOOPBACK.getsockname()[1]


@pytest.fixture
def proxy(test_host: EgressTestHost) -> Iterator[tuple[EgressProxy, str, list[str]]]:
    """A proxy on loopback (the sandbox's side is this test), its URL and the limits it reported."""
    limits: list[str] = []
    proxy = EgressProxy(
        Policy.parse(
            [
                "allowed.test:8080",
                "allowed.test:8443",
                f"loop.test:{LOOP_PORT}",
                "meta.test:80",
                "private.test:8080",
                "mixed.test:8080",
            ]
        ),
        caps=Caps(bytes_out=64 << 10, bytes_in=256 << 10, connections=8),
        resolver=RESOLVER,
        own_addresses=frozenset({HOST_SIDE}),
        on_limit=limits.append,
        public_for_tests=[TEST_NET],
    )
    yield proxy, _serve_on_loopback(proxy), limits
    proxy.close()


def _serve_on_loopback(egress: EgressProxy) -> str:
    """Serve the proxy on a free loopback port (the sandbox's side is the test); its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    egress.serve(listener)
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def _get(proxy_url: str, url: str, *, ca: Path | None = None) -> tuple[int, bytes]:
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url})]
    if ca is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(ca))))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except urllib.error.URLError as exc:  # a refused CONNECT: urllib raises OSError("Tunnel connection failed: 403")
        return (403 if "403" in str(exc.reason) else 0), str(exc.reason).encode()


def test_an_allowed_host_is_reached_over_http_and_https_and_each_attempt_is_recorded(
    proxy: tuple[EgressProxy, str, list[str]], test_host: EgressTestHost
) -> None:
    egress, url, limits = proxy
    status, body = _get(url, "http://allowed.test:8080/hello")
    assert (status, body) == (200, b"hello from the test host, allowed.test:8080 /hello\n")
    status, body = _get(url, "https://allowed.test:8443/hello", ca=test_host.ca)
    assert (status, body) == (200, b"hello from the test host, allowed.test:8443 /hello\n")
    first, second = egress.record()
    assert (first["method"], first["host"], first["port"], first["allowed"], first["address"]) == (
        "GET",
        "allowed.test",
        8080,
        True,
        TEST_HOST,
    )
    assert second["method"] == "CONNECT" and second["allowed"] and second["bytes_in"] > 1000  # TLS, certificate
    assert first["bytes_out"] > 0 and first["bytes_in"] > len(body) and first["at"] <= time.time()
    assert limits == []


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://other.test:8080/hello", "not in the run's egress policy"),
        ("https://allowed.test:22/", "not in the run's egress policy"),  # CONNECT to another port
        ("http://198.18.7.2:8080/hello", "not in the run's egress policy"),  # an address, not a name
        ("http://[2001:db8::1]:8080/", "not in the run's egress policy"),
        (f"http://loop.test:{LOOP_PORT}/", "loop.test resolves to 127.0.0.1, a loopback address"),
        ("http://meta.test/latest/meta-data/", "meta.test resolves to 169.254.169.254, the cloud metadata address"),
        ("http://private.test:8080/", "private.test resolves to 10.1.2.3, a private address"),
        ("http://mixed.test:8080/", "mixed.test resolves to 10.1.2.3, a private address"),  # every address
    ],
)
def test_a_refused_destination_fails_at_once_and_is_recorded_with_why(
    proxy: tuple[EgressProxy, str, list[str]], url: str, why: str
) -> None:
    egress, proxy_url, _ = proxy
    started = time.monotonic()
    status, body = _get(proxy_url, url)
    assert status == 403 and time.monotonic() - started < 2.0, body  # at once, never a hang
    [attempt] = egress.record()
    assert not attempt["allowed"] and attempt["reason"] == why and attempt["address"] == ""
    assert attempt["bytes_in"] == attempt["bytes_out"] == 0
    with pytest.raises(TimeoutError):
        LOOPBACK.accept()  # no connection was made to loopback


def test_a_download_over_the_cap_is_cut_and_the_run_told(proxy: tuple[EgressProxy, str, list[str]]) -> None:
    egress, url, limits = proxy
    status, body = _get(url, "http://allowed.test:8080/bytes/1000")
    assert status == 200 and len(body) == 1000
    with pytest.raises(http.client.IncompleteRead) as cut_short:  # the connection was cut mid-body
        _get(url, "http://allowed.test:8080/bytes/1048576")
    assert len(cut_short.value.partial) < 1048576
    assert limits == ["more than 256 KiB in"]
    cut = egress.record()[1]
    assert cut["allowed"] and cut["reason"] == "cut: the run's egress cap (more than 256 KiB in)"
    assert cut["bytes_in"] <= (256 << 10) + 65536 + 1000
    status, body = _get(url, "http://allowed.test:8080/hello")  # and nothing more after it
    assert status == 403 and b"passed its egress cap" in body


def test_connections_past_the_cap_are_refused(test_host: EgressTestHost) -> None:
    limits: list[str] = []
    egress = EgressProxy(
        Policy.parse(["allowed.test:8080"]),
        caps=Caps(connections=2),
        resolver=RESOLVER,
        own_addresses=frozenset(),
        on_limit=limits.append,
        public_for_tests=[TEST_NET],
    )
    url = _serve_on_loopback(egress)
    try:
        assert [_get(url, "http://allowed.test:8080/hello")[0] for _ in range(3)] == [200, 200, 403]
    finally:
        egress.close()
    assert limits == ["more than 2 connections"]
    assert [a["allowed"] for a in egress.record()] == [True, True, False]


def test_the_proxy_stops_with_connections_open(proxy: tuple[EgressProxy, str, list[str]]) -> None:
    egress, url, _ = proxy
    port = int(url.rsplit(":", 1)[1])
    hanging = socket.create_connection(("127.0.0.1", port))
    hanging.sendall(b"CONNECT allowed.test:8080 HTTP/1.1\r\n\r\n")
    assert hanging.recv(100).startswith(b"HTTP/1.1 200")
    stopped = threading.Thread(target=egress.close)
    stopped.start()
    stopped.join(5)
    assert not stopped.is_alive()
    hanging.settimeout(5)
    assert hanging.recv(100) == b""  # the tunnel closed with the proxy
    hanging.close()


# --- the run's side: a network namespace with loopback and the proxy's listener only -----------

SANDBOX_PROBE = f"""
import errno, json, socket, urllib.request
out = {{"interfaces": [name for _, name in socket.if_nameindex()]}}
with urllib.request.urlopen("http://allowed.test:8080/hello", timeout=10) as response:  # by HTTP_PROXY
    out["proxied"] = response.read().decode()
try:
    socket.create_connection(("{TEST_HOST}", 8080), timeout=3)
    out["direct_tcp"] = "connected"
except OSError as exc:
    out["direct_tcp"] = errno.errorcode[exc.errno]
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"\\0" * 12, ("{TEST_HOST}", 53))
    out["udp_dns"] = "sent"
except OSError as exc:
    out["udp_dns"] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""


def test_a_run_namespace_reaches_the_proxy_and_has_no_other_path(test_host: EgressTestHost) -> None:
    import json

    from runner.host import netns
    from runner.host.spawner import join_netns

    space = netns.create()
    egress = EgressProxy(
        Policy.parse(["allowed.test:8080"]), resolver=RESOLVER, own_addresses=frozenset(), public_for_tests=[TEST_NET]
    )
    egress.serve(space.listener)
    try:
        env = {"PATH": "/usr/bin:/bin", "HTTP_PROXY": space.proxy_url, "http_proxy": space.proxy_url}
        proc = subprocess.run(
            [sys.executable, "-c", SANDBOX_PROBE], env=env, capture_output=True, text=True, timeout=60,
            preexec_fn=lambda: join_netns(space.fd),
        )  # fmt: skip
    finally:
        egress.close()
        space.close()
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)
    assert said == {
        "interfaces": ["lo"],
        "proxied": "hello from the test host, allowed.test:8080 /hello\n",
        "direct_tcp": "ENETUNREACH",  # the test host is there, but not for the run: no route
        "udp_dns": "ENETUNREACH",
    }
    [attempt] = egress.record()
    assert attempt["allowed"] and attempt["host"] == "allowed.test" and attempt["address"] == TEST_HOST


def test_the_record_keeps_the_first_attempts_and_counts_every_one(
    proxy: tuple[EgressProxy, str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import runner.egress.proxy

    monkeypatch.setattr(runner.egress.proxy, "ATTEMPTS_KEPT", 3)
    egress, url, _ = proxy
    statuses = [_get(url, f"http://other.test:8080/{n}")[0] for n in range(5)] + [
        _get(url, "http://allowed.test:8080/hello")[0]
    ]
    assert statuses == [403] * 5 + [200]
    summary = egress.summary()
    assert len(summary["attempts"]) == 3 and summary["attempts_not_kept"] == 3
    assert summary["refused"] == 5 and summary["connections"] == 1  # the totals count every attempt


def test_a_name_is_reached_at_the_first_of_its_checked_addresses_that_answers(test_host: EgressTestHost) -> None:
    # 2001:db8:7::1 (documentation range, treated as public here alone) has no route: refused at once.
    unrouted = ipaddress.ip_network("2001:db8:7::/48")
    egress = EgressProxy(
        Policy.parse(["fallback.test:8080"]),
        resolver=StaticResolver({"fallback.test": ["2001:db8:7::1", TEST_HOST]}),
        own_addresses=frozenset(),
        public_for_tests=[TEST_NET, unrouted],
    )
    url = _serve_on_loopback(egress)
    try:
        assert _get(url, "http://fallback.test:8080/hello")[0] == 200
    finally:
        egress.close()
    [attempt] = egress.record()
    assert attempt["allowed"] and attempt["address"] == TEST_HOST and attempt["reason"] == ""


# --- the proxy's own bounds: caps before lookups, a head timeout, connections open at once ------
# Against an upstream of the test's own on loopback (treated as public here alone): no test host.

LOOPBACK_NET = ipaddress.ip_network("127.0.0.0/8")


class CountingResolver(StaticResolver):
    """Names under .up.test resolve to loopback, anything else does not; each lookup is counted,
    and the most that ran at once, each taking `delay_s`."""

    def __init__(self, delay_s: float = 0.0):
        super().__init__({})
        self.asked: list[str] = []
        self.delay_s = delay_s
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()

    def resolve(self, host: str, port: int) -> list[str]:
        with self.lock:
            self.asked.append(host)
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            time.sleep(self.delay_s)
            if host.endswith(".up.test"):
                return ["127.0.0.1"]
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not known")
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def upstream() -> Iterator[int]:
    """A port on loopback that takes connections (the kernel's backlog accepts them)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        yield listener.getsockname()[1]


def _bounded_proxy(
    rules: list[str], resolver: Resolver, limits: list[str], **caps: int
) -> tuple[EgressProxy, tuple[str, int]]:
    egress = EgressProxy(
        Policy.parse(rules),
        caps=Caps(**caps),
        resolver=resolver,
        own_addresses=frozenset(),
        on_limit=limits.append,
        public_for_tests=[LOOPBACK_NET],
    )
    url = _serve_on_loopback(egress)
    return egress, ("127.0.0.1", int(url.rsplit(":", 1)[1]))


def _ask(address: tuple[str, int], request: bytes, timeout_s: float = 5.0) -> bytes:
    """Send `request` to the proxy and read its answer to the end (or the first answer of a tunnel)."""
    with socket.create_connection(address, timeout=timeout_s) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
            if answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n"):
                break  # a tunnel is open: its first answer is all there is to read
        return answer


def test_refused_requests_past_their_cap_stop_the_run_and_are_never_looked_up(upstream: int) -> None:
    resolver, limits = CountingResolver(), list[str]()
    egress, proxy = _bounded_proxy(["*.nx.test:443"], resolver, limits, connections=2)  # 8 refused at most
    try:
        answers = [_ask(proxy, f"CONNECT n{i}.nx.test:443 HTTP/1.1\r\n\r\n".encode()) for i in range(12)]
    finally:
        egress.close()
    assert all(answer.startswith(b"HTTP/1.1 403") for answer in answers), answers
    assert len(resolver.asked) == 9  # the ninth refusal passed the cap; nothing was looked up after it
    assert limits == ["more than 8 refused requests"] and egress.limit == limits[0]
    reasons = [a["reason"] for a in egress.record()]
    assert all(r.startswith("the name does not resolve") for r in reasons[:9]), reasons
    assert reasons[9:] == ["the run passed its egress cap (more than 8 refused requests)"] * 3
    assert egress.summary()["refused"] == 12 and egress.connections == 0


def test_the_connections_cap_is_checked_before_a_lookup_and_lookups_run_one_at_a_time(upstream: int) -> None:
    resolver, limits = CountingResolver(delay_s=0.2), list[str]()
    egress, proxy = _bounded_proxy([f"*.up.test:{upstream}"], resolver, limits, connections=2)
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            requests = [f"CONNECT h{i}.up.test:{upstream} HTTP/1.1\r\n\r\n".encode() for i in range(6)]
            answers = list(pool.map(lambda request: _ask(proxy, request), requests))
    finally:
        egress.close()
    assert sorted(answer[:12] for answer in answers) == [b"HTTP/1.1 200"] * 2 + [b"HTTP/1.1 403"] * 4, answers
    assert len(resolver.asked) == 2 and resolver.most_at_once == 1, resolver.asked
    assert limits == ["more than 2 connections"]
    assert egress.connections == 2 and egress.refused == 4


def test_a_client_that_sends_no_request_is_closed_and_recorded_as_refused(
    upstream: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runner.egress.proxy

    monkeypatch.setattr(runner.egress.proxy, "HEAD_TIMEOUT_S", 0.5)
    egress, proxy = _bounded_proxy([f"a.up.test:{upstream}"], CountingResolver(), [])
    try:
        started = time.monotonic()
        silent = _ask(proxy, b"")
        partial = _ask(proxy, f"CONNECT a.up.test:{upstream} HTTP/1.1\r\n".encode())  # never ends its head
        waited = time.monotonic() - started
    finally:
        egress.close()
    assert silent.startswith(b"HTTP/1.1 408") and partial.startswith(b"HTTP/1.1 408"), (silent, partial)
    assert waited < 3.0
    assert [(a["allowed"], a["host"], a["reason"]) for a in egress.record()] == [
        (False, "", "no complete request within 0.5 s")
    ] * 2
    assert egress.refused == 2 and egress.connections == 0


def test_connections_past_the_open_cap_are_refused_without_being_read(upstream: int) -> None:
    egress, proxy = _bounded_proxy([f"a.up.test:{upstream}"], CountingResolver(), [], open_at_once=3)
    held = [socket.create_connection(proxy) for _ in range(3)]  # open, sending nothing yet
    try:
        deadline = time.monotonic() + 5
        while len(egress.attempts) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        # Refused unread: this client sends nothing, else closing on its unread request would reset
        # the connection and might take the answer with it.
        refused = _ask(proxy, b"")
        held.pop().close()
        time.sleep(0.2)  # the proxy sees it go
        served = _ask(proxy, f"CONNECT a.up.test:{upstream} HTTP/1.1\r\n\r\n".encode())
    finally:
        for conn in held:
            conn.close()
        egress.close()
    assert refused.startswith(b"HTTP/1.1 503") and b"more than 3 connections open at once" in refused, refused
    assert served.startswith(b"HTTP/1.1 200"), served
    fourth = egress.record()[3]
    assert (fourth["allowed"], fourth["host"], fourth["reason"]) == (False, "", "more than 3 connections open at once")


@pytest.mark.parametrize(
    "request_line",
    [
        b"CONNECT a.up.test:\xb2 HTTP/1.1",  # a superscript two: a digit to str.isdigit, not to int()
        b"CONNECT a.up.test:" + b"9" * 5000 + b" HTTP/1.1",
        b"CONNECT " + b"a" * 300 + b".up.test:443 HTTP/1.1",  # longer than any DNS name
        b"GET http://" + b"a" * 300 + b".up.test/ HTTP/1.1",
        b"X" * 40 + b" http://a.up.test/ HTTP/1.1",
        b"not a proxy request",
    ],
)
def test_a_request_that_is_not_a_proxy_request_is_refused_and_recorded(request_line: bytes, upstream: int) -> None:
    resolver = CountingResolver()
    egress, proxy = _bounded_proxy(["a.up.test:443"], resolver, [])
    try:
        answer = _ask(proxy, request_line + b"\r\n\r\n")
    finally:
        egress.close()
    assert answer.startswith(b"HTTP/1.1 400"), answer
    [attempt] = egress.record()
    assert not attempt["allowed"] and attempt["host"] == "" and "CONNECT host:port" in attempt["reason"]
    assert egress.refused == 1 and resolver.asked == []
