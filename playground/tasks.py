"""Celery tasks: thin. Each takes ids (or nothing) and calls a service."""

from __future__ import annotations

import socket

from celery import shared_task

from playground.models import RunKind
from playground.services import execution, grading, hosts, retention, runs


@shared_task(acks_late=True, reject_on_worker_lost=True)
def execute_run(run_id: str) -> str:
    final = execution.run_execute(run_id=run_id, worker=socket.gethostname())
    if final is not None and final.kind != RunKind.RUN:
        grading.settle()  # its result, and the grading slot it freed handed on
    return "not claimable" if final is None else final.outcome or ""


@shared_task
def reap_lost_runs() -> int:
    """Finish runs whose worker died (lease expired) as sandbox_error, re-send or reject runs
    waiting too long, and sweep this host."""
    reaped = runs.reap()
    grading.settle()  # grading runs the reaper finished, and slots a lost process left unused
    hosts.host_sweep()
    return reaped


@shared_task
def purge_expired_data() -> dict[str, int]:
    return retention.purge_expired()
