"""`make test-hosts`: Cordon on several hosts, proven on one machine (5-6 minutes).

One web process, a private PostgreSQL cluster and Redis, and two worker hosts that share nothing
but those and CORDON_STORAGE=database: each its own name, data and host state directories, cgroup
parent and sandbox uids, started in a mount namespace of its own in which the other host's
directories, the web's and the project's var/ are hidden, and in a PID namespace of its own with
its own /proc (tests/hosts/stack.py, tests/hosts/enter.py). The scenarios, each from a clean start
(both hosts up, none draining, no run in flight):

1. isolation: from inside each host's namespaces, its own directories and the (read-only) images
   are there; the other host's, the web's and the databases' are not; with runs of both in flight,
   its /proc lists exactly its own processes (its sandboxes' included), none of the other host's,
   and no /proc/<pid>/root there leads to the other host's files;
2. data: a dataset uploaded through the web is read by runs on both hosts; their stdout and output
   files, downloaded through the API, are byte for byte what the programs wrote;
3. drain from the admin (HTTP log-in, the changelist action): the drained host finishes what it
   runs, takes nothing new until resumed, then takes runs again; runs/s with one host and two;
4. burst: 200 hello-world runs at once, spread over both hosts, every one succeeded;
5. capacity: runs/s of one host and of two on runs queued beforehand (the web's submit rate aside);
6. lost host: one killed mid-run (its PID namespace's init, so every process of the namespace,
   its process group and every run cgroup SIGKILLed; none survives): its runs end as lost_worker
   and their retries succeed on the other host within 60 s; restarted, it sweeps what it left (run
   cgroups, run directories, views, locks, work and spool directories);
7. chaos (tests/hosts/chaos.py): under a steady load of runs, PostgreSQL stopped 10 s, Redis
   unreachable 10 s, Redis restarted empty, one host's data disk full, one host's network to
   PostgreSQL cut, one host's clock stepped 2 minutes forward and back, the web killed during a
   burst of 120 submissions; for each, what was lost, charged twice, left stuck, half-written,
   blamed on the program or left behind (all must be 0), printed as the chaos table.

Then: no dataset, output or log file on any disk (they are in the database), and no traceback in
any process's log. Prints the checks and the figures as tables and saves them as JSON under
var/hosts/ (with the processes' logs when a check failed). Exit 0 when every check passed, 1 when
one failed (each failure says why). `python -m tests.hosts drain lost` runs only those scenarios;
`--keep` keeps the harness directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.config import PROJECT_ROOT, paths_from_env
from runner.receipt import site_key
from tests.bench import Row, targeted
from tests.conftest import child_env, free_port
from tests.hosts.stack import AdminSession, Api, Host, Layout, Web, start_time, wait_for
from tests.playground.conftest import RedisServer

HOSTS = ("hosta", "hostb")
CONCURRENCY = 4  # each host's Celery pool, and its admission slots
UID_BASES = {"hosta": 2_100_000, "hostb": 2_200_000}  # apart from each other and from the default
BURST = 200
THROUGHPUT_RUNS = 100
RECOVERY_LIMIT_S = 60.0
SUBMIT_THREADS = 8
HELLO = "print('hello')"


def log(message: str) -> None:
    print(f"[test-hosts {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    figures: list[Row] = field(default_factory=list)
    chaos: list[dict[str, Any]] = field(default_factory=list)  # one row per fault (tests/hosts/chaos.py)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        log(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        return bool(ok)

    def figure(self, scenario: str, metric: str, value: float | None, unit: str, **target: float) -> None:
        row = Row(scenario, metric, value, unit) if value is None else targeted(scenario, metric, value, unit, **target)
        self.figures.append(row)

    @contextmanager
    def scenario(self, name: str) -> Iterator[None]:
        """A scenario whose exception fails it (with the reason) and lets the next one run."""
        log(f"--- {name}")
        started = time.monotonic()
        try:
            yield
        except Exception as exc:
            traceback.print_exc()
            self.check(f"{name}: completed", False, f"{type(exc).__name__}: {exc}"[:2000])
        self.figure(name, "scenario time", time.monotonic() - started, "s")

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)


# --- the stack ------------------------------------------------------------------------------


class Stack:
    """PostgreSQL, Redis, the web and the two worker hosts, with a user's API client and an admin."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.pg: Any = None
        # No append-only file: a broker that outlives nothing here need not fsync every write.
        self.redis = RedisServer(f"redis://127.0.0.1:{free_port()}/0", layout.redis, append_only=False)
        self.web: Web | None = None
        self.hosts: dict[str, Host] = {}
        self.api: Api | None = None
        self.admin_user = "hosts-admin"
        self.admin_password = secrets.token_urlsafe(18)
        self.token = ""
        self.app: Any = None  # the Celery app, once this process has Django set up
        # hostb reaches PostgreSQL through a proxy the chaos part can cut (tests/hosts/chaos.py);
        # hosta's data directory is a tmpfs of its own, which the chaos part fills.
        self.pg_proxies: dict[str, Any] = {}
        self.chaos_logs_from: dict[Path, int] = {}  # each log's size when the chaos part began
        self.disks: list[Any] = []
        self.site_key = layout.private / "receipt_key.pem"

    def start(self) -> None:
        from tests.pg import PostgresCluster

        images_dir = paths_from_env().images_dir
        if not (images_dir / "built.json").is_file():
            raise RuntimeError(f"no images under {images_dir}: run `make images`")
        self.pg = PostgresCluster(workdir=self.layout.pg)
        self.pg.start()
        database_url = self.pg.database_url("cordon_hosts")
        self.redis.start()
        shared = child_env(
            DATABASE_URL=database_url, REDIS_URL=self.redis.url, CORDON_STORAGE="database",
            DJANGO_SETTINGS_MODULE="playground.settings",
        )  # fmt: skip
        # One receipt key for the site, a copy on each host, as README asks of several hosts (each
        # would otherwise make its own, and the audit would find their receipts signed by strangers).
        site_key(self.site_key)
        web_env = {
            **shared,
            "CORDON_DATA_DIR": str(self.layout.web),
            "CORDON_RECEIPT_KEY_FILE": str(self.site_key),
            "CORDON_HOST_STATE_DIR": str(self.layout.web / "state"),
            "CORDON_IMAGES_DIR": str(images_dir),
            "CORDON_QUOTA_CONCURRENT_RUNS": "100000",
            "CORDON_QUOTA_RUNS_PER_HOUR": "100000",
            "CORDON_API_THROTTLE": "100000/min",
        }
        self._django(web_env)
        self.web = Web(web_env, self.layout.logs / "web.log")
        self.web.start()
        from tests.hosts.chaos import CuttableProxy, HostDisk

        for name in HOSTS:
            env = shared
            if name == "hostb":
                proxy = self.pg_proxies[name] = CuttableProxy(("127.0.0.1", self.pg.port))
                env = {**shared, "DATABASE_URL": database_url.replace(f":{self.pg.port}/", f":{proxy.port}/")}
            host = Host(name=name, layout=self.layout, env=env, concurrency=CONCURRENCY, slots=CONCURRENCY,
                        uid_base=UID_BASES[name], images_dir=images_dir)  # fmt: skip
            self.hosts[name] = host
            host.dir.mkdir(mode=0o711, parents=True, exist_ok=True)
            shutil.copy2(self.site_key, host.dir / self.site_key.name)  # R/self/, where only it reads
            host.env["CORDON_RECEIPT_KEY_FILE"] = str(self.layout.own / self.site_key.name)
            if name == "hosta":
                host.prepare()
                self.disks.append(HostDisk(host))
            host.start()
        for host in self.hosts.values():
            host.wait_ready(self.app)

    def _django(self, env: dict[str, str]) -> None:
        """This process on the web's settings (the ORM for what the API does not say), migrated, with
        a user and her token, and a superuser for the admin."""
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=PROJECT_ROOT, env=env,
                       check=True)  # fmt: skip
        os.environ.update(env)
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        from playground.celery import app
        from playground.services.accounts import token_create

        users = get_user_model()
        users.objects.create_superuser(username=self.admin_user, email="", password=self.admin_password)
        user = users.objects.create_user(username="hosts-user")
        self.token = token_create(user=user)
        self.app = app

    def client(self) -> Api:
        if self.api is None:
            assert self.web is not None
            self.api = Api(self.web.base, self.token)
        return self.api

    def admin(self) -> AdminSession:
        assert self.web is not None
        session = AdminSession(self.web.base)
        session.login(self.admin_user, self.admin_password)
        return session

    def stop(self) -> None:
        """Everything stopped, each part even when another failed to stop."""
        steps: list[Callable[[], None]] = [host.stop for host in self.hosts.values()]
        steps += [self.web.stop] if self.web is not None else []
        steps += [self.redis.stop, self._close_database]
        steps += [proxy.close for proxy in self.pg_proxies.values()]
        steps += [self.pg.stop] if self.pg is not None else []
        steps += [disk.close for disk in self.disks]
        for step in steps:
            try:
                step()
            except Exception:
                traceback.print_exc()

    def _close_database(self) -> None:
        if self.app is not None:
            from django.db import connections

            connections.close_all()

    def reset(self) -> None:
        """Both hosts up, none draining, no run in flight: what every scenario starts from, even
        after one that failed half-way."""
        from playground.models import ACTIVE_STATES, Run, WorkerHost
        from playground.services.hosts import hosts_drain

        for host in self.hosts.values():
            if host.proc is None or host.proc.poll() is not None:
                log(f"restarting {host.name} for the next scenario")
                host.stop()
                host.start()
                host.wait_ready(self.app)
        draining = list(WorkerHost.objects.filter(draining=True).values_list("name", flat=True))
        if draining:
            log(f"resuming {', '.join(draining)} for the next scenario")
            hosts_drain(names=draining, draining=False)
            for name in draining:
                host = self.hosts[name]
                wait_for(f"{name} consuming again", lambda h=host: "namespace" in (h.consuming(self.app) or []), 30)
        try:
            wait_for("no run in flight", lambda: not Run.objects.filter(state__in=ACTIVE_STATES).exists(), 150, 0.5)
        except TimeoutError:
            left = Counter(Run.objects.filter(state__in=ACTIVE_STATES).values_list("state", "worker_host"))
            raise TimeoutError(f"runs still in flight after 150 s (state, host): {dict(left)}") from None


# --- runs, through the API and the ORM ---------------------------------------------------------


def submit_many(api: Api, codes: list[str], **kwargs: Any) -> list[str]:
    """Submit every code at once (SUBMIT_THREADS at a time); the run ids in order."""
    with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
        return list(pool.map(lambda code: api.submit(code, **kwargs), codes))


def runs_of(ids: list[str]) -> dict[str, dict[str, Any]]:
    from django.db import close_old_connections

    from playground.models import Run

    close_old_connections()
    fields = ("id", "state", "outcome", "worker_host", "error_code", "cleanup_ok", "reason", "retry_of_id")
    return {str(r["id"]): r for r in Run.objects.filter(id__in=ids).values(*fields)}


def wait_finished(ids: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    def done() -> dict[str, dict[str, Any]] | None:
        rows = runs_of(ids)
        return rows if len(rows) == len(ids) and all(r["state"] == "finished" for r in rows.values()) else None

    try:
        return wait_for(f"{len(ids)} runs finished", done, timeout_s, 0.2)
    except TimeoutError:
        states = Counter(r["state"] for r in runs_of(ids).values())
        raise TimeoutError(f"{len(ids)} runs not finished within {timeout_s:g} s: {dict(states)}") from None


def outcomes(rows: dict[str, dict[str, Any]]) -> Counter[str]:
    return Counter(f"{r['outcome']}{'/' + r['error_code'] if r['error_code'] else ''}" for r in rows.values())


def per_host(rows: dict[str, dict[str, Any]]) -> Counter[str]:
    return Counter(r["worker_host"] or "(none)" for r in rows.values())


def api_retry_links(api: Api, lost: list[str]) -> list[str]:
    """Lost runs whose record does not name exactly one retry that names it back."""
    wrong = []
    for run_id in lost:
        retries = [str(r) for r in api.call("GET", f"/api/runs/{run_id}")["retries"]]
        if len(retries) != 1 or str(api.call("GET", f"/api/runs/{retries[0]}")["retry_of"]) != run_id:
            wrong.append(f"{run_id}: retries {retries}")
    return wrong


def api_audit_problems(api: Api, run_id: str) -> list[str]:
    """What the API's record of a run says is not clean in its audit."""
    record = api.call("GET", f"/api/runs/{run_id}")
    problems = [] if record["cleanup_ok"] is True else [f"{run_id}: cleanup_ok={record['cleanup_ok']}"]
    problems += [f"{run_id}: {c['name']}: {c['detail'][:200]}" for c in record["cleanup"] if not c["ok"]]
    return problems + ([] if record["cleanup"] else [f"{run_id}: no cleanup checks"])


def throughput(report: Report, api: Api, scenario: str, label: str) -> dict[str, dict[str, Any]]:
    """THROUGHPUT_RUNS hello-world runs submitted at once: runs/s from the first submit to the last end."""
    started = time.monotonic()
    ids = submit_many(api, [HELLO] * THROUGHPUT_RUNS)
    submitted = time.monotonic() - started
    rows = wait_finished(ids, 120)
    elapsed = time.monotonic() - started
    report.figure(scenario, f"runs/s, {THROUGHPUT_RUNS} hello-world runs, {label}", THROUGHPUT_RUNS / elapsed, "runs/s")
    report.figure(scenario, f"{label}: all {THROUGHPUT_RUNS} submitted after", submitted, "s")
    report.check(f"{scenario}: {THROUGHPUT_RUNS} runs {label} all succeeded",
                 outcomes(rows) == Counter({"succeeded": THROUGHPUT_RUNS}), f"{dict(outcomes(rows))}")  # fmt: skip
    return rows


# --- the scenarios ----------------------------------------------------------------------------


ISOLATION_SLEEP_S = 6


def isolation(report: Report, stack: Stack) -> None:
    layout = stack.layout
    for name, host in stack.hosts.items():
        other = next(h for n, h in stack.hosts.items() if n != name)
        visible = {
            "its own data dir (R/self/data)": layout.own / "data" / f".marker-{name}",
            "its own host state dir": layout.own / "state" / "locks",
            "the images (R/images)": layout.images / "built.json",
        }
        hidden = {
            "the other host's data dir": other.data_dir / f".marker-{other.name}",
            "the other host's state dir": other.state_dir,
            "its own directory at its real path": host.data_dir,
            "the web's data dir": layout.web,
            "PostgreSQL's directory": layout.pg,
            "the project's var/images": stack.hosts[name].images_dir / "built.json",
        }
        missing = [what for what, path in visible.items() if not host.sees(path)]
        seen = [f"{what} ({path})" for what, path in hidden.items() if host.sees(path)]
        report.check(f"isolation: {name} sees its own directories and the images", not missing, ", ".join(missing))
        report.check(f"isolation: {name} sees nothing of {other.name}, the web, the databases or var/", not seen,
                     "; ".join(seen))  # fmt: skip
        report.check(f"isolation: {name} has the images read-only and its data dir writable",
                     not host.can_write(layout.images) and host.can_write(layout.own / "data"))  # fmt: skip
    # The processes, with runs of both hosts in flight: sandboxes in their nested namespaces too.
    code = f"import time\nprint('started', flush=True)\ntime.sleep({ISOLATION_SLEEP_S})"
    ids = submit_many(stack.client(), [code] * (2 * CONCURRENCY))
    wait_for("runs running on both hosts", lambda: running_on_all(ids), 30)
    time.sleep(0.5)  # the programs started in their sandboxes
    for name, host in stack.hosts.items():
        process_isolation(report, stack, host, next(h for n, h in stack.hosts.items() if n != name))
    rows = wait_finished(ids, 60)
    report.check("isolation: the runs in flight during the process checks succeeded, on both hosts",
                 outcomes(rows) == Counter({"succeeded": len(ids)}) and set(per_host(rows)) == set(HOSTS),
                 f"{dict(outcomes(rows))} on {dict(per_host(rows))}")  # fmt: skip


def running_on_all(ids: list[str]) -> bool:
    """Whether each host runs some of these runs and none is queued."""
    rows = runs_of(ids).values()
    running = Counter(r["worker_host"] for r in rows if r["state"] == "running")
    return all(running[n] > 0 for n in HOSTS) and not any(r["state"] == "queued" for r in rows)


def process_isolation(report: Report, stack: Stack, host: Host, other: Host) -> None:
    """From inside `host` (its mount and PID namespaces): its /proc lists its own processes, every
    one (its sandboxes' included), and none of `other`'s; no /proc/<pid>/root leads to the other
    host's files, the web's or the databases'."""
    name, layout = host.name, stack.layout
    own_marker = layout.own / "data" / f".marker-{name}"
    foreign_paths = [layout.own / "data" / f".marker-{other.name}", other.data_dir / f".marker-{other.name}",
                     other.state_dir, layout.web, layout.pg]  # fmt: skip
    other_worker = other.worker_pid()
    if other_worker is None:
        raise RuntimeError(f"{other.name} has no worker process")
    other_started = start_time(other_worker)
    # Its processes as the machine sees them (by their pid in its namespace), before and after the probe.
    before = set(host.own_view().items())
    probe = host.probe([own_marker, *foreign_paths], [other_worker])
    after = set(host.own_view().items())
    seen = {(int(pid), p["started"]) for pid, p in probe["seen"].items()}
    foreign, missing = seen - (before | after), (before & after) - seen
    uids = Counter(p["uid"] for p in probe["seen"].values())
    own_sandboxed = sum(n for uid, n in uids.items() if uid in host.sandbox_uids)
    other_sandboxed = sum(n for uid, n in uids.items() if uid in other.sandbox_uids)
    zombies = sum(p["state"] == "Z" for p in probe["seen"].values())
    report.check(
        f"isolation: {name}'s /proc lists its own processes, every one, sandboxed programs included",
        not foreign and not missing and own_sandboxed > 0 and "1" in probe["seen"],
        f"{len(seen)} listed, {len(before & after)} in its PID namespace and those nested in it; not its own: "
        f"{sorted(foreign)[:5]}; missing: {sorted(missing)[:5]}; {own_sandboxed} as its sandbox uids; "
        f"{zombies} zombies",
    )  # fmt: skip
    there = probe["asked"].get(str(other_worker))
    report.check(
        f"isolation: {name}'s /proc lists none of {other.name}'s processes (its worker, its sandboxed programs)",
        not foreign and there != other_started and other_sandboxed == 0,
        f"{other.name}'s worker, pid {other_worker} here: "
        f"{'absent' if there is None else 'a process of its own there' if there != other_started else 'THERE'} "
        f"in {name}'s /proc; {other_sandboxed} processes as {other.name}'s sandbox uids",
    )  # fmt: skip
    reached = {pid: p["reach"] for pid, p in probe["seen"].items() if set(p["reach"]) - {str(own_marker)}}
    own = str(own_marker) in probe["seen"].get("1", {}).get("reach", [])
    report.check(
        f"isolation: through /proc/<pid>/root {name} reaches its own files, none of {other.name}'s, the web's "
        "or the databases'",
        own and not reached,
        f"{len(probe['seen'])} processes probed; its own through /proc/1/root: {own}; reached: "
        f"{dict(list(reached.items())[:3])}",
    )  # fmt: skip
    # The probe's control: from the machine's namespaces, the same path reaches the other host's files.
    control = Path(f"/proc/{other_worker}/root{layout.own}/data/.marker-{other.name}")
    report.check(f"isolation: the probe is sound: from the machine, {other.name}'s files are reached through "
                 "/proc/<its worker's pid>/root", control.exists(), str(control))  # fmt: skip


DATASET_NAME = "data.csv"
STDOUT_LINES = 3000
BLOB_BLOCKS = 20_000  # 32 bytes each: a 640 KB output


def dataset_code(index: int) -> str:
    return f"""
import hashlib, pathlib, time
data = pathlib.Path('/input/{DATASET_NAME}').read_bytes()
digest = hashlib.sha256(data).hexdigest()
print(digest)
print('run', {index})
for n in range({STDOUT_LINES}):
    print({index}, 'line', n, digest[:12])
out = pathlib.Path('/output')
(out / 'digest.txt').write_text(digest + '\\n')
blocks = (hashlib.sha256(f'{index}:{{i}}'.encode()).digest() for i in range({BLOB_BLOCKS}))
(out / 'blob.bin').write_bytes(b''.join(blocks))
time.sleep(1.5)
"""


def dataset_expected(index: int, digest: str) -> tuple[bytes, dict[str, bytes]]:
    lines = [digest, f"run {index}", *(f"{index} line {n} {digest[:12]}" for n in range(STDOUT_LINES))]
    blob = b"".join(hashlib.sha256(f"{index}:{i}".encode()).digest() for i in range(BLOB_BLOCKS))
    return ("\n".join(lines) + "\n").encode(), {"digest.txt": f"{digest}\n".encode(), "blob.bin": blob}


def datasets_outputs_logs(report: Report, stack: Stack) -> None:
    scenario = "dataset, outputs, logs"
    api = stack.client()
    rng = random.Random(16)  # noqa: S311 - test data, the same on every run
    data = b"id,value\n" + b"".join(f"{i},{rng.random():.12f}\n".encode() for i in range(12_000))
    digest = hashlib.sha256(data).hexdigest()
    dataset = api.upload(DATASET_NAME, data)
    report.check(f"{scenario}: the web stored the dataset ({len(data)} bytes)", dataset["sha256"] == digest,
                 f"stored sha256 {dataset['sha256'][:16]}..., sent {digest[:16]}...")  # fmt: skip
    count = 2 * CONCURRENCY
    ids = submit_many(api, [dataset_code(i) for i in range(count)], dataset_ids=[dataset["id"]])
    rows = wait_finished(ids, 90)
    hosts = per_host(rows)
    report.check(f"{scenario}: all {count} runs succeeded", outcomes(rows) == Counter({"succeeded": count}),
                 f"{dict(outcomes(rows))}")  # fmt: skip
    report.check(
        f"{scenario}: runs on both hosts used the dataset", set(hosts) == set(HOSTS), f"runs per host: {dict(hosts)}"
    )
    wrong_logs, wrong_outputs, served = [], [], Counter[str]()
    for index, run_id in enumerate(ids):
        stdout, files = dataset_expected(index, digest)
        host = rows[run_id]["worker_host"]
        got = api.log(run_id)
        if got != stdout:
            wrong_logs.append(f"{run_id} ({host}): {len(got)} bytes, expected {len(stdout)}")
        record = api.call("GET", f"/api/runs/{run_id}")
        listed = {o["name"]: o for o in record["outputs"]}
        if set(listed) != set(files):
            wrong_outputs.append(f"{run_id} ({host}): outputs {sorted(listed)}")
            continue
        for name, content in files.items():
            body = api.get_bytes(listed[name]["url"])
            if body != content or listed[name]["sha256"] != hashlib.sha256(content).hexdigest():
                wrong_outputs.append(f"{run_id} ({host}) {name}: {len(body)} bytes served, {len(content)} written")
        served[host] += 1
    report.check(f"{scenario}: stdout of every run served by the web as written ({len(stdout)} bytes each)",
                 not wrong_logs, "; ".join(wrong_logs[:4]))  # fmt: skip
    report.check(f"{scenario}: outputs of every run served by the web as written (digest.txt, blob.bin 640 KB)",
                 not wrong_outputs, "; ".join(wrong_outputs[:4]))  # fmt: skip
    report.check(f"{scenario}: logs and outputs checked from both hosts", set(served) == set(HOSTS), f"{dict(served)}")
    problems = [p for i in ids for p in api_audit_problems(api, i)]
    report.check(f"{scenario}: clean audits", not problems, "; ".join(problems[:4]))


def drain_and_throughput(report: Report, stack: Stack) -> None:
    from playground.models import RunEvent, WorkerHost

    scenario = "drain"
    api, app = stack.client(), stack.app
    drained, other = stack.hosts["hosta"], stack.hosts["hostb"]
    pk = WorkerHost.objects.get(name=drained.name).pk
    admin = stack.admin()
    held_code = "import time\ntime.sleep(4)\nprint('held')"
    first = submit_many(api, [held_code] * (2 * CONCURRENCY))

    def running_on_drained() -> list[str]:
        rows = runs_of(first)
        return [i for i, r in rows.items() if r["worker_host"] == drained.name and r["state"] == "running"]

    wait_for(f"runs running on {drained.name}", running_on_drained, 30)
    message = admin.action("drain_hosts", [pk])
    row = WorkerHost.objects.get(pk=pk)
    drain_at = row.drain_requested_at
    held = [i for i, r in runs_of(first).items() if r["worker_host"] == drained.name]
    report.check(f"{scenario}: the admin action drain_hosts drained {drained.name}", row.draining,
                 f"admin said: {message!r}")  # fmt: skip
    drained_at = time.monotonic()
    after = submit_many(api, ["import time\ntime.sleep(0.5)\nprint('after the drain')"] * (2 * CONCURRENCY))
    wait_for(f"{drained.name} stops consuming its engine queue",
             lambda: "namespace" not in (drained.consuming(app) or ["namespace"]), 20, 0.25)  # fmt: skip
    report.figure(scenario, "drain -> worker stopped consuming", time.monotonic() - drained_at, "s")
    rows = wait_finished(first + after, 60)
    held_rows = {i: rows[i] for i in held}
    report.check(
        f"{scenario}: the {len(held)} runs {drained.name} held finished there, succeeded",
        bool(held)
        and all(r["outcome"] == "succeeded" and r["worker_host"] == drained.name for r in held_rows.values()),
        f"{dict(outcomes(held_rows))} on {dict(per_host(held_rows))}",
    )  # fmt: skip
    after_rows = {i: rows[i] for i in after}
    report.check(f"{scenario}: runs submitted after the drain all went to {other.name}",
                 per_host(after_rows) == Counter({other.name: len(after)}) and
                 outcomes(after_rows) == Counter({"succeeded": len(after)}),
                 f"{dict(per_host(after_rows))}, {dict(outcomes(after_rows))}")  # fmt: skip
    one = throughput(report, api, "throughput", "one host (hosta drained)")
    report.check(f"{scenario}: the drained host took none of the {THROUGHPUT_RUNS} runs",
                 per_host(one) == Counter({other.name: THROUGHPUT_RUNS}), f"{dict(per_host(one))}")  # fmt: skip
    claimed = RunEvent.objects.filter(state="claimed", at__gt=drain_at, run__worker_host=drained.name).count()
    report.check(f"{scenario}: {drained.name} claimed no run while drained", claimed == 0, f"{claimed} claimed")
    message = admin.action("resume_hosts", [pk])
    resumed = time.monotonic()
    report.check(f"{scenario}: the admin action resume_hosts resumed {drained.name}",
                 not WorkerHost.objects.get(pk=pk).draining, f"admin said: {message!r}")  # fmt: skip
    wait_for(f"{drained.name} consumes its engine queue again",
             lambda: "namespace" in (drained.consuming(app) or []), 30, 0.25)  # fmt: skip
    report.figure(scenario, "resume -> worker consuming again", time.monotonic() - resumed, "s")
    both = throughput(report, api, "throughput", "two hosts")
    report.check(f"{scenario}: after resume, {drained.name} takes runs again", per_host(both)[drained.name] > 0,
                 f"{dict(per_host(both))}")  # fmt: skip
    for name in HOSTS:
        report.figure("throughput", f"two hosts: runs on {name}", per_host(both)[name], "runs")


def burst(report: Report, stack: Stack) -> None:
    scenario = "burst"
    started = time.monotonic()
    ids = submit_many(stack.client(), [HELLO] * BURST)
    submitted = time.monotonic() - started
    rows = wait_finished(ids, 150)
    elapsed = time.monotonic() - started
    hosts = per_host(rows)
    report.check(f"{scenario}: all {BURST} runs submitted at once succeeded",
                 outcomes(rows) == Counter({"succeeded": BURST}), f"{dict(outcomes(rows))}")  # fmt: skip
    report.check(f"{scenario}: spread over both hosts", all(hosts[n] > 0 for n in HOSTS), f"{dict(hosts)}")
    report.figure(scenario, f"{BURST} runs: all submitted after", submitted, "s")
    report.figure(scenario, f"{BURST} runs: all finished after", elapsed, "s")
    report.figure(scenario, f"{BURST} runs: runs/s", BURST / elapsed, "runs/s")
    for name in HOSTS:
        report.figure(scenario, f"{BURST} runs: on {name}", hosts[name], "runs")


def capacity(report: Report, stack: Stack) -> None:
    """What the hosts execute, apart from what the web submits: THROUGHPUT_RUNS runs queued while no
    worker consumes (the harness stops their consumers with Celery's control commands, which the
    host loop leaves alone when the host is not draining), then one host or both let go at once."""
    scenario = "capacity"
    api, app = stack.client(), stack.app
    for serving in (["hostb"], list(HOSTS)):
        hosts = [stack.hosts[name] for name in serving]
        label = "one host" if len(hosts) == 1 else "two hosts"
        try:
            for host in stack.hosts.values():
                app.control.cancel_consumer("namespace", destination=[host.nodename], reply=True, timeout=5)
            wait_for("no worker consuming", lambda: not any("namespace" in (h.consuming(app) or ["namespace"])
                                                             for h in stack.hosts.values()), 20, 0.25)  # fmt: skip
            ids = submit_many(api, [HELLO] * THROUGHPUT_RUNS)
            started = time.monotonic()
            for host in hosts:
                app.control.add_consumer("namespace", destination=[host.nodename], reply=True, timeout=5)
            rows = wait_finished(ids, 120)
            elapsed = time.monotonic() - started
        finally:
            for host in stack.hosts.values():
                app.control.add_consumer("namespace", destination=[host.nodename], reply=True, timeout=5)
        report.figure(scenario, f"runs/s, {THROUGHPUT_RUNS} runs queued beforehand, {label}",
                      THROUGHPUT_RUNS / elapsed, "runs/s")  # fmt: skip
        report.check(f"{scenario}: {THROUGHPUT_RUNS} queued runs, {label}, all succeeded on {', '.join(serving)}",
                     outcomes(rows) == Counter({"succeeded": THROUGHPUT_RUNS}) and set(per_host(rows)) == set(serving),
                     f"{dict(outcomes(rows))} on {dict(per_host(rows))}")  # fmt: skip


LOST_SLEEP_S = 8


def kill_and_recover(report: Report, stack: Stack) -> None:
    from playground.models import Run

    scenario = "lost host"
    api = stack.client()
    victim, survivor = stack.hosts["hosta"], stack.hosts["hostb"]
    code = f"import time\nprint('started', flush=True)\ntime.sleep({LOST_SLEEP_S})\nprint('done')"
    ids = submit_many(api, [code] * (2 * CONCURRENCY), limits={"wall_timeout_s": 30})

    wait_for("runs running on both hosts", lambda: running_on_all(ids), 30)
    time.sleep(1.0)  # the programs have printed, their lease renewed at least once
    killed_at = time.monotonic()
    kill = victim.kill()
    rows = runs_of(ids)
    lost = [i for i, r in rows.items() if r["worker_host"] == victim.name and r["state"] != "finished"]
    sandboxed = sum(kill.run_cgroups_killed.values())
    log(f"killed {victim.name}: {len(lost)} runs held, {kill.processes} processes in its namespaces, "
        f"{len(kill.outside_group)} outside its process group, {len(kill.run_cgroups_killed)} run cgroups killed "
        f"({sandboxed} processes)")  # fmt: skip
    report.check(f"{scenario}: {victim.name} held runs when killed", bool(lost), f"{dict(per_host(rows))}")
    report.check(f"{scenario}: the sandboxed programs of {victim.name} killed (cgroup.kill too), their cgroups empty",
                 len(kill.run_cgroups_killed) >= len(lost) and sandboxed > 0,
                 f"{len(kill.run_cgroups_killed)} run cgroups, {sandboxed} processes in them")  # fmt: skip
    report.check(f"{scenario}: no process of {victim.name}'s namespaces (PID, nested, mount) survived the kill",
                 kill.processes > 0 and not kill.survivors,
                 f"{kill.processes} killed; survivors: {kill.survivors}")  # fmt: skip
    report.figure(scenario, "processes of its namespaces killed with its init", kill.processes, "")
    report.figure(scenario, "sandboxed processes in its run cgroups (cgroup.kill)", sandboxed, "")
    report.figure(scenario, "processes outside the worker's process group", len(kill.outside_group), "")
    times: dict[str, float] = {}

    def recovered() -> bool:
        rows = runs_of(lost)
        if "lost" not in times and all(r["state"] == "finished" for r in rows.values()):
            times["lost"] = time.monotonic() - killed_at
        retries = Run.objects.filter(retry_of_id__in=lost).values_list("id", "state")
        if "lost" in times and len(retries) == len(lost) and all(state == "finished" for _, state in retries):
            times["retried"] = time.monotonic() - killed_at
            return True
        return time.monotonic() - killed_at > RECOVERY_LIMIT_S + 30

    wait_for("the lost runs and their retries finished", recovered, RECOVERY_LIMIT_S + 40, 0.2)
    lost_rows = runs_of(lost)
    report.check(f"{scenario}: the {len(lost)} lost runs finished sandbox_error/lost_worker",
                 outcomes(lost_rows) == Counter({"sandbox_error/lost_worker": len(lost)}),
                 f"{dict(outcomes(lost_rows))}")  # fmt: skip
    retry_ids = [str(i) for i in Run.objects.filter(retry_of_id__in=lost).values_list("id", flat=True)]
    retry_rows = runs_of(retry_ids)
    report.check(
        f"{scenario}: each lost run's retry succeeded on {survivor.name}",
        len(retry_rows) == len(lost)
        and all(r["outcome"] == "succeeded" and r["worker_host"] == survivor.name for r in retry_rows.values()),
        f"{len(retry_rows)} retries: {dict(outcomes(retry_rows))} on {dict(per_host(retry_rows))}",
    )  # fmt: skip
    report.check(f"{scenario}: the API links each lost run and its retry (retries, retry_of)",
                 not (wrong := api_retry_links(api, lost)), "; ".join(wrong[:4]))  # fmt: skip
    problems = [p for i in retry_ids for p in api_audit_problems(api, i)]
    report.check(f"{scenario}: the retries' audits are clean (cleanup_ok, every cleanup check ok)",
                 bool(retry_ids) and not problems, "; ".join(problems[:4]))  # fmt: skip
    report.figure(scenario, "kill -> lost runs finished lost_worker", times.get("lost"), "s", at_most=RECOVERY_LIMIT_S)
    report.figure(scenario, "kill -> every lost run's retry finished", times.get("retried"), "s",
                  at_most=RECOVERY_LIMIT_S)  # fmt: skip
    report.check(f"{scenario}: recovered within {RECOVERY_LIMIT_S:g} s", times.get("retried", 1e9) <= RECOVERY_LIMIT_S,
                 f"{times.get('retried', float('nan')):.1f} s")  # fmt: skip
    others = {i: r for i, r in runs_of(ids).items() if i not in lost}
    report.check(f"{scenario}: the runs {survivor.name} held succeeded",
                 outcomes(others) == Counter({"succeeded": len(others)}), f"{dict(outcomes(others))}")  # fmt: skip
    partial = [i for i in lost if not api.log(i).startswith(b"started\n")]
    report.check(f"{scenario}: what the lost runs printed is served (stored from Redis by the reaper)", not partial,
                 f"{len(partial)} of {len(lost)} without their 'started' line")  # fmt: skip
    restart(report, stack, victim)


def restart(report: Report, stack: Stack, host: Host) -> None:
    scenario = "lost host"
    debris = host.debris()
    worker_debris = worker_dirs(host)
    counts = {what: len(names) for what, names in {**debris, **worker_debris}.items()}
    log(f"{host.name} left: {counts}")
    report.check(f"{scenario}: the killed host left debris before its restart", sum(map(len, debris.values())) > 0,
                 ", ".join(f"{n} {what}" for what, n in counts.items()))  # fmt: skip
    for what, names in debris.items():
        report.figure(scenario, f"left by the killed host: {what}", len(names), "")
    started = time.monotonic()
    host.start()
    host.wait_ready(stack.app)
    ready = time.monotonic() - started
    report.figure(scenario, "restart -> worker ready", ready, "s")

    def remaining() -> dict[str, list[str]]:
        now, workers = host.debris(), worker_dirs(host)
        left = {what: sorted(set(names) & set(now[what])) for what, names in debris.items()}
        left.update({what: sorted(set(names) & set(workers[what])) for what, names in worker_debris.items()})
        return {what: names for what, names in left.items() if names}

    try:
        wait_for("the restarted host swept its debris", lambda: not remaining(), 20, 0.5)
        report.figure(scenario, "restart -> debris swept", time.monotonic() - started, "s")
    except TimeoutError:
        pass
    left = remaining()
    runner_left = {what: names for what, names in left.items() if what in debris}
    report.check(f"{scenario}: restarted, it swept its run cgroups, run dirs, views and locks", not runner_left,
                 f"left: {runner_left}")  # fmt: skip
    worker_left = {what: names for what, names in left.items() if what in worker_debris}
    report.check(f"{scenario}: restarted, it swept its work and log spool dirs", not worker_left,
                 f"left: {worker_left}")  # fmt: skip
    ids = submit_many(stack.client(), ["import time\ntime.sleep(1)\nprint('again')"] * (2 * CONCURRENCY))
    rows = wait_finished(ids, 60)
    report.check(f"{scenario}: restarted, {host.name} takes runs again", per_host(rows)[host.name] > 0,
                 f"{dict(per_host(rows))}, {dict(outcomes(rows))}")  # fmt: skip


def worker_dirs(host: Host) -> dict[str, list[str]]:
    """The worker's own per-run directories in the host's data dir (input/export work, log spool)."""

    def names(directory: Path) -> list[str]:
        return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []

    return {"work directories": names(host.data_dir / "work"), "log spools": names(host.data_dir / "spool" / "logs")}


# What a host or the web keeps on its own disk with CORDON_STORAGE=database: its secret key, its
# processes' metric counts, and a running run's transient directories (runs/, work/, spool/: what
# the sweep checks are about).
OWN_FILES = ("secret_key", ".marker-", "metrics")
TRANSIENT_DIRS = ("runs", "work", "spool")


def nothing_stored_locally(report: Report, stack: Stack) -> None:
    """Datasets, outputs and logs are in the database: no file of theirs on the web's or a host's disk."""
    found = []
    for directory in (stack.layout.web, *(host.data_dir for host in stack.hosts.values())):
        for path in directory.rglob("*"):
            relative = path.relative_to(directory)
            if (
                path.is_file()
                and not relative.parts[0].startswith(OWN_FILES)
                and relative.parts[0] not in TRANSIENT_DIRS
            ):
                found.append(str(path.relative_to(stack.layout.private)))
    report.check("storage: no dataset, output or log file on the web's or the hosts' disks", not found,
                 ", ".join(found[:8]))  # fmt: skip


def receipts_hold(report: Report, stack: Stack) -> None:
    """Every run of every scenario, chaos included, has its receipt, in chains that hold: what
    `manage.py verify_audit` says of the hosts' chains against the runs' rows."""
    web_env = {**stack.web.env} if stack.web is not None else {}
    audit = subprocess.run([sys.executable, "manage.py", "verify_audit"], cwd=PROJECT_ROOT, env=web_env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    said = [line for line in audit.stdout.splitlines() if not line.startswith("{")]
    report.check("receipts: every host's chain holds and every finished run has one (verify_audit)",
                 audit.returncode == 0, "; ".join(said[-6:])[:2000] or audit.stderr[-2000:])  # fmt: skip


def logged_errors(report: Report, stack: Stack) -> None:
    """Every traceback the worker hosts and the web logged before the chaos part: none is expected (a
    killed host logs none)."""
    found = []
    for path in sorted(stack.layout.logs.glob("*.log")):
        with open(path, "rb") as handle:
            text = handle.read(stack.chaos_logs_from.get(path, -1)).decode(errors="replace")
        lines = text.splitlines()
        for index, line in enumerate(lines):
            if line.startswith("Traceback"):
                said = lines[index - 1] if index else ""
                error = next((x for x in lines[index + 1 :] if x and not x.startswith(" ")), "")
                found.append(f"{path.stem}: {said[:160]} -> {error[:240]}")
    report.check("logs: no traceback in the worker hosts' or the web's logs", not found, " | ".join(found[:5]))


# --- the report --------------------------------------------------------------------------------


def print_tables(report: Report) -> None:
    table = [("check", "verdict", "why")] + [(c.name, "pass" if c.ok else "FAIL", "" if c.ok else c.detail[:160])
                                              for c in report.checks]  # fmt: skip
    _print(table)
    print()
    rows = [("scenario", "figure", "value", "unit", "target", "verdict")] + [
        (r.benchmark, r.metric, "unknown" if r.value is None else f"{r.value:.4g}", r.unit, r.target, r.verdict)
        for r in report.figures
    ]
    _print(rows)


def print_chaos(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    table = [("fault", "accepted", "refused", "finished", "lost", "charged 2x", "stuck", "half-written", "blamed",
              "debris", "recovered", "outcomes")]  # fmt: skip
    for r in rows:
        recovered = "never" if r["recovery_s"] is None else f"{r['recovery_s']:.1f} s"
        table.append((r["fault"], *(str(r[k]) for k in ("submitted", "refused", "finished", "lost", "charged_twice",
                      "stuck", "half_written", "blamed", "debris")), recovered,
                      ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))))  # fmt: skip
    print()
    _print(table)


def _print(table: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for index, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))


def save(report: Report, out_dir: Path, elapsed_s: float, logs: Path | None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {
        "at": stamp, "host": platform.node(), "ok": report.ok, "elapsed_s": round(elapsed_s, 1),
        "checks": [asdict(c) for c in report.checks], "figures": [r.as_dict() for r in report.figures],
        "chaos": report.chaos,
    }  # fmt: skip
    path = out_dir / f"hosts-{stamp}.json"
    for target in (path, out_dir / "latest.json"):
        target.write_text(json.dumps(payload, indent=2) + "\n")
    if logs is not None and not report.ok:
        kept = out_dir / f"logs-{stamp}"
        shutil.copytree(logs, kept)
        print(f"the processes' logs are kept in {kept}")
    return path


def chaos(report: Report, stack: Stack) -> None:
    """Each fault of tests/hosts/chaos.py under a steady load, from a clean start; its row in the
    chaos table, and a check that it lost, double-charged, left stuck, half-written or as debris
    nothing, and blamed no run on its program."""
    from tests.hosts.chaos import FAULTS

    # What the processes log from here on is under faults: a request that failed while the database
    # was away logs its traceback. The chaos table counts what those faults did; logged_errors
    # reads the logs up to here.
    stack.chaos_logs_from = {path: path.stat().st_size for path in stack.layout.logs.glob("*.log")}
    for _, fault in FAULTS:
        stack.reset()
        started = time.monotonic()
        count = fault(stack)
        row = {**asdict(count), "outcomes": dict(count.outcomes), "seconds": round(time.monotonic() - started, 1)}
        report.chaos.append(row)
        detail = (f"{count.submitted} accepted, {count.refused} refused, {count.finished} finished "
                  f"{dict(count.outcomes)}; lost {count.lost}, charged twice {count.charged_twice}, "
                  f"stuck {count.stuck}, half-written {count.half_written}, blamed {count.blamed}, "
                  f"debris {count.debris}; recovered in {count.recovery_s}")  # fmt: skip
        report.check(f"chaos: {count.fault}: nothing lost, charged twice, stuck, half-written, blamed or left",
                     count.clean and count.recovery_s is not None, detail)  # fmt: skip


# name on the command line: (title in the report, scenario)
SCENARIOS: dict[str, tuple[str, Callable[[Report, Stack], None]]] = {
    "isolation": ("isolation", isolation),
    "data": ("dataset, outputs, logs", datasets_outputs_logs),
    "drain": ("drain", drain_and_throughput),
    "burst": ("burst", burst),
    "capacity": ("capacity", capacity),
    "lost": ("lost host", kill_and_recover),
    "chaos": ("chaos", chaos),
}


def _interrupt(signo: int, frame: Any) -> None:
    raise KeyboardInterrupt  # a SIGTERM stops everything as Ctrl-C does


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hosts", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", help=f"run only these of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the harness directory (logs, data) for a look")
    args = parser.parse_args(argv)
    if unknown := set(args.scenarios) - set(SCENARIOS):
        parser.error(f"no scenario {', '.join(sorted(unknown))}; the scenarios: {', '.join(SCENARIOS)}")
    if os.geteuid() != 0:
        print("test-hosts: run as root (worker hosts need mount namespaces and cgroups)", file=sys.stderr)
        return 1
    out_dir = paths_from_env().data_dir / "hosts"
    started = time.monotonic()
    report = Report()
    layout = Layout(Path(tempfile.mkdtemp(prefix="cordon-hosts-")))
    stack = Stack(layout)
    signal.signal(signal.SIGTERM, _interrupt)
    log(f"harness root {layout.root}")
    try:
        with report.scenario("stack"):
            stack.start()
            report.figure("stack", "start-up: PostgreSQL, Redis, migrate, web, two hosts", time.monotonic() - started,
                          "s")  # fmt: skip
            report.check("stack: PostgreSQL, Redis, the web and both worker hosts up", True)
        if report.ok:
            for name, (title, scenario) in SCENARIOS.items():
                if not args.scenarios or name in args.scenarios:
                    with report.scenario(title):
                        stack.reset()
                        scenario(report, stack)
            nothing_stored_locally(report, stack)
            receipts_hold(report, stack)
            logged_errors(report, stack)
    except KeyboardInterrupt:
        report.check("interrupted", False, "Ctrl-C or SIGTERM")
    finally:
        for signo in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signo, signal.SIG_IGN)  # the clean-up runs to its end
        log("stopping everything")
        stack.stop()
        elapsed = time.monotonic() - started
        report.figure("total", "the whole harness", elapsed, "s")
        print()
        print_tables(report)
        print_chaos(report.chaos)
        path = save(report, out_dir, elapsed, layout.logs)
        if args.keep:
            print(f"kept {layout.root}")
        else:
            shutil.rmtree(layout.root, ignore_errors=True)
    failed = [c for c in report.checks if not c.ok]
    print(f"\nsaved {path}; {len(report.checks) - len(failed)} checks passed, {len(failed)} failed, "
          f"{elapsed:.0f} s")  # fmt: skip
    for check in failed:
        print(f"FAILED: {check.name}: {check.detail}")
    return 0 if report.ok else 1
