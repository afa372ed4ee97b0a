"""The supervisor: one run from admission to audit, with every decision made outside the sandbox.

admit -> stage -> prepare -> start -> stream + sample (deadline, CPU, caps, cancel) -> stop
-> collect -> export -> classify -> teardown + audit. The monotonic clock is the host's; the
program never owns the timer, the kill or the cleanup decision.
"""

from __future__ import annotations

import errno
import os
import re
import selectors
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.cells import CELL_PROGRAMS, SESSION_DIR, export_session, stage_state
from runner.classify import Evidence, classify
from runner.config import Paths, paths_from_env
from runner.egress.policy import Policy, policy_problem
from runner.egress.proxy import Caps, EgressSettings, RunEgress
from runner.engines.base import Collected, EgressReach, Engine, HandOverError, RunContext
from runner.env import ConfigError, env_bool, env_float, env_int, env_str
from runner.files import export_outputs, stage_inputs
from runner.host import hostfs
from runner.host.admission import Admission, Capacity
from runner.host.locks import RunLock
from runner.images import ImageError, ImageRef, ImageStore
from runner.ready import Ready, ReadyPool, ReadySettings
from runner.registry import Registry
from runner.spec import (
    MIB,
    RUNTIMES,
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
from runner.stopping import Usage, stop_reason

Event = dict[str, Any]
EventSink = Callable[[Event], None]
_READ_SIZE = 1 << 16
# What of each stream the supervisor keeps even when it does not keep the streams: enough of
# stderr for the sandbox's own start-up complaint and for the V8 heap-exhaustion line.
TAIL_BYTES = 4096
# The run's figures are read this often, to enforce the CPU limit and to see OOM kills and the
# process cap; the first read waits as long, so a program that ends sooner costs none.
SAMPLE_INTERVAL_S = 0.05
# How often a reading is also recorded (a `sample` event), by time since the program started:
# densely at first, so that a half-second run has a curve, then ever more sparsely, so that a
# five-minute run has some 360 rows, not 6000.
RECORD_INTERVALS_S = ((2.0, 0.05), (10.0, 0.25), (float("inf"), 1.0))
# The script's file name in the sandbox's script directory, by runtime.
SCRIPT_NAMES = {"python": "main.py", "node": "main.js"}


def record_interval(t: float) -> float:
    """Seconds until the next recorded sample, `t` seconds after the program started."""
    return next(interval for until, interval in RECORD_INTERVALS_S if t < until)


@dataclass(frozen=True)
class SupervisorSettings:
    """The settings every engine shares; each engine reads its own (Engine.from_host)."""

    uid_base: int = 1_900_000
    stop_grace_s: float = 0.5
    cgroup_parent: str = "cordon"
    require_vm: bool = False

    @classmethod
    def from_env(cls) -> SupervisorSettings:
        return cls(
            uid_base=env_int("CORDON_SANDBOX_UID_BASE", 1_900_000, minimum=1000),
            cgroup_parent=_cgroup_parent(env_str("CORDON_CGROUP_PARENT", "cordon")),
            stop_grace_s=env_float("CORDON_STOP_GRACE_S", 0.5, minimum=0.0),
            require_vm=env_bool("CORDON_REQUIRE_VM", False),
        )


def _cgroup_parent(name: str) -> str:
    """One cgroup directory name: a run's cgroups live under it, and a sweep reclaims what is there."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ConfigError(f"CORDON_CGROUP_PARENT must be one directory name (letters, digits, ._-); got {name!r}")
    return name


@dataclass
class _Stream:
    name: str
    cap: int
    keep: bool = True  # hold every published byte (up to the cap) for the RunResult
    kept: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)  # the last published bytes, always
    total: int = 0  # bytes read, including the one that passed the cap

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def publish(self, data: bytes) -> None:
        if self.keep:
            self.kept += data
        self.tail += data
        del self.tail[:-TAIL_BYTES]


class Supervisor:
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

    def check_sandbox_paths(self) -> None:
        """Refuse to go on (ConfigError, the directory named) when a sandbox's uid cannot reach a
        directory its sandbox is made in: every run's setup would fail. Asked at start-up (a
        worker's, the CLI's) and by the doctor; one process as that uid, so not once per run."""
        uid = self.settings.uid_base
        paths = {path for engine in self.engines.values() for path in engine.sandbox_uid_paths(self.views_dir)}
        for path in sorted(paths):
            blocked = hostfs.untraversable(path, uid)
            if blocked is not None:
                st = blocked.stat()
                raise ConfigError(
                    f"the sandboxes' uid ({uid} and up) cannot enter {blocked} (mode {st.st_mode & 0o7777:04o}, "
                    f"owner uid {st.st_uid}), on the way to {path}: every run's sandbox would fail to set up. "
                    f"Let others traverse it (chmod o+x {blocked}) or set CORDON_HOST_STATE_DIR elsewhere"
                )

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
        emit = on_event or (lambda event: None)
        started = time.monotonic()
        result = RunResult(outcome=Outcome.SANDBOX_ERROR, run_id=run_id, limits=spec.limits)
        lock = RunLock(self.locks_dir, run_id)
        lock.acquire()
        pool = self._ready_pool() if self.ready_settings.enabled else None
        if pool is not None:
            pool.run_begins()
        ctx: RunContext | None = None
        engine: Engine | None = None
        ready: Ready | None = None
        ready_checks: list[CleanupCheck] = []  # a ready sandbox's that failed at hand-over
        fell_back = False
        evidence = Evidence()
        streams = {
            "stdout": _Stream("stdout", spec.limits.stdout_max_bytes, keep=keep_output),
            "stderr": _Stream("stderr", spec.limits.stderr_max_bytes, keep=keep_output),
        }
        try:
            self._validate(spec)
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
            image = self._image(spec.image_name)
            result.image = ImageInfo(image.name, image.digest)
            need = engine.reservation(spec.limits, cell=spec.cell)
            # Streams kept for the result are this process's memory, on top of the sandbox's.
            kept_mib = -(-(spec.limits.stdout_max_bytes + spec.limits.stderr_max_bytes) // MIB) if keep_output else 0
            memory_mib = need.memory_mib + kept_mib
            ready, cold_reason = self._claim_ready(engine, spec, image, run_id)
            reservation = None

            def make_room() -> None:
                given = self._give_back_room(image, spec.limits, memory_mib)
                if given:
                    result.evidence.setdefault("room_given_back", []).extend(given)

            if ready is not None:
                ctx = ready.for_run(run_id, spec, program_argv(spec, engine.script_dir))
                try:
                    reservation = self.admission.acquire(
                        run_id, memory_mib=memory_mib, cpus=need.cpus, cancelled=cancelled, take=ready.id,
                        on_wait=make_room,
                    )  # fmt: skip
                except RunnerError as exc:
                    if exc.code != "ready_reservation_lost":
                        raise
                    failure = self._abandon(engine, ctx, ready, ready_checks, exc.message)
                else:
                    _announce(emit, Phase.ADMITTED, slot=reservation.slot)
                    _announce(emit, Phase.STARTING)
                    failure = self._hand_over(engine, ctx, ready, result, ready_checks)
                if failure:
                    cold_reason, ctx, fell_back = f"its ready sandbox failed at hand-over ({failure})", None, True
            if reservation is None:
                reservation = self.admission.acquire(
                    run_id, memory_mib=memory_mib, cpus=need.cpus, cancelled=cancelled, on_wait=make_room
                )
                _announce(emit, Phase.ADMITTED, slot=reservation.slot)
            if ctx is None:
                if cold_reason:
                    result.engine_note = f"{result.engine_note}; sandbox started cold: {cold_reason}"[:500]
                ctx = self._stage(spec, run_id, reservation.slot, image, engine)
                if spec.egress:
                    opened = RunEgress.open(Policy.parse(spec.egress), Caps.of(spec.limits), self.egress)
                    self._egress[run_id] = opened
                    ctx.egress = EgressReach(opened.namespace.fd, opened.env)
                if ready is None:
                    _announce(emit, Phase.STARTING)
                with _ours("sandbox_prepare_failed", "preparing the sandbox (its cgroups and mounts)"):
                    engine.prepare(ctx)
                with _ours("staging_failed", "writing the program's script"):
                    self._write_script(ctx)
                ctx.process = engine.start(ctx)
                result.sandbox_start = "cold"
            result.sandbox_id = f"{engine.name}:{run_id}"
            result.evidence["host_uid"] = ctx.uid
            t_start = time.monotonic()
            result.timings["start_s"] = t_start - started
            _announce(emit, Phase.RUNNING)
            ready_at, cpu_at_ready = self._supervise(engine, ctx, streams, evidence, emit, cancelled, t_start)
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
            _announce(emit, Phase.EXPORTING)
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
            result.cleanup = [*ready_checks, *self.teardown_sandbox(engine, ctx, run_id)]
            closed_egress = self._egress.pop(run_id, None)  # closed by the teardown; its record is read below
            if ready is not None and pool is not None:
                result.cleanup.append(pool.finished(ready, run_id, fell_back=fell_back))
            if pool is not None:
                pool.run_ends(run_id, result.sandbox_start or "", time.monotonic() - started)
            lock.release()
        if closed_egress is not None:
            result.egress = closed_egress.proxy.summary()
            evidence.egress_limit = closed_egress.proxy.limit
        evidence.cancelled = evidence.cancelled or evidence.stopped_by == "cancel"
        result.outcome, result.reason = classify(evidence, spec.limits)
        for stream in streams.values():
            setattr(result, stream.name, bytes(stream.kept))
            setattr(result, f"{stream.name}_bytes", min(stream.total, stream.cap))
            setattr(result, f"{stream.name}_truncated", stream.truncated)
        result.evidence.update(_evidence_dict(evidence, streams))
        result.timings["total_s"] = round(time.monotonic() - started, 4)
        emit({"type": "final", "result": result.to_json()})
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

    # --- streaming and watching ---------------------------------------------------

    def _supervise(
        self,
        engine: Engine,
        ctx: RunContext,
        streams: dict[str, _Stream],
        evidence: Evidence,
        emit: EventSink,
        cancelled: Callable[[], bool],
        t_start: float,
    ) -> tuple[float | None, float | None]:
        """Stream, sample and enforce until the sandbox is done. Returns when the program started
        (after a VM's boot; None if it never did) and the CPU seconds used by then."""
        process = ctx.process
        if process is None or process.stdout is None or process.stderr is None:
            raise RunnerError("engine_failure", "the engine started no process with output pipes", retryable=True)
        selector = selectors.DefaultSelector()
        for pipe, stream in ((process.stdout, streams["stdout"]), (process.stderr, streams["stderr"])):
            os.set_blocking(pipe.fileno(), False)
            selector.register(pipe.fileno(), selectors.EVENT_READ, stream)
        for fd in engine.control_fds(ctx):
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ, None)
        boot_deadline = t_start + engine.boot_timeout_s
        ready_at: float | None = None
        cpu_at_ready: float | None = None
        deadline = float("inf")
        next_sample = t_start + SAMPLE_INTERVAL_S
        next_record = 0.0  # seconds after the program started
        exited_at: float | None = None
        try:
            while selector.get_map():
                now = time.monotonic()
                wake_at = boot_deadline if ready_at is None else deadline
                timeout = max(0.0, min(wake_at, next_sample) - now)
                for key, _ in selector.select(timeout):
                    self._read(key, selector, engine, ctx, evidence, emit)
                now = time.monotonic()
                if ready_at is None and engine.ready(ctx):
                    ready_at, deadline = now, now + ctx.limits.wall_timeout_s
                    # The boot's CPU time is not the job's: the job's is counted from here.
                    cpu_at_ready = engine.sample(ctx).cpu_s if engine.has_boot_phase else 0.0
                    if engine.has_boot_phase:
                        _announce(emit, Phase.RUNNING, boot_s=round(now - t_start, 3))
                usage: Usage | None = None
                if now >= next_sample:
                    next_sample = now + SAMPLE_INTERVAL_S
                    sample = engine.sample(ctx)
                    used = None if sample.cpu_s is None else sample.cpu_s - (cpu_at_ready or 0.0)
                    usage = Usage(used, sample.oom_kills, sample.process_cap_hits)
                    if ready_at is not None and now - ready_at >= next_record:
                        t = now - ready_at
                        next_record = t + record_interval(t) - SAMPLE_INTERVAL_S / 2  # a reading's jitter
                        emit({"type": "sample", "t": round(t, 3), "cpu_s": None if used is None else round(used, 4),
                              "memory_bytes": sample.memory_bytes, "file_bytes": sample.file_bytes})  # fmt: skip
                ready = ready_at is not None
                self._enforce(engine, ctx, evidence, cancelled, usage, ready, now, boot_deadline, deadline)
                if process.poll() is not None:
                    exited_at = exited_at or now
                    if now - exited_at > 2.0:
                        # The program is gone but something still holds a pipe: stop waiting for EOF.
                        self._stop(engine, ctx, evidence, evidence.stopped_by or "exit")
                        break
        finally:
            selector.close()
        return ready_at, cpu_at_ready

    def _enforce(
        self, engine: Engine, ctx: RunContext, evidence: Evidence, cancelled: Callable[[], bool], usage: Usage | None,
        ready: bool, now: float, boot_deadline: float, deadline: float,
    ) -> None:  # fmt: skip
        """Stop the run if a limit says so (runner.stopping decides which); the first reason stands."""
        stopped = evidence.stopped_by is not None
        failure = None if stopped else engine.failure(ctx)
        reason = stop_reason(
            stopped=stopped,
            cancelled=not stopped and cancelled(),
            engine_failed=failure is not None,
            ready=ready,
            now=now,
            boot_deadline=boot_deadline,
            deadline=deadline,
            cpu_time_s=ctx.limits.cpu_time_s,
            usage=usage,
            egress_limit=self._egress_limit(ctx.run_id),
        )
        if reason == "engine_error":
            evidence.engine_error = failure
        elif reason == "boot_timeout":
            evidence.engine_error = RunnerError(
                "boot_failed",
                f"the sandbox did not boot within {engine.boot_timeout_s:g} s "
                f"(no readiness from {engine.name}); not the program's fault",
                retryable=True,
            )
        if reason is not None:
            self._stop(engine, ctx, evidence, reason)

    def _read(
        self, key: selectors.SelectorKey, selector: selectors.BaseSelector, engine: Engine, ctx: RunContext,
        evidence: Evidence, emit: EventSink,
    ) -> None:  # fmt: skip
        fd = key.fd
        stream: _Stream | None = key.data
        # Never read more than one byte past a stream's cap: that byte proves the cap was passed,
        # and what the program writes after it is neither needed nor read.
        size = _READ_SIZE if stream is None else max(1, min(_READ_SIZE, stream.cap - stream.total + 1))
        try:
            data = os.read(fd, size)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            selector.unregister(fd)
            return
        if stream is None:
            engine.on_control(ctx, fd, data)
            return
        offset = stream.total
        stream.total += len(data)
        room = stream.cap - offset  # every byte before `offset` within the cap is published
        if room > 0:
            kept = data[:room]
            stream.publish(kept)
            emit({"type": "chunk", "stream": stream.name, "offset": offset, "data": kept})
        if stream.total > stream.cap:
            # Past its cap, the stream is not read again: the sandbox is being stopped, and the
            # pipe's remains are dropped with it at teardown.
            selector.unregister(fd)
            if evidence.stopped_by is None:
                self._stop(engine, ctx, evidence, stream.name)
                evidence.stream_cap_hit = stream.name
                evidence.bytes_at_cap_time = stream.total

    def _egress_limit(self, run_id: str) -> bool:
        run_egress = self._egress.get(run_id)
        return run_egress is not None and bool(run_egress.proxy.limit)

    def _stop(self, engine: Engine, ctx: RunContext, evidence: Evidence, reason: str) -> None:
        evidence.stopped_by = reason
        evidence.stop_requested_at = time.monotonic()
        method = engine.stop(ctx, grace_s=0.0 if reason in ("stdout", "stderr") else self.settings.stop_grace_s)
        evidence.stop_latency_s = time.monotonic() - evidence.stop_requested_at
        evidence.kill_method = method

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

    def sweep_bases(self) -> list[str]:
        """Remove what the engines keep between runs and no run is using (`runner sweep --bases`)."""
        return [line for engine in self.engines.values() for line in engine.sweep_kept()]

    def warm_up(self) -> list[str]:
        """Start making what the engines keep between runs, as a worker starts (what was started)."""
        return [name for engine in self.engines.values() for name in engine.warm_up(self.images)]

    def sweep(self) -> list[str]:
        """Reclaim what crashed supervisors left: cgroups, mounts and directories of dead runs."""
        swept: list[str] = []

        def is_live(run_id: str) -> bool:
            # Asked at the moment of each decision, not from a snapshot: a run takes its lock
            # before it creates anything, so whatever exists under a held lock is live.
            return RunLock(self.locks_dir, run_id).is_held()

        for engine in self.engines.values():
            swept.extend(engine.sweep(is_live))
        view_roots = {engine.view_root(self.views_dir) for engine in self.engines.values()}
        places = [(root, "view") for root in sorted(view_roots)] + [(self.runs_dir, "run directory")]
        for directory, what in places:
            for entry in sorted(directory.iterdir()) if directory.is_dir() else ():
                if entry.is_dir() and not is_live(entry.name):
                    for mount in hostfs.mounts_under(entry):
                        hostfs.unmount(mount)
                    if not hostfs.mounts_under(entry):
                        shutil.rmtree(entry, ignore_errors=True)
                    swept.append(f"{what} {entry.name}")
        for lock in sorted(self.locks_dir.glob("*.lock")):
            RunLock(self.locks_dir, lock.name.removesuffix(".lock")).remove_if_stale()
        return swept


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


def _announce(emit: EventSink, phase: Phase, **detail: Any) -> None:
    emit({"type": "state", "state": phase.value, **detail})


def _v8_heap_exhausted(collected: Collected, streams: dict[str, _Stream]) -> bool:
    """Node aborts (SIGABRT) with this line when its heap cap (set below the memory limit) is hit."""
    return collected.signal == 6 and b"JavaScript heap out of memory" in bytes(streams["stderr"].tail)


def _evidence_dict(ev: Evidence, streams: dict[str, _Stream]) -> dict[str, Any]:
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
