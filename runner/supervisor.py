"""The supervisor: one run from admission to audit, with every decision made outside the sandbox.

admit -> stage -> prepare -> start -> stream + sample (deadline, CPU, caps, cancel) -> stop
-> collect -> export -> classify -> teardown + audit. The monotonic clock is the host's; the
program never owns the timer, the kill or the cleanup decision.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from runner.cells import CELL_PROGRAMS, export_session, stage_state
from runner.classify import Evidence, classify
from runner.config import Paths, SupervisorSettings, paths_from_env
from runner.egress.policy import Policy, policy_problem
from runner.egress.proxy import Caps, EgressSettings, RunEgress
from runner.engines.base import Collected, EgressReach, Engine, HandOverError, RunContext
from runner.files import export_outputs, stage_inputs
from runner.host import hostfs
from runner.host.admission import Admission, Capacity, Reservation
from runner.host.locks import RunLock
from runner.images import ImageError, ImageRef, ImageStore
from runner.ready import Ready, ReadyPool, ReadySettings
from runner.registry import Registry
from runner.spec import (
    MIB,
    RUNTIMES,
    SESSION_DIR,
    CleanupCheck,
    ImageInfo,
    Limits,
    Outcome,
    Phase,
    RunnerError,
    RunResult,
    RunSpec,
    maxima_from_env,
)
from runner.watch import EventSink, Stream, Watch, announce

# The script's file name in the sandbox's script directory, by runtime.
SCRIPT_NAMES = {"python": "main.py", "node": "main.js"}


@dataclass
class _Attempt:
    """One run's working state, from its lock to its recorded end: what it asked, where it is
    running, what it has left to tear down (a ready sandbox's failed checks among it)."""

    spec: RunSpec
    run_id: str
    emit: EventSink
    cancelled: Callable[[], bool]
    started: float
    result: RunResult
    streams: dict[str, Stream]
    evidence: Evidence = field(default_factory=Evidence)
    engine: Engine | None = None
    ctx: RunContext | None = None
    ready: Ready | None = None
    ready_checks: list[CleanupCheck] = field(default_factory=list)  # a ready sandbox's that failed at hand-over
    fell_back: bool = False
    memory_mib: int = 0  # what admission reserves for it (_measure)
    cpus: float = 0.0
    make_room: Callable[[], None] = lambda: None


class Supervisor:
    """Runs on this host, each from admission to audit. A worker process has one (Supervisor.here),
    which owns the process's ready pool; the CLI, the doctor and tests make their own."""

    _mine: ClassVar[dict[tuple[Any, ...], Supervisor]] = {}
    _mine_lock = threading.Lock()

    @classmethod
    def here(cls) -> Supervisor:
        """This process's supervisor, made on first use from the environment (CORDON_*): a forked
        child makes its own, and so does a process whose CORDON_* environment changed (a test's)."""
        key = (os.getpid(), tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("CORDON_"))))
        with cls._mine_lock:
            found = cls._mine.get(key)
            if found is None:
                found = cls._mine[key] = cls()
            return found

    def __init__(
        self,
        *,
        paths: Paths | None = None,
        engines: dict[str, Engine] | None = None,
        admission: Admission | None = None,
        settings: SupervisorSettings | None = None,
        maxima: Limits | None = None,
        egress: EgressSettings | None = None,
        ready: ReadySettings | None = None,
    ):
        self.paths = paths or paths_from_env()
        self.settings = settings or SupervisorSettings.from_env()
        self.maxima = maxima or maxima_from_env()
        self.egress = egress or EgressSettings.from_env()
        self._egress: dict[str, RunEgress] = {}  # each run with egress: its proxy, from before its sandbox to its end
        self.ready_settings = ready or ReadySettings.from_env()
        self.admission = admission or Admission(self.paths.host_state_dir / "admission", Capacity.from_env())
        self.images = ImageStore(self.paths)
        self.registry = Registry(self.settings, self.paths.host_state_dir, engines=engines)
        self.runs_dir = self.paths.data_dir / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.runs_dir, 0o711)  # noqa: S103 - traversable, not listable
        # Run locks are host-wide: a sweep must see the live runs of every install on the host.
        self.locks_dir = self.paths.host_state_dir / "locks"
        self.locks_dir.mkdir(parents=True, exist_ok=True)
        self.views_dir = self.paths.host_state_dir / "views"
        self.views_dir.mkdir(parents=True, exist_ok=True)
        for directory in (self.paths.host_state_dir, self.views_dir):
            os.chmod(directory, 0o711)  # noqa: S103 - the sandbox uid traverses to its view

    @property
    def engines(self) -> dict[str, Engine]:
        """Every engine by name, from the registry (a test may put its own in this dict)."""
        return self.registry.engines

    # --- one run ------------------------------------------------------------------

    def run(
        self,
        spec: RunSpec,
        *,
        on_event: EventSink | None = None,
        cancelled: Callable[[], bool] = lambda: False,
        output_dir: Path | None = None,
        run_id: str | None = None,
        keep_output: bool = True,
    ) -> RunResult:
        """Run one spec to its recorded end. Every byte of stdout and stderr within the caps goes
        to `on_event` as a chunk; with `keep_output` False they are not also held for the result
        (its stdout and stderr stay empty), so a caller that logs the chunks holds no copy."""
        run_id = run_id or uuid.uuid4().hex[:16]
        at = _Attempt(
            spec=spec, run_id=run_id, emit=on_event or (lambda event: None), cancelled=cancelled,
            started=time.monotonic(),
            result=RunResult(outcome=Outcome.SANDBOX_ERROR, run_id=run_id, limits=spec.limits),
            streams={
                "stdout": Stream("stdout", spec.limits.stdout_max_bytes, keep=keep_output),
                "stderr": Stream("stderr", spec.limits.stderr_max_bytes, keep=keep_output),
            },
        )  # fmt: skip
        result, evidence = at.result, at.evidence
        lock = RunLock(self.locks_dir, run_id)
        lock.acquire()
        pool = self._ready_pool() if self.ready_settings.enabled else None
        if pool is not None:
            pool.run_begins()
        try:
            self._validate(spec)
            engine = at.engine = self._engine_for(spec, result)
            image = self._image(spec.image_name)
            result.image = ImageInfo(image.name, image.digest)
            self._measure(at, engine, image, keep_output)
            at.ready, cold_reason = self._claim_ready(engine, spec, image, run_id)
            reservation, failure = self._start_ready(at, engine, at.ready) if at.ready is not None else (None, "")
            if failure:
                cold_reason = f"its ready sandbox failed at hand-over ({failure})"
            if reservation is None:
                reservation = self.admission.acquire(
                    run_id, memory_mib=at.memory_mib, cpus=at.cpus, cancelled=cancelled, on_wait=at.make_room
                )
                announce(at.emit, Phase.ADMITTED, slot=reservation.slot)
            if at.ctx is None:
                at.ctx = self._start_cold(at, engine, image, reservation.slot, cold_reason)
            self._run_program(at, engine, at.ctx, output_dir)
        except RunnerError as exc:
            if evidence.stopped_by == "cancel" or (cancelled() and exc.outcome is not Outcome.REJECTED_INPUT):
                evidence.cancelled = True
            evidence.engine_error = exc
            result.error = exc
        except ImageError as exc:
            error = RunnerError("image_unavailable", str(exc), retryable=False)
            evidence.engine_error, result.error = error, error
        except Exception as exc:  # an engine or host failure must still end as a recorded run
            # A full disk on the host (its staging, spool or work directories) is named as such.
            code = "host_disk_full" if isinstance(exc, OSError) and exc.errno == errno.ENOSPC else "engine_failure"
            error = RunnerError(code, f"{type(exc).__name__}: {exc}", retryable=True)
            evidence.engine_error, result.error = error, error
        finally:
            result.cleanup = [*at.ready_checks, *self.teardown_sandbox(at.engine, at.ctx, run_id)]
            closed_egress = self._egress.pop(run_id, None)  # closed by the teardown; its record is read below
            if at.ready is not None and pool is not None:
                result.cleanup.append(pool.finished(at.ready, run_id, fell_back=at.fell_back))
            if pool is not None:
                pool.run_ends(run_id, result.sandbox_start or "", time.monotonic() - at.started)
            lock.release()
        return self._conclude(at, closed_egress)

    def _engine_for(self, spec: RunSpec, result: RunResult) -> Engine:
        """The engine the spec asks for (or auto's choice), recorded on the result."""
        engine, result.engine_note = self.registry.choose(spec.engine)
        result.engine, result.isolation = engine.name, engine.isolation
        result.engine_version = engine.version()
        if spec.egress and not engine.scoped_egress:
            raise RunnerError(
                "egress_unsupported",
                f"the {engine.name} engine cannot give a run scoped egress; run it without egress "
                "or on an engine that can",
                outcome=Outcome.REJECTED_INPUT,
            )
        return engine

    def _start_ready(self, at: _Attempt, engine: Engine, ready: Ready) -> tuple[Reservation | None, str]:
        """The run in the ready sandbox it claimed: admitted into the sandbox's own reservation and
        handed over (at.ctx, from the start: a failure raised on the way tears it down). Returns the
        reservation (None if the sandbox's was lost) and why the hand-over failed ("" if it did not;
        if it did, the run starts cold and at.ctx is None again)."""
        spec = at.spec
        ctx = at.ctx = ready.for_run(at.run_id, spec, program_argv(spec, engine.script_dir))
        reservation = None
        try:
            reservation = self.admission.acquire(
                at.run_id, memory_mib=at.memory_mib, cpus=at.cpus, cancelled=at.cancelled, take=ready.id,
                on_wait=at.make_room,
            )  # fmt: skip
        except RunnerError as exc:
            if exc.code != "ready_reservation_lost":
                raise
            failure = self._abandon(engine, ctx, ready, at.ready_checks, exc.message)
        else:
            announce(at.emit, Phase.ADMITTED, slot=reservation.slot)
            announce(at.emit, Phase.STARTING)
            failure = self._hand_over(engine, ctx, ready, at.result, at.ready_checks)
        if failure:
            at.ctx, at.fell_back = None, True
        return reservation, failure

    def _measure(self, at: _Attempt, engine: Engine, image: ImageRef, keep_output: bool) -> None:
        """What admission reserves for the run (at.memory_mib, at.cpus), and how it makes room."""
        need = engine.reservation(at.spec.limits, cell=at.spec.cell)
        # Streams kept for the result are this process's memory, on top of the sandbox's.
        limits = at.spec.limits
        kept_mib = -(-(limits.stdout_max_bytes + limits.stderr_max_bytes) // MIB) if keep_output else 0
        at.memory_mib, at.cpus = need.memory_mib + kept_mib, need.cpus

        def make_room() -> None:
            given = self._give_back_room(image, limits, at.memory_mib)
            if given:
                at.result.evidence.setdefault("room_given_back", []).extend(given)

        at.make_room = make_room

    def _start_cold(self, at: _Attempt, engine: Engine, image: ImageRef, slot: int, cold_reason: str) -> RunContext:
        """A sandbox made for the run now: staged, its egress opened, prepared and started."""
        spec, result = at.spec, at.result
        if cold_reason:
            result.engine_note = f"{result.engine_note}; sandbox started cold: {cold_reason}"[:500]
        ctx = at.ctx = self._stage(spec, at.run_id, slot, image, engine)
        if spec.egress:
            opened = RunEgress.open(Policy.parse(spec.egress), Caps.of(spec.limits), self.egress)
            self._egress[at.run_id] = opened
            ctx.egress = EgressReach(opened.namespace.fd, opened.env)
        if at.ready is None:
            announce(at.emit, Phase.STARTING)
        with _ours("sandbox_prepare_failed", "preparing the sandbox (its cgroups and mounts)"):
            engine.prepare(ctx)
        with _ours("staging_failed", "writing the program's script"):
            self._write_script(ctx)
        ctx.process = engine.start(ctx)
        result.sandbox_start = "cold"
        return ctx

    def _run_program(self, at: _Attempt, engine: Engine, ctx: RunContext, output_dir: Path | None) -> None:
        """The started program watched to its end, stopped, collected and its files exported."""
        spec, result, evidence, streams = at.spec, at.result, at.evidence, at.streams
        result.sandbox_id = f"{engine.name}:{at.run_id}"
        result.evidence["host_uid"] = ctx.uid
        t_start = time.monotonic()
        result.timings["start_s"] = t_start - at.started
        announce(at.emit, Phase.RUNNING)
        watch = Watch(
            engine, ctx, streams, evidence, at.emit, at.cancelled, stop_grace_s=self.settings.stop_grace_s,
            egress_limit=lambda: self._egress_limit(at.run_id),
        )  # fmt: skip
        ready_at, cpu_at_ready = watch.until_done(t_start)
        if ready_at is not None:
            result.wall_s = round(time.monotonic() - ready_at, 4)
            if engine.has_boot_phase:  # a VM's boot: guest kernel and agent, until the program ran
                result.timings["boot_s"] = round(ready_at - t_start, 4)
        stop_method = engine.stop(ctx, grace_s=self.settings.stop_grace_s)
        result.evidence["stop"] = stop_method
        collected = engine.collect(ctx)
        if evidence.engine_error is not None:
            raise evidence.engine_error
        if not collected.started:
            raise engine.not_started(ctx, bytes(streams["stderr"].tail).decode(errors="replace")[-500:])
        announce(at.emit, Phase.EXPORTING)
        self._record(result, collected, evidence, engine)
        if result.cpu_s is not None and cpu_at_ready is not None:
            result.cpu_s = round(max(0.0, result.cpu_s - cpu_at_ready), 4)  # the boot is not the job's
        evidence.runtime_heap_exhausted = spec.runtime == "node" and _v8_heap_exhausted(collected, streams)
        evidence.guest_oom_kill = (
            engine.sigkill_means_guest_oom and collected.signal == 9 and evidence.stopped_by is None
        )
        export = export_outputs(ctx.output_dir, output_dir, spec.limits, skip=SESSION_DIR if spec.cell else None)
        result.outputs, result.rejected_outputs = export.outputs, export.rejected
        if spec.cell:
            session = export_session(ctx.output_dir, output_dir / SESSION_DIR if output_dir else None, spec.limits)
            result.session, result.rejected_outputs = session.files, [*export.rejected, *session.rejected]
            evidence.state_oversize, evidence.restoring_state = session.state_oversize, session.restoring
        evidence.output_files_over_cap, evidence.output_too_deep = export.over_cap, export.too_deep
        if export.oversize is not None:
            evidence.oversize_output, evidence.oversize_output_bytes = export.oversize

    def _conclude(self, at: _Attempt, closed_egress: RunEgress | None) -> RunResult:
        """The result as recorded: its egress, its outcome classified, its streams, its timings."""
        result, evidence, streams = at.result, at.evidence, at.streams
        if closed_egress is not None:
            result.egress = closed_egress.proxy.summary()
            evidence.egress_limit = closed_egress.proxy.limit
        evidence.cancelled = evidence.cancelled or evidence.stopped_by == "cancel"
        result.outcome, result.reason = classify(evidence, at.spec.limits)
        for stream in streams.values():
            setattr(result, stream.name, bytes(stream.kept))
            setattr(result, f"{stream.name}_bytes", min(stream.total, stream.cap))
            setattr(result, f"{stream.name}_truncated", stream.truncated)
        result.evidence.update(_evidence_dict(evidence, streams))
        result.timings["total_s"] = round(time.monotonic() - at.started, 4)
        at.emit({"type": "final", "result": result.to_json()})
        return result

    # --- ready sandboxes (runner.ready) ---------------------------------------------

    def _ready_pool(self) -> ReadyPool:
        return ReadyPool.here(self, self.ready_settings)

    def _claim_ready(self, engine: Engine, spec: RunSpec, image: ImageRef, run_id: str) -> tuple[Ready | None, str]:
        """This run's ready sandbox, or None and why the run starts cold ("" when they are off, or
        the engine makes none: a microVM's start is its vm_start)."""
        if not self.ready_settings.enabled or not engine.ready_sandboxes:
            return None, ""
        return self._ready_pool().claim(engine, spec, image, run_id)

    def _give_back_room(self, image: ImageRef, limits: Limits, memory_mib: int) -> list[str]:
        """No room for a run: this process's idle ready sandboxes give theirs back, then each engine
        what it keeps idle (a warm base), until the run's memory fits; what went, for its record."""
        if self.ready_settings.enabled:
            self._ready_pool().drain()
        given: list[str] = []
        for engine in self.registry.engines.values():
            given += engine.give_back_room(image, limits, lambda: self.admission.room_for(memory_mib))
        return given

    def _hand_over(
        self, engine: Engine, ctx: RunContext, ready: Ready, result: RunResult, checks: list[CleanupCheck]
    ) -> str:
        """Stage the run into its ready sandbox and hand the program over; "" when it went well.
        Else the sandbox is torn down (its audit added to `checks`) and the reason returned, for the
        run to start cold in the reservation it holds. A staging refusal is the run's own: raised."""
        t0 = time.monotonic()
        self._stage_inputs(ctx)
        t1 = time.monotonic()
        try:
            self._write_script(ctx)
            engine.hand_over(ctx, ready.host)
        except (HandOverError, OSError) as exc:
            return self._abandon(engine, ctx, ready, checks, str(exc))
        result.sandbox_start = "ready"
        result.timings.update(staging_s=round(t1 - t0, 4), handover_s=round(time.monotonic() - t1, 4))
        result.evidence["ready_sandbox"] = {"id": ready.id, "class": ready.cls.label, "made_s": round(ready.make_s, 3),
                                            "waited_s": round(time.monotonic() - ready.made_at, 3)}  # fmt: skip
        return ""

    def _abandon(self, engine: Engine, ctx: RunContext, ready: Ready, checks: list[CleanupCheck], why: str) -> str:
        """Tear down a ready sandbox that cannot take its run (its audit added to `checks`); `why`,
        for the run to start cold, in the reservation it may hold (its uid was this sandbox's)."""
        torn = self.teardown_sandbox(engine, ctx, ready.id, release=False)
        checks.extend(CleanupCheck(f"ready sandbox {c.name}", c.ok, c.detail) for c in torn)
        if not all(c.ok for c in torn):  # never start a run on a uid whose last sandbox is not gone
            raise RunnerError(
                "ready_teardown_failed", f"a ready sandbox could not take its run ({why}) nor be removed cleanly",
                retryable=True,
            )  # fmt: skip
        return why

    def _validate(self, spec: RunSpec) -> None:
        if spec.runtime not in RUNTIMES:
            raise RunnerError(
                "unknown_runtime", f"runtime must be one of {', '.join(RUNTIMES)}", outcome=Outcome.REJECTED_INPUT
            )
        problems = spec.limits.over(self.maxima)
        if problems:
            raise RunnerError("limits_over_maxima", "; ".join(m for _, m in problems), outcome=Outcome.REJECTED_INPUT)
        spec.check_stdin_and_args()
        problem = policy_problem(spec.egress, [("this service's", self.egress.ceiling)])
        if problem is not None:
            raise RunnerError(*problem, outcome=Outcome.REJECTED_INPUT)

    def _image(self, name: str) -> Any:
        ref = self.images.resolve(name)
        if not self.images.recently_verified(ref):
            report = self.images.verify(name)
            if not report.ok:
                raise RunnerError(
                    "image_verification_failed", f"image {name} failed verification: {report.problems[:5]}"
                )
        return ref

    def _stage(self, spec: RunSpec, run_id: str, slot: int, image: Any, engine: Engine) -> RunContext:
        ctx = self.context(spec, run_id, slot, image, engine)
        self._stage_inputs(ctx)
        return ctx

    def _stage_inputs(self, ctx: RunContext) -> None:
        """The run's inputs (and a cell's state) into its input directory, which is empty."""
        spec = ctx.spec  # a failure leaves the directory to the teardown
        with _ours("staging_failed", "staging the run's inputs"):
            stage_inputs(spec.inputs, ctx.input_dir, spec.limits, spec.input_names)
            if spec.state is not None:
                stage_state(spec.state, ctx.input_dir, spec.limits)

    def context(self, spec: RunSpec, run_id: str, slot: int, image: Any, engine: Engine) -> RunContext:
        """A sandbox's context, its run directory made with an empty input directory: a run's,
        or a ready sandbox's (runner.ready), named `run_id`."""
        run_dir = self.runs_dir / run_id
        views = engine.view_root(self.views_dir)
        input_dir = run_dir / "in"
        with _ours("staging_failed", "making the run's directories"):
            views.mkdir(mode=0o711, parents=True, exist_ok=True)
            run_dir.mkdir(mode=0o711)
            input_dir.mkdir(mode=0o755)
        return RunContext(
            run_id=run_id,
            spec=spec,
            limits=spec.limits,
            run_dir=run_dir,
            view_dir=views / run_id,
            input_dir=input_dir,
            scratch_dir=views / run_id / "scratch",
            output_dir=views / run_id / "out",
            slot=slot,
            uid=self.settings.uid_base + slot,
            image=image,
            argv=program_argv(spec, engine.script_dir),
        )

    def _egress_limit(self, run_id: str) -> bool:
        run_egress = self._egress.get(run_id)
        return run_egress is not None and bool(run_egress.proxy.limit)

    @staticmethod
    def _write_script(ctx: RunContext) -> None:
        """The script goes into scratch, root-owned and read-only (the job may still delete it)."""
        path = ctx.scratch_dir / SCRIPT_NAMES[ctx.spec.runtime]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
        with os.fdopen(fd, "wb") as handle:
            handle.write(ctx.spec.script)

    @staticmethod
    def _record(result: RunResult, collected: Collected, evidence: Evidence, engine: Engine) -> None:
        result.exit_code, result.signal = collected.exit_code, collected.signal
        result.vm_start = collected.vm_start
        result.timings.update(collected.timings)
        if collected.vm_note:
            result.engine_note = f"{result.engine_note}; booted cold: {collected.vm_note}"[:500]
        result.cpu_s = None if collected.cpu_s is None else round(collected.cpu_s, 4)
        result.peak_memory_bytes = collected.peak_memory_bytes
        result.peak_file_bytes = collected.peak_file_bytes
        result.evidence["cgroup_peak_memory_bytes"] = collected.cgroup_peak_memory_bytes
        evidence.memory_file_bytes = collected.peak_file_bytes if engine.files_in_memory_limit else None
        evidence.exit_code, evidence.signal = collected.exit_code, collected.signal
        evidence.oom_kills = collected.oom_kills
        evidence.process_cap_hits = collected.process_cap_hits
        evidence.scratch_full = collected.scratch_full
        evidence.output_area_full = collected.output_area_full

    # --- teardown -----------------------------------------------------------------

    def teardown_sandbox(
        self, engine: Engine | None, ctx: RunContext | None, run_id: str, *, release: bool = True
    ) -> list[CleanupCheck]:
        """Stop, remove and audit everything of a sandbox (`ctx`, None if none was made) and, with
        `release`, its admission reservation, held as `run_id`: a run's, or a ready sandbox's
        (runner.ready)."""
        checks: list[CleanupCheck] = []
        if engine is not None and ctx is not None:
            if ctx.process is not None and ctx.process.poll() is None:
                engine.stop(ctx, grace_s=0.0)
            for pipe in (ctx.process.stdout, ctx.process.stderr) if ctx.process else ():
                if pipe is not None:
                    pipe.close()
            checks.extend(engine.teardown(ctx))
        run_egress = self._egress.get(run_id)
        if run_egress is not None:  # after the sandbox: nothing of the run can reach it now
            closed, detail = run_egress.close()
            checks.append(CleanupCheck("egress", closed, detail))
        run_dir = ctx.run_dir if ctx is not None else self.runs_dir / run_id
        if run_dir.exists() and not hostfs.mounts_under(run_dir):  # never recurse into a live mount
            shutil.rmtree(run_dir, ignore_errors=True)
        checks.append(
            CleanupCheck(
                "staging",
                not run_dir.exists(),
                "run directory removed" if not run_dir.exists() else f"{run_dir} remains",
            )
        )
        if release:
            self.admission.release(run_id)
            held = self.admission.holds(run_id)
            checks.append(
                CleanupCheck("slot", not held, "admission slot released" if not held else "slot still reserved")
            )
        return checks


def program_argv(spec: RunSpec, script_dir: str = "/tmp") -> list[str]:
    """The program's argv: interpreter, its options, the script, then the run's own arguments
    (sys.argv[1:] in Python, process.argv.slice(2) in Node), each one element, never parsed."""
    script = f"{script_dir}/{SCRIPT_NAMES[spec.runtime]}"
    program = [CELL_PROGRAMS[spec.runtime], script] if spec.cell else [script]  # a cell's: runner.cells
    if spec.runtime == "python":
        return ["/usr/bin/python3", *program, *spec.args]
    heap_mib = max(16, int(spec.limits.memory_mib * 0.6))
    return ["/usr/bin/node", f"--max-old-space-size={heap_mib}", *program, *spec.args]


@contextmanager
def _ours(code: str, step: str) -> Iterator[None]:
    """A host failure (OSError: a full disk, a mount refused) in a step before the program runs:
    ours, a retryable sandbox error named by the step, never the program's."""
    try:
        yield
    except OSError as exc:
        raise RunnerError(code, f"{step} failed, so the program never ran: {exc}", retryable=True) from exc


def _v8_heap_exhausted(collected: Collected, streams: dict[str, Stream]) -> bool:
    """Node aborts (SIGABRT) with this line when its heap cap (set below the memory limit) is hit."""
    return collected.signal == 6 and b"JavaScript heap out of memory" in bytes(streams["stderr"].tail)


def _evidence_dict(ev: Evidence, streams: dict[str, Stream]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "stopped_by": ev.stopped_by,
        "oom_kills": ev.oom_kills,
        "process_cap_hits": ev.process_cap_hits,
        "scratch_full": ev.scratch_full,
        "output_area_full": ev.output_area_full,
        "output_files_over_cap": ev.output_files_over_cap,
        "oversize_output": ev.oversize_output,
        "output_too_deep": ev.output_too_deep,
        "guest_oom_kill": ev.guest_oom_kill,
    }
    if ev.egress_limit:
        out["egress_limit"] = ev.egress_limit
    if ev.state_oversize is not None or ev.restoring_state:
        out.update(state_oversize=ev.state_oversize, restoring_state=ev.restoring_state)
    if ev.stop_latency_s is not None:
        out["stop_latency_s"] = round(ev.stop_latency_s, 4)
        out["kill_method"] = ev.kill_method
    if ev.stream_cap_hit:
        stream = streams[ev.stream_cap_hit]
        out["bytes_read_past_cap"] = stream.total - stream.cap
    return out
