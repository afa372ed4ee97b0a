"""Watching a started sandbox: its stdout and stderr streamed within their caps as chunks, its
figures sampled (and some recorded), and it stopped when a limit, the deadline, a cancel or its
engine says so (runner.stopping decides which reason stands). What it sees goes into the run's
Evidence, which runner.classify turns into an outcome; the supervisor owns everything around it."""

from __future__ import annotations

import errno
import os
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner.classify import Evidence
from runner.engines.base import Engine, RunContext
from runner.spec import Phase, RunnerError
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


def record_interval(t: float) -> float:
    """Seconds until the next recorded sample, `t` seconds after the program started."""
    return next(interval for until, interval in RECORD_INTERVALS_S if t < until)


@dataclass
class Stream:
    """One of the program's output streams: what was read of it, what of it is kept."""

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


def announce(emit: EventSink, phase: Phase, **detail: Any) -> None:
    emit({"type": "state", "state": phase.value, **detail})


@dataclass
class Watch:
    """One started sandbox, watched until it is done; `egress_limit` says whether its egress proxy
    has stopped it (a cap passed), and `stop_grace_s` is the grace a stop gives but a cap's."""

    engine: Engine
    ctx: RunContext
    streams: dict[str, Stream]
    evidence: Evidence
    emit: EventSink
    cancelled: Callable[[], bool]
    stop_grace_s: float
    egress_limit: Callable[[], bool]

    def until_done(self, t_start: float) -> tuple[float | None, float | None]:
        """Stream, sample and enforce until the sandbox is done. Returns when the program started
        (after a VM's boot; None if it never did) and the CPU seconds used by then."""
        engine, ctx, streams, emit = self.engine, self.ctx, self.streams, self.emit
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
                    self._read(key, selector)
                now = time.monotonic()
                if ready_at is None and engine.ready(ctx):
                    ready_at, deadline = now, now + ctx.limits.wall_timeout_s
                    # The boot's CPU time is not the job's: the job's is counted from here.
                    cpu_at_ready = engine.sample(ctx).cpu_s if engine.has_boot_phase else 0.0
                    if engine.has_boot_phase:
                        announce(emit, Phase.RUNNING, boot_s=round(now - t_start, 3))
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
                self._enforce(usage, ready, now, boot_deadline, deadline)
                if process.poll() is not None:
                    exited_at = exited_at or now
                    if now - exited_at > 2.0:
                        # The program is gone but something still holds a pipe: stop waiting for EOF.
                        self.stop(self.evidence.stopped_by or "exit")
                        break
        finally:
            selector.close()
        return ready_at, cpu_at_ready

    def _enforce(self, usage: Usage | None, ready: bool, now: float, boot_deadline: float, deadline: float) -> None:
        """Stop the run if a limit says so (runner.stopping decides which); the first reason stands."""
        engine, ctx, evidence = self.engine, self.ctx, self.evidence
        stopped = evidence.stopped_by is not None
        failure = None if stopped else engine.failure(ctx)
        reason = stop_reason(
            stopped=stopped,
            cancelled=not stopped and self.cancelled(),
            engine_failed=failure is not None,
            ready=ready,
            now=now,
            boot_deadline=boot_deadline,
            deadline=deadline,
            cpu_time_s=ctx.limits.cpu_time_s,
            usage=usage,
            egress_limit=self.egress_limit(),
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
            self.stop(reason)

    def _read(self, key: selectors.SelectorKey, selector: selectors.BaseSelector) -> None:
        fd, evidence = key.fd, self.evidence
        stream: Stream | None = key.data
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
            self.engine.on_control(self.ctx, fd, data)
            return
        offset = stream.total
        stream.total += len(data)
        room = stream.cap - offset  # every byte before `offset` within the cap is published
        if room > 0:
            kept = data[:room]
            stream.publish(kept)
            self.emit({"type": "chunk", "stream": stream.name, "offset": offset, "data": kept})
        if stream.total > stream.cap:
            # Past its cap, the stream is not read again: the sandbox is being stopped, and the
            # pipe's remains are dropped with it at teardown.
            selector.unregister(fd)
            if evidence.stopped_by is None:
                self.stop(stream.name)
                evidence.stream_cap_hit = stream.name
                evidence.bytes_at_cap_time = stream.total

    def stop(self, reason: str) -> None:
        """Stop the sandbox now, for `reason` (a cap passed: without its grace)."""
        evidence = self.evidence
        evidence.stopped_by = reason
        evidence.stop_requested_at = time.monotonic()
        method = self.engine.stop(self.ctx, grace_s=0.0 if reason in ("stdout", "stderr") else self.stop_grace_s)
        evidence.stop_latency_s = time.monotonic() - evidence.stop_requested_at
        evidence.kill_method = method
