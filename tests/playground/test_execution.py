"""The worker's side of a run, without a worker: one claim wins, `claimed` until the host's
admission says `admitted`, a claimed run can be cancelled or reaped, and a RunResult becomes
the run's record (its timings too) in one place."""

from __future__ import annotations

import itertools
import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import InterfaceError, close_old_connections
from django.test import Client
from django.utils import timezone

from playground.live import LiveMessage, LivePublisher
from playground.models import Run, RunEvent, RunState
from playground.services import execution
from playground.services import runs as run_services
from playground.services.accounts import token_create
from playground.services.execution import RunEvents, SampleRows, run_claim, run_finish, run_spec
from runner.spec import CleanupCheck, Limits, Outcome, RunResult
from tests.playground.conftest import in_parallel
from tests.playground.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


class RecordingPublisher(LivePublisher):
    def __init__(self, run_id: Any):
        super().__init__(run_id)
        self.sent: list[LiveMessage] = []

    def send(self, message: LiveMessage) -> None:
        self.sent.append(message)


def _queued_run(**fields: Any) -> Run:
    user: Any = UserFactory()
    return Run.objects.create(owner=user, runtime="python", code="print(1)", limits=Limits().to_json(), **fields)


def _states(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).values_list("state", flat=True))


def _claim_at_once(run_id: str, workers: int) -> list[str | None]:
    """Each worker's claim of the run, all let go together, each thread on its own connection:
    the worker's name where its claim won, None where it lost."""

    def claim(index: int) -> str | None:
        claimed = run_claim(run_id=run_id, worker=f"worker-{index}")
        return None if claimed is None else claimed.worker_host

    return in_parallel(workers, claim, timeout_s=60)


def test_of_two_workers_claiming_one_run_at_once_exactly_one_wins() -> None:
    for _ in range(5):
        run = _queued_run()
        winners = [w for w in _claim_at_once(str(run.id), 2) if w is not None]
        assert len(winners) == 1, winners
        run.refresh_from_db()
        assert (run.state, run.worker_host) == (RunState.CLAIMED, winners[0])
        assert _states(run) == ["claimed"]


def test_a_claimed_run_is_admitted_only_when_the_supervisor_says_its_host_has_room() -> None:
    run = _queued_run()
    claimed = run_claim(run_id=str(run.id), worker="here")
    assert claimed is not None and claimed.state == RunState.CLAIMED
    assert run_claim(run_id=str(run.id), worker="there") is None  # claimed once only
    live = RecordingPublisher(run.id)
    events = RunEvents(run=claimed, live=live)
    events({"type": "state", "state": "admitted", "slot": 3})
    events.write_phases()
    run.refresh_from_db()
    assert run.state == RunState.ADMITTED
    admitted = RunEvent.objects.get(run=run, state="admitted")
    assert admitted.detail == {"slot": 3}
    assert [(m["type"], m.get("state")) for m in live.sent] == [("state", "admitted")]


def test_a_phase_is_sent_live_at_once_and_its_row_written_at_the_first_round_past_the_delay(
    redis_server: Any,
) -> None:
    run = _queued_run()
    claimed = run_claim(run_id=str(run.id), worker="here")
    assert claimed is not None
    now = [100.0]
    live = RecordingPublisher(run.id)
    events = RunEvents(run=claimed, live=live, clock=lambda: now[0])
    events.next_heartbeat = events.next_cancel_poll = 1e9  # this test's rounds ask the row nothing else
    before = timezone.now()
    events({"type": "state", "state": "admitted", "slot": 0})
    events({"type": "state", "state": "starting"})
    assert [m.get("state") for m in live.sent] == ["admitted", "starting"]
    now[0] += execution.PHASE_WRITE_S / 2
    events.cancelled()
    run.refresh_from_db()
    assert (run.state, _states(run)) == (RunState.CLAIMED, ["claimed"])  # not yet: one transaction for both
    now[0] += execution.PHASE_WRITE_S
    events.cancelled()
    run.refresh_from_db()
    assert (run.state, _states(run)) == (RunState.STARTING, ["claimed", "admitted", "starting"])
    written = RunEvent.objects.get(run=run, state="admitted").at
    assert before <= written <= RunEvent.objects.get(run=run, state="starting").at  # when announced
    events({"type": "state", "state": "running"})
    result = RunResult(outcome=Outcome.SUCCEEDED, run_id="r", exit_code=0, cleanup=[CleanupCheck("staging", True, "")])
    final = run_finish(run=claimed, result=result, exported=None, samples=[], phases=events.phases)
    assert (final.state, _states(run)) == (RunState.FINISHED, ["claimed", "admitted", "starting", "running",
                                                               "finished"])  # fmt: skip


def test_a_claimed_run_waiting_for_admission_is_cancelled_through_its_worker() -> None:
    run = _queued_run()
    claimed = run_claim(run_id=str(run.id), worker="here")
    assert claimed is not None
    events = RunEvents(run=claimed, live=RecordingPublisher(run.id))
    assert events.cancelled() is False
    after = run_services.run_cancel(run=claimed, by=claimed.owner)
    assert (after.state, after.cancel_requested) == (RunState.CLAIMED, True)
    events.next_cancel_poll = 0.0  # the next round asks the row again
    assert events.cancelled() is True


def test_cancel_records_an_event_only_when_it_changes_the_run() -> None:
    running = _queued_run()
    claimed = run_claim(run_id=str(running.id), worker="here")
    assert claimed is not None
    for _ in range(3):  # a page's Stop pressed three times: one request to stop
        run_services.run_cancel(run=claimed, by=claimed.owner)
    assert _states(running) == ["claimed", "cancel_requested"]
    queued = _queued_run()
    for _ in range(3):
        after = run_services.run_cancel(run=queued, by=queued.owner)
    assert (after.state, after.outcome) == (RunState.FINISHED, "cancelled")
    assert _states(queued) == ["finished"]
    done = _queued_run(state=RunState.FINISHED, outcome="succeeded")
    after = run_services.run_cancel(run=done, by=done.owner)
    assert (after.outcome, after.cancel_requested) == ("succeeded", False)
    assert _states(done) == []


@pytest.mark.usefixtures("no_worker")  # no reaper but the test's
def test_a_claimed_run_whose_worker_stopped_renewing_its_lease_is_reaped(redis_server: Any) -> None:
    run = _queued_run()
    assert run_claim(run_id=str(run.id), worker="gone") is not None
    assert run_services.reap() == 0  # the lease still runs
    Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert run_services.reap() == 1
    run.refresh_from_db()
    assert (run.state, run.outcome, run.error_code, run.charged) == (RunState.FINISHED, "sandbox_error",
                                                                     "lost_worker", False)  # fmt: skip
    [retry] = run.retries.all()  # and retried once, as a new run
    assert retry.retry_count == 1


@pytest.mark.images
@pytest.mark.usefixtures("no_worker")  # no reaper but the test's
def test_a_run_whose_staging_outlasts_the_lease_keeps_it_and_is_not_reaped(
    redis_server: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease is renewed from the claim, not only when the supervisor calls back: a run whose
    inputs take longer than the lease to stage (a large dataset from remote storage) is not
    reaped as lost_worker while its worker is alive. A reaper asks every 0.2 s meanwhile."""
    settings.CORDON_LEASE_S = 2
    monkeypatch.setattr(execution, "HEARTBEAT_S", 0.25)
    staged = execution.run_spec

    def slow_staging(**kwargs: Any) -> Any:
        time.sleep(5.0)  # two and a half leases, with no callback from the supervisor (it has not started)
        return staged(**kwargs)

    monkeypatch.setattr(execution, "run_spec", slow_staging)
    run = _queued_run()
    done = threading.Event()
    reaped: list[int] = []

    def reaper() -> None:
        try:
            while not done.wait(0.2):
                reaped.append(run_services.reap())
        finally:
            close_old_connections()

    watching = threading.Thread(target=reaper)
    watching.start()
    try:
        final = execution.run_execute(run_id=str(run.id), worker="here")
    finally:
        done.set()
        watching.join()
    assert final is not None
    assert (final.outcome, final.error_code) == ("succeeded", ""), final.reason
    assert len(reaped) >= 20 and sum(reaped) == 0, reaped
    assert not run.retries.exists()


@pytest.mark.usefixtures("no_worker")  # no reaper but the test's
def test_a_lease_keeper_stops_at_its_bound_and_a_run_stuck_past_it_is_reaped(
    redis_server: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.CORDON_LEASE_S = 1
    monkeypatch.setattr(execution, "HEARTBEAT_S", 0.1)
    run = _queued_run()
    assert run_claim(run_id=str(run.id), worker="here") is not None
    with execution.LeaseKeeper(run_id=run.id, bound_s=2.0) as keeper:
        time.sleep(1.5)  # past the first lease, renewed within the bound: alive
        assert run_services.reap() == 0
        keeper.thread.join(timeout=5)  # the bound passed: it stopped renewing by itself
        assert not keeper.thread.is_alive()
        time.sleep(1.5)
        assert run_services.reap() == 1  # as a dead worker's would be
    run.refresh_from_db()
    assert (run.outcome, run.error_code) == ("sandbox_error", "lost_worker")


def test_the_result_becomes_the_record_with_its_timings_shown_in_the_run_detail(redis_server: Any) -> None:
    run = _queued_run()
    claimed = run_claim(run_id=str(run.id), worker="here")
    assert claimed is not None
    result = RunResult(
        outcome=Outcome.SUCCEEDED, run_id="r", exit_code=0, wall_s=0.5, cpu_s=0.25, stdout_bytes=2,
        cleanup=[CleanupCheck("staging", True, "removed")], engine="smolvm", isolation="vm",
        timings={"start_s": 0.123456, "boot_s": 1.5, "total_s": 2.25, "branch_s": 0.9, "mount_s": 0.3,
                 "refresh_s": 0.2, "clock_skew_s": 0.0},
        peak_memory_bytes=None, peak_file_bytes=4096, vm_start="branch",
    )  # fmt: skip
    finished = run_finish(run=claimed, result=result, exported=None, samples=[[0.5, 0.25, None, 4096]])
    assert (finished.state, finished.outcome, finished.cleanup_ok) == (RunState.FINISHED, "succeeded", True)
    phases = {"branch_s": 0.9, "mount_s": 0.3, "refresh_s": 0.2}
    assert finished.timings == {"start_s": 0.1235, "boot_s": 1.5, "total_s": 2.25, **phases, "clock_skew_s": 0.0}
    assert (finished.peak_memory_bytes, finished.peak_file_bytes) == (None, 4096)  # a VM's program: unknown
    assert run_finish(run=claimed, result=result, exported=None, samples=[]).samples == [[0.5, 0.25, None, 4096]]
    assert _states(run) == ["claimed", "finished"]  # written once: the second finish changed nothing
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_create(user=run.owner)}")
    shown = client.get(f"/api/runs/{run.id}").json()
    assert shown["timings"] == {"start_s": 0.1235, "boot_s": 1.5, "total_s": 2.25, **phases, "cold_s": None,
                                "staging_s": None, "handover_s": None, "clean_s": None}  # fmt: skip
    assert finished.vm_start == "branch" == shown["vm_start"]
    Run.objects.filter(id=run.id).update(timings={"start_s": 0.1, "total_s": 0.4})  # no boot phase
    assert client.get(f"/api/runs/{run.id}").json()["timings"] == {
        "start_s": 0.1, "boot_s": None, "total_s": 0.4, "branch_s": None, "mount_s": None, "refresh_s": None,
        "cold_s": None, "staging_s": None, "handover_s": None, "clean_s": None,
    }  # fmt: skip
    schema = client.get("/api/openapi.json").json()["components"]["schemas"]["TimingsOut"]
    assert set(schema["properties"]) == {
        "start_s", "boot_s", "total_s", "branch_s", "mount_s", "refresh_s", "cold_s", "staging_s", "handover_s",
        "clean_s",
    }  # fmt: skip
    assert json.dumps(shown)


def test_the_spec_takes_the_runs_limits_through_the_record_and_an_old_record_gets_todays_defaults(
    tmp_path: Path,
) -> None:
    run = _queued_run(engine_requested="namespace")
    Run.objects.filter(id=run.id).update(limits={"wall_timeout_s": 3.0, "memory_mib": 128})
    run.refresh_from_db()
    spec = run_spec(run=run, staging=tmp_path)
    assert spec.limits == Limits(wall_timeout_s=3.0, memory_mib=128)
    assert (spec.runtime, spec.script, spec.engine) == ("python", b"print(1)", "namespace")


def test_samples_are_stored_as_time_cpu_memory_and_file_bytes() -> None:
    run = _queued_run()
    claimed = run_claim(run_id=str(run.id), worker="here")
    assert claimed is not None
    events = RunEvents(run=claimed, live=RecordingPublisher(run.id))
    events({"type": "sample", "t": 0.05, "cpu_s": 0.01, "memory_bytes": 5 << 20, "file_bytes": 100 << 20})
    assert events.samples.rows == [[0.05, 0.01, 5 << 20, 100 << 20]]


def test_a_long_runs_samples_are_thinned_evenly_to_at_most_the_limit() -> None:
    rows = SampleRows(limit=600)
    for second in range(5000):
        rows.add([float(second), None, None, None])
    times = [float(row[0] or 0) for row in rows.rows]
    assert 300 <= len(times) <= 600
    [gap] = {b - a for a, b in itertools.pairwise(times)}  # evenly spread
    assert times[0] == 0.0 and times[-1] > 5000 - 1 - gap  # over the whole run, to its end


def test_a_short_runs_samples_are_all_kept() -> None:
    rows = SampleRows(limit=600)
    for index in range(40):
        rows.add([index * 0.05, None, None, None])
    assert len(rows.rows) == 40


def test_a_runs_end_is_written_again_while_the_database_is_away_and_given_up_past_the_bound() -> None:
    from django.db import OperationalError

    from playground.services.execution import _until_stored

    run = _queued_run()
    failures = iter([OperationalError("server closed the connection"), InterfaceError("connection already closed")])

    def write() -> Run:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return Run.objects.get(id=run.id)

    assert _until_stored(write).id == run.id  # after two failures, the third try writes it

    def never() -> Run:
        raise OperationalError("the database is down")

    with pytest.raises(OperationalError):
        _until_stored(never, bound_s=1.0)


def test_a_host_whose_clock_is_two_minutes_ahead_reaps_no_live_run_and_sees_the_others_live(
    monkeypatch: pytest.MonkeyPatch, redis_server: Any
) -> None:
    """Leases and heartbeats are the database's time, written and judged: a host clock stepped
    forward does not make another host's live run look lost, nor its heartbeat stale."""
    from playground.selectors.hosts import live_hosts
    from playground.services.hosts import worker_register

    run = _queued_run()
    assert run_claim(run_id=str(run.id), worker="other-host") is not None
    worker_register(name="other-host", engines=["namespace"], doctor={})
    ahead = timezone.now() + timedelta(minutes=2)
    monkeypatch.setattr(timezone, "now", lambda: ahead)  # this host's clock, stepped forward
    assert run_services.reap() == 0
    run.refresh_from_db()
    assert run.state == RunState.CLAIMED
    assert list(live_hosts().values_list("name", flat=True)) == ["other-host"]


def test_a_run_whose_maker_died_before_sending_it_is_sent_by_the_reaper(redis_server: Any) -> None:
    from playground.services.dispatch import requeue_stale

    made = timezone.now() - timedelta(minutes=2)
    orphan = _queued_run()  # committed, never sent: enqueued_at is empty
    Run.objects.filter(id=orphan.id).update(created_at=made)
    fresh = _queued_run()  # its maker may still be about to send it
    sent_long_ago = _queued_run(enqueued_at=made)
    assert requeue_stale() == 2
    for run in (orphan, fresh, sent_long_ago):
        run.refresh_from_db()
    assert orphan.enqueued_at is not None and orphan.enqueued_at > made
    assert fresh.enqueued_at is None
    assert sent_long_ago.enqueued_at is not None and sent_long_ago.enqueued_at > made
