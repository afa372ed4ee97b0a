"""Which limit stops a run first: the supervisor's decision, as a pure function of what it saw.

No clock and no I/O here: the supervisor reads the time, samples the sandbox and asks. When
several reasons apply in the same round, precedence is fixed:

    cancel > engine_error > boot_timeout > deadline > egress > cpu > oom > process_cap

The sandbox's own trouble (cancel, engine failure, a boot that never finished) comes first,
then the wall clock, then the egress proxy's caps (it says at once when one is passed), then
what a sample shows. Until the program has started there is no wall
deadline and no usage limit, only the boot deadline; once it has, the boot deadline is gone.
A stream passing its byte cap is decided where the stream is read, not here. The first reason
stands: a run already stopped is not stopped again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """One sample of the sandbox, counted from when the program started."""

    cpu_s: float | None  # CPU seconds since the program started; None when the host cannot tell
    oom_kills: int = 0
    process_cap_hits: int = 0


def stop_reason(
    *,
    stopped: bool,
    cancelled: bool,
    engine_failed: bool,
    ready: bool,
    now: float,
    boot_deadline: float,
    deadline: float,
    cpu_time_s: float,
    usage: Usage | None = None,
    egress_limit: bool = False,
) -> str | None:
    """Why the run must stop now (the `Evidence.stopped_by` word), or None to let it go on.

    `ready` says whether the program has started (a VM has booted); `deadline` is the wall
    deadline, which counts only once it has. `usage` is this round's sample, None when the
    round took none: the limits it carries are checked only on a round that sampled.
    `egress_limit` says the run's egress proxy saw a cap passed (bytes or connections).
    """
    if stopped:
        return None
    if cancelled:
        return "cancel"
    if engine_failed:
        return "engine_error"
    if not ready:
        return "boot_timeout" if now >= boot_deadline else None
    if now >= deadline:
        return "deadline"
    if egress_limit:
        return "egress"
    if usage is None:
        return None
    if usage.cpu_s is not None and usage.cpu_s >= cpu_time_s:
        return "cpu"
    if usage.oom_kills > 0:
        return "oom"
    if usage.process_cap_hits > 0:
        return "process_cap"
    return None
