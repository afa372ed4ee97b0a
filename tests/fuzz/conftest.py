"""The live stack the fuzz test talks to: Redis, a Celery worker and the web server as processes
on the test database, a user with a bearer token, and a dataset and a finished run of theirs."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.conf import settings
from django.contrib.auth.models import User

from playground.services.accounts import token_create
from runner.config import PROJECT_ROOT, paths_from_env
from tests.conftest import child_env, free_port, web_server_argv
from tests.playground.conftest import RedisServer

CELERY = str(Path(sys.executable).parent / "celery")


@dataclass(frozen=True)
class LiveSite:
    base_url: str
    token: str = field(repr=False)

    def call(self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json") -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
        request = urllib.request.Request(f"{self.base_url}{path}", method=method, data=body, headers=headers)  # noqa: S310
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our own loopback URL
            return json.loads(response.read())


SEED_CSV = b"name,age\nada,36\nalan,41\n"
SEED_CODE = "import shutil\nshutil.copy('/input/people.csv', '/output/people.csv')\nprint('seeded')\n"


def _seed(site: LiveSite, timeout: float = 60) -> None:
    """Something to find: a dataset, and a finished run that read it and wrote an output. The
    fuzzer reuses ids from the list answers, so the operations on one item get past the 404."""
    boundary = secrets.token_hex(16)
    upload = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="people.csv"\r\n'
              f"Content-Type: text/csv\r\n\r\n").encode() + SEED_CSV + f"\r\n--{boundary}--\r\n".encode()  # fmt: skip
    dataset = site.call("POST", "/api/datasets", upload, f"multipart/form-data; boundary={boundary}")
    submit = {"runtime": "python", "code": SEED_CODE, "dataset_ids": [dataset["id"]]}
    run = site.call("POST", "/api/runs", json.dumps(submit).encode())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = site.call("GET", f"/api/runs/{run['id']}")
        if run["state"] == "finished":
            assert run["outcome"] == "succeeded", run
            return
        time.sleep(0.2)
    raise RuntimeError(f"the seed run did not finish: {run}")


class Children:
    """Processes started each in a session of its own, stopped group by group in reverse order."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{name}.log").open("wb") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, env=self.env, start_new_session=True,
                                    stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs = []


def _signal_group(proc: subprocess.Popen[bytes], signo: int) -> None:
    try:
        os.killpg(proc.pid, signo)
    except ProcessLookupError:
        pass


def _wait_for_worker(redis_url: str, log: Path, timeout: float = 60) -> None:
    # A bare app on our own broker: playground's app would broadcast on the settings' broker
    # whatever connection it is given, where other sessions' workers may answer.
    probe = Celery(broker=redis_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if probe.control.ping(timeout=0.5):
                return
            time.sleep(0.2)
    finally:
        probe.close()
    raise RuntimeError(f"the Celery worker did not answer a ping; its log: {log}")


def _wait_for_web(base_url: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base_url}/api/health", timeout=2):  # noqa: S310 - our own loopback URL
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the web server did not answer /api/health; its log: {log}")


@pytest.fixture
def live_site(transactional_db: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    # A Redis on a port of its own (settings.REDIS_URL is fixed before tests/conftest.py can
    # move it, so concurrent sessions would share it), and a data directory of its own for the
    # uploads and run files the fuzzing leaves; the database is the test database.
    redis = RedisServer(f"redis://127.0.0.1:{free_port()}/0", tmp_path_factory.mktemp("fuzz-redis"))
    redis.start()
    data_dir = tmp_path_factory.mktemp("fuzz-data")
    env = child_env(
        DATABASE_URL=f"sqlite:///{settings.DATABASES['default']['NAME']}",
        REDIS_URL=redis.url,
        CORDON_DATA_DIR=str(data_dir),
        CORDON_IMAGES_DIR=str(paths_from_env().images_dir),
        # Thousands of requests a minute are the point here; the throttle has tests of its own.
        CORDON_API_THROTTLE="1000000/min",
        # Whatever limits a generated run asks for, it ends soon, so that stopping the worker
        # does not wait on it and the runs the fuzzing starts do not pile up.
        CORDON_MAX_WALL_TIMEOUT_S="10",
        CORDON_MAX_CPU_TIME_S="10",
    )
    children = Children(env, log_dir=data_dir)
    try:
        children.spawn("worker", [CELERY, "-A", "playground", "worker", "--loglevel=WARNING", "--concurrency=2",
                        "--without-mingle", "--without-gossip"])  # fmt: skip
        port = free_port()
        children.spawn("web", web_server_argv(port))
        base_url = f"http://127.0.0.1:{port}"
        _wait_for_worker(redis.url, log=data_dir / "worker.log")
        _wait_for_web(base_url, log=data_dir / "web.log")
        user = User.objects.create_user("fuzzer", password="a long enough password")
        site = LiveSite(base_url=base_url, token=token_create(user=user, name="fuzz"))
        _seed(site)
        yield site
    finally:
        children.stop()
        redis.stop()
