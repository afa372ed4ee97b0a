"""Real services for the web tests: a Redis server and Celery workers (and beat) as processes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis as redis_client
from django.conf import settings
from django.db import close_old_connections
from django.test import Client

from runner.config import PROJECT_ROOT
from tests.conftest import child_env, free_port, web_server_argv

CELERY = str(Path(sys.executable).parent / "celery")
# Each worker's (and beat's) output, kept for the session: a failed test's report ends with the
# last lines of every one written to during it (a flake in CI is then read, not guessed at).
WORKER_LOGS = Path(tempfile.mkdtemp(prefix="cordon-test-workers-"))
WORKER_LOG_LINES = 60
_TEST_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "setup":
        item.stash[_TEST_STARTED] = call.start  # its fixtures' workers included
    if not report.failed:  # in its call, or in a fixture (a worker that never answered, say)
        return
    started = item.stash.get(_TEST_STARTED, call.start)
    for path in sorted(WORKER_LOGS.glob("*.log")):
        if path.stat().st_mtime >= started:
            with open(path, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - 64 * 1024))  # the tail is enough
                lines = log.read().decode(errors="replace").splitlines()[-WORKER_LOG_LINES:]
            report.sections.append((f"{path.name}, its last {len(lines)} lines", "\n".join(lines)))


@pytest.fixture(scope="session", autouse=True)
def _worker_logs_removed() -> Iterator[None]:
    yield
    shutil.rmtree(WORKER_LOGS, ignore_errors=True)


class RedisServer:
    """A private redis-server; `append_only` as `make run` keeps it (queued runs survive a restart)."""

    def __init__(self, url: str, workdir: Path, *, append_only: bool = True):
        self.url = url
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.workdir = workdir
        self.append_only = append_only
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        durability = ["--appendonly", "yes", "--appendfsync", "always"] if self.append_only else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.workdir),
             "--save", "", *durability],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis_client.Redis.from_url(self.url, socket_connect_timeout=0.2).ping():
                    return
            except redis_client.RedisError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # SIGTERM: a clean shutdown, the append-only file flushed
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture(autouse=True)
def _fresh_throttle_counts() -> None:
    """No throttle count (Redis) carries over from an earlier test: every test client has the same
    address, and user ids are used again after a flush. Nothing to do when no Redis runs."""
    try:
        store = redis_client.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.2)
        for key in store.scan_iter("cordon-throttle:*"):
            store.delete(key)
    except redis_client.ConnectionError:
        return


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(settings.REDIS_URL, tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


class Worker:
    """`celery -A playground worker` with no queue flags, as an operator would start it.

    A test that starts its own (to kill it, restart it or give it a beat) stops the session's
    shared worker first, so that no other worker takes its runs."""

    def __init__(self, env: dict[str, str], beat: bool = False, concurrency: int = 4, name: str | None = None):
        self.env = env
        self.beat = beat
        self.concurrency = concurrency
        self.name = name  # its node name's first part (several workers at once); Celery's own if None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.schedule_dir: str | None = None  # beat's schedule file, gone with the worker

    def start(self) -> None:
        if SharedWorker.current is not None and SharedWorker.current.worker is not self:
            SharedWorker.current.stop()
        argv = [CELERY, "-A", "playground", "worker", "--loglevel=INFO", f"--concurrency={self.concurrency}",
                "--without-mingle", "--without-gossip", *(["-n", f"{self.name}@%h"] if self.name else [])]  # fmt: skip
        self.procs.append(self._spawn(argv, "worker"))
        if self.beat:
            self.schedule_dir = self.schedule_dir or tempfile.mkdtemp(prefix="cordon-beat-")
            beat = [CELERY, "-A", "playground", "beat", "--loglevel=INFO", "--schedule",
                    str(Path(self.schedule_dir) / "beat.db")]  # fmt: skip
            self.procs.append(self._spawn(beat, "beat"))
        self.wait_ready()

    def _spawn(self, argv: list[str], role: str) -> subprocess.Popen[bytes]:
        """A process of this worker's, its output appended to its log in WORKER_LOGS."""
        path = WORKER_LOGS / f"{self.name or 'celery'}-{role}.log"
        with open(path, "ab") as log:  # the child keeps its own descriptor
            return subprocess.Popen(argv, cwd=PROJECT_ROOT, env=self.env, start_new_session=True,
                                    stdout=log, stderr=subprocess.STDOUT)  # fmt: skip

    def wait_ready(self, timeout: float = 60) -> None:
        from playground.celery import app

        deadline = time.monotonic() + timeout
        destination = [f"{self.name}@{socket.gethostname()}"] if self.name else None
        while time.monotonic() < deadline:
            try:
                if app.control.ping(timeout=0.5, destination=destination):
                    return
            except (OSError, redis_client.RedisError):  # a restarted Redis: reconnect and ask again
                time.sleep(0.2)
        raise RuntimeError("the Celery worker did not answer a ping")

    def kill(self, signo: int = signal.SIGKILL) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signo)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            proc.wait(timeout=30)
        self.procs = []
        if self.schedule_dir is not None:
            shutil.rmtree(self.schedule_dir, ignore_errors=True)
            self.schedule_dir = None

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


class SharedWorker:
    """The session's one worker for the tests that only need a worker running: started when a test
    first asks for it, stopped when a test starts workers of its own, started again when needed."""

    current: SharedWorker | None = None

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.worker: Worker | None = None
        self.host: tuple[list[str], dict[str, Any]] | None = None
        SharedWorker.current = self

    def ensure(self) -> Worker:
        if self.worker is None:
            self.worker = Worker(self.env)
            self.worker.start()
        return self.worker

    def register_host(self) -> None:
        """The worker's WorkerHost row, as it registers it: a transactional test's flush drops it."""
        from playground.celery import engines_here
        from playground.services.hosts import worker_register

        if self.host is None:
            self.host = engines_here()
        engines, report = self.host
        worker_register(name=settings.CORDON_HOST_NAME, engines=engines, doctor=report)

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


@pytest.fixture(scope="session")
def session_worker_env(django_db_setup: None, redis_server: RedisServer) -> dict[str, str]:
    test_db = settings.DATABASES["default"]["NAME"]
    return child_env(DATABASE_URL=f"sqlite:///{test_db}", REDIS_URL=redis_server.url,
                     CORDON_DATA_DIR=str(settings.DATA_DIR), CORDON_LEASE_S="6")  # fmt: skip


@pytest.fixture
def worker_env(session_worker_env: dict[str, str]) -> dict[str, str]:
    return dict(session_worker_env)


@pytest.fixture(scope="session")
def shared_worker(session_worker_env: dict[str, str]) -> Iterator[SharedWorker]:
    shared = SharedWorker(session_worker_env)
    yield shared
    shared.stop()
    SharedWorker.current = None


@pytest.fixture
def no_worker() -> None:
    """No worker takes this test's runs (the session's shared one may be running): the test leaves
    them queued and checks their rows, or runs them itself."""
    if SharedWorker.current is not None:
        SharedWorker.current.stop()


@pytest.fixture
def worker(shared_worker: SharedWorker, transactional_db: None) -> Worker:
    """A worker serving this host's engine queues (the session's shared one), its host registered."""
    started = shared_worker.ensure()
    shared_worker.register_host()
    return started


@contextmanager
def serve_web(env: dict[str, str], *, port: int | None = None) -> Iterator[str]:
    """The web server as `make run` starts it, on `port` or a free one; yields its base URL once
    /api/health answers."""
    port = port or free_port()
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(web_server_argv(port), cwd=PROJECT_ROOT, env=env, start_new_session=True,
                                  stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/api/health", timeout=2):  # noqa: S310 - our loopback URL
                        break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        log.seek(0)
                        said = log.read().decode(errors="replace")[-2000:]
                        raise RuntimeError(f"the web server did not answer /api/health:\n{said}") from None
                    time.sleep(0.2)
            yield base
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=20)


@pytest.fixture
def web_server(worker_env: dict[str, str]) -> Iterator[str]:
    with serve_web(worker_env) as base:
        yield base


def in_parallel(count: int, work: Callable[[int], Any], *, timeout_s: float = 120) -> list[Any]:
    """`work(index)` in `count` threads let go together, each on its own database connection;
    their results in order (None for one that did not finish within `timeout_s`)."""
    results: list[Any] = [None] * count
    barrier = threading.Barrier(count)

    def one(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    return results


def multipart_upload(filename: str, data: bytes) -> tuple[bytes, str]:
    """A one-file multipart body (field `file`) built by hand, and its content type: Django's
    test client would strip directories and odd characters from the name before sending it."""
    boundary = "cordonboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: text/csv\r\n\r\n"
    )
    return head.encode() + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def session_cookie(user: Any) -> bytes:
    """A Cookie header value carrying a logged-in session of `user` (for websocket tests)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def api(user: Any, *, raise_request_exception: bool = True) -> Client:
    """A test client that calls the API as `user`, with a bearer token of theirs."""
    from playground.services.accounts import token_create

    return Client(
        HTTP_AUTHORIZATION=f"Bearer {token_create(user=user)}", raise_request_exception=raise_request_exception
    )


def json_error(response: Any, status: int) -> dict[str, Any]:
    """The API's one error shape, with this status, as JSON."""
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    error: dict[str, Any] = response.json()
    assert set(error) == {"code", "message", "field"}, error
    return error
