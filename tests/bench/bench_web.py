"""The web path end to end: HTTP submit (the web server) -> Celery worker -> namespace engine ->
final state, on its own Redis and database. p50/p95 over 50 hello-world runs one at a time, then
sustained runs per second over 60 s with the worker at its default concurrency."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from runner.config import PROJECT_ROOT, paths_from_env
from tests.bench import Row, p50, percentile, targeted
from tests.conftest import child_env, free_port, web_server_argv

SEQUENTIAL = 50
WAIT_MAX_S = 60.0  # the longest GET /api/runs/{id}/wait holds (playground.api.runs.WAIT_MAX_S)
SUSTAIN_S = 60.0
PY = sys.executable
BIN = Path(sys.executable).parent


class Stack:
    """Redis, the Celery workers `make run` starts (people's runs, grading) and the web server on a
    database of their own, and a user's token. `env` adds to (or overrides) their environment;
    `concurrency` is the runs worker's pool size, `grading_concurrency` the grading worker's."""

    def __init__(
        self, env: dict[str, str] | None = None, concurrency: int | None = None, grading_concurrency: int = 1
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cordon-bench-"))
        self.port = free_port()
        redis_port = free_port()
        paths = paths_from_env()
        self.env = child_env(
            REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
            DATABASE_URL=f"sqlite:///{self.dir / 'bench.sqlite3'}",
            CORDON_DATA_DIR=str(self.dir),
            CORDON_IMAGES_DIR=str(paths.images_dir),
            CORDON_QUOTA_RUNS_PER_HOUR="100000",
            CORDON_QUOTA_CONCURRENT_RUNS="64",
            CORDON_API_THROTTLE="100000/min",
            **(env or {}),
        )
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            self._spawn(["redis-server", "--port", str(redis_port), "--save", "", "--dir", str(self.dir)])
            self._manage("migrate", "--noinput", "-v0")
            self._manage(
                "shell", "-c", "from django.contrib.auth.models import User; User.objects.create_user('bench')"
            )
            self.token = self._manage("create_api_token", "bench").strip()
            pool = [f"--concurrency={concurrency}"] if concurrency else []
            celery = [str(BIN / "celery"), "-A", "playground", "worker", "--loglevel=WARNING"]
            self.worker = self._spawn([*celery, "-n", "runs@%h", *pool], CORDON_WORKER_QUEUES="runs")
            self.grader = self._spawn(
                ["nice", "-n", "10", *celery, "-n", "grading@%h", f"--concurrency={grading_concurrency}"],
                CORDON_WORKER_QUEUES="grading",
            )  # as the Procfile starts them
            self.web = self._spawn(web_server_argv(self.port))
            self._wait_up()
        except BaseException:
            self.close()
            raise

    def restart_web(self) -> None:
        """A fresh web server process (memory measurements start from a clean heap)."""
        self._stop(self.web)
        self.procs.remove(self.web)
        self.web = self._spawn(web_server_argv(self.port))
        self._wait_up()

    def _manage(self, *args: str) -> str:
        return subprocess.run([PY, "manage.py", *args], cwd=PROJECT_ROOT, env=self.env, check=True,
                              capture_output=True, text=True).stdout  # fmt: skip

    def _spawn(self, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, env={**self.env, **env}, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        self.procs.append(proc)
        return proc

    def _wait_up(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.call("GET", "/api/health")
                ping = subprocess.run([str(BIN / "celery"), "-A", "playground", "inspect", "ping"], cwd=PROJECT_ROOT,
                                      env=self.env, capture_output=True, text=True)  # fmt: skip
                if ping.stdout.count("pong") >= 2:  # both workers
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError("the bench stack did not come up")

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", method=method, data=json.dumps(body).encode() if body else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=90) as response:  # noqa: S310 - our own http URL
            return json.loads(response.read())

    def post_file(self, path: str, name: str, data: bytes, content_type: str) -> Any:
        """POST one file as the form field `file` (a dataset's upload, a notebook's import)."""
        boundary = uuid.uuid4().hex
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            f"Content-Type: {content_type}\r\n\r\n"
        )
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", method="POST",
            data=head.encode() + data + f"\r\n--{boundary}--\r\n".encode(),
            headers={"Authorization": f"Bearer {self.token}",
                     "Content-Type": f"multipart/form-data; boundary={boundary}"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=90) as response:  # noqa: S310 - our own http URL
            return json.loads(response.read())

    def one_run(self) -> float:
        started = time.monotonic()
        run = self.call("POST", "/api/runs", {"runtime": "python", "code": "print('hello')"})
        state = self.wait_finished(run["id"])
        if state["outcome"] != "succeeded":
            raise RuntimeError(f"bench run ended {state['outcome']}: {state['reason']}")
        return time.monotonic() - started

    def wait_finished(self, run_id: str, timeout: float = 300) -> Any:
        """The run's record once finished, from the API's long poll (GET /api/runs/{id}/wait: answered
        when the worker publishes the run's end). Measured against polling GET /api/runs/{id} every
        20 ms (a poll's wait, and each poll's own request), p50 of 30 hello runs submit -> finished:
        129 against 148 ms cold 0.1 s apart, 148 against 173 ms from ready sandboxes 0.5 s apart."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = min(WAIT_MAX_S, max(1.0, deadline - time.monotonic()))
            state = self.call("GET", f"/api/runs/{run_id}/wait?timeout_s={left:.0f}")
            if state["state"] == "finished":
                return state
        raise RuntimeError(f"bench run {run_id} did not finish within {timeout:.0f} s")

    def close(self) -> None:
        for proc in reversed(self.procs):
            self._stop(proc)
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the process group (the worker's pool, the sandboxes), SIGKILL if it lingers."""
        for signo, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, signo)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue


def sustained(stack: Stack, seconds: float) -> float:
    """Hello runs per second, from two clients per core submitting one after another for `seconds`."""
    done = 0
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client() -> None:
        nonlocal done
        while time.monotonic() < stop_at:
            stack.one_run()
            with lock:
                done += 1

    started = time.monotonic()
    clients = [threading.Thread(target=client) for _ in range(2 * (os.cpu_count() or 1))]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    return done / (time.monotonic() - started)


def run() -> list[Row]:
    stack = Stack()
    try:
        stack.one_run()  # warm-up: image verification, imports
        latencies = [stack.one_run() for _ in range(SEQUENTIAL)]
        rate = sustained(stack, SUSTAIN_S)
    finally:
        stack.close()
    return [
        targeted("web", f"API submit -> finished, hello world, p50 of {SEQUENTIAL}", p50(latencies) * 1000, "ms",
                 at_most=100),
        targeted("web", f"API submit -> finished, hello world, p95 of {SEQUENTIAL}",
                 percentile(latencies, 0.95) * 1000, "ms", at_most=150),
        targeted("web", f"sustained runs per second over {SUSTAIN_S:.0f} s (worker default concurrency)",
                 rate, "runs/s", at_least=15),
    ]  # fmt: skip
