"""Ready sandboxes: a run's setup done before the run is known, in a sandbox nothing has run in.

A supervisor process keeps, for each class of run it has met lately, one sandbox made in full and
waiting: its cgroups, its namespaces and mounts (/input, /tmp and /output empty), and the image's
interpreter started as the slot's uid, its usual modules imported, blocked on a private socket
(the image's /usr/lib/cordon/ready.py or ready.js, which documents the protocol). A run of that
class takes it over: the run's limits are written to its cgroups and areas, its inputs staged,
its script written, and the program handed over through the socket; only then does the deadline
start. From there the run is supervised, torn down and audited as any other. A ready sandbox
serves exactly one run (the audit says so, check by check), and its replacement is made in the
background, off every run's critical path, once no run of the process is under way, at the lowest
CPU weight (MAKER_CPU_WEIGHT: it takes only CPU no run wants; a run that waits for it raises it to
its own). A run waits for one being made only when that is sooner than starting cold
(_worth_waiting, from what making one and the class's runs took lately). Made beside a notebook's
running cells instead, one per cell, it was measured a loss on a 2-core host (12 cells back to
back: p50 546-694 ms, against 487 ms all cold that day): making a cell's sandbox (all its imports)
costs more than a cold cell.

Why it is as isolated as a cold one: it is the same sandbox, made by the same code (the engine's
prepare and start), merely earlier; the interpreter in it was started fresh by the image, not
forked from anything of the host's, so nothing of the pool's memory, fds or environment is in
it; the run's own environment, argv, stdin and limits reach it at hand-over, and the random
module's state is drawn again then. Its price: the memory and the admission slot it holds while
it waits (CORDON_READY=false turns it off).

The class of a run (ReadyClass): its image, runtime, the modules its interpreter imports ahead
("analyst": numpy, pandas, matplotlib, for a script that names pandas or matplotlib; "cell": the
analyst's and IPython, with the notebook cell program's shell made; "bare": none), what is fixed
when the interpreter starts (OpenMP's thread count, node's heap cap), and what the engine fixes
(Engine.ready_fit). A run with scoped egress (its network is joined before the sandbox is made)
starts cold, as does one its engine cannot take (a node run with stdin on `namespace`), and says
why.

On the smolvm engine no interpreter waits (Engine.ready_interpreter): a ready sandbox is a branch
of the warm base of the run's size, its areas mounted, its child waiting on the socket; the guest's
entropy and clock are refreshed at hand-over (runner.engines.smolvm.child.take_run).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any

from runner.engines.base import Engine, HandOverError, RunContext
from runner.host.locks import RunLock
from runner.images import ImageRef
from runner.ready.sandboxes import (
    ANALYST_WORDS,
    READY_PROGRAMS,
    STATUS_DIR,
    Maker,
    Ready,
    ReadyClass,
    ReadyReused,
    ReadySettings,
    ready_argv,
    ready_class,
    receive_ready,
    status_files,
)
from runner.spec import CleanupCheck, Limits, RunSpec

__all__ = [
    "ANALYST_WORDS",
    "PREFIX",
    "READY_PROGRAMS",
    "STATUS_DIR",
    "Maker",
    "Ready",
    "ReadyClass",
    "ReadyPool",
    "ReadyReused",
    "ReadySettings",
    "ready_argv",
    "ready_class",
    "status_files",
]

PREFIX = "ready-"  # a ready sandbox's name: its cgroups, view and lock, which a sweep reclaims
# What a run's memory limit must leave free above what the waiting interpreter holds: this, or a
# quarter of the limit if more (a program that would fit cold must fit in its ready sandbox too).
MEMORY_MARGIN_BYTES = 32 * 1024 * 1024
NO_ROOM_BACKOFF_S = 1.0  # after admission had no room for a ready sandbox, before it is asked again
WAITERS_CHECK_S = 0.05  # how often a pool holding idle sandboxes looks for runs waiting for room
# A replacement is made once this process has had no run for this long (a run's end, then its
# caller's next request). A run that finds its class's sandbox being made waits for it only if what
# is left of the making is shorter than what a ready sandbox saves it (ReadyPool._worth_waiting).
# Measured here with a notebook's Run all (12 cells back to back over a frame's state, the next
# posted ~0.1 s after one ends; a cell's sandbox takes ~0.7-0.9 s to make and saves ~0.3 s), two
# rounds each, p50: ready sandboxes off 722/700 ms; this 651/636 ms (6 of 12 ready: a cell that
# does not wait starts cold, the next finds the sandbox made meanwhile) and a cell a second 175/167
# ms; every making waited for, 938 ms; making stopped (cgroup freezer) while a cold cell ran,
# 702/701 ms (3 of 12); a cell's class made only after 0.4 s without a run, 692/690 ms, and a cell a
# second 347/374 ms (it came before its making was done). A hello's sandbox takes ~0.05 s to make.
IDLE_BEFORE_MAKE_S = 0.05
# How a class's runs went, kept as a moving average: a new measure counts for this much.
SMOOTHING = 0.3
# A waiting sandbox's share of a busy CPU (cgroup v2's least): it is made with what no run wants,
# and the run that takes it gets its own weight at hand-over.
MAKER_CPU_WEIGHT = 1
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)  # root may pass net.core.wmem_max
HAND_OVER_BUFFER_BYTES = 4 << 20  # one hand-over message: the run's argv and environment
log = logging.getLogger(__name__)


class ReadyPool:
    """This process's ready sandboxes, one per class it has met lately, made in a thread of its own."""

    _mine: dict[tuple[Any, ...], ReadyPool] = {}
    _mine_lock = threading.Lock()

    @classmethod
    def here(cls, supervisor: Maker, settings: ReadySettings | None = None) -> ReadyPool:
        """This process's pool for the supervisor's host and install (a forked child makes its own)."""
        key = (os.getpid(), str(supervisor.paths.host_state_dir), supervisor.settings.cgroup_parent,
               supervisor.settings.uid_base)  # fmt: skip
        with cls._mine_lock:
            pool = cls._mine.get(key)
            if pool is None:
                pool = cls._mine[key] = ReadyPool(supervisor, settings or ReadySettings.from_env())
                atexit.register(pool.close)  # a process that ends on a crash leaves them to the sweep
            return pool

    def __init__(self, supervisor: Maker, settings: ReadySettings):
        self.supervisor = supervisor
        self.settings = settings
        self.idle: dict[ReadyClass, Ready] = {}
        self.making: dict[ReadyClass, float] = {}  # being made, since (time.monotonic())
        self.make_s: dict[ReadyClass, float] = {}  # how long making one takes, lately
        self.took_s: dict[tuple[ReadyClass, str], float] = {}  # a run's time, by class and start, lately
        self.asking: dict[str, tuple[ReadyClass, float]] = {}  # a run under way: its class, time it waited
        self.wanted: OrderedDict[ReadyClass, float] = OrderedDict()  # the classes met, oldest first
        self.in_use: dict[str, Ready] = {}
        self.failures: dict[ReadyClass, int] = {}
        self.stopped: dict[ReadyClass, str] = {}  # classes given up, and why
        self.counts = {"made": 0, "claimed": 0, "failed": 0, "recycled": 0, "fell_back": 0}
        self.changed = threading.Condition()
        self.closed = False
        self.pid = os.getpid()
        self.dirty = False  # the published status is behind: the thread writes it, not a run
        self.last_run_end = 0.0  # time.monotonic() when a run of this process last ended
        self.runs_now = 0  # runs of this process under way (ready or cold): no sandbox is made then
        self.no_room_until = 0.0  # admission had no room for a sandbox: not asked again before this
        self.no_room: set[ReadyClass] = set()  # classes lacking a sandbox that admission had no room for, lately
        self.being_made: dict[ReadyClass, tuple[Engine, RunContext]] = {}  # made now, its cgroups there
        self.hurried: dict[ReadyClass, int] = {}  # the CPU weight a run waiting for one of these asked
        self.thread = threading.Thread(target=self._loop, name="cordon-ready-pool", daemon=True)
        self.thread.start()

    # --- a run's side -------------------------------------------------------------

    def claim(self, engine: Engine, spec: RunSpec, image: ImageRef, run_id: str) -> tuple[Ready | None, str]:
        """The ready sandbox for this run, marked as its own, or None and why it starts cold. A
        class met for the first time gets one made for the next run of it."""
        cls, why = ready_class(spec, image, engine)
        if cls is None:
            return None, why
        asked = time.monotonic()
        deadline = asked + self.settings.wait_s
        with self.changed:
            self._want(cls)
            self.asking[run_id] = (cls, 0.0)
            if cls not in self.idle and cls in self.making:
                if not self._worth_waiting(cls):
                    return None, "its class's sandbox is being made, and starting cold is sooner"
                self._hurry(cls, spec.cpu_weight)
            while cls not in self.idle and cls in self.making and time.monotonic() < deadline:
                self.changed.wait(max(0.0, deadline - time.monotonic()))
            self.asking[run_id] = (cls, time.monotonic() - asked)
            ready = self.idle.get(cls)
            if ready is None:
                return None, self.stopped.get(cls) or "no ready sandbox of its class yet"
            limit = spec.limits.memory_mib * 1024 * 1024
            if engine.ready_interpreter and ready.memory_bytes + max(MEMORY_MARGIN_BYTES, limit // 4) > limit:
                return None, "its memory limit is too close to what a ready sandbox of its class already holds"
            del self.idle[cls]
            self.in_use[ready.id] = ready
            self.counts["claimed"] += 1
            self.dirty = True
        try:
            ready.claim(run_id)
        except BaseException:  # never handed out: torn down here, its lock held until it is gone
            with self.changed:
                self.in_use.pop(ready.id, None)
                self.changed.notify_all()
            self._discard(ready)
            raise
        return ready, ""

    def wait_ready(self, cls: ReadyClass, timeout_s: float) -> Ready | None:
        """Ask for a sandbox of `cls` (as a run of it does) and wait until one is idle; None if none
        is within `timeout_s`, or the class was given up (status() says why). For tests and
        benchmarks, which time runs through a sandbox made ahead."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            self._want(cls)
            while cls not in self.idle and cls not in self.stopped and time.monotonic() < deadline:
                self.changed.wait(min(0.5, max(0.0, deadline - time.monotonic())))
                self._want(cls)  # still among the classes kept, however many others came meanwhile
            return self.idle.get(cls)

    def finished(self, ready: Ready, run_id: str, *, fell_back: bool = False) -> CleanupCheck:
        """The run that took `ready` is over (torn down by the supervisor): the audit's single-use
        check, and the sandbox's lock released."""
        try:
            check = ready.single_use_check(run_id)
            ready.host.close()
            self.supervisor.admission.release(ready.id)  # held still if the run never took it over
        finally:
            ready.lock.release()
        with self.changed:
            self.in_use.pop(ready.id, None)
            if fell_back:
                self.counts["fell_back"] += 1
                self._failed(ready.cls, "a ready sandbox failed at hand-over")
            self.dirty = True
            self.changed.notify_all()
        return check

    def run_begins(self) -> None:
        """A run of this process begins (any run): no sandbox is made beside it."""
        with self.changed:
            self.runs_now += 1

    def run_ends(self, run_id: str = "", start: str = "", took_s: float | None = None) -> None:
        """It ended (`start` "ready" or "cold", after `took_s`): replacements are made once the
        process has been idle a moment."""
        with self.changed:
            self.runs_now -= 1
            self.last_run_end = time.monotonic()
            claimed = self.asking.pop(run_id, None)
            if claimed is not None and start and took_s is not None:
                cls, waited_s = claimed  # a ready run's wait for its sandbox is the making's, not the run's
                _smooth(self.took_s, (cls, start), took_s - waited_s if start == "ready" else took_s)
            self.changed.notify_all()

    def drain(self) -> int:
        """Tear down every idle sandbox of this process (a run needs their room); how many."""
        with self.changed:
            idle, self.idle = list(self.idle.values()), {}
        for ready in idle:
            self._discard(ready)
        self._publish()
        return len(idle)

    def close(self) -> None:
        """Stop making sandboxes and tear down the idle ones (this process's pool only: a forked
        child's copy of its parent's pool is never closed, the parent's sandboxes are not its)."""
        if os.getpid() != self.pid:
            return
        with ReadyPool._mine_lock:  # the next `here` makes a new one
            ReadyPool._mine = {key: pool for key, pool in ReadyPool._mine.items() if pool is not self}
        with self.changed:
            self.closed = True
            self.changed.notify_all()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=self.settings.make_timeout_s + 10)  # a sandbox being made
        self.drain()

    @classmethod
    def close_mine(cls) -> None:
        """Close every pool of this process (a worker process that ends: Celery's children leave
        with os._exit, which runs no atexit handler)."""
        with cls._mine_lock:
            pools = [pool for key, pool in cls._mine.items() if key[0] == os.getpid()]
        for pool in pools:
            pool.close()

    @classmethod
    def _forget_inherited(cls) -> None:
        """In a forked child: the parent's pools are the parent's (never used, never closed here)."""
        cls._mine = {key: pool for key, pool in cls._mine.items() if key[0] == os.getpid()}

    # --- the pool's thread ----------------------------------------------------------

    def _want(self, cls: ReadyClass) -> None:
        """(lock held) `cls` was met now: kept among the classes made ready, the oldest dropped."""
        self.wanted[cls] = time.monotonic()
        self.wanted.move_to_end(cls)
        while len(self.wanted) > self.settings.classes:
            old, _ = self.wanted.popitem(last=False)
            stale = self.idle.pop(old, None)
            if stale is not None:
                threading.Thread(target=self._discard, args=(stale,), daemon=True).start()
        self.changed.notify_all()

    def _saves_s(self, cls: ReadyClass) -> float | None:
        """(lock held) What a ready sandbox saves a run of `cls`, lately: cold runs' time less
        ready runs' (None until both were measured)."""
        cold_s, ready_s = self.took_s.get((cls, "cold")), self.took_s.get((cls, "ready"))
        return None if cold_s is None or ready_s is None else cold_s - ready_s

    def _worth_waiting(self, cls: ReadyClass) -> bool:
        """(lock held) Whether a run of `cls` that finds its sandbox being made should wait for it:
        unless what is left of the making (as long as it took lately) is longer than what it saves.
        Nothing measured yet: wait."""
        made_s, saves_s = self.make_s.get(cls), self._saves_s(cls)
        if made_s is None or saves_s is None:
            return True
        return made_s - (time.monotonic() - self.making[cls]) <= saves_s

    def _hurry(self, cls: ReadyClass, cpu_weight: int) -> None:
        """(lock held) A run waits for the sandbox of `cls` being made: it is made with the run's
        CPU weight from now on (never a run held up by a maker only idle CPU feeds)."""
        self.hurried[cls] = max(cpu_weight, self.hurried.get(cls, MAKER_CPU_WEIGHT))
        made = self.being_made.get(cls)
        if made is not None:
            self._weigh(cls, *made)

    def _weigh(self, cls: ReadyClass, engine: Engine, ctx: RunContext) -> None:
        """(lock held) The weight a waiting run asked for, written to the sandbox being made."""
        weight = self.hurried.get(cls)
        if weight is None:
            return
        try:
            engine.set_cpu_weight(ctx, weight)
        except OSError as exc:  # it is made at the lowest weight still: slower, never wrong
            log.warning("ready sandboxes: %s could not be given weight %d: %s", cls.label, weight, exc)

    def _loop(self) -> None:
        while True:
            todo: tuple[str, ReadyClass] | None = None
            with self.changed:
                while not self.closed:
                    todo = self._next()
                    if todo is not None or self.dirty:
                        break
                    self.changed.wait(timeout=self._next_check())
                if self.closed:
                    return
                self.dirty = False
                stale = None
                if todo is not None:
                    kind, cls = todo
                    stale = self.idle.pop(cls) if kind in ("recycle", "yield") else None
                    if stale is None:
                        self.making[cls] = time.monotonic()
            if todo is None:  # only the published status was behind (a claim, a run's end)
                self._publish()
                continue
            try:
                self._step(cls, stale)
            except Exception:  # the pool lives on: a failure is counted, and doctor shows it
                log.exception("ready sandboxes: %s of %s failed", kind, cls.label)
                with self.changed:
                    self._failed(cls, "an unexpected error in the pool (see the worker's log)")
                    self.making.pop(cls, None)
            self._publish()

    def _step(self, cls: ReadyClass, stale: Ready | None) -> None:
        """Recycle `stale`, or make one sandbox of `cls` (the lock not held)."""
        if stale is not None:
            self._discard(stale)
            with self.changed:
                self.counts["recycled"] += 1  # made anew when old, or gave its room to a waiting run
            return
        try:
            ready = self._make(cls)
        except Exception as exc:  # recorded, counted, and shown by doctor
            with self.changed:
                self._failed(cls, f"{type(exc).__name__}: {exc}")
            ready = None
        else:
            if ready is None:  # no room now: asked again after a pause, not in a loop
                self.no_room_until = time.monotonic() + NO_ROOM_BACKOFF_S
        with self.changed:
            self.making.pop(cls, None)
            if ready is not None:
                _smooth(self.make_s, cls, ready.make_s)
            keep = ready is not None and cls in self.wanted and not self.closed
            if ready is not None and keep:
                self.idle[cls] = ready
                self.failures.pop(cls, None)
                self.counts["made"] += 1
            self.changed.notify_all()
        if ready is not None and not keep:
            self._discard(ready)

    def _next(self) -> tuple[str, ReadyClass] | None:
        """(lock held) What to do: give an idle sandbox's room to a run that waits for it, recycle
        one past its age, or make one a class lacks."""
        now = time.monotonic()
        if self.supervisor.admission.waiting():
            # Runs wait for room (a burst): ours is theirs, and none is made for a while after.
            self.no_room_until = now + NO_ROOM_BACKOFF_S
            return ("yield", next(iter(self.idle))) if self.idle else None
        for cls, ready in self.idle.items():
            if now - ready.made_at > self.settings.max_age_s:
                return "recycle", cls
        if now < self.no_room_until or now - self.last_run_end < IDLE_BEFORE_MAKE_S or self.runs_now:
            return None
        for cls in reversed(self.wanted):  # the most recently met first
            # (A replacement waits for the run that took the last one: runs_now above.)
            lacking = cls not in self.idle and cls not in self.making and cls not in self.stopped
            if lacking and self._room_for_one(cls):
                self.no_room.discard(cls)
                return "make", cls
            if lacking:
                self.no_room.add(cls)  # shown by doctor: why a class has none ready
        return None

    def _next_check(self) -> float:
        """(lock held) Seconds until the oldest idle sandbox is due for recycling (or a while)."""
        now = time.monotonic()
        ages = [ready.made_at + self.settings.max_age_s - now for ready in self.idle.values()]
        # Holding idle sandboxes, it looks for waiting runs often; holding none, rarely.
        every = WAITERS_CHECK_S if self.idle else 1.0
        waits = [t - now for t in (self.no_room_until, self.last_run_end + IDLE_BEFORE_MAKE_S) if t > now]
        return max(0.01, min([every, *waits, *ages]))

    def _room_for_one(self, cls: ReadyClass) -> bool:
        """Whether admission would give a ready sandbox its room now (asked for real in _make), on
        a host where no run is under way: the CPU a sandbox's making takes would be theirs, and a
        busy host gains nothing from a sandbox made ahead (its runs come back to back; measured in
        a classroom's deadline burst, making them between runs slowed grading by a quarter)."""
        entries = self.supervisor.admission.peek()  # the host-wide lock is for runs, not for advice
        capacity = self.supervisor.admission.capacity
        used = {e.slot for e in entries if e.slot >= 0}
        running = sum(1 for e in entries if e.slot >= 0 and not e.run_id.startswith(PREFIX))
        room_limits = self._room(cls)
        if room_limits is None:
            return False
        need = self.supervisor.engines[cls.engine].reservation(room_limits).memory_mib
        memory = sum(e.memory_mib for e in entries) + 2 * need
        room = capacity.slots - len(used) > self.settings.free_slots and memory <= capacity.memory_mib
        return room and running == 0

    def _room(self, cls: ReadyClass) -> Limits | None:
        """What a waiting sandbox's cgroups allow: its room (or what the engine's fixed part needs:
        a microVM's memory), and the most processes any run may have (the launch's process rlimit
        is fixed then; the run's pids cap is set at hand-over); None if it can no longer be made."""
        room = Limits(memory_mib=self.settings.room_mib, cpus=float(cls.threads),
                      max_processes=self.supervisor.maxima.max_processes)  # fmt: skip
        return self.supervisor.engines[cls.engine].ready_room(cls.fixed, room)

    def _failed(self, cls: ReadyClass, why: str) -> None:
        """(lock held)"""
        self.counts["failed"] += 1
        self.failures[cls] = self.failures.get(cls, 0) + 1
        if self.failures[cls] >= self.settings.max_failures:
            self.stopped[cls] = f"ready sandboxes of {cls.label} stopped after {self.failures[cls]} failures: {why}"

    def _make(self, cls: ReadyClass) -> Ready | None:
        """One ready sandbox of `cls`, or None if admission has no room for it now."""
        supervisor = self.supervisor
        engine = supervisor.engines[cls.engine]
        sandbox_id = PREFIX + uuid.uuid4().hex[:12]
        started = time.monotonic()
        room = self._room(cls)
        if room is None:
            raise HandOverError(f"what its class fixes ({cls.fixed}) is gone")
        lock = RunLock(supervisor.locks_dir, sandbox_id)
        lock.acquire()
        memory = engine.reservation(room).memory_mib
        try:
            reservation = supervisor.admission.try_acquire(
                sandbox_id, memory_mib=memory, keep_free_slots=self.settings.free_slots, keep_free_mib=memory
            )
        except BaseException:
            lock.release()
            raise
        if reservation is None:
            lock.release()
            return None
        spec = RunSpec(runtime=cls.runtime, image=cls.image, script=b"", limits=room, engine=cls.engine,
                       cpu_weight=MAKER_CPU_WEIGHT)  # fmt: skip
        ctx: RunContext | None = None
        host, sandbox = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # One message holds the run's argv and environment: past the default buffer, it would
            # not fit (EMSGSIZE, and the run would start cold).
            host.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, HAND_OVER_BUFFER_BYTES)
            image = supervisor.images.resolve(cls.image)
            if image.digest != cls.digest:
                raise HandOverError(f"image {cls.image} is now {image.digest}, not {cls.digest}")
            ctx = supervisor.context(spec, sandbox_id, reservation.slot, image, engine)
            ctx.argv, ctx.ready_end = ready_argv(cls), sandbox
            engine.prepare(ctx)
            with self.changed:  # its cgroups are there: a run that waits for it may raise its weight
                self.being_made[cls] = (engine, ctx)
                self._weigh(cls, engine, ctx)
            ctx.process = engine.start(ctx)
            sandbox.close()
            ctx.ready_end = None
            said = receive_ready(host, timeout=self.settings.make_timeout_s)
            if not said.get("ready"):
                raise HandOverError(f"it said: {said.get('problem') or said}")
            memory_now = engine.sample(ctx).memory_bytes or 0
        except BaseException:
            sandbox.close()
            host.close()
            self._made(cls)
            if ctx is not None:
                supervisor.teardown_sandbox(engine, ctx, sandbox_id)
            else:
                supervisor.admission.release(sandbox_id)
            lock.release()
            raise
        self._made(cls)
        return Ready(sandbox_id, cls, engine, ctx, host, lock, time.monotonic(), time.monotonic() - started,
                     memory_now, memory)  # fmt: skip

    def _made(self, cls: ReadyClass) -> None:
        with self.changed:
            self.being_made.pop(cls, None)
            self.hurried.pop(cls, None)

    def _discard(self, ready: Ready) -> None:
        """Tear down a sandbox no run took; a failed audit is counted as a failure of its class."""
        try:
            ready.host.close()
            checks = self.supervisor.teardown_sandbox(ready.engine, ready.ctx, ready.id)
        finally:
            ready.lock.release()
        failed = [c for c in checks if not c.ok]
        if failed:
            with self.changed:
                self._failed(ready.cls, f"its teardown failed: {failed[0].name}: {failed[0].detail}")

    # --- what doctor reads ------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self.changed:
            classes = []
            for cls in {*self.wanted, *self.stopped, *(r.cls for r in self.in_use.values())}:
                ready = self.idle.get(cls)
                classes.append({
                    "class": cls.label,
                    "ready": int(ready is not None),
                    "making": cls in self.making,
                    "in_use": sum(1 for r in self.in_use.values() if r.cls == cls),
                    "failures": self.failures.get(cls, 0),
                    "memory_bytes": ready.memory_bytes if ready else 0,
                    "reserved_mib": ready.reserved_mib if ready else 0,
                    "stopped": self.stopped.get(cls, ""),
                    "no_room": cls in self.no_room and ready is None,
                    # lately: how long one takes to make, and a run of the class from each start
                    "make_s": _rounded(self.make_s.get(cls)),
                    "ready_run_s": _rounded(self.took_s.get((cls, "ready"))),
                    "cold_run_s": _rounded(self.took_s.get((cls, "cold"))),
                })  # fmt: skip
            return {"pid": os.getpid(), "classes": sorted(classes, key=lambda c: c["class"]), **self.counts}

    def _publish(self) -> None:
        """This process's pool, written where doctor reads every process's (status_files)."""
        directory = self.supervisor.paths.host_state_dir / STATUS_DIR
        try:
            directory.mkdir(mode=0o700, exist_ok=True)
            path = directory / f"{os.getpid()}.json"
            tmp = directory / f"{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(self.status()))
            tmp.replace(path)
        except OSError:
            pass  # doctor shows an older figure; the pool works on


os.register_at_fork(after_in_child=ReadyPool._forget_inherited)


def _smooth(averages: dict[Any, float], key: Any, value: float) -> None:
    """`averages[key]` moved towards `value` (SMOOTHING), or set to it the first time."""
    old = averages.get(key)
    averages[key] = value if old is None else old + SMOOTHING * (value - old)


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
