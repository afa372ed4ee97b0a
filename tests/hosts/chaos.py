"""The chaos part of `make test-hosts`: faults injected under a steady load of runs, and what each
did, counted.

A bounded loop (LOAD_RATE runs a second, loopback only, each printing two lines and writing a
known output file) runs across every fault. Each fault (FAULTS) is injected while runs are
queued, running and finishing, then cleared; then the harness waits for every run of its window
to end, and counts:

- submitted: runs the web accepted (a 201), and refused: requests it answered with an error or
  not at all (a person sees the error: nothing is lost);
- lost: accepted runs with no row, or whose row never finished (must be 0);
- charged twice: a run and its retry both charged to the user (0);
- stuck: rows still unfinished past the lease and reaper's bound after the fault cleared (0);
- half-written: a finished run whose stored output or log differs from what the program
  wrote, or is missing (0);
- blamed: a run ended as the program's own failure (it always succeeds): an infrastructure
  fault must end as sandbox_error with a code naming it (0);
- debris: run cgroups, run and work directories, views, locks and spools left on the hosts once
  everything ended (0);
- recovery: from the fault's end until a fresh run succeeds.

The faults: PostgreSQL stopped 10 s and started again; Redis unreachable 10 s (its process
stopped, SIGSTOP: its data kept, as an append-only file keeps it); Redis restarted empty (queued
tasks and live logs lost); one host's data disk full (ENOSPC in its work, staging and spool
directories; a tmpfs of its own), then freed; one host's network to PostgreSQL cut (its
connections go through a proxy of the harness, which drops them and refuses new ones) while its
runs go on; one host's wall clock stepped two minutes forward and back (tests/hosts/skewed.py);
the web killed (SIGKILL) and restarted during a burst of BURST submissions, each
client submitting again after an error, as a person would.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tests.hosts.stack import Api, Host, wait_for

LOAD_RATE = 3.0  # runs submitted a second, across every fault
LOAD_SLEEP_S = 1.5  # each load run sleeps this long between its two lines: some are always running
FAULT_S = 10.0
BURST = 120
OUTPUT = b"cordon chaos output\n" * 1024  # what every load run writes to /output/out.bin
OUTPUT_SHA = hashlib.sha256(OUTPUT).hexdigest()
LOAD_CODE = (
    "import time\nprint('start', flush=True)\n"
    f"time.sleep({LOAD_SLEEP_S})\n"
    "open('/output/out.bin', 'wb').write(b'cordon chaos output\\n' * 1024)\nprint('end')\n"
)
# A student's submission in the burst: the load's program without its pause (120 of them queued at
# once would otherwise take a minute to drain, on two small hosts).
BURST_CODE = LOAD_CODE.replace(f"time.sleep({LOAD_SLEEP_S})\n", "")
SETTLE_BOUND_S = 90.0  # the lease (CORDON_LEASE_S), the reaper's period, a retry, and slack
DISK_MIB = 256


def _db(query: Callable[[], Any], bound_s: float = 60.0) -> Any:
    """A query of the harness's own (this process is a client of the database too): asked again,
    on a fresh connection, while a fault keeps the database away."""
    from django.db import InterfaceError, OperationalError, connections

    deadline = time.monotonic() + bound_s
    while True:
        try:
            return query()
        except (OperationalError, InterfaceError):
            connections.close_all()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def log(message: str) -> None:
    print(f"[test-hosts {time.strftime('%H:%M:%S')}] chaos: {message}", flush=True)


# --- the load -------------------------------------------------------------------------------------


@dataclass
class Submissions:
    """What the clients asked for and what they were told."""

    accepted: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def submit(self, api: Api, code: str = LOAD_CODE) -> str | None:
        try:
            run_id = api.submit(code, limits={"wall_timeout_s": 30})
        except (RuntimeError, OSError) as exc:  # the web's error, or no answer at all
            with self.lock:
                self.refused[_why(exc)] += 1
            return None
        with self.lock:
            self.accepted.append(run_id)
        return run_id


def _why(exc: BaseException) -> str:
    text = str(exc)
    for code in ("500", "502", "503", "504", "429"):
        if f": {code} " in text:
            return f"HTTP {code}"
    return type(exc).__name__


class Load:
    """LOAD_RATE submissions a second in the background, each in a thread of a bounded pool (a
    request the fault holds up does not hold the others), until stopped."""

    def __init__(self, api: Api, submissions: Submissions) -> None:
        self.api, self.submissions = api, submissions
        self.stopping = threading.Event()
        self.pool = ThreadPoolExecutor(16)
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stopping.wait(1.0 / LOAD_RATE):
            self.pool.submit(self.submissions.submit, self.api)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()
        self.pool.shutdown(wait=True)


# --- a TCP proxy whose connections the harness can cut ------------------------------------------


class CuttableProxy:
    """127.0.0.1:<port> forwarded to `target`, in a thread; `cut()` drops every connection and
    refuses (closes at once) new ones until `restore()`: a network cut as a client sees it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut_off = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut_off.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while not self.cut_off.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.5)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (b if sock is a else a).sendall(data)
        except OSError:
            return
        finally:
            for sock in (a, b):
                sock.close()
            with self.lock:
                if (a, b) in self.pairs:
                    self.pairs.remove((a, b))

    def cut(self) -> None:
        self.cut_off.set()
        with self.lock:
            for a, b in self.pairs:
                for sock in (a, b):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def restore(self) -> None:
        self.cut_off.clear()

    def close(self) -> None:
        self.cut()
        self.listener.close()


# --- one fault's count --------------------------------------------------------------------------


@dataclass
class Count:
    fault: str
    submitted: int = 0
    refused: int = 0
    finished: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    charged_twice: int = 0
    stuck: int = 0
    half_written: int = 0
    blamed: int = 0
    debris: int = 0
    recovery_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.charged_twice or self.stuck or self.half_written or self.blamed or self.debris)


def settle(stack: Any, submissions: Submissions, since: Any, count: Count) -> None:
    """Wait for every run of the window (the chaos user's rows created since `since`, and every
    accepted one) to end, within SETTLE_BOUND_S; then count what the fault did."""
    from django.db import close_old_connections

    from playground.models import Run, RunOutputFile

    def window() -> list[Any]:
        close_old_connections()
        fields = ("id", "state", "outcome", "error_code", "charged", "retry_of_id", "code")
        return list(_db(lambda: list(Run.objects.filter(created_at__gte=since).values(*fields))))

    try:
        wait_for("every run of the window finished", lambda: all(r["state"] == "finished" for r in window()),
                 SETTLE_BOUND_S, 0.5)  # fmt: skip
    except TimeoutError:
        pass
    rows = {str(r["id"]): r for r in window()}
    count.submitted, count.refused = len(submissions.accepted), sum(submissions.refused.values())
    count.finished = sum(1 for r in rows.values() if r["state"] == "finished")
    count.outcomes = Counter(f"{r['outcome']}{'/' + r['error_code'] if r['error_code'] else ''}"
                             for r in rows.values() if r["state"] == "finished")  # fmt: skip
    count.lost = sum(1 for i in submissions.accepted if i not in rows or rows[i]["state"] != "finished")
    count.stuck = sum(1 for r in rows.values() if r["state"] != "finished")
    chains: Counter[str] = Counter()
    for run_id, row in rows.items():
        if row["charged"]:
            chains[str(row["retry_of_id"] or run_id)] += 1
    count.charged_twice = sum(1 for n in chains.values() if n > 1)
    ours = ("succeeded", "sandbox_error", "cancelled", "rejected_capacity")  # anything else is the program's
    count.blamed = sum(1 for r in rows.values() if r["state"] == "finished" and r["outcome"] not in ours)
    succeeded = [i for i, r in rows.items() if r["outcome"] == "succeeded" and r["code"] == LOAD_CODE]  # not probes
    count.half_written = half_written(stack.client(), succeeded, RunOutputFile)
    count.debris = debris(stack)


def _outputs_of(outputs: Any, run_id: str) -> list[Any]:
    return list(outputs.objects.filter(run_id=run_id, name="out.bin"))


def half_written(api: Api, run_ids: list[str], outputs: Any) -> int:
    """Succeeded runs whose log or output file, as stored and served, is not what the program wrote."""
    from django.core.files.storage import default_storage

    bad = 0
    for run_id in run_ids:
        files = _db(partial(_outputs_of, outputs, run_id))
        ok = len(files) == 1 and files[0].sha256 == OUTPUT_SHA and bool(files[0].file.name)
        if ok:
            with default_storage.open(files[0].file.name) as handle:
                ok = hashlib.sha256(handle.read()).hexdigest() == OUTPUT_SHA
        ok = ok and api.log(run_id) == b"start\nend\n"
        bad += not ok
    return bad


def debris(stack: Any) -> int:
    """What runs left on the hosts once every run ended (after a sweep's period)."""
    from tests.hosts.harness import worker_dirs

    def left() -> int:
        total = 0
        for host in stack.hosts.values():
            if host.proc is None:
                continue
            total += sum(len(names) for names in host.debris().values())
            total += sum(len(names) for names in worker_dirs(host).values())
        return total

    try:
        wait_for("the hosts clean", lambda: left() == 0, 25, 0.5)
    except TimeoutError:
        pass
    return left()


def recovered_after(api: Api, cleared_at: float, bound_s: float = 120.0) -> float | None:
    """Seconds from `cleared_at` until a fresh run succeeds (one submitted again each time one fails)."""
    from playground.models import Run

    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        try:
            run_id = api.submit("print('probe')")
        except (RuntimeError, OSError):
            time.sleep(0.5)
            continue
        while time.monotonic() < deadline:
            row = _db(Run.objects.filter(id=run_id).values("state", "outcome").first)
            if row and row["state"] == "finished":
                if row["outcome"] == "succeeded":
                    return time.monotonic() - cleared_at
                break
            time.sleep(0.2)
    return None


# --- the faults -----------------------------------------------------------------------------------


def _window(stack: Any, name: str, inject: Callable[[], object], clear: Callable[[], object],
            lead_s: float = 1.5) -> Count:  # fmt: skip
    """Load running, `inject`, FAULT_S, `clear`, load for a while more; then the count."""
    from django.db import connections
    from django.utils import timezone

    count = Count(name)
    since = timezone.now()
    submissions = Submissions()
    api = stack.client()
    with Load(api, submissions):
        time.sleep(lead_s)
        log(f"{name}: injecting")
        inject()
        time.sleep(FAULT_S)
        clear()
        cleared = time.monotonic()
        connections.close_all()  # this process's own: the fault may have ended them
        log(f"{name}: cleared")
        count.recovery_s = recovered_after(api, cleared)
        time.sleep(1.0)
    settle(stack, submissions, since, count)
    return count


def postgres_stopped(stack: Any) -> Count:
    return _window(stack, "PostgreSQL stopped 10 s", stack.pg.pause, stack.pg.resume)


def redis_unreachable(stack: Any) -> Count:
    pid = stack.redis.proc.pid
    return _window(stack, "Redis unreachable 10 s (SIGSTOP)", lambda: os.kill(pid, signal.SIGSTOP),
                   lambda: os.kill(pid, signal.SIGCONT))  # fmt: skip


def redis_restarted_empty(stack: Any) -> Count:
    def inject() -> None:
        stack.redis.proc.kill()  # SIGKILL: no append-only file here, so all of it is gone
        stack.redis.proc.wait(timeout=10)

    return _window(stack, "Redis restarted empty", inject, stack.redis.start)


def disk_full(stack: Any) -> Count:
    host: Host = stack.hosts["hosta"]
    filler = host.data_dir / "chaos-filler"

    def inject() -> None:
        with open(filler, "wb", buffering=0) as handle:  # unbuffered: no write left for close to fail on
            free = os.statvfs(host.data_dir)
            with contextlib.suppress(OSError):
                os.posix_fallocate(handle.fileno(), 0, free.f_bavail * free.f_frsize)
            with contextlib.suppress(OSError):
                while True:  # the last blocks
                    handle.write(b"\0" * 4096)

    return _window(stack, f"{host.name}'s data disk full (ENOSPC)", inject, lambda: filler.unlink())


def postgres_cut(stack: Any) -> Count:
    proxy: CuttableProxy = stack.pg_proxies["hostb"]
    return _window(stack, "hostb's network to PostgreSQL cut 10 s", proxy.cut, proxy.restore)


def web_killed_in_burst(stack: Any) -> Count:
    """BURST clients submit at once; the web is SIGKILLed after a third of them, started again 1 s
    later; a client told nothing (or an error) submits once more when the web answers again."""
    from django.utils import timezone

    count = Count(f"web killed during a {BURST}-submission burst")
    since = timezone.now()
    submissions = Submissions()
    api = stack.client()
    killed = threading.Event()

    def client(index: int) -> None:
        if submissions.submit(api, BURST_CODE) is None:
            wait_for("the web back", stack.web.healthy, 60, 0.2)
            submissions.submit(api, BURST_CODE)

    def killer() -> None:
        wait_for("a third of the burst accepted", lambda: len(submissions.accepted) >= BURST // 3, 60, 0.01)
        stack.web.kill()
        killed.set()
        time.sleep(1.0)
        stack.web.start()

    thread = threading.Thread(target=killer)
    thread.start()
    with ThreadPoolExecutor(24) as pool:
        list(pool.map(client, range(BURST)))
    thread.join()
    count.recovery_s = recovered_after(api, time.monotonic())
    count.notes.append(f"{sum(submissions.refused.values())} requests failed and were sent again")
    settle(stack, submissions, since, count)
    return count


def clock_stepped(stack: Any) -> Count:
    """hostb's wall clock two minutes ahead for FAULT_S, then back (tests/hosts/skewed.py): hostb
    is restarted with a skewable clock first, then runs its share of the load as before."""
    host: Host = stack.hosts["hostb"]
    skew = host.dir / "clock-offset"  # R/self/clock-offset in its namespace
    skew.write_text("0\n")
    if host.clock_file is None:
        host.stop()
        host.clock_file = stack.layout.own / skew.name
        host.start()
        host.wait_ready(stack.app)
    return _window(stack, "hostb's clock stepped 2 min forward, then back", lambda: skew.write_text("120\n"),
                   lambda: skew.write_text("0\n"))  # fmt: skip


FAULTS: tuple[tuple[str, Callable[[Any], Count]], ...] = (
    ("postgres-stop", postgres_stopped),
    ("redis-stop", redis_unreachable),
    ("redis-empty", redis_restarted_empty),
    ("disk-full", disk_full),
    ("pg-cut", postgres_cut),
    ("clock", clock_stepped),
    ("web-kill", web_killed_in_burst),
)


class HostDisk:
    """The host's data directory on a tmpfs of its own (its disk, which a fault can fill), made
    before the host starts; `close` unmounts it once the host is gone."""

    def __init__(self, host: Host, size_mib: int = DISK_MIB) -> None:
        self.path = host.data_dir
        kept = {p.name: p.read_bytes() for p in self.path.iterdir() if p.is_file()}
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0711", "tmpfs", str(self.path)],
                       check=True)  # fmt: skip
        for name, data in kept.items():
            (self.path / name).write_bytes(data)

    def close(self) -> None:
        subprocess.run(["umount", "--lazy", str(self.path)], check=False)
