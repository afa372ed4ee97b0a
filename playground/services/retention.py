"""Retention: user data (datasets, logs, outputs, a notebook cell's displayed images counted as
outputs and its state as a snapshot) is deleted when old, each kind after its own days, or on
request; run metadata, receipts and audit rows stay (audit rows for CORDON_RETENTION_AUDIT_DAYS,
ten years by default). Every purge is recorded as a Purge row, an audit row itself."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from playground.logs import log_delete
from playground.models import ACTIVE_STATES, Dataset, Purge, Run, RunCell, RunOutputFile, StaffAccess
from playground.services.cells import cell_files_purge
from playground.services.datasets import dataset_delete


def purge_user_data(*, user: User, by: User | None = None) -> dict[str, int]:
    """Delete a user's datasets, logs and outputs (a cell's state counted with its outputs); run
    metadata and audits stay. The purge is itself recorded (Purge), with who asked."""
    counts = {"datasets": 0, "logs": 0, "outputs": 0}
    for dataset in Dataset.objects.filter(owner=user):
        dataset_delete(dataset=dataset)
        counts["datasets"] += 1
    for run in Run.objects.filter(owner=user, logs_purged=False).exclude(state__in=ACTIVE_STATES):
        counts["logs"] += _purge_run_files(run)
    counts["outputs"] = _purge_outputs(RunOutputFile.objects.filter(run__owner=user))
    counts["outputs"] += cell_files_purge(RunCell.objects.filter(run__owner=user))
    Purge.objects.create(kind="user", owner_username=user.get_username(), by=by, counts=counts)
    return counts


def purge_expired(*, days: int | None = None) -> dict[str, int]:
    """Delete what is older than its kind's retention (CORDON_RETENTION: logs, outputs, snapshots
    (a notebook cell's state), datasets, audit rows), or than `days` for every kind but audit rows.
    Run metadata and receipts are never deleted here. Each purge that deleted anything is recorded."""
    now = timezone.now()
    kept = settings.CORDON_RETENTION
    cutoff = {kind: now - timedelta(days=days or kept[kind]) for kind in kept}
    cutoff["audit"] = now - timedelta(days=kept["audit"])
    counts = {"datasets": 0, "logs": 0, "outputs": 0, "snapshots": 0, "audit": 0}
    for dataset in Dataset.objects.filter(created_at__lt=cutoff["datasets"]):
        dataset_delete(dataset=dataset)
        counts["datasets"] += 1
    for run in Run.objects.filter(finished_at__lt=cutoff["logs"], logs_purged=False):
        counts["logs"] += _purge_run_files(run)
    counts["outputs"] = _purge_outputs(RunOutputFile.objects.filter(run__finished_at__lt=cutoff["outputs"]))
    cells = RunCell.objects.filter
    counts["outputs"] += cell_files_purge(cells(run__finished_at__lt=cutoff["outputs"]), states=False)
    counts["snapshots"] = cell_files_purge(cells(run__finished_at__lt=cutoff["snapshots"]), displays=False)
    counts["audit"] = StaffAccess.objects.filter(at__lt=cutoff["audit"]).delete()[0]
    counts["audit"] += Purge.objects.filter(at__lt=cutoff["audit"]).delete()[0]
    if any(counts.values()):
        Purge.objects.create(kind="expired", counts=counts, older_than={k: v.isoformat() for k, v in cutoff.items()})
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
