"""Scoped egress enforced outside the sandbox: one proxy per run, serving its policy
(runner.egress.policy).

With an empty policy a run has no network at all (as always). With a non-empty one the sandbox
still gets no route off the machine: it reaches this proxy only, which speaks HTTP CONNECT (TLS
and anything else tunnelled) and plain HTTP by absolute URI, and for each request:

- parses its head with h11 (a kept parser, not one of ours) and refuses with 400 (431 when too
  large) what h11 refuses - a malformed request line or header, a duplicate Host, conflicting
  Content-Length - and what h11 would take but the proxy does not: a line ending in a bare LF,
  a folded header line (obs-fold), userinfo in the target (user@host), any version but HTTP/1.0
  and 1.1 (an HTTP/1.1 head without Host is taken: the proxy never reads Host, and a plain HTTP
  request goes upstream with the checked destination's Host instead of the client's);
- takes the destination by name and port, and refuses it unless the policy names it (a refused
  request gets a 403 at once, never a hang);
- resolves the name itself (the sandbox has no resolver), and refuses it unless every address
  is public: never loopback, link-local (the cloud metadata address among them), private, CGNAT,
  multicast, reserved, unspecified, or one of the host's own addresses;
- connects to the address it checked, not the name again (no DNS rebinding between check and
  connect);
- counts bytes each way and connections, against the run's caps: past one, the connection is cut
  and the run told why (its outcome, egress_limit); the connections cap is checked before a name
  is resolved, and refused requests have a cap of their own (REFUSED_PER_CONNECTION times the
  connections cap), so lookups are bounded too;
- bounds its own work per run: one name resolved at a time, each within RESOLVE_TIMEOUT_S, a
  request head within HEAD_TIMEOUT_S, and at most Caps.open_at_once client connections open;
- records the attempt: destination, port, allowed or refused and why, the address used, bytes
  each way, when and how long.

Django-free; a run's supervisor serves one proxy per run (EgressProxy.serve) on a listening
socket it made where the sandbox can reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import h11
import psutil

from runner.egress.policy import Policy, ceiling_from_env
from runner.host import netns
from runner.spec import ATTEMPTS_KEPT
from runner.units import size_words

MAX_HEAD_BYTES = 16384
MAX_METHOD_CHARS = 16
MAX_HOST_CHARS = 253  # the longest DNS name: a longer one is no destination, and the record keeps hosts
HEAD_TIMEOUT_S = 10.0  # a client that has sent no complete request head by then is refused
RESOLVE_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
CONNECT_TRIES = 3  # a name's checked addresses tried in turn, at most
RELAY_CHUNK = 65536
# Refused requests a run may make, per connection it may make, before it is stopped (egress_limit).
# Each may have cost a lookup; a program that keeps asking for what it may not have is stopped, not
# served forever, while one that tries a few hosts outside its policy or a name that does not
# resolve is not. Derived from the connections cap so that a run allowed more may fail more.
REFUSED_PER_CONNECTION = 4
# Not public, though Python's ipaddress calls some of them global or does not say.
NOT_PUBLIC = tuple(
    ipaddress.ip_network(n)
    for n in ("100.64.0.0/10", "169.254.0.0/16", "fe80::/10", "fc00::/7", "64:ff9b:1::/48", "2002::/16")
)
METADATA = ipaddress.ip_address("169.254.169.254")
KINDS = {
    "loopback": "a loopback address", "link_local": "a link-local address", "multicast": "a multicast address",
    "unspecified": "the unspecified address", "private": "a private address", "reserved": "a reserved address",
}  # fmt: skip
HOP_HEADERS = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}
DROPPED = HOP_HEADERS | {b"host"}  # from a request sent upstream: it gets the checked destination's Host
HTTP_VERSIONS = (b"1.0", b"1.1")
PROXY_REQUESTS = "the proxy takes CONNECT host:port or an absolute http:// URL"


def host_addresses() -> frozenset[str]:
    """Every address this host's interfaces have (a proxy never connects to one of them)."""
    found = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                found.add(str(ipaddress.ip_address(address.address.split("%")[0])))
    return frozenset(found)


def refusal(address: str, *, own: frozenset[str], public_for_tests: Sequence[Any] = ()) -> str:
    """Why a proxy may not connect to `address` ('' when it is public and not the host's own)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if str(ip) in own:
        return "an address of this host"
    if ip == METADATA:
        return "the cloud metadata address"
    for kind, said in KINDS.items():
        if getattr(ip, f"is_{kind}") and not any(ip in net for net in public_for_tests):
            return said
    if any(ip in net for net in NOT_PUBLIC):
        return "not a public address"
    if not ip.is_global and not any(ip in net for net in public_for_tests):
        return "not a public address"
    return ""


class Resolver:
    """Names to addresses, as the proxy resolves them (the sandbox has no resolver)."""

    def resolve(self, host: str, port: int) -> list[str]:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


class StaticResolver(Resolver):
    """A fixed map of names to addresses (tests: a name for a test host, or for a forbidden address)."""

    def __init__(self, names: dict[str, list[str]]):
        self.names = names

    def resolve(self, host: str, port: int) -> list[str]:
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not known")
        return list(self.names[host])


@dataclass
class Attempt:
    """One request through the proxy, as the run's record keeps it."""

    at: float  # unix time it came in
    method: str  # CONNECT, GET, ...
    host: str
    port: int
    allowed: bool = False
    reason: str = ""  # why refused, or why it ended (a cap)
    address: str = ""  # the checked address it connected to
    bytes_out: int = 0  # from the sandbox to the destination
    bytes_in: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Caps:
    bytes_out: int = 8 << 20
    bytes_in: int = 64 << 20
    connections: int = 32
    open_at_once: int = 64  # client connections open at once; one more is refused unread

    @classmethod
    def of(cls, limits: Any) -> Caps:
        """A run's caps, from its Limits (runner.spec)."""
        return cls(limits.egress_max_bytes_out, limits.egress_max_bytes_in, limits.egress_max_connections)

    @property
    def refused(self) -> int:
        """Refused requests a run may make; one more passes the cap."""
        return REFUSED_PER_CONNECTION * self.connections


@dataclass
class EgressProxy:
    """One run's proxy: its policy, caps and record. `serve` runs it on a listening socket in a
    thread of its own until `close`."""

    policy: Policy
    caps: Caps = field(default_factory=Caps)
    resolver: Resolver = field(default_factory=Resolver)
    own_addresses: frozenset[str] = field(default_factory=host_addresses)
    on_limit: Callable[[str], None] = lambda reason: None
    public_for_tests: Sequence[Any] = ()  # networks a test treats as public (its own test hosts)
    attempts: list[Attempt] = field(default_factory=list)  # the first ATTEMPTS_KEPT
    attempts_not_kept: int = 0
    connections: int = 0  # every allowed attempt, kept or not
    refused: int = 0
    limit: str = ""  # the cap that was passed, if any
    _bytes_out: int = 0
    _bytes_in: int = 0
    _open: int = 0  # client connections open now
    _lookups: asyncio.Lock = field(default_factory=asyncio.Lock)  # one name resolved at a time
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    # serving

    def serve(self, listener: socket.socket) -> None:
        """Serve on `listener` (bound and listening) in a thread until close()."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            server = loop.run_until_complete(asyncio.start_server(self._handle, sock=listener))
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shut(server))
                loop.close()

        self._thread = threading.Thread(target=run, name="cordon-egress", daemon=True)
        self._thread.start()
        ready.wait(10)

    async def _shut(self, server: asyncio.Server) -> None:
        """Stop listening and end every relay still open (the run is over)."""
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await server.wait_closed()

    def close(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def record(self) -> list[dict[str, Any]]:
        return [attempt.to_json() for attempt in self.attempts]

    def summary(self) -> dict[str, Any]:
        """What the run's record keeps (RunResult.egress): the policy, every attempt, the totals,
        and the cap the run passed ('' if none)."""
        return {
            "policy": self.policy.to_json(),
            "attempts": self.record(),
            "attempts_not_kept": self.attempts_not_kept,
            "connections": self.connections,
            "refused": self.refused,
            "bytes_out": self._bytes_out,
            "bytes_in": self._bytes_in,
            "limit": self.limit,
        }

    @property
    def serving(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # one request

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: exactly one attempt on the record, allowed or refused."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        attempt = self._attempt()
        try:
            if self._open >= self.caps.open_at_once:  # refused before reading a byte of it
                await self._refuse(writer, attempt, 503, f"more than {self.caps.open_at_once} connections open at once")
                return
            self._open += 1
            try:
                await self._request(reader, writer, attempt)
            finally:
                self._open -= 1
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # the sandbox's side went away: nothing more to relay
        except asyncio.CancelledError:
            pass  # the proxy is closing (the run is over): this request ends here
        finally:
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(OSError):
                writer.close()

    def _attempt(self) -> Attempt:
        """A new attempt, on the record from the start (kept, or counted past ATTEMPTS_KEPT)."""
        attempt = Attempt(at=time.time(), method="", host="", port=0)
        if len(self.attempts) < ATTEMPTS_KEPT:
            self.attempts.append(attempt)
        else:
            self.attempts_not_kept += 1
        return attempt

    async def _refuse(self, writer: asyncio.StreamWriter, attempt: Attempt, status: int, why: str) -> None:
        """Count and record a refusal (past the refused cap, the run is stopped), then answer it."""
        attempt.reason = why
        self.refused += 1
        if self.refused > self.caps.refused:
            self._passed(f"more than {self.caps.refused} refused requests")
        text = f"egress to {attempt.host}:{attempt.port} refused: {why}" if attempt.host else why
        await _answer(writer, status, text)

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, attempt: Attempt) -> None:
        request = await _read_head(reader)
        if isinstance(request, tuple):
            await self._refuse(writer, attempt, *request)
            return
        method = request.method.decode("ascii")  # h11 took it as a token and the target as visible ASCII
        parsed = _destination(method, request.target.decode("ascii"))
        if parsed is None:
            await self._refuse(writer, attempt, 400, PROXY_REQUESTS)
            return
        host, port, path = parsed
        attempt.method, attempt.host, attempt.port = method, host, port
        started = time.monotonic()
        addresses, why = await self._check(host, port)
        if why:
            await self._refuse(writer, attempt, 403, why)
            return
        attempt.allowed = True  # it passed every check: it counts as a connection
        opened = await _open_first(addresses[:CONNECT_TRIES], port)
        if isinstance(opened, str):
            attempt.reason = opened
            await _answer(writer, 502, opened)
            return
        attempt.address, upstream_reader, upstream_writer = opened
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            sent = _origin_request(request, host, port, path)
            attempt.bytes_out += len(sent)
            self._bytes_out += len(sent)
            upstream_writer.write(sent)
        try:
            await self._relay(reader, writer, upstream_reader, upstream_writer, attempt)
        finally:
            attempt.seconds = round(time.monotonic() - started, 3)
            with contextlib.suppress(OSError):
                upstream_writer.close()

    async def _check(self, host: str, port: int) -> tuple[list[str], str]:
        """(the checked addresses to connect to, '') or ([], why it is refused). The caps are checked
        before the name is resolved, and lookups are one at a time, so no lookup starts past a cap."""
        if self.limit:
            return [], f"the run passed its egress cap ({self.limit})"
        if not self.policy.allows(host, port):
            return [], "not in the run's egress policy"
        async with self._lookups:
            if self.limit:  # passed while this request waited its turn
                return [], f"the run passed its egress cap ({self.limit})"
            if self.connections >= self.caps.connections:
                self._passed(f"more than {self.caps.connections} connections")
                return [], f"the run's cap of {self.caps.connections} connections"
            loop = asyncio.get_running_loop()
            try:
                lookup = loop.run_in_executor(None, self.resolver.resolve, host, port)
                addresses = await asyncio.wait_for(lookup, RESOLVE_TIMEOUT_S)
            except TimeoutError:
                return [], f"the name did not resolve within {RESOLVE_TIMEOUT_S:g} s"
            except OSError as exc:
                return [], f"the name does not resolve ({exc})"
            if not addresses:
                return [], "the name has no address"
            for address in addresses:  # every address must be public: a name is not half trusted
                why = refusal(address, own=self.own_addresses, public_for_tests=self.public_for_tests)
                if why:
                    return [], f"{host} resolves to {address}, {why}"
            self.connections += 1
            return addresses, ""

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        attempt: Attempt,
    ) -> None:
        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, outward: bool) -> None:
            while data := await source.read(RELAY_CHUNK):
                if outward:
                    attempt.bytes_out += len(data)
                    self._bytes_out += len(data)
                else:
                    attempt.bytes_in += len(data)
                    self._bytes_in += len(data)
                if self._bytes_out > self.caps.bytes_out or self._bytes_in > self.caps.bytes_in:
                    way = "out" if self._bytes_out > self.caps.bytes_out else "in"
                    cap = self.caps.bytes_out if way == "out" else self.caps.bytes_in
                    attempt.reason = self._passed(f"more than {size_words(cap)} {way}")
                    return
                sink.write(data)
                await sink.drain()
            with contextlib.suppress(OSError):
                if sink.can_write_eof():
                    sink.write_eof()

        outward = asyncio.ensure_future(pump(reader, up_writer, True))
        inward = asyncio.ensure_future(pump(up_reader, writer, False))
        _, pending = await asyncio.wait({outward, inward}, return_when=asyncio.FIRST_COMPLETED)
        if self.limit:  # a cap cuts both ways at once
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        elif pending:
            await asyncio.wait(pending)
        for task in (outward, inward):
            if not task.cancelled() and task.exception() is not None:
                attempt.reason = attempt.reason or f"ended: {task.exception().__class__.__name__}"

    def _passed(self, what: str) -> str:
        if not self.limit:
            self.limit = what
            self.on_limit(what)
        return f"cut: the run's egress cap ({what})"


async def _open_first(addresses: list[str], port: int) -> tuple[str, asyncio.StreamReader, asyncio.StreamWriter] | str:
    """A connection to the first of the checked addresses that answers (an IPv6 address first on a
    host without IPv6 routes is no reason to fail), or why none did."""
    why = ""
    for address in addresses:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            why = f"could not connect to {address}: {exc.__class__.__name__}"
            continue
        return address, reader, writer
    return why


async def _read_head(reader: asyncio.StreamReader) -> h11.Request | tuple[int, str]:
    """A request's head as h11 parsed it, or (status, why) it is refused: not sent in time, too
    large, cut short, or not a well-formed HTTP/1.0 or 1.1 head. It is read a line at a time, so h11
    is given the head and nothing after it: what the client sent next (a request's body, a tunnel's
    first bytes) stays in `reader` for the relay, as it came."""
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    head = bytearray()
    has_host = False
    try:
        async with asyncio.timeout(HEAD_TIMEOUT_S):
            while (event := parser.next_event()) is h11.NEED_DATA:
                line = await reader.readuntil(b"\n")
                if len(head) + len(line) > MAX_HEAD_BYTES:
                    return 431, "request head too large"
                if why := _line_refusal(line, first=not head):
                    return 400, why
                if head and line == b"\r\n" and not has_host:
                    # h11 holds every HTTP/1.1 request to an origin server's rule, Host required; the
                    # proxy never reads Host (its destination is the target, and a request it forwards
                    # gets the checked destination's Host), and clients send CONNECT without one. An
                    # empty one is added where none came, so that h11 checks the rest as it is.
                    parser.receive_data(b"Host:\r\n")
                has_host = has_host or (bool(head) and line[:5].lower() == b"host:")
                head += line
                parser.receive_data(line)
    except TimeoutError:
        return 408, f"no complete request within {HEAD_TIMEOUT_S:g} s"
    except asyncio.LimitOverrunError:  # a line longer than the reader's buffer
        return 431, "request head too large"
    except asyncio.IncompleteReadError:
        return 400, "closed before a complete request"
    except h11.RemoteProtocolError as exc:
        return (431 if exc.error_status_hint == 431 else 400), _malformed(exc)
    return _proxy_head(event)


def _line_refusal(line: bytes, *, first: bool) -> str:
    """Why a line of a request head is refused though h11 would take it ('' if it is not): h11 ends
    a line at a bare LF and unfolds an obs-fold continuation, where another parser down the line
    might not; the proxy takes neither, so no two readers of one head disagree on it."""
    if not line.endswith(b"\r\n"):
        return "a line of the head ends in a bare LF, not CRLF"
    if not first and line.startswith((b" ", b"\t")):
        return "a header line continued on the next (obs-fold)"
    return ""


def _proxy_head(event: object) -> h11.Request | tuple[int, str]:
    """The request h11 parsed, if it is HTTP/1.0 or 1.1 (h11 takes any HTTP/d.d)."""
    if not isinstance(event, h11.Request):
        return 400, PROXY_REQUESTS
    if event.http_version not in HTTP_VERSIONS:
        return 400, f"HTTP/{event.http_version.decode()} is not HTTP/1.0 or 1.1; {PROXY_REQUESTS}"
    return event


def _malformed(exc: h11.RemoteProtocolError) -> str:
    said = str(exc)  # h11 quotes the line it refused: the record keeps a bounded part of it
    return f"a malformed request head ({said[:100]}{'...' if len(said) > 100 else ''}); {PROXY_REQUESTS}"


def _destination(method: str, target: str) -> tuple[str, int, str] | None:
    """(host, port, origin-form path) of a proxy request, or None when it is not one. An authority
    with userinfo (user@host) is never a destination."""
    if method == "CONNECT":
        name, sep, port = target.rpartition(":")
        if not sep or not re.fullmatch(r"[0-9]{1,5}", port):  # isdigit() takes "²", which int() does not
            return None
        host, number, path = name.strip("[]").lower().rstrip("."), int(port), ""
    else:
        match = re.fullmatch(r"http://([^/:?#@\s]+|\[[0-9a-fA-F:.]+\])(?::([0-9]{1,5}))?([/?][^\s]*)?", target)
        if not method.isalpha() or len(method) > MAX_METHOD_CHARS or match is None:
            return None
        host, number = match.group(1).strip("[]").lower().rstrip("."), int(match.group(2) or 80)
        path = match.group(3) or "/"
    if not host or "@" in host or len(host) > MAX_HOST_CHARS:
        return None
    return host, number, path


def _origin_request(request: h11.Request, host: str, port: int, path: str) -> bytes:
    """The head sent upstream for a plain HTTP request: origin form, the client's headers as h11
    parsed them (each name and value already validated) less the hop-by-hop ones, the Host of the
    destination that was checked (RFC 9112 3.2.2: a proxy replaces the client's), and
    Connection: close."""
    authority = (f"[{host}]" if ":" in host else host) + ("" if port == 80 else f":{port}")
    kept = [name + b": " + value for name, value in request.headers.raw_items() if name.lower() not in DROPPED]
    return b"\r\n".join(
        [
            request.method + b" " + path.encode("ascii") + b" HTTP/" + request.http_version,
            b"Host: " + authority.encode("ascii"),
            *kept,
            b"Connection: close",
            b"",
            b"",
        ]
    )


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reason = {
        400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 431: "Request Header Fields Too Large",
        502: "Bad Gateway", 503: "Service Unavailable",
    }  # fmt: skip
    body = (text + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nX-Cordon-Egress: refused\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


def proxy_env(url: str) -> dict[str, str]:
    """The sandbox's environment for its proxy: both spellings, as clients read either (urllib,
    requests and pip read these; Node.js from 22.21 and 24.5 with NODE_USE_ENV_PROXY=1)."""
    names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
    return {**dict.fromkeys(names, url), "NO_PROXY": "", "no_proxy": "", "NODE_USE_ENV_PROXY": "1"}


@dataclass(frozen=True)
class EgressSettings:
    """The operator's side of egress: the site ceiling, and how the proxy resolves names (a test
    gives a StaticResolver and the networks of its own test hosts)."""

    ceiling: Policy = field(default_factory=Policy)
    resolver: Resolver = field(default_factory=Resolver)
    public_for_tests: tuple[Any, ...] = ()

    @classmethod
    def from_env(cls, environ: Any = None) -> EgressSettings:
        return cls(ceiling=ceiling_from_env(environ))


@dataclass
class RunEgress:
    """One run's egress: its network namespace (loopback and the proxy's listener only) and the
    proxy serving it from the supervisor's side. Opened before the sandbox starts, closed after
    its processes are gone."""

    namespace: netns.EgressNamespace
    proxy: EgressProxy

    @classmethod
    def open(cls, policy: Policy, caps: Caps, settings: EgressSettings) -> RunEgress:
        namespace = netns.create()
        proxy = EgressProxy(policy, caps, settings.resolver, public_for_tests=settings.public_for_tests)
        try:
            proxy.serve(namespace.listener)
        except BaseException:
            namespace.close()
            raise
        return cls(namespace, proxy)

    @property
    def env(self) -> dict[str, str]:
        return proxy_env(self.namespace.proxy_url)

    def close(self) -> tuple[bool, str]:
        """End the proxy (open tunnels cut) and let the namespace go: (done, what the audit says)."""
        self.proxy.close()
        self.namespace.close()
        if self.proxy.serving:
            return False, "the egress proxy is still serving"
        return True, "egress proxy stopped, its namespace released"
