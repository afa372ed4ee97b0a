"""LTI's Celery tasks, on the maintenance queue (every worker that takes people's runs consumes it):
sending a score to an LMS, again with backoff while attempts are left; the sweep of lost ones."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import transaction

from playground.lti import passback

QUEUE = "maintenance"  # named at each enqueue: Celery 6 drops a task's own `queue` attribute


@shared_task(bind=True, acks_late=True, max_retries=passback.MAX_ATTEMPTS, soft_time_limit=120)
def send_passback(self: Any, passback_id: int) -> str:
    outcome = passback.passback_send(passback_id=passback_id)
    if outcome == "retry":
        raise self.retry(countdown=passback.retry_delay_s(self.request.retries + 1), queue=QUEUE)
    return outcome


def enqueue_passback(passback_id: int) -> None:
    """Sent once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: send_passback.apply_async((passback_id,), queue=QUEUE))


@shared_task
def resend_stale_passbacks() -> int:
    """Pending scores whose task was lost: sent again (each claim is conditional: sent once)."""
    stale = list(passback.passbacks_stale().values_list("id", flat=True)[:500])
    for passback_id in stale:
        send_passback.apply_async((passback_id,), queue=QUEUE)
    return len(stale)
