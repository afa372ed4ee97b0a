"""Every write Cordon makes: keyword-only, typed, each in one place. Views, the API, consumers
and tasks call these and stay thin."""

from __future__ import annotations

import hashlib
import logging
import secrets
import shutil
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files import File
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from playground.limits import LIMIT_FIELDS, limits_from_record, over_maximum
from playground.models import (
    ACTIVE_STATES,
    ApiToken,
    CleanupCheck,
    Dataset,
    Notebook,
    Run,
    RunEvent,
    RunOutputFile,
    RunState,
    WorkerHost,
)
from runner.files import SAFE_NAME
from runner.spec import RUNTIMES, Limits, Outcome, RunResult

log = logging.getLogger(__name__)
MAX_CODE_BYTES = 256 * 1024
# A worker host beats every minute; one not heard from for this long serves nothing.
WORKER_LIVE_S = 180


class ServiceError(Exception):
    """A refusal with a stable code, the field at fault and the HTTP status it maps to."""

    def __init__(self, code: str, message: str, *, field: str | None = None, status: int = 400):
        super().__init__(message)
        self.code, self.message, self.field, self.status = code, message, field, status


# --- datasets ---------------------------------------------------------------------------


def dataset_create(*, user: User, upload: UploadedFile) -> Dataset:
    name = upload.name or ""
    if "/" in name or "\\" in name or not SAFE_NAME.fullmatch(name):
        raise ServiceError(
            "unsafe_name", f"file name {name!r} is not allowed: letters, digits and ._+- only, no paths", field="file"
        )
    limit = settings.CORDON_DATASET_MAX_BYTES
    if upload.size is None or upload.size > limit:
        raise ServiceError(
            "too_large", f"the file is {upload.size} bytes; the maximum is {limit}", field="file", status=413
        )
    _check_storage_quota(user, upload.size)
    if Dataset.objects.filter(owner=user, name=name).exists():
        raise ServiceError("duplicate_name", f"you already have a dataset named {name!r}", field="file", status=409)
    digest = hashlib.sha256()
    head = b""
    for chunk in upload.chunks():
        digest.update(chunk)
        if len(head) < 4096:
            head += chunk[: 4096 - len(head)]
    upload.seek(0)
    dataset = Dataset(owner=user, name=name, size=upload.size, sha256=digest.hexdigest(), sniffed_type=sniff(head))
    dataset.file.save(secrets.token_hex(16), File(upload), save=False)
    try:
        with transaction.atomic():
            dataset.save()
    except IntegrityError:  # a parallel upload of the same name won the constraint
        dataset.file.delete(save=False)
        raise ServiceError(
            "duplicate_name", f"you already have a dataset named {name!r}", field="file", status=409
        ) from None
    return dataset


def sniff(head: bytes) -> str:
    """A coarse type from the first bytes only; user files are never parsed on the host."""
    if not head:
        return "empty"
    if b"\0" in head:
        return "binary"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        return "json"
    first = text.splitlines()[0] if text.splitlines() else ""
    if "," in first or "\t" in first:
        return "csv"
    return "text"


def dataset_delete(*, dataset: Dataset) -> None:
    dataset.file.delete(save=False)
    dataset.delete()


def _check_storage_quota(user: User, adding: int) -> None:
    used = (Dataset.objects.filter(owner=user).aggregate(total=Sum("size"))["total"] or 0) + (
        RunOutputFile.objects.filter(run__owner=user).exclude(file="").aggregate(total=Sum("size"))["total"] or 0
    )
    quota = settings.CORDON_QUOTA_STORAGE_BYTES
    if used + adding > quota:
        raise ServiceError(
            "quota_exceeded", f"storage quota: {used} of {quota} bytes used; this needs {adding} more", status=413
        )


# --- runs: submission -------------------------------------------------------------------


def run_create(
    *,
    user: User,
    runtime: str,
    code: str,
    dataset_ids: list[Any],
    output_ids: list[int] | None = None,
    limits: Limits | None = None,
    engine: str = "auto",
) -> Run:
    if runtime not in RUNTIMES:
        raise ServiceError(
            "unknown_runtime", f"runtime must be one of {', '.join(RUNTIMES)}", field="runtime", status=422
        )
    if len(code.encode()) > MAX_CODE_BYTES:
        raise ServiceError("code_too_large", f"code is over {MAX_CODE_BYTES} bytes", field="code", status=422)
    if engine not in ("auto", "namespace", "smolvm"):
        raise ServiceError("unknown_engine", "engine must be auto, namespace or smolvm", field="engine", status=422)
    limits = limits or Limits()
    check_limits(limits)
    datasets = list(Dataset.objects.filter(owner=user, id__in=dataset_ids))
    if len(datasets) != len(set(map(str, dataset_ids))):
        raise ServiceError(
            "dataset_not_found", "a dataset in dataset_ids does not exist", field="dataset_ids", status=404
        )
    outputs = list(RunOutputFile.objects.filter(run__owner=user, id__in=output_ids or []).exclude(file=""))
    if len(outputs) != len(set(output_ids or [])):
        raise ServiceError("output_not_found", "an output in output_ids does not exist", field="output_ids", status=404)
    names = [d.name for d in datasets] + [o.name.rsplit("/", 1)[-1] for o in outputs]
    if len(names) != len(set(names)):
        raise ServiceError("duplicate_input_name", "two inputs have the same name", field="dataset_ids", status=422)
    queue = choose_queue(engine)
    with transaction.atomic():
        # One submission of a user at a time, so the quota check and the insert cannot race:
        # a row lock on PostgreSQL; on SQLite the IMMEDIATE transaction already serialises.
        User.objects.select_for_update().get(pk=user.pk)
        _check_run_quotas(user)
        run = Run.objects.create(
            owner=user, runtime=runtime, code=code, limits=limits.to_json(), engine_requested=engine, queue=queue
        )
        run.datasets.set(datasets)
        run.input_outputs.set(outputs)
        _event(run, RunState.QUEUED)
        enqueue(run)
    return run


def check_limits(limits: Limits) -> None:
    """Every run's limits, new, rerun or retried, against the operator's maxima of today."""
    for field, message in over_maximum(limits):
        code = "invalid_limit" if "greater than 0" in message else "limit_over_maximum"
        raise ServiceError(code, message, field=field, status=422)


def live_engines() -> set[str]:
    """The engines that some worker host with a recent heartbeat serves."""
    recent = timezone.now() - timedelta(seconds=WORKER_LIVE_S)
    return {e for host in WorkerHost.objects.filter(heartbeat_at__gte=recent) for e in host.engines or []}


def choose_queue(engine: str) -> str:
    """The queue of an engine some live worker serves: auto prefers microVMs where a host has them.
    An engine asked for by name that no live host serves is refused here, not queued for ever."""
    live = live_engines()
    if engine == "auto":
        return "smolvm" if "smolvm" in live else "namespace"
    if engine not in live:
        serving = ", ".join(sorted(live)) or "none"
        raise ServiceError(
            "engine_unavailable", f"no live worker host serves the {engine} engine (served now: {serving}); "
            "submit with engine 'auto' or ask the operator", field="engine", status=503,
        )  # fmt: skip
    return engine


def enqueue(run: Run) -> None:
    """Send the run to its engine's queue once the row is committed. If the broker is down, this
    process sends it again every second until the broker takes it (and the reaper re-sends runs
    still queued long after, should this process die); a duplicate is harmless (claims are atomic)."""
    limits = limits_from_record(run.limits)
    # A hard time limit above the run's own deadline, boot and teardown included.
    time_limit = int(limits.wall_timeout_s + 180)
    run_id, queue = str(run.id), run.queue

    def send() -> None:
        Run.objects.filter(id=run_id).update(enqueued_at=timezone.now())
        if not _send(run_id, queue, time_limit):
            _unsent.add(run_id, queue, time_limit)

    transaction.on_commit(send)


def _send(run_id: str, queue: str, time_limit: int) -> bool:
    from playground.tasks import execute_run

    try:
        execute_run.apply_async(args=(run_id,), queue=queue, time_limit=time_limit, retry=False)
    except Exception:  # the broker is unreachable: sent again once it is back
        log.warning("could not enqueue run %s; sending it again when the broker is back", run_id, exc_info=True)
        return False
    return True


class _Unsent:
    """Runs whose task the broker refused, sent again from this process every RESEND_S until it
    takes them, so a run submitted while Redis is down starts as soon as Redis is back."""

    RESEND_S = 1.0

    def __init__(self) -> None:
        self._pending: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, run_id: str, queue: str, time_limit: int) -> None:
        with self._lock:
            self._pending[run_id] = (queue, time_limit)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="cordon-resend", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        from django.db import close_old_connections

        while True:
            time.sleep(self.RESEND_S)
            with self._lock:
                if not self._pending:
                    # Decided under the lock that `add` takes: a run added now starts a new thread.
                    self._thread = None
                    return
                pending = dict(self._pending)
            ids = Run.objects.filter(id__in=list(pending), state=RunState.QUEUED).values_list("id", flat=True)
            queued = {str(i) for i in ids}
            for run_id, (queue, time_limit) in pending.items():
                if run_id not in queued or _send(run_id, queue, time_limit):
                    with self._lock:
                        self._pending.pop(run_id, None)
            close_old_connections()


_unsent = _Unsent()


def requeue_stale(*, older_than_s: float = 60.0) -> int:
    """Send again the runs still queued long after they were sent (a lost message or broker)."""
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    stale = list(Run.objects.filter(state=RunState.QUEUED, cancel_requested=False, enqueued_at__lt=cutoff))
    for run in stale:
        enqueue(run)
    return len(stale)


def reject_unserved(*, older_than_s: float | None = None) -> int:
    """Finish as rejected_capacity the runs queued longer than the wait bound on a queue that no
    live worker host serves: nothing ran, nothing is charged, the quota slot is free again."""
    wait_s = settings.CORDON_QUEUE_WAIT_S if older_than_s is None else older_than_s
    live = live_engines()
    cutoff = timezone.now() - timedelta(seconds=wait_s)
    waiting = Run.objects.filter(state=RunState.QUEUED, created_at__lt=cutoff).exclude(queue__in=live)
    rejected = 0
    for run in waiting:
        reason = f"no live worker host served the {run.queue} engine within {wait_s:g} s"
        finished = Run.objects.filter(id=run.id, state=RunState.QUEUED).update(
            state=RunState.FINISHED, outcome=Outcome.REJECTED_CAPACITY.value, charged=False, reason=reason,
            error_code="engine_unavailable", error_message=reason, finished_at=timezone.now(),
        )  # fmt: skip
        if finished:
            _event(run, RunState.FINISHED, {"outcome": Outcome.REJECTED_CAPACITY.value, "reason": reason})
            rejected += 1
    return rejected


def _check_run_quotas(user: User) -> None:
    active = Run.objects.filter(owner=user, state__in=ACTIVE_STATES).count()
    if active >= settings.CORDON_QUOTA_CONCURRENT_RUNS:
        raise ServiceError(
            "quota_exceeded", f"{active} runs are active; at most {settings.CORDON_QUOTA_CONCURRENT_RUNS} at once",
            status=429,
        )  # fmt: skip
    hour = Run.objects.filter(owner=user, created_at__gte=timezone.now() - timedelta(hours=1), retry_of=None).count()
    if hour >= settings.CORDON_QUOTA_RUNS_PER_HOUR:
        raise ServiceError(
            "quota_exceeded", f"{hour} runs in the last hour; at most {settings.CORDON_QUOTA_RUNS_PER_HOUR}", status=429
        )


def run_cancel(*, run: Run, by: User) -> Run:
    """Queued runs end at once; running ones are stopped by their worker within a poll."""
    finished = Run.objects.filter(id=run.id, state=RunState.QUEUED).update(
        state=RunState.FINISHED, outcome=Outcome.CANCELLED.value, charged=False, cancel_requested=True,
        reason="cancelled before it started", finished_at=timezone.now(),
    )  # fmt: skip
    if finished:
        _event(run, RunState.FINISHED, {"outcome": "cancelled", "by": by.get_username()})
    else:
        Run.objects.filter(id=run.id, state__in=ACTIVE_STATES).update(cancel_requested=True)
        RunEvent.objects.create(run=run, state="cancel_requested", detail={"by": by.get_username()})
    run.refresh_from_db()
    return run


def run_rerun(*, run: Run, by: User) -> Run:
    new = run_create(
        user=run.owner, runtime=run.runtime, code=run.code, dataset_ids=[d.id for d in run.datasets.all()],
        output_ids=[o.id for o in run.input_outputs.all()], limits=limits_from_record(run.limits),
        engine=run.engine_requested,
    )  # fmt: skip
    Run.objects.filter(id=new.id).update(rerun_of=run)
    new.refresh_from_db()
    return new


# --- runs: execution (called by the worker) ---------------------------------------------


def run_claim(*, run_id: str, worker: str) -> Run | None:
    """queued -> admitted, by exactly one worker (a conditional update; the row count decides)."""
    lease = timezone.now() + timedelta(seconds=settings.CORDON_LEASE_S)
    claimed = Run.objects.filter(id=run_id, state=RunState.QUEUED, cancel_requested=False).update(
        state=RunState.ADMITTED, worker_host=worker, started_at=timezone.now(), lease_expires_at=lease
    )
    if not claimed:
        return None
    run = Run.objects.get(id=run_id)
    _event(run, RunState.ADMITTED, {"worker": worker})
    return run


def run_advance(*, run: Run, state: str, detail: dict[str, Any] | None = None) -> bool:
    """Record a state change if the run is still active (a conditional update)."""
    changed = Run.objects.filter(id=run.id, state__in=ACTIVE_STATES).exclude(state=state).update(state=state)
    if changed:
        _event(run, state, detail or {})
    return bool(changed)


def run_heartbeat(*, run: Run, samples: list[list[float | None]] | None = None) -> bool:
    """Extend the lease; returns whether a cancel was requested."""
    lease = timezone.now() + timedelta(seconds=settings.CORDON_LEASE_S)
    update: dict[str, Any] = {"lease_expires_at": lease}
    if samples is not None:
        update["samples"] = samples
    Run.objects.filter(id=run.id, state__in=ACTIVE_STATES).update(**update)
    return Run.objects.filter(id=run.id, cancel_requested=True).exists()


def run_finish(*, run: Run, result: RunResult, exported: Path | None, samples: list[list[float | None]]) -> Run:
    """Write the final record (only if the run is still active: a reaper may have finished it)."""
    outcome = result.outcome
    values: dict[str, Any] = {
        "state": RunState.FINISHED,
        "outcome": outcome.value,
        "reason": result.reason[:500],
        "charged": outcome.charged,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "wall_s": result.wall_s,
        "cpu_s": result.cpu_s,
        "peak_memory_bytes": result.peak_memory_bytes,
        "stdout_bytes": result.stdout_bytes,
        "stderr_bytes": result.stderr_bytes,
        "stdout_truncated": result.stdout_truncated,
        "stderr_truncated": result.stderr_truncated,
        "samples": samples,
        "image_name": result.image.name if result.image else "",
        "image_digest": result.image.digest if result.image else "",
        "engine": result.engine or "",
        "engine_version": result.engine_version or "",
        "engine_note": result.engine_note[:500],
        "isolation": result.isolation or "",
        "sandbox_id": result.sandbox_id or "",
        "error_code": result.error.code if result.error else "",
        "error_message": result.error.message if result.error else "",
        "cleanup_ok": result.cleanup_ok,
        "finished_at": timezone.now(),
        "lease_expires_at": None,
    }
    with transaction.atomic():
        if not Run.objects.filter(id=run.id, state__in=ACTIVE_STATES).update(**values):
            return Run.objects.get(id=run.id)
        CleanupCheck.objects.bulk_create(
            [CleanupCheck(run=run, name=c.name, ok=c.ok, detail=c.detail[:1000]) for c in result.cleanup]
        )
        for output in result.outputs:
            record = RunOutputFile(run=run, name=output.name, size=output.size, sha256=output.sha256)
            source = exported / output.name if exported else None
            if source is not None and source.is_file():
                with open(source, "rb") as handle:
                    record.file.save(secrets.token_hex(16), File(handle), save=False)
            record.save()
        _event(run, RunState.FINISHED, {"outcome": outcome.value, "reason": result.reason[:200]})
    run.refresh_from_db()
    if outcome is Outcome.SANDBOX_ERROR and result.error is not None and result.error.retryable:
        retry_once(run=run)
    return run


def retry_once(*, run: Run) -> Run | None:
    """A sandbox error is not the user's: run it once more, as a new, linked run."""
    if run.retry_count >= 1 or run.cancel_requested:
        return None
    try:  # the same check as a new run's: the maxima may have been lowered since
        check_limits(limits_from_record(run.limits))
    except ServiceError as exc:
        _event(run, "retry_refused", {"reason": exc.message})
        return None
    retry = Run.objects.create(
        owner=run.owner, runtime=run.runtime, code=run.code, limits=run.limits, engine_requested=run.engine_requested,
        queue=run.queue, retry_of=run, retry_count=run.retry_count + 1,
    )  # fmt: skip
    retry.datasets.set(run.datasets.all())
    retry.input_outputs.set(run.input_outputs.all())
    _event(retry, RunState.QUEUED, {"retry_of": str(run.id)})
    enqueue(retry)
    return retry


def run_fail_lost(*, run: Run) -> bool:
    """Finish a run whose worker stopped renewing its lease: sandbox_error, not charged."""
    now = timezone.now()
    lost = Run.objects.filter(id=run.id, state__in=ACTIVE_STATES[1:], lease_expires_at__lt=now).update(
        state=RunState.FINISHED, outcome=Outcome.SANDBOX_ERROR.value, charged=False, error_code="lost_worker",
        error_message=f"the worker on {run.worker_host or 'an unknown host'} stopped renewing its lease",
        reason="lost_worker: the worker running it died", finished_at=now, lease_expires_at=None,
    )  # fmt: skip
    if lost:
        _event(run, RunState.FINISHED, {"outcome": "sandbox_error", "error": "lost_worker"})
        run.refresh_from_db()
        retry_once(run=run)
    return bool(lost)


def _event(run: Run, state: str, detail: dict[str, Any] | None = None) -> RunEvent:
    return RunEvent.objects.create(run=run, state=state, detail=detail or {})


# --- notebooks -------------------------------------------------------------------------

MAX_CELLS = 50
LIMIT_NAMES = frozenset(f.name for f in LIMIT_FIELDS)


def notebook_save(*, user: User, cells: list[dict[str, Any]]) -> Notebook:
    """Replace the user's cells (autosave). Each cell is checked; nothing half-valid is stored."""
    if len(cells) > MAX_CELLS:
        raise ServiceError("too_many_cells", f"at most {MAX_CELLS} cells", field="cells", status=422)
    clean = []
    for index, cell in enumerate(cells):
        if cell.get("runtime") not in RUNTIMES:
            raise ServiceError("unknown_runtime", f"cell {index + 1}: runtime must be python or node",
                               field=f"cells.{index}.runtime", status=422)  # fmt: skip
        code = str(cell.get("code", ""))
        if len(code.encode()) > MAX_CODE_BYTES:
            raise ServiceError("code_too_large", f"cell {index + 1}: code is over {MAX_CODE_BYTES} bytes",
                               field=f"cells.{index}.code", status=422)  # fmt: skip
        limits = Limits(**{k: v for k, v in dict(cell.get("limits") or {}).items() if k in LIMIT_NAMES})
        for field, message in over_maximum(limits):
            raise ServiceError("limit_over_maximum", f"cell {index + 1}: {message}", field=f"cells.{index}.{field}",
                               status=422)  # fmt: skip
        clean.append({
            "id": str(cell.get("id", ""))[:64], "runtime": cell["runtime"], "code": code,
            "limits": {k: v for k, v in dict(cell.get("limits") or {}).items() if k in LIMIT_NAMES},
            "dataset_ids": [str(x) for x in cell.get("dataset_ids") or []][:64],
            "output_ids": [int(x) for x in cell.get("output_ids") or []][:64],
            "last_run": str(cell["last_run"]) if cell.get("last_run") else None,
        })  # fmt: skip
    notebook, _ = Notebook.objects.update_or_create(owner=user, defaults={"cells": clean})
    return notebook


# --- logs -------------------------------------------------------------------------------


def log_path(run_id: Any, stream: str) -> Path:
    return Path(settings.MEDIA_ROOT) / "logs" / str(run_id) / f"{stream}.log"


def log_append(*, run_id: Any, stream: str, offset: int, data: bytes) -> None:
    """Write a chunk at its byte offset (idempotent for a replayed chunk)."""
    path = log_path(run_id, stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "r+b" if path.exists() else "wb") as handle:
        handle.seek(offset)
        handle.write(data)


# --- hosts, tokens, retention -----------------------------------------------------------


def worker_register(*, name: str, engines: list[str], doctor: dict[str, Any]) -> WorkerHost:
    host, _ = WorkerHost.objects.update_or_create(
        name=name, defaults={"engines": engines, "doctor": doctor, "heartbeat_at": timezone.now()}
    )
    return host


def token_create(*, user: User, name: str = "") -> str:
    token = "cdn_" + secrets.token_urlsafe(32)
    ApiToken.objects.create(
        user=user, name=name, prefix=token[:12], key_hash=hashlib.sha256(token.encode()).hexdigest()
    )
    return token


def token_user(*, token: str) -> User | None:
    digest = hashlib.sha256(token.encode()).hexdigest()
    found = ApiToken.objects.select_related("user").filter(key_hash=digest, user__is_active=True).first()
    if found is None:
        return None
    ApiToken.objects.filter(id=found.id).update(last_used_at=timezone.now())
    return found.user


def purge_user_data(*, user: User) -> dict[str, int]:
    """Delete a user's datasets, logs and outputs; run metadata and audits stay."""
    counts = {"datasets": 0, "logs": 0, "outputs": 0}
    for dataset in Dataset.objects.filter(owner=user):
        dataset_delete(dataset=dataset)
        counts["datasets"] += 1
    for run in Run.objects.filter(owner=user, logs_purged=False).exclude(state__in=ACTIVE_STATES):
        counts["logs"] += _purge_run_files(run)
    counts["outputs"] = _purge_outputs(RunOutputFile.objects.filter(run__owner=user))
    return counts


def purge_expired(*, days: int | None = None) -> dict[str, int]:
    cutoff = timezone.now() - timedelta(days=days or settings.CORDON_RETENTION_DAYS)
    counts = {"datasets": 0, "logs": 0, "outputs": 0}
    for dataset in Dataset.objects.filter(created_at__lt=cutoff):
        dataset_delete(dataset=dataset)
        counts["datasets"] += 1
    old = Run.objects.filter(Q(finished_at__lt=cutoff), logs_purged=False)
    for run in old:
        counts["logs"] += _purge_run_files(run)
    counts["outputs"] = _purge_outputs(RunOutputFile.objects.filter(run__finished_at__lt=cutoff))
    return counts


def _purge_run_files(run: Run) -> int:
    directory = log_path(run.id, "stdout").parent
    if directory.exists():
        shutil.rmtree(directory)
    Run.objects.filter(id=run.id).update(logs_purged=True, code="", samples=[])
    return 1


def _purge_outputs(outputs: Any) -> int:
    count = 0
    for output in outputs.exclude(file=""):
        output.file.delete(save=False)
        RunOutputFile.objects.filter(id=output.id).update(file="")
        count += 1
    return count
