"""The web path end to end: HTTP submit (daphne) -> Celery worker -> namespace engine -> final
state, on its own Redis and database. p50/p95 over 50 hello-world runs one at a time, then
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
from pathlib import Path
from typing import Any

from runner.config import PROJECT_ROOT, paths_from_env
from tests.bench import Row, p50, percentile
from tests.conftest import child_env, free_port

SEQUENTIAL = 50
SUSTAIN_S = 60.0
PY = sys.executable
BIN = Path(sys.executable).parent


class Stack:
    def __init__(self) -> None:
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
        )
        self.procs: list[subprocess.Popen[bytes]] = []
        self._spawn(["redis-server", "--port", str(redis_port), "--save", "", "--dir", str(self.dir)])
        self._manage("migrate", "--noinput", "-v0")
        self._manage("shell", "-c", "from django.contrib.auth.models import User; User.objects.create_user('bench')")
        self.token = self._manage("create_api_token", "bench").strip()
        self._spawn([str(BIN / "celery"), "-A", "playground", "worker", "--loglevel=WARNING"])
        self._spawn([str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(self.port), "playground.asgi:application"])
        self._wait_up()

    def _manage(self, *args: str) -> str:
        return subprocess.run([PY, "manage.py", *args], cwd=PROJECT_ROOT, env=self.env, check=True,
                              capture_output=True, text=True).stdout  # fmt: skip

    def _spawn(self, argv: list[str]) -> None:
        self.procs.append(subprocess.Popen(argv, cwd=PROJECT_ROOT, env=self.env, start_new_session=True,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip

    def _wait_up(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.call("GET", "/api/health")
                ping = subprocess.run([str(BIN / "celery"), "-A", "playground", "inspect", "ping"], cwd=PROJECT_ROOT,
                                      env=self.env, capture_output=True, text=True)  # fmt: skip
                if "pong" in ping.stdout:
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
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our own http URL
            return json.loads(response.read())

    def one_run(self) -> float:
        started = time.monotonic()
        run = self.call("POST", "/api/runs", {"runtime": "python", "code": "print('hello')"})
        while True:
            state = self.call("GET", f"/api/runs/{run['id']}")
            if state["state"] == "finished":
                if state["outcome"] != "succeeded":
                    raise RuntimeError(f"bench run ended {state['outcome']}: {state['reason']}")
                return time.monotonic() - started
            time.sleep(0.02)

    def close(self) -> None:
        for proc in reversed(self.procs):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


def run() -> list[Row]:
    stack = Stack()
    try:
        stack.one_run()  # warm-up: image verification, imports
        latencies = [stack.one_run() for _ in range(SEQUENTIAL)]
        done = 0
        lock = threading.Lock()
        stop_at = time.monotonic() + SUSTAIN_S

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
        elapsed = time.monotonic() - started
    finally:
        stack.close()
    return [
        Row("web", f"API submit -> finished, hello world, p50 of {SEQUENTIAL}", p50(latencies) * 1000, "ms"),
        Row(
            "web", f"API submit -> finished, hello world, p95 of {SEQUENTIAL}", percentile(latencies, 0.95) * 1000, "ms"
        ),
        Row(
            "web",
            f"sustained runs per second over {SUSTAIN_S:.0f} s (worker default concurrency)",
            done / elapsed,
            "runs/s",
        ),
    ]
