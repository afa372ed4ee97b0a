"""The spawner starts a program with exactly the fds, limits and uid it is asked for, reports how
it ended, takes what it started down with it when the supervisor is gone, and reaps the orphans
of what it started; 50 supervised runs leave no zombie and no process reparented beyond it."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time

import psutil
import pytest

from runner.config import PROJECT_ROOT
from runner.host.spawner import Spawned, Spawner, SpawnError, Steps
from tests.conftest import child_env

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


def _gone(pid: int, *, timeout_s: float) -> bool:
    """Whether `pid` no longer exists (not even as a zombie) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and psutil.pid_exists(pid):
        time.sleep(0.01)
    return not psutil.pid_exists(pid)


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
    with pytest.raises(SpawnError, match="No such file") as missing:
        _run(["/nonexistent/program"])
    assert missing.value.step == "exec"
    with pytest.raises(SpawnError, match="absolute") as refused:
        _run(["sh", "-c", "true"])
    assert refused.value.step == "spawner"


@pytest.mark.parametrize(
    ("steps", "step", "words"),
    [
        (Steps(cgroup_procs=["/nonexistent/cgroup.procs"], uid=NOBODY), "cgroups", "joining the run's cgroups"),
        (Steps(cgroup_procs=[], uid=NOBODY, rlimits=[(resource.RLIMIT_NOFILE, -5)]), "drop",
         "setting its limits and dropping to the sandbox uid"),
    ],
)  # fmt: skip
def test_a_launcher_that_fails_before_exec_names_its_step(steps: Steps, step: str, words: str) -> None:
    with pytest.raises(SpawnError) as failed:
        _run(["/bin/true"], steps=steps)
    assert failed.value.step == step
    assert f"the sandbox launcher failed {words}: " in str(failed.value)


def test_when_the_supervisor_is_gone_what_the_spawner_started_is_killed() -> None:
    spawner = Spawner()
    process, read = _run(["/bin/sleep", "60"], spawner=spawner)
    os.close(read)
    spawner.sock.close()  # as when the supervisor's process dies
    assert spawner.process.wait(timeout=10) == 0
    assert _gone(process.pid, timeout_s=10)


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


def test_an_orphan_of_what_it_started_is_adopted_by_the_spawner_and_reaped() -> None:
    """bwrap's monitor leaves the init of its pid namespace an orphan (it returns once that init has
    reported the program's exit): the spawner is the subreaper that collects such orphans, so none
    goes to the host's init, or stays a zombie where there is no init."""
    spawner = Spawner()
    # The orphan holds no end of the output pipe (which would keep the read below waiting for it).
    process, read = _run(["/bin/sh", "-c", "sleep 3 >/dev/null 2>&1 & echo $!"], spawner=spawner)
    orphan = int(_output(read))
    assert process.wait(timeout=10) == 0  # the program's own end is still reported
    assert psutil.Process(orphan).ppid() == spawner.process.pid  # adopted here, not by the host's init
    assert _gone(orphan, timeout_s=20)  # reaped, not a zombie (a zombie's pid still exists)
    spawner.sock.close()
    assert spawner.process.wait(timeout=10) == 0


# A supervisor's process as a subreaper: every process its runs leave orphaned comes to it, so what
# it finds among its children after the runs is what would otherwise go to the host's init.
FIFTY_RUNS = """
import ctypes, json, os, time
import psutil
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
from runner.host.admission import Admission, Capacity
from runner.config import paths_from_env
from runner.spec import RunSpec
from runner.supervisor import Supervisor
paths = paths_from_env()
supervisor = Supervisor(paths=paths, admission=Admission(paths.host_state_dir / "admission",
                        Capacity(slots=4, memory_mib=4096, cpus=16.0, wait_s=120.0)))
outcomes = []
for index in range(50):
    script = b"print(1)" if index % 2 else b"import subprocess; subprocess.Popen(['sleep', '0.1'])"
    outcomes.append(supervisor.run(RunSpec(runtime="python", script=script, engine="namespace")).outcome.value)
time.sleep(0.5)
me = psutil.Process()
spawners = set()
for child in me.children():
    try:
        if "spawner.py" in " ".join(child.cmdline()):
            spawners.add(child.pid)
    except psutil.Error:  # a zombie has no command line: a stray, below
        continue
strays = []
for child in me.children(recursive=True):
    if child.pid in spawners:
        continue
    try:
        strays.append([child.pid, child.ppid(), child.status(), child.name()])
    except psutil.NoSuchProcess:
        continue
reaped = []
while True:
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if not pid:
        break
    reaped.append(pid)
print(json.dumps({"outcomes": outcomes, "strays": strays, "reaped_here": reaped, "spawners": len(spawners)}))
"""


@pytest.mark.images
def test_fifty_runs_leave_no_zombie_and_no_process_reparented_beyond_the_spawner() -> None:
    proc = subprocess.run([sys.executable, "-c", FIFTY_RUNS], cwd=PROJECT_ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["outcomes"] == ["succeeded"] * 50
    assert found["spawners"] >= 1
    assert found["strays"] == [] and found["reaped_here"] == [], found
