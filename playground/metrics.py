"""Prometheus metrics: what each process counts, and what a scrape adds from the shared state.

Counts (runs finished, refusals, errors) are made where they happen, in whichever process: the
web's, a Celery pool process, the beat. prometheus_client's multiprocess mode keeps each
process's in a file of CORDON_METRICS_DIR (settings set PROMETHEUS_MULTIPROC_DIR before this
module is first imported), and a scrape sums this host's files. Every host has its own directory;
Prometheus scrapes each host (`/metrics` on a web host, CORDON_METRICS_BIND on a worker host).

What is a state rather than an event is read at scrape time (StateCollector): runs in sandboxes
per host and the grading queue from the database every host shares, this host's ready sandboxes
from what its worker processes publish (runner.ready.status_files) and its warm microVM bases
from their records.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Count
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from playground.models import WORKER_STATES, Run, RunState
from playground.selectors.runs import grading_in_flight, grading_waiting
from runner.config import SupervisorSettings, paths_from_env
from runner.ready import status_files
from runner.registry import Registry

# Seconds: a queue wait is from under a second to the queue-wait bound; a run from a blink to its
# wall limit (up to an hour).
WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
WALL_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

RUNS_FINISHED = Counter(
    "cordon_runs_finished", "Runs finished, by outcome, engine and kind", ["outcome", "engine", "kind"]
)
QUEUE_WAIT = Histogram(
    "cordon_run_queue_wait_seconds", "From a run's creation to its sandbox's start", ["engine"], buckets=WAIT_BUCKETS
)
WALL_TIME = Histogram("cordon_run_wall_seconds", "A run's wall time in its sandbox", ["engine"], buckets=WALL_BUCKETS)
ADMISSION_REFUSALS = Counter("cordon_admission_refusals", "Runs refused for want of room (rejected_capacity)", ["why"])
SANDBOX_ERRORS = Counter("cordon_sandbox_errors", "Runs ended by a fault of ours (sandbox_error), by code", ["code"])
CLEANUP_FAILURES = Counter("cordon_cleanup_check_failures", "Cleanup checks that failed, by check", ["check"])
EGRESS_ATTEMPTS = Counter(
    "cordon_egress_attempts", "Egress attempts by sandboxes: allowed, or refused and why", ["verdict", "reason"]
)
THROTTLE_REFUSALS = Counter("cordon_throttle_refusals", "Requests refused by a throttle, by which", ["throttle"])

# A refusal's reason, as the proxy words it (runner/egress/proxy.py), in a few classes: a label's
# values must stay few. The first class whose words the reason holds.
EGRESS_REASONS = (
    ("policy", ("not in the run's egress policy",)),
    ("cap", ("cap", "connections open at once")),
    ("name", ("resolve", "has no address")),
    ("address", ("resolves to",)),
)


def egress_reason(reason: str) -> str:
    for name, words in EGRESS_REASONS:
        if any(word in reason for word in words):
            return name
    return "request"  # a request the proxy could not take (malformed, not a proxy request)


def count_run_finished(run: Any, failed_checks: list[str]) -> None:
    """A finished run's counts (every path that finishes one calls this once, on commit), with the
    names of its cleanup checks that failed."""
    engine = run.engine or run.engine_requested or ""
    RUNS_FINISHED.labels(outcome=run.outcome or "", engine=engine, kind=run.kind).inc()
    if run.started_at and run.created_at:
        QUEUE_WAIT.labels(engine=engine).observe(max(0.0, (run.started_at - run.created_at).total_seconds()))
    if run.wall_s is not None:
        WALL_TIME.labels(engine=engine).observe(run.wall_s)
    if run.outcome == "rejected_capacity":
        ADMISSION_REFUSALS.labels(why="no_host" if run.worker_host == "" else "no_room").inc()
    if run.outcome == "sandbox_error":
        SANDBOX_ERRORS.labels(code=run.error_code or "unknown").inc()
    for check in failed_checks:
        CLEANUP_FAILURES.labels(check=check).inc()
    record = run.egress_record or {}
    refused_kept = [a for a in record.get("attempts") or [] if not a.get("allowed")]
    for attempt in refused_kept:
        EGRESS_ATTEMPTS.labels(verdict="refused", reason=egress_reason(attempt.get("reason", ""))).inc()
    refused_unkept = int(record.get("refused") or 0) - len(refused_kept)
    if refused_unkept > 0:  # past the attempts a run keeps: counted, their reasons not kept
        EGRESS_ATTEMPTS.labels(verdict="refused", reason="not_kept").inc(refused_unkept)
    if record.get("connections"):
        EGRESS_ATTEMPTS.labels(verdict="allowed", reason="").inc(int(record["connections"]))


def count_throttled(throttle: str) -> None:
    THROTTLE_REFUSALS.labels(throttle=throttle).inc()


class StateCollector(Collector):
    """The gauges read at scrape time: the shared database's (with `shared`) and this host's."""

    def __init__(self, *, shared: bool) -> None:
        self.shared = shared

    def collect(self) -> Iterator[Metric]:
        yield from _ready_pools(paths_from_env().host_state_dir, settings.CORDON_HOST_NAME)
        yield from _kept(_registry().kept(), settings.CORDON_HOST_NAME)
        if self.shared:
            yield from _shared_states()


def _shared_states() -> Iterator[Metric]:
    """What every host's database says: the runs in sandboxes per host, the grading queue."""
    live = GaugeMetricFamily(
        "cordon_live_sandboxes", "Runs in a sandbox (admitted to exporting), by host", labels=["host"]
    )
    in_sandbox = [state for state in WORKER_STATES if state != RunState.CLAIMED]  # claimed: waits for admission
    for host, count in Run.objects.filter(state__in=in_sandbox).values_list("worker_host").annotate(n=Count("id")):
        live.add_metric([host or ""], count)
    yield live
    queue = GaugeMetricFamily(
        "cordon_grading_queue_depth", "Grading runs waiting for a slot, and in flight", labels=["state"]
    )
    # As the queue counts them: in flight is what holds a slot, never more than CORDON_GRADING_SLOTS
    # (a test whose run has ended and whose check waits for a slot is waiting, not in flight).
    queue.add_metric(["waiting"], grading_waiting())
    queue.add_metric(["in_flight"], grading_in_flight())
    yield queue


def _ready_pools(host_state_dir: Path, host: str) -> Iterator[Metric]:
    """This host's ready sandboxes (runner.ready), summed over its worker processes per class."""
    ready = GaugeMetricFamily(
        "cordon_ready_sandboxes", "Ready sandboxes on this host, by class and state", labels=["host", "class", "state"]
    )
    totals: dict[tuple[str, str], int] = {}
    for pool in status_files(host_state_dir):
        for cls in pool.get("classes", ()):
            for state in ("ready", "in_use"):
                key = (cls["class"], state)
                totals[key] = totals.get(key, 0) + int(cls.get(state, 0))
            key = (cls["class"], "stopped")
            totals[key] = totals.get(key, 0) + int(bool(cls.get("stopped")))
    for (label, state), value in sorted(totals.items()):
        ready.add_metric([host, label, state], value)
    yield ready


@functools.cache
def _registry() -> Registry:
    """This process's view of the host's engines (built once: engines are cheap objects)."""
    return Registry(SupervisorSettings.from_env(), paths_from_env().host_state_dir)


def _kept(kept: list[dict[str, str]], host: str) -> Iterator[Metric]:
    """What engines keep between runs on this host (the smolvm engine's warm microVM bases), by
    engine, kind, image and state."""
    labels = ["host", "engine", "kind", "image", "state"]
    warm = GaugeMetricFamily("cordon_warm_bases", "Warm microVM bases on this host, by image and state", labels=labels)
    totals: dict[tuple[str, ...], int] = {}
    for item in kept:
        found = (item["engine"], item["kind"], item["image"], item["state"])
        totals[found] = totals.get(found, 0) + 1
    for key, value in sorted(totals.items()):
        warm.add_metric([host, *key], value)
    yield warm


def registry(*, shared: bool = True) -> CollectorRegistry:
    """This host's processes' counts and its ready sandboxes; with `shared`, the database's states
    too (a web host's /metrics: every worker host's CORDON_METRICS_BIND leaves them out, or each
    would repeat them)."""
    found = CollectorRegistry()
    multiprocess.MultiProcessCollector(found, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])  # type: ignore[no-untyped-call]
    found.register(StateCollector(shared=shared))
    return found


def scrape() -> bytes:
    """This host's metrics in Prometheus's text format."""
    return generate_latest(registry())


def serve(bind: str) -> str:
    """Serve this host's metrics (without the shared states) on `bind` ("host:port") in a thread."""
    host, _, port = bind.rpartition(":")
    server, _ = start_http_server(int(port), addr=host.strip("[]") or "127.0.0.1", registry=registry(shared=False))
    return f"{host}:{server.server_port}"


def process_ended(pid: int) -> None:
    """A worker process that ends: its live gauges go (its counts stay in the sums)."""
    multiprocess.mark_process_dead(pid, os.environ["PROMETHEUS_MULTIPROC_DIR"])  # type: ignore[no-untyped-call]
