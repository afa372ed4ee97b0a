"""Retention: user data (datasets, logs, outputs, with a notebook cell's state and displayed images
counted as outputs) is deleted when old or on request; run metadata and audits stay."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from playground.logs import log_delete
from playground.models import ACTIVE_STATES, Dataset, Run, RunCell, RunOutputFile
from playground.services.cells import cell_files_purge
from playground.services.datasets import dataset_delete


def purge_user_data(*, user: User) -> dict[str, int]:
    """Delete a user's datasets, logs and outputs; run metadata and audits stay."""
    counts = {"datasets": 0, "logs": 0, "outputs": 0}
    for dataset in Dataset.objects.filter(owner=user):
        dataset_delete(dataset=dataset)
        counts["datasets"] += 1
    for run in Run.objects.filter(owner=user, logs_purged=False).exclude(state__in=ACTIVE_STATES):
        counts["logs"] += _purge_run_files(run)
    counts["outputs"] = _purge_outputs(RunOutputFile.objects.filter(run__owner=user))
    counts["outputs"] += cell_files_purge(RunCell.objects.filter(run__owner=user))
    return counts


def purge_expired(*, days: int | None = None) -> dict[str, int]:
    cutoff = timezone.now() - timedelta(days=days or settings.CORDON_RETENTION_DAYS)
    counts = {"datasets": 0, "logs": 0, "outputs": 0}
    for dataset in Dataset.objects.filter(created_at__lt=cutoff):
        dataset_delete(dataset=dataset)
        counts["datasets"] += 1
    for run in Run.objects.filter(finished_at__lt=cutoff, logs_purged=False):
        counts["logs"] += _purge_run_files(run)
    counts["outputs"] = _purge_outputs(RunOutputFile.objects.filter(run__finished_at__lt=cutoff))
    counts["outputs"] += cell_files_purge(RunCell.objects.filter(run__finished_at__lt=cutoff))
    return counts


def _purge_run_files(run: Run) -> int:
    log_delete(run_id=run.id)
    Run.objects.filter(id=run.id).update(logs_purged=True, code="", samples=[])
    return 1


def _purge_outputs(outputs: QuerySet[RunOutputFile]) -> int:
    count = 0
    for output in outputs.exclude(file=""):
        output.file.delete(save=False)
        RunOutputFile.objects.filter(id=output.id).update(file="")
        count += 1
    return count
