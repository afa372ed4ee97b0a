"""Celery tasks: thin. Each takes ids (or nothing) and calls a service."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from playground.classroom import grading_settle, similarity_reports
from playground.services import dispatch, execution, hosts, retention


# A database briefly away (a restart, no free connection) before the claim: the task is tried again
# a few seconds later rather than acknowledged with its run left queued until the reaper re-sends it.
@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=2, retry_backoff_max=30, retry_jitter=True, max_retries=6,
)  # fmt: skip
def execute_run(self: Any, run_id: str) -> str:
    if hosts.host_is_draining(name=settings.CORDON_HOST_NAME):
        # Reserved before the drain reached this worker: stop consuming now, and send it back for
        # a host that is not draining.
        dispatch.stop_consuming(
            nodename=self.request.hostname, queue=(self.request.delivery_info or {}).get("routing_key")
        )
        return "sent back: this host is draining" if dispatch.resend(run_id=run_id) else "not claimable"
    final = execution.run_execute(run_id=run_id, worker=settings.CORDON_HOST_NAME)
    if final is not None and final.is_grading:
        grading_settle.settle(run_id=run_id)  # its own result (a bounded comparison), and the slot it freed
    return "not claimable" if final is None else final.outcome or ""


@shared_task(acks_late=True, reject_on_worker_lost=True)
def make_similarity_report(report_id: str) -> None:
    similarity_reports.report_make(report_id)


@shared_task
def purge_expired_data() -> dict[str, int]:
    return retention.purge_expired()
