"""Memory that must not grow with what clients send (issue 11), measured on processes of a real
stack with psutil every 20 ms: the Celery pool process while a run floods 1 GiB at a 64 MiB
stdout cap, and the web server while it refuses 80 MB uploads. Target: growth <= 20 MB each."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from statistics import median

import psutil

from runner.spec import MIB
from tests.bench import Row
from tests.bench.bench_web import Stack
from tests.conftest import web_server_argv

MB = 1_000_000
GROWTH_TARGET_MB = 20.0
SAMPLE_S = 0.02

FLOOD_CAP = 64 * MIB
FLOOD_CODE = "import sys\nblock = b'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.buffer.write(block)\n"

UPLOAD_BYTES = 80 * MB
BLOCK = b"a,b\n" * (MIB // 4)


class Sampler:
    """The RSS of one process, every SAMPLE_S on a thread of its own, while in a `with` block."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.process.memory_info().rss)
            except psutil.Error:  # the process is gone: what was seen stands
                return
            time.sleep(SAMPLE_S)

    @property
    def peak(self) -> int:
        return max(self.samples)


def settled_rss(pid: int, wait_s: float = 0.0, over_s: float = 1.0) -> int:
    """The median RSS over `over_s`, after `wait_s` (a resting level, not one sample's noise)."""
    time.sleep(wait_s)
    with Sampler(pid) as sampler:
        time.sleep(over_s)
    return int(median(sampler.samples))


@dataclass(frozen=True)
class Growth:
    baseline: int
    peak: int
    after: int

    def rows(self, benchmark: str, what: str) -> list[Row]:
        growth_mb = (self.peak - self.baseline) / MB
        verdict = "pass" if growth_mb <= GROWTH_TARGET_MB else "FAIL"
        return [
            Row(benchmark, f"{what}: RSS before", self.baseline / MB, "MB"),
            Row(benchmark, f"{what}: RSS peak", self.peak / MB, "MB"),
            Row(benchmark, f"{what}: RSS after", self.after / MB, "MB"),
            Row(
                benchmark, f"{what}: RSS growth (peak - before)", growth_mb, "MB", f"<= {GROWTH_TARGET_MB:.0f}", verdict
            ),
        ]


def run() -> list[Row]:
    # One pool process, so that the run lands where the warm-up run already loaded everything.
    stack = Stack(env={"CORDON_MAX_STDOUT_MAX_BYTES": str(FLOOD_CAP)}, concurrency=1)
    try:
        return worker_flood(stack) + rejected_uploads(stack)
    finally:
        stack.close()


# --- the worker under a stdout flood -------------------------------------------------------


def worker_flood(stack: Stack) -> list[Row]:
    stack.one_run()  # warm-up: imports and image verification in the pool process
    (pool,) = psutil.Process(stack.worker.pid).children()
    baseline = settled_rss(pool.pid)
    with Sampler(pool.pid) as sampler:
        limits = {"stdout_max_bytes": FLOOD_CAP, "wall_timeout_s": 120}
        submitted = stack.call("POST", "/api/runs", {"runtime": "python", "code": FLOOD_CODE, "limits": limits})
        run = stack.wait_finished(submitted["id"])
    growth = Growth(baseline, max(sampler.peak, baseline), settled_rss(pool.pid, wait_s=1.0))
    what = "Celery pool process, a run writing 1 GiB to stdout at a 64 MiB cap"
    verdict = "pass" if run["outcome"] == "output_limit" else "FAIL"
    kept = Row("worker memory", f"that run: {run['outcome']}, stdout kept", run["stdout_bytes"] / MIB, "MiB",
               "output_limit", verdict)  # fmt: skip
    return [*growth.rows("worker memory", what), kept]


# --- the web server refusing large uploads -------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: the connection ended without an answer
    sent: int  # body bytes the server took before the answer (or the end)


def rejected_uploads(stack: Stack) -> list[Row]:
    argv = web_server_argv(stack.port)
    server = argv[2] if argv[1] == "-m" else "daphne"  # playground.server, or daphne before it existed
    bearer = [("Authorization", f"Bearer {stack.token}")]
    cases = [
        ("unauthenticated 80 MB multipart upload", [], False),
        ("80 MB multipart upload over the dataset cap", bearer, False),
        ("80 MB chunked multipart upload, no Content-Length", bearer, True),
    ]
    rows: list[Row] = []
    for what, headers, chunked in cases:
        stack.restart_web()  # each case from a fresh process: a heap already grown would hide growth
        _warm_up(stack)
        pid = stack.web.pid
        baseline = settled_rss(pid)
        with Sampler(pid) as sampler:
            answer = post_upload(stack.port, headers, UPLOAD_BYTES, chunked=chunked)
            time.sleep(0.5)  # what the server does right after it answered counts too
        growth = Growth(baseline, max(sampler.peak, baseline), settled_rss(pid, wait_s=2.0))
        rows += growth.rows(f"web memory ({server})", what)
        rows.append(Row(f"web memory ({server})", f"{what}: HTTP status", answer.status, "status"))
        rows.append(
            Row(f"web memory ({server})", f"{what}: body bytes written before the answer came", answer.sent / MB, "MB")
        )
    return rows


def _warm_up(stack: Stack) -> None:
    """Load what an upload loads (auth, the multipart parser, storage) before the baseline."""
    stack.call("GET", "/api/datasets")
    small = 64 * 1024
    post_upload(stack.port, [], small, chunked=False)
    post_upload(stack.port, [("Authorization", f"Bearer {stack.token}")], small, chunked=False)


def post_upload(port: int, headers: list[tuple[str, str]], size: int, *, chunked: bool) -> Answer:
    """POST a multipart body of `size` bytes to /api/datasets over a raw socket, reading on a
    second thread so that an early answer is seen while the body still goes out. The server
    may close before all of it is sent: that is a refusal, not an error."""
    boundary = secrets.token_hex(16)
    parts = _multipart(boundary, size)
    framing = [("Transfer-Encoding", "chunked")] if chunked else [("Content-Length", str(_multipart_length(size)))]
    head = [("Host", f"127.0.0.1:{port}"), ("Content-Type", f"multipart/form-data; boundary={boundary}"),
            ("Connection", "close"), *framing, *headers]  # fmt: skip
    request = "POST /api/datasets HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head) + "\r\n"
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    received = bytearray()
    sent = 0
    sent_at_answer: list[int] = []

    def read() -> None:
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            if not received:
                sent_at_answer.append(sent)
            received.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        sock.sendall(request.encode())
        for part in _chunked(parts) if chunked else parts:
            sock.sendall(part)
            sent += len(part)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass  # refused and closed, or no longer reading: the answer, if any, is on the reader
    # No shutdown(SHUT_WR) here: daphne takes a half-close for a client gone and never answers.
    reader.join(timeout=60)
    sock.close()
    return Answer(status=_status(bytes(received)), sent=sent_at_answer[0] if sent_at_answer else sent)


def _multipart(boundary: str, size: int) -> Iterator[bytes]:
    yield _part_head(boundary)
    left = size
    while left > 0:
        block = BLOCK[: min(left, len(BLOCK))]
        left -= len(block)
        yield block
    yield _part_tail(boundary)


def _multipart_length(size: int) -> int:
    boundary = "0" * 32  # token_hex(16): the length is all that matters
    return len(_part_head(boundary)) + size + len(_part_tail(boundary))


def _part_head(boundary: str) -> bytes:
    return (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n'
            "Content-Type: text/csv\r\n\r\n").encode()  # fmt: skip


def _part_tail(boundary: str) -> bytes:
    return f"\r\n--{boundary}--\r\n".encode()


def _chunked(parts: Iterator[bytes]) -> Iterator[bytes]:
    for part in parts:
        yield f"{len(part):x}\r\n".encode() + part + b"\r\n"
    yield b"0\r\n\r\n"


def _status(response: bytes) -> int | None:
    line = response.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[0].startswith(b"HTTP/") and line[1].isdigit() else None
