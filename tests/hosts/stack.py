"""The processes of the several-hosts proof: Redis, the web and two worker hosts, each worker host
in a mount namespace and a PID namespace of its own (tests/hosts/enter.py), and clients for the
API and the admin.

The harness root R (a temporary directory, 0711 so that sandbox uids traverse to their views):

    R/private/hosts/<name>/{data,state,tmp}   a worker host's own directories
    R/private/{web,pg,redis,logs}              the web's data, the databases, every process's log
    R/self, R/images                           empty here; in a host's namespace its own directory
                                               and the shared images (read-only) are bound there

In a host's namespace R/private and the project's var/ are empty tmpfs mounts, so a host sees its
own directory (as R/self), the images, and nothing of the other host, the web or the databases.
Its /proc is its PID namespace's: it sees its own processes only, so that no /proc/<pid>/root
leads it into the other host's mounts.

A host's processes, from this (the machine's) PID namespace: `unshare` (the harness's child, in the
host's mount namespace but in ours for PIDs), its child the namespace's init (pid 1 there:
tests/hosts/enter.py), the init's child the Celery worker, and everything below, sandboxes in
their nested namespaces included. All but the sandboxes are in unshare's process group.
"""

from __future__ import annotations

import fcntl
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

from redis.exceptions import RedisError

from runner.config import PROJECT_ROOT
from runner.host.cgroups import CgroupLayout, RunCgroup, run_names
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


# --- processes and their namespaces, as this (the machine's) PID namespace sees them ----------

NS_GET_PARENT = 0xB702  # ioctl on a namespace's fd: its parent namespace's fd (linux/nsfs.h)


def pid_namespaces(pid: int) -> list[int]:
    """The inode numbers of the PID namespace of process `pid` and of each of its ancestors up to
    ours, ours not included: [] for a process of our namespace, or one gone."""
    try:
        fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY)
    except (FileNotFoundError, ProcessLookupError):
        return []
    chain = []
    try:
        while True:
            chain.append(os.fstat(fd).st_ino)
            try:
                parent = fcntl.ioctl(fd, NS_GET_PARENT)
            except OSError:  # EPERM: the parent is ours, or beyond
                break
            os.close(fd)
            fd = parent
    finally:
        os.close(fd)
    return chain[:-1] if chain and chain[-1] == os.stat("/proc/self/ns/pid").st_ino else chain


def status_fields(pid: int, *keys: str) -> dict[str, list[int]]:
    """Numeric fields of /proc/<pid>/status (NSpid, PPid, Uid...); {} if the process is gone."""
    found: dict[str, list[int]] = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key in keys:
                    found[key] = [int(v) for v in value.split()]
    except (FileNotFoundError, ProcessLookupError):
        return {}
    return found


def start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (the same in every PID namespace)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def log_tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace")
    except FileNotFoundError:
        return ""


# --- Redis and the web --------------------------------------------------------------------


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
        return self.healthy()

    def healthy(self) -> bool:
        """Whether /api/health answers now."""
        try:
            with urllib.request.urlopen(f"{self.base}/api/health", timeout=2):  # noqa: S310 - our loopback URL
                return True
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL, as a crash: no request it holds is answered."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

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
    """What killing a host took: its PID namespace's init, its process group, its run cgroups."""

    run_cgroups_killed: dict[str, int]  # run cgroup -> the processes it held when killed
    processes: int  # the processes of its namespaces when killed (nested ones included)
    outside_group: list[int]  # of those, the ones outside its process group (sandboxes, mostly)
    survivors: list[int]  # processes of its namespaces still there after it all (none expected)


class Host:
    """One worker host: `celery -A playground worker` in a mount namespace and a PID namespace of its
    own, with its own name, data and host state directories, cgroup parent and sandbox uids."""

    def __init__(
        self, *, name: str, layout: Layout, env: dict[str, str], concurrency: int, slots: int, uid_base: int,
        images_dir: Path,
    ) -> None:  # fmt: skip
        self.name = name
        self.layout = layout
        self.dir = layout.host_dir(name)
        self.concurrency = concurrency
        self.cgroup_parent = f"cordon-{name}"
        self.sandbox_uids = range(uid_base, uid_base + slots)
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
        self.proc: subprocess.Popen[bytes] | None = None  # unshare
        # Set, the worker's wall clock is off by the seconds in this file (tests/hosts/skewed.py),
        # given as the path inside the host's namespace.
        self.clock_file: Path | None = None
        self.launched_at = 0.0
        self._init: tuple[int, int] | None = None  # its PID namespace's init: pid here, pidfd
        self.mnt_ns = ""
        self.pid_ns = 0  # the inode number of its PID namespace

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
        if self.clock_file is not None:
            worker = [PY, "-m", "tests.hosts.skewed", str(self.clock_file), *worker]
        hide = [self.layout.private, PROJECT_ROOT / "var"]
        return [
            "unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private", "--",
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
            try:
                replies = app.control.ping(destination=[self.nodename], timeout=0.5) or []
            except (OSError, RedisError):  # Redis restarted since (the chaos part): ask again, reconnected
                return False
            if not any(self.nodename in reply for reply in replies):
                return False
            row = WorkerHost.objects.filter(name=self.name).values_list("started_at", flat=True).first()
            return row is not None and row.timestamp() >= self.launched_at - 1

        try:
            wait_for(f"worker host {self.name} ready", ready, timeout_s, 0.3)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}; its log ends:\n{log_tail(self.log)}") from None
        if self.init_pid() is None:
            raise RuntimeError(f"worker host {self.name}: no init in its PID namespace")

    # its namespaces

    def init_pid(self) -> int | None:
        """The pid (here) of the host's PID namespace's init, unshare's child; a pidfd on it is kept,
        so that it is signalled, never a process that took its pid after it."""
        if self._init is None and self.proc is not None and self.proc.poll() is None:
            found = children(self.proc.pid)
            if found:
                pid, pidfd = found[0], os.pidfd_open(found[0])
                if status_fields(pid, "NSpid").get("NSpid", [])[1:] == [1]:
                    self._init = (pid, pidfd)
                    self.mnt_ns = os.readlink(f"/proc/{pid}/ns/mnt")
                    self.pid_ns = os.stat(f"/proc/{pid}/ns/pid").st_ino
                else:
                    os.close(pidfd)  # not pid 1 of a PID namespace: not a host's init, never signalled
        return None if self._init is None else self._init[0]

    def signal_init(self, signo: int) -> bool:
        """Signal the namespace's init (SIGKILL: the kernel then SIGKILLs every process of the
        namespace, nested namespaces included); whether it was there."""
        if self.init_pid() is None or self._init is None:
            return False
        try:
            signal.pidfd_send_signal(self._init[1], signo)
            return True
        except ProcessLookupError:
            return False

    def worker_pid(self) -> int | None:
        """The Celery worker's main process: the init's child."""
        init = self.init_pid()
        found = children(init) if init is not None else []
        return found[0] if found else None

    def members(self) -> dict[int, int]:
        """The host's processes, each with its process group: those of its PID namespace and of
        the namespaces nested in it (the sandboxes), and those of its mount namespace (unshare)."""
        found: dict[int, int] = {}
        if not self.pid_ns:
            return found
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                if self.pid_ns in pid_namespaces(pid) or os.readlink(f"/proc/{pid}/ns/mnt") == self.mnt_ns:
                    found[pid] = os.getpgid(pid)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        return found

    def own_view(self) -> dict[int, int]:
        """The processes of the host's PID namespace and of those nested in it, by their pid there
        (each with its start time): what its /proc should list, no more, no less."""
        found: dict[int, int] = {}
        for pid in self.members():
            nspid = status_fields(pid, "NSpid").get("NSpid", [])
            started = start_time(pid)
            if self.pid_ns in pid_namespaces(pid) and len(nspid) >= 2 and started is not None:
                found[nspid[1]] = started
        return found

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

    def probe(self, paths: list[Path], pids: list[int]) -> dict[str, Any]:
        """From inside the host (its mount and PID namespaces), what its /proc shows: every process
        there with its start time and which of `paths` its /proc/<pid>/root leads to, and whether
        each of `pids` is there (with its start time)."""
        done = self._in_namespace([PY, "-I", "-c", PROBE, json.dumps([[str(p) for p in paths], pids])])
        if done.returncode != 0:
            raise RuntimeError(f"the probe inside {self.name} failed: {done.stderr.decode(errors='replace')[-800:]}")
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    def _in_namespace(self, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        """`argv` run inside the host: in its mount namespace and its PID namespace (its /proc)."""
        init = self.init_pid()
        if init is None:
            raise RuntimeError(f"worker host {self.name} is not running")
        return subprocess.run(["nsenter", "-t", str(init), "-m", "-p", "--", *argv], capture_output=True,
                              check=False, timeout=20)  # fmt: skip

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
        """SIGKILL everything of the host at once: its PID namespace's init (the kernel SIGKILLs every
        process of the namespace with it, nested ones included), its process group (unshare, the
        worker), every sandboxed program (cgroup.kill of each run cgroup under its parent); then
        whatever of its namespaces is still there after 5 s is a survivor (none expected)."""
        if self.proc is None:
            raise RuntimeError(f"worker host {self.name} is not running")
        group, members = self.proc.pid, self.members()
        layout = CgroupLayout.detect()
        cgroups = {name: RunCgroup(layout, self.cgroup_parent, name) for name in self.run_cgroups()}
        held = {name: len(cgroup.pids()) for name, cgroup in cgroups.items()}
        self.signal_init(signal.SIGKILL)
        _killpg(group, signal.SIGKILL)
        for cgroup in cgroups.values():
            cgroup.kill()
        self.proc.wait(timeout=30)
        for name, cgroup in cgroups.items():
            if not cgroup.wait_empty(10):
                raise RuntimeError(f"run cgroup {name} of {self.name} still has processes after cgroup.kill")
        survivors: list[int] = []
        try:
            wait_for(f"every process of {self.name}'s namespaces gone", lambda: not self.members(), 5, 0.05)
        except TimeoutError:
            survivors = list(self.members())
            _kill_each(survivors)
        self._forget()
        return KillReport(held, len(members), [pid for pid, g in members.items() if g != group], survivors)

    def _forget(self) -> None:
        if self._init is not None:
            os.close(self._init[1])
        self.proc, self._init, self.mnt_ns, self.pid_ns = None, None, "", 0

    def stop(self) -> None:
        """A warm shutdown (SIGTERM to the namespace's init, which passes it to the worker), then
        whatever is left killed with the init; its cgroups removed."""
        if self.proc is None:
            self.remove_cgroups()
            return
        if self.proc.poll() is None:
            if not self.signal_init(signal.SIGTERM):
                _killpg(self.proc.pid, signal.SIGTERM)  # no init (yet): the worker's group, as it is
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self.signal_init(signal.SIGKILL)
        _killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        _kill_each(list(self.members()))  # none expected: the namespace ended with its init
        self._forget()
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


def _killpg(group: int, signo: int) -> None:
    try:
        os.killpg(group, signo)
    except ProcessLookupError:
        pass


# Run inside a host (`python -I -c PROBE '[paths, pids]'`): what its /proc shows, as JSON. Each
# process but the probe: its start time, uid, state (Z: a zombie), and which paths its
# /proc/<pid>/root leads to (an error other than "not there" counts as leading there).
PROBE = """
import json, os, sys
paths, asked = json.loads(sys.argv[1])
def stat(pid):
    try:
        with open(f'/proc/{pid}/stat') as handle:
            fields = handle.read().rsplit(')', 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None, None
def reaches(pid, path):
    try:
        os.stat(f'/proc/{pid}/root{path}')
        return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
seen = {}
for pid in (int(n) for n in os.listdir('/proc') if n.isdigit() and int(n) != os.getpid()):
    try:
        uid = os.stat(f'/proc/{pid}').st_uid
    except OSError:
        continue
    state, started = stat(pid)
    if started is not None:
        seen[pid] = {'started': started, 'uid': uid, 'state': state, 'reach': [p for p in paths if reaches(pid, p)]}
print(json.dumps({'seen': seen, 'asked': {pid: stat(pid)[1] for pid in asked if os.path.exists(f'/proc/{pid}')}}))
"""


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
