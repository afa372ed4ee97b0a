"""`make run` brings up Redis, the Celery workers (people's runs, grading), beat and daphne; Ctrl-C
stops all of them."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.conftest import child_env, free_port

pytestmark = pytest.mark.services


class _Output:
    """Collects a child's output on a thread so the pipe never fills."""

    def __init__(self, proc: subprocess.Popen[str]):
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def _get(opener: urllib.request.OpenerDirector, url: str) -> tuple[int, str]:
    try:
        with opener.open(url, timeout=5) as response:
            return response.status, response.read().decode()
    except OSError:
        return 0, ""


def test_make_run_serves_the_site_and_a_worker_and_ctrl_c_stops_everything(
    project_root: Path, images_dir: Path, tmp_path: Path
) -> None:
    http_port, redis_port = free_port(), free_port()
    env = child_env(
        CORDON_DATA_DIR=str(tmp_path / "data"),
        CORDON_IMAGES_DIR=str(images_dir),
        CORDON_HTTP_PORT=str(http_port),
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
    )
    proc = subprocess.Popen(
        ["make", "run"],
        cwd=project_root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job is
    )
    output = _Output(proc)
    base = f"http://127.0.0.1:{http_port}/"
    try:
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        _wait_for(lambda: _get(opener, base)[0] == 200, 120, f"the site at {base}\n{output.text}")
        assert f"Cordon: {base}" in output.text
        password = re.search(r"password: (\S+)", output.text)
        assert password, output.text

        # The admin login works with the printed credentials.
        status, _ = _get(opener, base + "admin/login/")
        assert status == 200
        token = next(c.value for c in jar if c.name == "csrftoken")
        form = urllib.parse.urlencode(
            {"username": "admin", "password": password.group(1), "csrfmiddlewaretoken": token, "next": "/admin/"}
        ).encode()
        with opener.open(base + "admin/login/", data=form, timeout=10) as response:
            assert response.url.endswith("/admin/")
            assert "Cordon audit console" in response.read().decode()

        # Both Celery workers (people's runs, grading) answer a ping through the same Redis (they may
        # still be connecting).
        for worker in ("runs@", "grading@"):
            _wait_for(lambda w=worker: re.search(rf"{w}\S+ ready\.", output.text) is not None, 60, worker)
        ping = subprocess.run(
            [str(project_root / ".venv/bin/celery"), "-A", "playground", "inspect", "ping", "--timeout", "5"],
            cwd=project_root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "runs@" in ping.stdout and "grading@" in ping.stdout and ping.stdout.count("pong") == 2, (
            ping.stdout + ping.stderr
        )

        family = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
        cmdlines = [" ".join(psutil.Process(pid).cmdline()) for pid in family]
        for program in ("redis-server", "worker --loglevel=INFO -n runs@", "worker --loglevel=INFO -n grading@",
                        "playground.server"):  # fmt: skip
            assert any(program in line for line in cmdlines), (program, cmdlines)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does to the foreground job
        proc.wait(timeout=30)

    _wait_for(
        lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in family),
        30,
        "every process of the stack to stop",
    )
    assert _get(urllib.request.build_opener(), base)[0] == 0
    for port in (http_port, redis_port):
        assert not any(
            getattr(c.laddr, "port", None) == port and c.status == "LISTEN" for c in psutil.net_connections("tcp")
        )
