"""The worker's side of a run: claim it (queued -> claimed; of several workers exactly one wins),
run it through the supervisor, record what it announces as it comes (the stored log, a state
row per phase, resource samples, live messages) and write the final record from its RunResult.
The Celery task calls `run_execute` with the run's id and nothing else."""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import InterfaceError, OperationalError, close_old_connections, connection, transaction
from django.utils import timezone

from playground.dbclock import db_after
from playground.egress import egress_problem, record_for_storage
from playground.environments import image_for, packages_elsewhere
from playground.live import ChunkBatcher, LivePublisher, final_message, state_message
from playground.logs import log_append, log_release, log_store
from playground.models import WORKER_STATES, CleanupCheck, Run, RunCell, RunOutputFile, RunState
from playground.services.cells import cell_finish_read, cell_finish_store
from playground.services.dispatch import task_time_limit_s
from playground.services.receipts import receipt_issue
from playground.services.runs import record_event, retry_once
from playground.storage import StorageIntegrityError, fetch_verified, save_verified
from runner.spec import BACKGROUND_CPU_WEIGHT, DEFAULT_CPU_WEIGHT, Outcome, Phase, RunnerError, RunResult, RunSpec
from runner.spec import CleanupCheck as RunnerCleanupCheck
from runner.supervisor import Supervisor

log = logging.getLogger(__name__)
HEARTBEAT_S = 3.0
# How long a finished run's record is tried again while the database is away (a restart, a
# network cut): past it the task fails, and the run is the reaper's (lost_worker, retried).
FINISH_RETRY_S = 120.0
DATABASE_AWAY = (OperationalError, InterfaceError)
CANCEL_POLL_S = 0.25
# How long after a phase's announcement its row is written, at most (a round of the supervisor's
# loop later); its live message goes at once.
PHASE_WRITE_S = 0.25
# A run's stored resource samples: [[t_s, cpu_s, memory_bytes, file_bytes], ...] (Run.samples),
# memory_bytes being the program's own and file_bytes what its files in /tmp and /output hold.
Samples = list[list[float | None]]
SAMPLES_MAX = 600


def run_execute(*, run_id: str, worker: str) -> Run | None:
    """Claim the run and take it to its recorded end; None if it was not claimable (another
    worker has it, it was cancelled or it is finished)."""
    run = run_claim(run_id=run_id, worker=worker)
    if run is None:
        return None
    events = RunEvents(run=run, live=LivePublisher(run.id))
    work = work_dir(run.id)
    with LeaseKeeper(run_id=run.id, bound_s=task_time_limit_s(run)):
        final = _run_claimed(run=run, events=events, work=work)
    events.live.send(final_message(final))
    if not events.live.flush():  # the task ends once its messages are out (or they are given up on)
        log.warning("run %s's live messages were not all sent within the flush's bound", run.id)
    return final


def _run_claimed(*, run: Run, events: RunEvents, work: Path) -> Run:
    """A claimed run, from staging its inputs to its recorded end; its work directory removed."""
    try:
        work.parent.mkdir(parents=True, exist_ok=True)
        work.mkdir(mode=0o700)  # the run's inputs and outputs: this process's alone
        (work / "inputs").mkdir()
        (work / "export").mkdir()
        result = egress_refused(run=run)
        if result is None:
            try:
                spec = run_spec(run=run, staging=work / "inputs")
            except (StorageIntegrityError, OSError) as exc:
                result = staging_failed(run=run, error=exc)
            else:
                # The events write every chunk to the stored log; the supervisor need not keep them.
                result = Supervisor.here().run(
                    spec, on_event=events, cancelled=events.cancelled, output_dir=work / "export",
                    run_id=run.id.hex[:16], keep_output=False,
                )  # fmt: skip
        final = _until_stored(
            lambda: run_finish(
                run=run, result=result, exported=work / "export", samples=events.samples.rows, phases=events.phases
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


class LeaseKeeper:
    """Renews a claimed run's lease every HEARTBEAT_S from a thread of its own, from the claim until
    its end is written, whatever the run's thread is doing meanwhile: fetching a large input from
    storage, verifying an image, waiting on the database in a callback. (RunEvents renews it too,
    but only when the supervisor calls back: a run whose staging outlasted the lease was reaped as
    lost_worker while its worker was alive.) Past `bound_s` it stops, as the Celery task's hard
    time limit stops the process: a thread stuck for good is then reaped like a dead worker."""

    def __init__(self, *, run_id: Any, bound_s: float) -> None:
        self.run_id, self.bound_s = run_id, bound_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"cordon-lease-{run_id}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        # Not waited for past a beat: one stuck connecting to the database must not hold up the
        # run's end (written by now; a late renewal finds it finished and changes nothing).
        self.thread.join(timeout=HEARTBEAT_S)

    def _loop(self) -> None:
        deadline = time.monotonic() + self.bound_s
        while not self.stop.wait(HEARTBEAT_S) and time.monotonic() < deadline:
            try:
                held = self._renew()
            except DATABASE_AWAY as exc:
                log.warning("the database is away; run %s's lease is renewed at the next beat (%s)", self.run_id, exc)
                continue
            except Exception:  # e.g. a read-only standby after a failover: the next beat tries again
                log.warning("run %s's lease could not be renewed; tried again at the next beat", self.run_id,
                            exc_info=True)  # fmt: skip
                continue
            if not held:  # finished meanwhile (by this worker, or by the reaper)
                return

    def _renew(self) -> int:
        try:
            return Run.objects.filter(id=self.run_id, state__in=WORKER_STATES).update(
                lease_expires_at=db_after(settings.CORDON_LEASE_S)
            )
        finally:
            close_old_connections()  # this thread's own, not held between beats (PostgreSQL's are counted)


def _until_stored(write: Callable[[], Run], *, bound_s: float = FINISH_RETRY_S) -> Run:
    """`write` (a run's end), tried again while the database is away, for up to `bound_s`: a run that
    finished during a database restart keeps its result (conditional writes: if the reaper finished
    it meanwhile, its end stands)."""
    deadline, wait = time.monotonic() + bound_s, 0.5
    while True:
        try:
            return write()
        except DATABASE_AWAY as exc:
            if time.monotonic() + wait > deadline:
                raise
            log.warning("the database is away (%s); the run's end is written again in %.1f s", exc, wait)
            connection.close()
            time.sleep(wait)
            wait = min(wait * 2, 8.0)


def work_root() -> Path:
    return Path(settings.DATA_DIR) / "work"


def work_dir(run_id: Any) -> Path:
    """Where the worker keeps a run's inputs fetched from storage and its exported outputs (this
    host's data directory; swept when the run is over: services/hosts.py)."""
    return work_root() / str(run_id)


def run_spec(*, run: Run, staging: Path) -> RunSpec:
    """What the supervisor is asked to do, from the run's row: its inputs fetched from storage into
    `staging` (or, from a local storage, used in place), each checked against its recorded sha256."""
    wanted = [(d.file.name, d.sha256, d.name) for d in run.datasets.all()]
    wanted += [(o.file.name, o.sha256, o.name.rsplit("/", 1)[-1]) for o in run.input_outputs.all()]
    wanted += [(f["path"], f.get("sha256", ""), f["name"]) for f in run.staged_files]
    inputs = [
        fetch_verified(default_storage, stored, sha256, staging / str(i))
        for i, (stored, sha256, _) in enumerate(wanted)
    ]
    cell = RunCell.objects.filter(run=run).select_related("state_from__cell").first()
    source = cell.state_from.cell if cell is not None and cell.state_from is not None else None
    state = None
    if source is not None and source.state_file:  # purged since the run was asked for: it says so
        state = fetch_verified(default_storage, source.state_file.name, source.state_sha256, staging / "state")
    return RunSpec(
        runtime=run.runtime,
        image=image_for(run.environment, run.runtime),
        script=run.code.encode(),
        stdin=run.stdin.encode(),
        args=tuple(run.args),
        limits=run.decoded_limits,
        inputs=tuple(inputs),
        input_names=tuple(name for _, _, name in wanted),
        engine=run.engine_requested,
        egress=tuple(run.egress),
        # Grading is nobody's screen: beside a person's run it takes a tenth of the CPU.
        cpu_weight=BACKGROUND_CPU_WEIGHT if run.is_grading else DEFAULT_CPU_WEIGHT,
        cell=cell is not None,
        state=state,
        packages_elsewhere=packages_elsewhere(run.environment or run.runtime) if cell is not None else "",
    )


def egress_refused(*, run: Run) -> RunResult | None:
    """The end of a run whose egress policy is no longer within its ceilings (one was lowered while
    it waited): rejected_input, before anything is staged. The supervisor checks the site's ceiling
    again itself; the course's only the web knows."""
    problem = egress_problem(run.egress, course=run.course)
    if problem is None:
        return None
    code, message = problem
    return RunResult(
        outcome=Outcome.REJECTED_INPUT, run_id=run.id.hex[:16], reason=f"{code}: {message}"[:500],
        error=RunnerError(code, message, outcome=Outcome.REJECTED_INPUT),
        cleanup=[RunnerCleanupCheck("no sandbox started", True, "the egress policy was refused before any sandbox")],
    )  # fmt: skip


def staging_failed(*, run: Run, error: Exception) -> RunResult:
    """The end of a run whose inputs could not be fetched from storage, or did not match their
    checksums: a sandbox error (the user's program never started), retried only if storage was away."""
    integrity = isinstance(error, StorageIntegrityError)
    code = "storage_integrity" if integrity else "storage_unavailable"
    message = f"an input could not be staged from storage: {error}"[:500]
    return RunResult(
        outcome=Outcome.SANDBOX_ERROR, run_id=run.id.hex[:16], reason=f"{code}: {message}",
        error=RunnerError(code, message, retryable=not integrity),
        cleanup=[RunnerCleanupCheck("no sandbox started", True, "staging failed before any sandbox was made")],
    )  # fmt: skip


# --- the run's state, from the worker -----------------------------------------------------


def run_claim(*, run_id: str, worker: str) -> Run | None:
    """queued -> claimed, by exactly one worker: a conditional update, and the row count decides.
    The run becomes `admitted` only when the supervisor's admission on this host says so."""
    now = timezone.now()
    with transaction.atomic():  # the claim and its event row commit together: one commit, not two
        claimed = Run.objects.filter(id=run_id, state=RunState.QUEUED, cancel_requested=False).update(
            state=RunState.CLAIMED, worker_host=worker, started_at=now,
            lease_expires_at=db_after(settings.CORDON_LEASE_S),
        )  # fmt: skip
        if not claimed:
            return None
        run = Run.objects.get(id=run_id)
        record_event(run=run, state=RunState.CLAIMED, detail={"worker": worker})
    return run


class PhaseRow(NamedTuple):
    """A phase the supervisor announced, and when: its row is written with the next ones."""

    state: RunState
    detail: dict[str, Any]
    at: datetime


def run_advance(*, run: Run, phases: Sequence[PhaseRow]) -> bool:
    """Record phases the supervisor announced, in one transaction, if a worker still holds the run
    (a conditional update: a run the reaper finished meanwhile stays finished). The run's row
    takes the last one's state."""
    if not phases:
        return False
    with transaction.atomic():  # the state and its event rows commit together
        changed = Run.objects.filter(id=run.id, state__in=WORKER_STATES).update(state=phases[-1].state)
        if changed:
            _record_phases(run, phases)
    return bool(changed)


def _record_phases(run: Run, phases: Sequence[PhaseRow]) -> None:
    """Each phase's event row, with the time it was announced (inside the caller's transaction)."""
    for phase in phases:
        record_event(run=run, state=phase.state, detail=phase.detail, at=phase.at)


def run_heartbeat(*, run: Run, samples: Samples | None = None) -> bool:
    """Extend the lease; returns whether a cancel was requested."""
    update: dict[str, Any] = {"lease_expires_at": db_after(settings.CORDON_LEASE_S)}
    if samples is not None:
        update["samples"] = samples
    Run.objects.filter(id=run.id, state__in=WORKER_STATES).update(**update)
    return Run.objects.filter(id=run.id, cancel_requested=True).exists()


def run_finish(
    *, run: Run, result: RunResult, exported: Path | None, samples: Samples, phases: Sequence[PhaseRow] = ()
) -> Run:
    """The one place a RunResult becomes rows: the run's final record, its cleanup checks and its
    output files, and the rows of `phases` not written yet (only if a worker still holds it: the
    reaper may have finished it)."""
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
        "peak_file_bytes": result.peak_file_bytes,
        "stdout_bytes": result.stdout_bytes,
        "stderr_bytes": result.stderr_bytes,
        "stdout_truncated": result.stdout_truncated,
        "stderr_truncated": result.stderr_truncated,
        "samples": samples,
        "timings": {name: round(seconds, 4) for name, seconds in result.timings.items()},
        "image_name": result.image.name if result.image else "",
        "image_digest": result.image.digest if result.image else "",
        "engine": result.engine or "",
        "engine_version": result.engine_version or "",
        "engine_note": result.engine_note[:500],
        "vm_start": result.vm_start or "",
        "sandbox_start": result.sandbox_start or "",
        "isolation": result.isolation or "",
        "sandbox_id": result.sandbox_id or "",
        "error_code": result.error.code if result.error else "",
        "error_message": result.error.message if result.error else "",
        "cleanup_ok": result.cleanup_ok,
        "egress_record": record_for_storage(result.egress),
        "finished_at": timezone.now(),
        "lease_expires_at": None,
    }
    finish = None
    if result.session:
        finish = cell_finish_read(result=result, exported=exported, limits=run.decoded_limits)
        if finish.clean_s is not None:  # the cleaning is the cell's: its record says what it took
            values["timings"]["clean_s"] = round(finish.clean_s, 4)
    log_store(run_id=run.id)  # before the end is committed: a reader who sees it finished finds the log
    with transaction.atomic():
        if not Run.objects.filter(id=run.id, state__in=WORKER_STATES).update(**values):
            log_release(run_id=run.id)
            return Run.objects.get(id=run.id)
        _record_phases(run, phases)
        CleanupCheck.objects.bulk_create(
            [CleanupCheck(run=run, name=c.name, ok=c.ok, detail=c.detail[:1000]) for c in result.cleanup]
        )
        for output in result.outputs:
            record = RunOutputFile(run=run, name=output.name, size=output.size, sha256=output.sha256)
            source = exported / output.name if exported else None
            if source is not None and source.is_file():
                try:
                    record.file.name = save_verified(default_storage, secrets.token_hex(16), source, output.sha256)
                except StorageIntegrityError as exc:  # listed, never served: its bytes are not the program's
                    record_event(run=run, state="output_not_stored", detail={"name": output.name, "error": str(exc)})
            record.save()
        if finish is not None:
            cell_finish_store(run=run, finish=finish, result=result, exported=exported)
        record_event(run=run, state=RunState.FINISHED, detail={"outcome": outcome.value, "reason": result.reason[:200]})
        run.refresh_from_db()
        if outcome is Outcome.SANDBOX_ERROR and result.error is not None and result.error.retryable:
            retry_once(run=run)  # in the same transaction: a reader sees the end and its retry together
        receipt_issue(run_id=run.id)  # last: the host's chain is locked only until the commit
    log_release(run_id=run.id)
    return run


# --- the supervisor's events ----------------------------------------------------------------


class SampleRows:
    """A run's samples as stored, at most `limit` rows however long it runs: when full, every
    second row goes, and from then on every second new one is kept, so the rows stay spread over
    the whole run (the supervisor's own spacing, dense at first, sparser later, is kept)."""

    def __init__(self, limit: int = SAMPLES_MAX) -> None:
        self.rows: Samples = []
        self.limit = limit
        self.stride = 1
        self.seen = 0

    def add(self, row: list[float | None]) -> None:
        if self.seen % self.stride == 0:
            self.rows.append(row)
            if len(self.rows) > self.limit:
                del self.rows[1::2]
                self.stride *= 2
        self.seen += 1


class RunEvents:
    """The supervisor's events of one run, as they come: chunks to the stored log and, batched,
    to the live group; phases to live `state` messages at once and to state rows PHASE_WRITE_S
    later, several in one transaction (a short run's phases are written with its end: four
    transactions fewer between a hello's start and its end); samples kept for the record. It also
    answers the supervisor's `cancelled` question (asked every round) from the run's row, renewing
    the lease as it goes, and sends a batch whose time has come."""

    def __init__(self, *, run: Run, live: LivePublisher, clock: Callable[[], float] = time.monotonic) -> None:
        self.run, self.live, self.clock = run, live, clock
        self.batcher = ChunkBatcher(clock=clock)
        self.samples = SampleRows()
        self.phases: list[PhaseRow] = []  # announced, their rows not written yet
        self.phases_due = 0.0
        self.cancel = False
        self.next_heartbeat = 0.0
        self.next_cancel_poll = 0.0

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "chunk":
            log_append(run_id=self.run.id, stream=event["stream"], offset=event["offset"], data=event["data"])
            self.live.send_all(self.batcher.add(event["stream"], event["offset"], event["data"]))
        elif kind == "state":
            self.live.send_all(self.batcher.flush())
            state = RunState.of(Phase(event["state"]))
            detail = {k: v for k, v in event.items() if k not in ("type", "state")}
            if not self.phases:
                self.phases_due = self.clock() + PHASE_WRITE_S
            self.phases.append(PhaseRow(state, detail, timezone.now()))
            self.live.send(state_message(state, at=time.time()))
        elif kind == "sample":
            self.samples.add([event["t"], event["cpu_s"], event["memory_bytes"], event["file_bytes"]])
        elif kind == "final":
            self.live.send_all(self.batcher.flush(final=True))
        self._maybe_heartbeat()

    def write_phases(self) -> None:
        """The rows of the phases announced so far (the run's row takes the last one's state)."""
        phases, self.phases = self.phases, []
        self._tolerant(lambda: run_advance(run=self.run, phases=phases), False)

    def cancelled(self) -> bool:
        self.live.send_all(self.batcher.due())
        now = self.clock()
        if self.phases and now >= self.phases_due:
            self.write_phases()
        if not self.cancel and now >= self.next_cancel_poll:
            self.next_cancel_poll = now + CANCEL_POLL_S
            asked = Run.objects.filter(id=self.run.id, cancel_requested=True).exists
            self.cancel = self._tolerant(asked, self.cancel)
            self._maybe_heartbeat()
        return self.cancel

    def _maybe_heartbeat(self) -> None:
        now = self.clock()
        if now >= self.next_heartbeat:
            self.next_heartbeat = now + HEARTBEAT_S
            beat = partial(run_heartbeat, run=self.run, samples=self.samples.rows)
            self.cancel = self._tolerant(beat, False) or self.cancel
            self.next_cancel_poll = now + CANCEL_POLL_S

    def _tolerant(self, call: Callable[[], bool], otherwise: bool) -> bool:
        """A database write or read the run can go on without (a phase's row, the lease renewal, the
        cancel poll): with the database away it is skipped, `otherwise` answered, and the
        connection dropped to be made again. The run goes on; if the database stays away past the
        lease, the reaper decides (lost_worker), as for a host that is gone."""
        try:
            return call()
        except DATABASE_AWAY as exc:
            log.warning("the database is away; run %s goes on without this write (%s)", self.run.id, exc)
            connection.close()
            return otherwise
