"""Turn what the supervisor saw into exactly one Outcome, with the reason in plain words.

Precedence, when several apply, is fixed: whoever stopped the run first wins, then the
strongest evidence of a limit, then the program's own exit status:

    cancelled > sandbox_error > timed_out > cpu_limit > egress_limit (the egress proxy's
    bytes, connections or refused-requests cap) > output_limit (stream cap, output files
    over their caps or in folders nested too deep, a notebook cell's state over its cap)
    > memory_limit (OOM kill)
    > process_limit > disk_limit > failed / succeeded

An egress cap counts whenever it was passed, like a stream cap: the proxy cut the connection
at that moment, so whatever the program did next followed from the cut.

Limits the program merely brushed against (a refused fork, a full disk) count only when the
program did not succeed: a program that handles ENOSPC and exits 0 has succeeded.
"""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass

from runner.spec import MIB, OUTPUT_MAX_DEPTH, Limits, Outcome, RunnerError
from runner.units import size_words


@dataclass
class Evidence:
    """Facts gathered outside the sandbox. Each flag is set only by the supervisor or the kernel."""

    cancelled: bool = False
    engine_error: RunnerError | None = None
    # The first reason the supervisor stopped the run: cancel, deadline, cpu, stdout, stderr,
    # oom, process_cap (or exit, when it only had to reap). First wins; later ones are ignored.
    stopped_by: str | None = None
    stop_requested_at: float | None = None
    stop_latency_s: float | None = None
    kill_method: str | None = None
    stream_cap_hit: str | None = None  # "stdout" or "stderr"
    bytes_at_cap_time: int = 0
    output_files_over_cap: bool = False
    # The first output file export refused for the byte cap, and its (apparent) size.
    oversize_output: str | None = None
    oversize_output_bytes: int = 0
    output_too_deep: str | None = None  # the first output folder export refused for its depth
    output_area_full: bool = False
    # A notebook cell's state passed state_max_bytes (its size as found), or the cell program's
    # marker said the program ended while restoring the state it started from (runner.cells).
    state_oversize: int | None = None
    restoring_state: bool = False
    oom_kills: int = 0
    runtime_heap_exhausted: bool = False  # e.g. V8's "JavaScript heap out of memory" abort
    # In a VM nothing on the host sends the program SIGKILL: the guest kernel's OOM killer does.
    guest_oom_kill: bool = False
    process_cap_hits: int = 0
    scratch_full: bool = False
    # What the program's files held at their peak where they count against the memory limit
    # (a namespace sandbox's tmpfs areas); None where they do not.
    memory_file_bytes: int | None = None
    egress_limit: str = ""  # the egress cap the run passed, as the proxy said it ("more than N bytes in")
    exit_code: int | None = None
    signal: int | None = None


def classify(ev: Evidence, limits: Limits) -> tuple[Outcome, str]:
    if ev.cancelled:
        return Outcome.CANCELLED, "cancelled before it finished"
    if ev.engine_error is not None:
        return ev.engine_error.outcome, f"{ev.engine_error.code}: {ev.engine_error.message}"
    if ev.stopped_by == "deadline":
        return Outcome.TIMED_OUT, f"stopped after the {limits.wall_timeout_s:g} s wall-clock limit"
    if ev.stopped_by == "cpu":
        return Outcome.CPU_LIMIT, f"stopped after using its {limits.cpu_time_s:g} s of CPU time"
    if ev.egress_limit:
        return Outcome.EGRESS_LIMIT, f"stopped when its egress passed its cap ({ev.egress_limit})"
    succeeded = ev.exit_code == 0 and ev.signal is None and ev.stopped_by in (None, "exit")
    if ev.stream_cap_hit:
        cap = limits.stdout_max_bytes if ev.stream_cap_hit == "stdout" else limits.stderr_max_bytes
        return Outcome.OUTPUT_LIMIT, f"stopped when {ev.stream_cap_hit} passed its cap of {size_words(cap)}"
    if ev.output_files_over_cap or ev.oversize_output is not None or ev.output_too_deep is not None:
        return Outcome.OUTPUT_LIMIT, _output_files_reason(ev, limits)
    if ev.state_oversize is not None:
        return Outcome.OUTPUT_LIMIT, (
            f"its state for the next cell is over state_max_bytes ({size_words(limits.state_max_bytes)}); "
            "the next cell starts from the state before it"
        )
    if not succeeded and ev.output_area_full:
        return Outcome.OUTPUT_LIMIT, f"filled its output area of {size_words(limits.output_max_bytes)}"
    if ev.stopped_by == "oom" or ev.oom_kills > 0 or ev.runtime_heap_exhausted or ev.guest_oom_kill:
        return Outcome.MEMORY_LIMIT, _memory_reason(ev, limits)
    if ev.stopped_by == "process_cap" or (not succeeded and ev.process_cap_hits > 0):
        return Outcome.PROCESS_LIMIT, f"hit the cap of {limits.max_processes} processes and threads"
    if not succeeded and ev.scratch_full:
        return Outcome.DISK_LIMIT, f"filled its {limits.disk_mib} MiB of writable space"
    if succeeded:
        return Outcome.SUCCEEDED, "exited 0"
    if ev.signal is not None:
        return Outcome.FAILED, f"killed by its own signal {_signal_name(ev.signal)}"
    return Outcome.FAILED, f"exited with status {ev.exit_code}"


def _memory_reason(ev: Evidence, limits: Limits) -> str:
    """Say so when files held a good part of the memory (1/8 or more): the program alone looks small."""
    reason = f"ran out of its {limits.memory_mib} MiB of memory"
    if ev.restoring_state:
        return reason + (
            " while restoring the state it starts from (the names the cells above left): raise memory_mib, "
            "or restart from nothing"
        )
    files = ev.memory_file_bytes or 0
    if files * 8 >= limits.memory_mib * MIB:
        reason += f", {files / MIB:.1f} MiB of it held by its files in /tmp and /output"
    return reason


def _output_files_reason(ev: Evidence, limits: Limits) -> str:
    """Folders too deep to walk first (what is below them was never counted); then name the file
    that broke the byte cap; else it was the count."""
    if ev.output_too_deep is not None:
        return f"wrote output folders nested more than {OUTPUT_MAX_DEPTH} deep"
    cap = limits.output_max_bytes
    if ev.oversize_output is None:
        return f"wrote more output files than the cap of {limits.output_max_files}"
    if ev.oversize_output_bytes > cap:
        return f"output file {ev.oversize_output} is over the cap of {size_words(cap)}"
    return f"output file {ev.oversize_output} takes the output files over their cap of {size_words(cap)}"


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return str(number)
