"""The spawner starts a program with exactly the fds, limits and uid it is asked for, reports how
it ended, and takes what it started down with it when the supervisor is gone."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time

import pytest

from runner.host.spawner import Spawned, Spawner, SpawnError, Steps

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the spawner drops to another uid: needs root")


def _run(argv: list[str], *, steps: Steps | None = None, extra: dict[int, int] | None = None,
         spawner: Spawner | None = None) -> tuple[Spawned, int]:  # fmt: skip
    """Start `argv` with stdout on a pipe; returns the process and the pipe's read end."""
    read, write = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        fds = {0: null, 1: write, 2: write, **(extra or {})}
        process = (spawner or Spawner.here()).spawn(argv, env={"PATH": "/usr/bin:/bin"}, fds=fds,
                                                    steps=steps or Steps(cgroup_procs=[], uid=NOBODY))  # fmt: skip
    finally:
        os.close(write)
        os.close(null)
    return process, read


def _output(read: int) -> str:
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    return b"".join(chunks).decode()


def test_a_program_runs_as_the_slot_uid_with_its_limits_and_its_exit_status_is_reported() -> None:
    steps = Steps(cgroup_procs=[], uid=NOBODY, rlimits=[(resource.RLIMIT_NOFILE, 77)])
    process, read = _run(["/bin/sh", "-c", "id -u; id -G; ulimit -n; cat /proc/self/oom_score_adj; exit 3"],
                         steps=steps)  # fmt: skip
    assert _output(read).split() == [str(NOBODY), str(NOBODY), "77", "1000"]
    assert process.wait(timeout=10) == 3 and process.returncode == 3 and process.poll() == 3


def test_only_the_fds_asked_for_are_open_in_the_program_at_their_numbers() -> None:
    side_read, side_write = os.pipe()
    number = 9
    process, read = _run(["/bin/sh", "-c", f"echo side >&{number}; ls /proc/self/fd"], extra={number: side_write})
    os.close(side_write)
    listed = sorted(int(fd) for fd in _output(read).split())
    assert _output(side_read) == "side\n"
    # 0, 1, 2, the fd asked for, and the one `ls` opens to list the directory (the lowest free)
    assert listed == [0, 1, 2, 3, number], listed
    assert process.wait(timeout=10) == 0


def test_a_program_killed_by_a_signal_reports_it_negative_like_popen() -> None:
    process, read = _run(["/bin/sleep", "60"])
    assert process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.05)
    process.kill()
    assert process.wait(timeout=10) == -signal.SIGKILL
    os.close(read)
    process.kill()  # once it has ended, a signal goes nowhere (never to a recycled pid)


def test_a_program_that_cannot_be_started_is_an_error_not_a_process() -> None:
    with pytest.raises(SpawnError, match="No such file"):
        _run(["/nonexistent/program"])
    with pytest.raises(SpawnError, match="absolute"):
        _run(["sh", "-c", "true"])


def test_when_the_supervisor_is_gone_what_the_spawner_started_is_killed() -> None:
    spawner = Spawner()
    process, read = _run(["/bin/sleep", "60"], spawner=spawner)
    os.close(read)
    spawner.sock.close()  # as when the supervisor's process dies
    assert spawner.process.wait(timeout=10) == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{process.pid}"):
        time.sleep(0.01)
    assert not os.path.exists(f"/proc/{process.pid}")


def test_targets_among_the_helpers_own_fd_numbers_still_land_where_asked() -> None:
    """Low numbers (3-9) are where the helper keeps its socket, selector and pipes."""
    pipes = {number: os.pipe() for number in range(3, 10)}  # dash redirects single digits only
    script = "; ".join(f"echo {number} >&{number}" for number in pipes)
    process, read = _run(["/bin/sh", "-c", script], extra={n: w for n, (_, w) in pipes.items()})
    for _, write in pipes.values():
        os.close(write)
    assert process.wait(timeout=10) == 0, _output(read)
    assert {number: _output(r) for number, (r, _) in pipes.items()} == {n: f"{n}\n" for n in pipes}
    os.close(read)
