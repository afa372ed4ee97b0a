"""The processes of the several-hosts proof: Redis, the web and two worker hosts, each worker host
in a mount namespace of its own (tests/hosts/enter.py), and clients for the API and the admin.

The harness root R (a temporary directory, 0711 so that sandbox uids traverse to their views):

    R/private/hosts/<name>/{data,state,tmp}   a worker host's own directories
    R/private/{web,pg,redis,logs}              the web's data, the databases, every process's log
    R/self, R/images                           empty here; in a host's namespace its own directory
                                               and the shared images (read-only) are bound there

In a host's namespace R/private and the project's var/ are empty tmpfs mounts, so a host sees its
own directory (as R/self), the images, and nothing of the other host, the web or the databases.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.cgroups import CgroupLayout, RunCgroup, run_names
from runner.config import PROJECT_ROOT
from tests.conftest import free_port, web_server_argv

PY = sys.executable
CELERY = str(Path(sys.executable).parent / "celery")


class Layout:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.private = root / "private"
        self.own = root / "self"
        self.images = root / "images"
        self.web = self.private / "web"
        self.pg = self.private / "pg"
        self.redis = self.private / "redis"
        self.logs = self.private / "logs"
        os.chmod(root, 0o711)  # noqa: S103 - sandbox uids traverse R/self to their views
        for directory in (self.private, self.own, self.images, self.web, self.redis, self.logs):
            directory.mkdir(mode=0o755, exist_ok=True)

    def host_dir(self, name: str) -> Path:
        return self.private / "hosts" / name


def wait_for(what: str, ready: Any, timeout_s: float, interval_s: float = 0.2) -> Any:
    """Poll `ready()` until it returns something true; that value, or TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(interval_s)


def log_tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace")
    except FileNotFoundError:
        return ""


# --- Redis and the web --------------------------------------------------------------------


class Redis:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.workdir),
                "--save", "", "--appendonly", "no"]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for("redis-server answering", self._answers, 10, 0.05)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


class Web:
    """The web server as `make run` starts it (daphne with the capped bodies), on a free port."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(web_server_argv(self.port), cwd=PROJECT_ROOT, env=self.env,
                                         start_new_session=True, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            wait_for("the web answering /api/health", self._healthy, 60)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}; its log ends:\n{log_tail(self.log)}") from None

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"the web server exited ({self.proc.returncode}):\n{log_tail(self.log)}")
        try:
            with urllib.request.urlopen(f"{self.base}/api/health", timeout=2):  # noqa: S310 - our loopback URL
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


# --- a worker host ------------------------------------------------------------------------


@dataclass
class KillReport:
    """What killing a host took: its process group, its run cgroups, and any straggler."""

    run_cgroups_killed: dict[str, int]  # run cgroup -> the processes it held when killed
    stragglers_killed: list[int]  # processes of its mount namespace outside its process group
    survivors: list[int]  # processes of its mount namespace still there after it all (none expected)


class Host:
    """One worker host: `celery -A playground worker` in a mount namespace of its own, with its own
    name, data and host state directories, cgroup parent and sandbox uids."""

    def __init__(
        self, *, name: str, layout: Layout, env: dict[str, str], concurrency: int, slots: int, uid_base: int,
        images_dir: Path,
    ) -> None:  # fmt: skip
        self.name = name
        self.layout = layout
        self.dir = layout.host_dir(name)
        self.concurrency = concurrency
        self.cgroup_parent = f"cordon-{name}"
        self.images_dir = images_dir
        self.log = layout.logs / f"{name}.log"
        self.nodename = f"{name}@{socket.gethostname()}"
        own = layout.own
        self.env = {
            **env,
            "CORDON_HOST_NAME": name,
            "CORDON_DATA_DIR": str(own / "data"),
            "CORDON_HOST_STATE_DIR": str(own / "state"),
            "CORDON_IMAGES_DIR": str(layout.images),
            "CORDON_CGROUP_PARENT": self.cgroup_parent,
            "CORDON_SANDBOX_UID_BASE": str(uid_base),
            "CORDON_MAX_SLOTS": str(slots),
            "CORDON_SMOLVM_STATE_DIR": str(own / "smolvm"),
            "TMPDIR": str(own / "tmp"),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.mnt_ns = ""
        self.launched_at = 0.0

    # the host's directories, as the harness (outside its namespace) sees them

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def state_dir(self) -> Path:
        return self.dir / "state"

    def prepare(self) -> None:
        self.dir.mkdir(mode=0o711, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o711)  # noqa: S103 - what R/self is in its namespace: traversed by sandbox uids
        for sub in ("data", "state", "tmp", "smolvm"):
            (self.dir / sub).mkdir(mode=0o711, exist_ok=True)
        (self.data_dir / f".marker-{self.name}").write_text(self.name)

    def argv(self) -> list[str]:
        worker = [CELERY, "-A", "playground", "worker", "-n", f"{self.name}@%h", "--loglevel=INFO",
                  f"--concurrency={self.concurrency}", "--without-mingle", "--without-gossip"]  # fmt: skip
        hide = [self.layout.private, PROJECT_ROOT / "var"]
        return [
            "unshare", "--mount", "--propagation", "private", "--",
            PY, "-m", "tests.hosts.enter",
            "--own", str(self.dir), str(self.layout.own),
            "--images", str(self.images_dir), str(self.layout.images),
            *[arg for path in hide for arg in ("--hide", str(path))],
            "--", *worker,
        ]  # fmt: skip

    def start(self) -> None:
        self.prepare()
        self.launched_at = time.time()
        with open(self.log, "ab") as out:
            out.write(f"\n--- {self.name} started at {time.strftime('%H:%M:%S')} ---\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.argv(), cwd=PROJECT_ROOT, env=self.env, start_new_session=True,
                                         stdout=out, stderr=subprocess.STDOUT)  # fmt: skip

    def wait_ready(self, app: Any, timeout_s: float = 60) -> None:
        """Until the worker answers a ping and its WorkerHost row says it started (after launch)."""
        from playground.models import WorkerHost

        def ready() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise RuntimeError(f"worker host {self.name} exited ({code}); its log ends:\n{log_tail(self.log)}")
            replies = app.control.ping(destination=[self.nodename], timeout=0.5) or []
            if not any(self.nodename in reply for reply in replies):
                return False
            row = WorkerHost.objects.filter(name=self.name).values_list("started_at", flat=True).first()
            return row is not None and row.timestamp() >= self.launched_at - 1

        try:
            wait_for(f"worker host {self.name} ready", ready, timeout_s, 0.3)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}; its log ends:\n{log_tail(self.log)}") from None
        self.mnt_ns = os.readlink(f"/proc/{self.proc.pid}/ns/mnt") if self.proc else ""

    def consuming(self, app: Any) -> list[str] | None:
        """The queues the worker consumes now (None: it did not answer)."""
        answer = app.control.inspect(destination=[self.nodename], timeout=1.0).active_queues() or {}
        queues = answer.get(self.nodename)
        return None if queues is None else sorted(q["name"] for q in queues)

    # what the host sees

    def sees(self, path: Path) -> bool:
        """Whether `path` exists inside the host's mount namespace."""
        return self._in_namespace(["test", "-e", str(path)]).returncode == 0

    def can_write(self, directory: Path) -> bool:
        probe = directory / f".write-probe-{secrets.token_hex(4)}"
        done = self._in_namespace(["touch", str(probe)])
        if done.returncode == 0:
            self._in_namespace(["rm", "-f", str(probe)])
        return done.returncode == 0

    def _in_namespace(self, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        if self.proc is None:
            raise RuntimeError(f"worker host {self.name} is not running")
        return subprocess.run(["nsenter", "-t", str(self.proc.pid), "-m", "--", *argv], capture_output=True,
                              check=False, timeout=10)  # fmt: skip

    # what the host left

    def run_cgroups(self) -> list[str]:
        return sorted(run_names(CgroupLayout.detect(), self.cgroup_parent))

    def debris(self) -> dict[str, list[str]]:
        """What runs of this host left on it: run cgroups, run directories, views and run locks."""

        def names(directory: Path, pattern: str = "*") -> list[str]:
            return sorted(p.name for p in directory.glob(pattern)) if directory.is_dir() else []

        return {
            "run cgroups": self.run_cgroups(),
            "run directories": names(self.data_dir / "runs"),
            "views": names(self.state_dir / "views"),
            "run locks": names(self.state_dir / "locks", "*.lock"),
        }

    # stopping

    def kill(self) -> KillReport:
        """SIGKILL everything of the host at once: the worker's process group, every sandboxed
        program (cgroup.kill of each run cgroup under its parent), and any other process left in
        its mount namespace (none is expected: reported as stragglers)."""
        if self.proc is None:
            raise RuntimeError(f"worker host {self.name} is not running")
        members = self._namespace_members()
        layout = CgroupLayout.detect()
        cgroups = {name: RunCgroup(layout, self.cgroup_parent, name) for name in self.run_cgroups()}
        held = {name: len(cgroup.pids()) for name, cgroup in cgroups.items()}
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for cgroup in cgroups.values():
            cgroup.kill()
        stragglers = [pid for pid, group in members.items() if group != self.proc.pid]
        _kill_each(stragglers)
        self.proc.wait(timeout=30)
        for name, cgroup in cgroups.items():
            if not cgroup.wait_empty(10):
                raise RuntimeError(f"run cgroup {name} of {self.name} still has processes after cgroup.kill")
        try:
            survivors: list[int] = []
            wait_for(f"every process of {self.name}'s namespace gone", lambda: not self._namespace_members(), 5, 0.05)
        except TimeoutError:
            survivors = list(self._namespace_members())
            _kill_each(survivors)
        self.proc, self.mnt_ns = None, ""
        return KillReport(held, stragglers, survivors)

    def _namespace_members(self) -> dict[int, int]:
        """The processes in the host's mount namespace, each with its process group."""
        found: dict[int, int] = {}
        if not self.mnt_ns:
            return found
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry.name}/ns/mnt") == self.mnt_ns:
                    found[int(entry.name)] = os.getpgid(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        return found

    def stop(self) -> None:
        """A warm shutdown (SIGTERM), then whatever is left killed; its cgroups removed."""
        if self.proc is None:
            self.remove_cgroups()
            return
        members = self._namespace_members() if self.proc.poll() is None else {}
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_each(list(members))
        self.proc.wait(timeout=30)
        self.proc, self.mnt_ns = None, ""
        self.remove_cgroups()

    def remove_cgroups(self) -> None:
        layout = CgroupLayout.detect()
        for name in self.run_cgroups():
            cgroup = RunCgroup(layout, self.cgroup_parent, name)
            cgroup.kill()
            cgroup.wait_empty(5)
            cgroup.remove()
        for parent in layout.parents(self.cgroup_parent):
            try:
                parent.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                print(f"could not remove cgroup parent {parent}: {exc}", file=sys.stderr)


def _kill_each(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- clients ------------------------------------------------------------------------------


class Api:
    """A user's API client: bearer token, JSON in and out (urllib: every call its own connection)."""

    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.headers = {"Authorization": f"Bearer {token}"}

    def _open(self, method: str, path: str, data: bytes | None = None, content_type: str | None = None) -> bytes:
        headers = dict(self.headers)
        if content_type:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(f"{self.base}{path}", method=method, data=data, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - our loopback URL
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        return json.loads(self._open(method, path, data, "application/json" if data else None))

    def get_bytes(self, path: str) -> bytes:
        return self._open("GET", path)

    def upload(self, name: str, data: bytes) -> Any:
        boundary = f"cordon{secrets.token_hex(8)}"
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        return json.loads(self._open("POST", "/api/datasets", body, f"multipart/form-data; boundary={boundary}"))

    def submit(self, code: str, *, dataset_ids: list[str] | None = None, limits: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {"runtime": "python", "code": code, "dataset_ids": dataset_ids or []}
        if limits:
            body["limits"] = limits
        return str(self.call("POST", "/api/runs", body)["id"])

    def log(self, run_id: str, stream: str = "stdout") -> bytes:
        """A finished run's whole log, read page by page."""
        data, offset = b"", 0
        while True:
            page = self.call("GET", f"/api/runs/{run_id}/log?stream={stream}&offset={offset}")
            data += page["data"].encode()
            if page["complete"] or page["next_offset"] == offset:
                return data
            offset = page["next_offset"]


class AdminSession:
    """A superuser logged in to /admin/ over HTTP, as a browser would (session cookie, CSRF token)."""

    CSRF_FIELD = re.compile(rb'name="csrfmiddlewaretoken" value="([^"]+)"')

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def _request(self, path: str, form: dict[str, Any] | None = None) -> tuple[int, str, bytes]:
        data = urllib.parse.urlencode(form, doseq=True).encode() if form is not None else None
        url = f"{self.base}{path}"
        request = urllib.request.Request(url, data=data, headers={"Referer": url})  # noqa: S310 - our loopback URL
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.url, bytes(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.url, bytes(exc.read())

    def _csrf(self, page: bytes, path: str) -> str:
        found = self.CSRF_FIELD.search(page)
        if found is None:
            raise RuntimeError(f"no CSRF token in the form of {path}")
        return found.group(1).decode()

    def login(self, username: str, password: str) -> None:
        path = "/admin/login/?next=/admin/"
        _, _, page = self._request(path)
        form = {"csrfmiddlewaretoken": self._csrf(page, path), "username": username, "password": password,
                "next": "/admin/"}  # fmt: skip
        status, url, page = self._request(path, form)
        if status != 200 or url.rstrip("/") != f"{self.base}/admin" or b"log out" not in page.lower():
            raise RuntimeError(f"admin log-in failed: {status} at {url}: {page[:300]!r}")

    def action(self, action: str, pks: list[int], path: str = "/admin/playground/workerhost/") -> str:
        """Post a changelist action on the rows `pks`; the message the admin answered with."""
        _, _, page = self._request(path)
        form = {"csrfmiddlewaretoken": self._csrf(page, path), "action": action, "index": "0",
                "_selected_action": [str(pk) for pk in pks]}  # fmt: skip
        status, url, page = self._request(path, form)
        if status != 200:
            raise RuntimeError(f"admin action {action}: {status} at {url}: {page[:300]!r}")
        listed = re.search(rb'<ul class="messagelist">(.*?)</ul>', page, re.S)
        messages = re.findall(rb"<li[^>]*>([^<]*)</li>", listed.group(1)) if listed else []
        return "; ".join(m.decode().strip() for m in messages)
