"""Admission is shared by every process on the host, and says no within its bound."""

import itertools
import multiprocessing
import time
from pathlib import Path

import pytest

from runner.host.admission import NO_SLOT, Admission, Capacity
from runner.spec import Outcome, RunnerError


def test_slots_are_distinct_and_released(tmp_path: Path) -> None:
    admission = Admission(tmp_path, Capacity(slots=2, memory_mib=1000, cpus=4, wait_s=0))
    a = admission.acquire("a", memory_mib=100, cpus=1)
    b = admission.acquire("b", memory_mib=100, cpus=1)
    assert {a.slot, b.slot} == {0, 1}
    admission.release("a")
    assert admission.acquire("c", memory_mib=100, cpus=1).slot == a.slot


def test_no_room_within_the_wait_bound_is_rejected_capacity(tmp_path: Path) -> None:
    admission = Admission(tmp_path, Capacity(slots=4, memory_mib=300, cpus=4, wait_s=0.3))
    admission.acquire("a", memory_mib=200, cpus=1)
    started = time.monotonic()
    with pytest.raises(RunnerError) as caught:
        admission.acquire("b", memory_mib=200, cpus=1)
    assert caught.value.outcome is Outcome.REJECTED_CAPACITY and caught.value.code == "no_capacity"
    assert 0.3 <= time.monotonic() - started < 2.0


def test_a_waiting_run_asks_for_idle_room_at_once_and_again_while_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What was busy at the first ask (a warm base being built) may be idle a while later."""
    monkeypatch.setattr("runner.host.admission.ASK_AGAIN_S", 0.2)
    admission = Admission(tmp_path, Capacity(slots=4, memory_mib=300, cpus=4, wait_s=5))
    admission.acquire("held", memory_mib=200, cpus=1)
    asked: list[float] = []

    def on_wait() -> None:
        asked.append(time.monotonic())
        if len(asked) == 3:  # the third ask finds the holder idle, and it gives its room back
            admission.release("held")

    started = time.monotonic()
    assert admission.acquire("b", memory_mib=200, cpus=1, on_wait=on_wait).run_id == "b"
    assert len(asked) == 3 and asked[0] - started < 0.1
    assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(asked))


def test_a_run_larger_than_the_host_is_refused_at_once(tmp_path: Path) -> None:
    admission = Admission(tmp_path, Capacity(slots=4, memory_mib=300, cpus=4, wait_s=30))
    with pytest.raises(RunnerError, match="admits at most 300 MiB"):
        admission.acquire("a", memory_mib=400, cpus=1)


def _hold(state_dir: str, ready) -> None:
    Admission(Path(state_dir), Capacity(slots=1, memory_mib=1000, cpus=4, wait_s=0)).acquire(
        "held", memory_mib=1, cpus=1
    )
    ready.set()
    time.sleep(60)


def test_a_dead_processs_reservation_is_reclaimed(tmp_path: Path) -> None:
    ready = multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold, args=(str(tmp_path), ready))
    holder.start()
    assert ready.wait(10)
    admission = Admission(tmp_path, Capacity(slots=1, memory_mib=1000, cpus=4, wait_s=0))
    with pytest.raises(RunnerError):
        admission.acquire("mine", memory_mib=1, cpus=1)  # the other process holds the only slot
    assert [e.run_id for e in admission.peek()] == ["held"]
    holder.kill()
    holder.join()
    assert admission.peek() == []  # advice without the lock leaves the dead out too (runner.ready asks it)
    assert admission.acquire("mine", memory_mib=1, cpus=1).slot == 0


def test_a_warm_base_holds_memory_but_no_slot_and_is_held_within_the_budget(tmp_path: Path) -> None:
    admission = Admission(tmp_path, Capacity(slots=2, memory_mib=1000, cpus=4, wait_s=0.05))
    held = admission.hold("cordonbase-x", memory_mib=600)
    assert held.slot == NO_SLOT and held.cpus == 0.0
    assert admission.acquire("a", memory_mib=300, cpus=1).slot == 0  # the base took no slot
    with pytest.raises(RunnerError) as refused:
        admission.acquire("b", memory_mib=200, cpus=1)
    assert refused.value.code == "no_capacity"
    assert "(1 of 2 slots and 900 of 1000 MiB in use)" in refused.value.message
    with pytest.raises(RunnerError) as over:
        admission.hold("cordonbase-y", memory_mib=200)  # a second base past the budget: not built
    assert over.value.outcome is Outcome.REJECTED_CAPACITY
    assert [e.run_id for e in admission.active()] == ["cordonbase-x", "a"]
