"""The supervisor's own costs on the host: what it holds of a run's output for its caller, and
what it reserves for the run at admission. Real namespace sandboxes."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace
from typing import Any

import pytest

from runner.config import paths_from_env
from runner.host.admission import Admission, Capacity
from runner.spec import DEFAULT_MAXIMA, MIB, Limits, Outcome, RunSpec
from runner.supervisor import Supervisor

pytestmark = pytest.mark.images

FLOOD = 64 * MIB
FLOOD_SCRIPT = b"""
import sys
block = b"x" * (1 << 20)
for _ in range(64):
    sys.stdout.buffer.write(block)
"""


class Chunks:
    """An event sink that, like the web worker's log, takes every chunk and holds none of them."""

    def __init__(self) -> None:
        self.bytes = {"stdout": 0, "stderr": 0}
        self.contiguous = True
        self.final: dict[str, Any] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        if event["type"] == "chunk":
            self.contiguous &= event["offset"] == self.bytes[event["stream"]]
            self.bytes[event["stream"]] += len(event["data"])
        elif event["type"] == "final":
            self.final = event["result"]


def _supervisor(capacity: Capacity | None = None, **maxima: Any) -> Supervisor:
    paths = paths_from_env()
    admission = None if capacity is None else Admission(paths.host_state_dir / "admission", capacity)
    return Supervisor(paths=paths, admission=admission, maxima=replace(DEFAULT_MAXIMA, **maxima))


def test_without_keep_output_a_64_mib_stdout_is_streamed_but_not_held() -> None:
    supervisor = _supervisor(stdout_max_bytes=FLOOD)
    limits = Limits(stdout_max_bytes=FLOOD, wall_timeout_s=120, cpu_time_s=120)
    chunks = Chunks()
    tracemalloc.start()
    try:
        result = supervisor.run(
            RunSpec(runtime="python", script=FLOOD_SCRIPT, limits=limits, engine="namespace"),
            on_event=chunks,
            keep_output=False,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.outcome is Outcome.SUCCEEDED, result.to_json()
    assert chunks.bytes["stdout"] == FLOOD and chunks.contiguous
    assert result.stdout_bytes == FLOOD and not result.stdout_truncated
    assert result.stdout == b"" and result.stderr == b""
    assert chunks.final["stdout"] == "" and chunks.final["stdout_bytes"] == FLOOD
    assert peak < 20 * 10**6, f"the supervisor held {peak / MIB:.1f} MiB at its peak"


def test_without_keep_output_the_counts_and_flags_past_the_cap_are_as_with_it() -> None:
    limits = Limits(stdout_max_bytes=100_000, stderr_max_bytes=1000)
    script = b"import sys\nsys.stderr.write('e' * 500)\nsys.stdout.write('x' * 10**6)\n"
    results = []
    for keep in (True, False):
        chunks = Chunks()
        result = _supervisor().run(
            RunSpec(runtime="python", script=script, limits=limits, engine="namespace"),
            on_event=chunks,
            keep_output=keep,
        )
        results.append((result.outcome, result.stdout_bytes, result.stdout_truncated, result.stderr_bytes,
                        result.stderr_truncated, chunks.bytes))  # fmt: skip
    kept, streamed = results
    assert kept == streamed
    assert kept[:3] == (Outcome.OUTPUT_LIMIT, 100_000, True) and kept[5] == {"stdout": 100_000, "stderr": 500}


@pytest.mark.parametrize("runtime", ["python", "node"])
def test_a_flood_is_read_one_byte_past_its_cap_and_no_further(runtime: str) -> None:
    scripts = {
        "python": b"import sys\nblock = b'x' * 65536\nwhile True:\n    sys.stdout.buffer.write(block)\n",
        "node": b"const b = Buffer.alloc(65536, 120);\nfor (;;) require('fs').writeSync(1, b);\n",
    }
    limits = Limits(stdout_max_bytes=MIB, wall_timeout_s=30)
    chunks = Chunks()
    result = _supervisor().run(
        RunSpec(runtime=runtime, script=scripts[runtime], limits=limits, engine="namespace"), on_event=chunks
    )
    assert result.outcome is Outcome.OUTPUT_LIMIT and result.stdout_truncated
    assert result.stdout_bytes == MIB == len(result.stdout) == chunks.bytes["stdout"]
    assert result.evidence["bytes_read_past_cap"] == 1
    assert result.cleanup_ok


def test_without_keep_output_node_running_out_of_heap_is_still_a_memory_limit() -> None:
    """The V8 line is found in the small stderr tail the supervisor always keeps."""
    script = b"""
process.stderr.write("x".repeat(50000) + "\\n");  // well past the tail, within a pipe's buffer
process.stderr.write("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\\n");
process.abort();
"""
    result = _supervisor().run(RunSpec(runtime="node", script=script, engine="namespace"), keep_output=False)
    assert result.signal == 6 and result.stderr == b""
    assert result.outcome is Outcome.MEMORY_LIMIT, result.to_json()


def test_a_microvm_is_admitted_for_all_its_cgroup_allows_not_a_namespace_sandboxs_share() -> None:
    """Admission happens before anything boots, so this holds on a host that cannot boot a VM."""
    limits = Limits()
    probe = _supervisor()
    namespace, vm = (probe.engines[name].reservation(limits) for name in ("namespace", "smolvm"))
    room = (namespace.memory_mib + vm.memory_mib) // 2
    supervisor = _supervisor(Capacity(slots=4, memory_mib=room, cpus=64.0, wait_s=0.0))
    refused = supervisor.run(
        RunSpec(runtime="python", script=b"pass", limits=limits, engine="smolvm"), keep_output=False
    )
    assert refused.outcome is Outcome.REJECTED_CAPACITY, refused.to_json()
    assert refused.error is not None and f"needs {vm.memory_mib}" in refused.error.message
    admitted = supervisor.run(
        RunSpec(runtime="python", script=b"pass", limits=limits, engine="namespace"), keep_output=False
    )
    assert admitted.outcome is Outcome.SUCCEEDED, admitted.to_json()


def test_admission_reserves_the_engines_share_plus_the_streams_the_supervisor_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    supervisor = _supervisor(Capacity(slots=4, memory_mib=8192, cpus=64.0, wait_s=60.0))
    asked: list[tuple[int, float]] = []
    acquire = supervisor.admission.acquire

    def recording(run_id: str, *, memory_mib: int, cpus: float, **kwargs: Any) -> Any:
        asked.append((memory_mib, cpus))
        return acquire(run_id, memory_mib=memory_mib, cpus=cpus, **kwargs)

    monkeypatch.setattr(supervisor.admission, "acquire", recording)
    limits = Limits(stdout_max_bytes=4 * MIB, stderr_max_bytes=2 * MIB)
    share = supervisor.engines["namespace"].reservation(limits)
    for keep in (True, False):
        spec = RunSpec(runtime="python", script=b"pass", limits=limits, engine="namespace")
        assert supervisor.run(spec, keep_output=keep).outcome is Outcome.SUCCEEDED
    assert asked == [(share.memory_mib + 6, share.cpus), (share.memory_mib, share.cpus)]


def test_a_process_has_one_supervisor_which_a_forked_child_or_a_new_environment_does_not_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    first = Supervisor.here()
    assert Supervisor.here() is first  # a worker's runs share it, and through it the ready pool
    monkeypatch.setenv("CORDON_STOP_GRACE_S", "0.25")
    changed = Supervisor.here()
    assert changed is not first and changed.settings.stop_grace_s == 0.25
    monkeypatch.undo()
    assert Supervisor.here() is first
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own, never its parent's (whose threads and pool it has not)
        os.write(write, b"1" if Supervisor.here() is not first else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(pid, 0)
