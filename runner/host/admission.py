"""Host capacity admission, shared by every supervisor process on the host.

A JSON ledger of reservations (slot, memory, vCPUs, owner pid) under a file lock. A slot
is also the run's sandbox uid offset, so concurrent runs never share a host uid. Entries
whose owner process died are reclaimed on every call.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from runner.config import host_slots
from runner.env import env_float, env_int
from runner.spec import Outcome, RunnerError


@dataclass(frozen=True)
class Capacity:
    slots: int
    memory_mib: int
    cpus: float
    wait_s: float

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Capacity:
        env = os.environ if environ is None else environ
        total_mib = psutil.virtual_memory().total // (1024 * 1024)
        cores = os.cpu_count() or 1
        return cls(
            slots=host_slots(env),
            memory_mib=env_int("CORDON_MEMORY_BUDGET_MIB", total_mib // 2, minimum=64, environ=env),
            cpus=env_float("CORDON_CPU_BUDGET", float(cores * 2), minimum=0.1, environ=env),
            wait_s=env_float("CORDON_ADMISSION_WAIT_S", 30.0, minimum=0.0, environ=env),
        )


NO_SLOT = -1  # a reservation that is not a run's holds no sandbox slot
# The longest pause between two tries of a waiting run: room given back (a run's end, an idle ready
# sandbox's yield: runner.ready) is taken within this.
WAIT_STEP_MAX_S = 0.1
# How often a run still waiting asks again for idle room to be given back (what was busy at its first
# ask, a warm base being built, may be idle by now).
ASK_AGAIN_S = 5.0


@dataclass(frozen=True)
class Reservation:
    run_id: str
    slot: int
    memory_mib: int
    cpus: float
    pid: int
    pid_started: float


class Admission:
    def __init__(self, state_dir: Path, capacity: Capacity):
        self.state_dir = state_dir
        self.capacity = capacity
        state_dir.mkdir(parents=True, exist_ok=True)
        self._ledger = state_dir / "admission.json"
        self._waiting_dir = state_dir / "waiting"

    def acquire(
        self,
        run_id: str,
        *,
        memory_mib: int,
        cpus: float,
        cancelled: Callable[[], bool] = lambda: False,
        take: str | None = None,
        on_wait: Callable[[], None] = lambda: None,
    ) -> Reservation:
        """Reserve room for a run, waiting with backoff up to the bound; else rejected_capacity.
        With `take`, the run takes over that reservation of this process's (a ready sandbox's):
        its slot, and its memory counted as free for the run's. `on_wait` is called when the first
        try finds no room, and again every ASK_AGAIN_S while the run waits (what the host holds
        idle, ready sandboxes and warm bases, is given back)."""
        if memory_mib > self.capacity.memory_mib or cpus > self.capacity.cpus:
            raise RunnerError(
                "exceeds_host_capacity",
                f"the run needs {memory_mib} MiB and {cpus:g} vCPUs; this host admits at most "
                f"{self.capacity.memory_mib} MiB and {self.capacity.cpus:g} vCPUs in all",
                outcome=Outcome.REJECTED_CAPACITY,
            )
        deadline = time.monotonic() + self.capacity.wait_s
        delay = 0.02
        asked_at: float | None = None
        try:
            while True:
                with self._locked() as entries:
                    reservation = self._try(entries, run_id, memory_mib, cpus, take=take)
                    if reservation is not None:
                        return reservation
                    in_use = sum(e.memory_mib for e in entries)
                    slots_used = sum(1 for e in entries if e.slot != NO_SLOT)  # warm bases: memory, no slot
                if asked_at is None:
                    self._mark_waiting(run_id)
                if asked_at is None or time.monotonic() - asked_at >= ASK_AGAIN_S:
                    asked_at = time.monotonic()
                    on_wait()
                self._wait(deadline, delay, cancelled, slots_used, in_use)
                delay = min(delay * 2, WAIT_STEP_MAX_S)
        finally:
            (self._waiting_dir / run_id).unlink(missing_ok=True)

    def _wait(self, deadline: float, delay: float, cancelled: Callable[[], bool], slots_used: int, in_use: int) -> None:
        """Sleep before the next try, or give up: past the bound, or cancelled."""
        if time.monotonic() >= deadline or cancelled():
            raise RunnerError(
                "no_capacity",
                f"no host capacity within {self.capacity.wait_s:g} s ({slots_used} of "
                f"{self.capacity.slots} slots and {in_use} of {self.capacity.memory_mib} MiB in use)",
                outcome=Outcome.REJECTED_CAPACITY,
                retryable=True,
            )
        time.sleep(delay)

    def _mark_waiting(self, run_id: str) -> None:
        """A run that waits for room says so (a file named after it, holding its process's pid):
        every process's idle ready sandboxes give theirs back (runner.ready) while one waits."""
        self._waiting_dir.mkdir(exist_ok=True)
        (self._waiting_dir / run_id).write_text(str(os.getpid()))

    def waiting(self) -> int:
        """How many runs of live processes wait for room on this host now."""
        count = 0
        for entry in os.scandir(self._waiting_dir) if self._waiting_dir.is_dir() else ():
            try:
                os.kill(int(Path(entry.path).read_text()), 0)
                count += 1
            except ProcessLookupError:
                Path(entry.path).unlink(missing_ok=True)  # its process died waiting
            except (OSError, ValueError):
                continue
        return count

    def _try(
        self, entries: list[Reservation], run_id: str, memory_mib: int, cpus: float, *, take: str | None = None,
        keep_free_slots: int = 0, keep_free_mib: int = 0,
    ) -> Reservation | None:  # fmt: skip
        me = psutil.Process()
        taken = [e for e in entries if e.run_id == take and e.pid == me.pid] if take else []
        if take and not taken:
            raise RunnerError("ready_reservation_lost", f"{take} holds no reservation of this process", retryable=True)
        others = [e for e in entries if e not in taken]
        used_slots = {e.slot for e in others}
        free = [taken[0].slot] if taken else [s for s in range(self.capacity.slots) if s not in used_slots]
        if len(free) <= keep_free_slots:
            return None
        if sum(e.memory_mib for e in others) + memory_mib + keep_free_mib > self.capacity.memory_mib:
            return None
        if sum(e.cpus for e in others) + cpus > self.capacity.cpus + 1e-9:
            return None
        reservation = Reservation(run_id, free[0], memory_mib, cpus, me.pid, me.create_time())
        entries[:] = [*others, reservation]
        return reservation

    def try_acquire(
        self, owner: str, *, memory_mib: int, keep_free_slots: int, keep_free_mib: int
    ) -> Reservation | None:
        """A slot and memory for a ready sandbox, now or never (None), leaving at least
        `keep_free_slots` slots and `keep_free_mib` free for runs; no vCPUs (it is idle until a run
        takes it over)."""
        with self._locked() as entries:
            return self._try(
                entries, owner, memory_mib, 0.0, keep_free_slots=keep_free_slots, keep_free_mib=keep_free_mib
            )

    def hold(self, owner: str, *, memory_mib: int) -> Reservation:
        """Hold memory for something that is not a run (a warm base): no slot, no vCPUs, no wait;
        owned by this process, so it is reclaimed when this process dies."""
        with self._locked() as entries:
            in_use = sum(e.memory_mib for e in entries)
            if in_use + memory_mib > self.capacity.memory_mib:
                raise RunnerError(
                    "no_capacity",
                    f"{memory_mib} MiB more would pass the host's budget "
                    f"({in_use} of {self.capacity.memory_mib} MiB in use)",
                    outcome=Outcome.REJECTED_CAPACITY,
                )
            me = psutil.Process()
            held = Reservation(owner, NO_SLOT, memory_mib, 0.0, me.pid, me.create_time())
            entries[:] = [e for e in entries if e.run_id != owner] + [held]
            return held

    def release(self, run_id: str) -> None:
        with self._locked() as entries:
            entries[:] = [e for e in entries if e.run_id != run_id]

    def room_for(self, memory_mib: int) -> bool:
        """Whether `memory_mib` more fits in the budget now (advice: another process may take it first)."""
        return sum(e.memory_mib for e in self.peek()) + memory_mib <= self.capacity.memory_mib

    def holds(self, run_id: str) -> bool:
        with self._locked() as entries:
            return any(e.run_id == run_id for e in entries)

    def peek(self) -> list[Reservation]:
        """The ledger's live entries as last written, without its lock (advice only). A dead owner's
        entries are left out, as a locked call would drop them: on an idle host none may come for
        a long while, and a removed warm base's memory would look held until then."""
        try:
            return [e for e in self._read() if _alive(e)]
        except ValueError:  # never half-written (it is replaced whole), but advice may be wrong
            return []

    def active(self) -> list[Reservation]:
        with self._locked() as entries:
            return list(entries)

    @contextmanager
    def _locked(self) -> Iterator[list[Reservation]]:
        with open(self.state_dir / "admission.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stored = self._read()
            entries = [e for e in stored if _alive(e)]
            yield entries
            if entries != stored:
                tmp = self._ledger.with_suffix(".tmp")
                tmp.write_text(json.dumps([asdict(e) for e in entries]))
                tmp.replace(self._ledger)

    def _read(self) -> list[Reservation]:
        try:
            return [Reservation(**item) for item in json.loads(self._ledger.read_text())]
        except FileNotFoundError:
            return []


def _alive(entry: Reservation) -> bool:
    try:
        return abs(psutil.Process(entry.pid).create_time() - entry.pid_started) < 0.01
    except psutil.NoSuchProcess:
        return False
