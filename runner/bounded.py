"""Host-side work on untrusted input (matching a student's output, rendering an instructor's
markdown), done in a child process that carries its own bounds, so no input can stall the process
that asked for it or outlive it.

`call(job, payload, bounds)` runs `job` ("package.module:function", a pure function of JSON
values that imports no Django) in `python -m runner.bounded`, in the caller's process group and
cgroup. The child dies with the thread that started it (PR_SET_PDEATHSIG, set by setpriv before
Python starts; that thread waits for it, so it dies with its parent) and with its process group
(SIGTERM, SIGINT and SIGHUP back to their defaults before Python starts: a Celery pool process
ignores SIGTERM, and an ignored signal survives exec). Before it reads a byte of its input it
limits its CPU time (RLIMIT_CPU) and its address space (RLIMIT_AS), makes no core file, and lowers
its CPU priority. The parent adds a wall deadline and kills it there. Its input and its answer are
capped in bytes, the input before it is sent.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from runner.config import PROJECT_ROOT

_PR_SET_PDEATHSIG = 1
_EXIT_MEMORY = 3  # the job ran out of its address space (MemoryError)
_EXIT_OUTPUT = 4  # the job's answer was over the cap
_EXIT_ORPHAN = 5  # the parent was gone before the child could tie itself to it
MARK = "runner.bounded"  # in every child's command line: how a test (or an operator) finds them


@dataclass(frozen=True)
class Bounds:
    """What one job may use. `cpu_s` is enforced by the kernel (RLIMIT_CPU), `wall_s` by the
    parent, `memory_mib` as the child's whole address space (the interpreter is about 40 MiB)."""

    cpu_s: int = 2
    wall_s: float = 5.0
    memory_mib: int = 512
    input_max_bytes: int = 4 << 20
    output_max_bytes: int = 4 << 20
    nice: int = 10


class HostWorkError(Exception):
    """A job that gave no answer. `code`: too_large (its input, refused before it started),
    cpu_time, wall_time, memory, output_too_large, failed (it raised; `message` says what)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


def call(job: str, payload: Any, bounds: Bounds) -> Any:
    """The job's answer to `payload` (keyword arguments, as JSON), or HostWorkError."""
    data = json.dumps(payload).encode()
    if len(data) > bounds.input_max_bytes:
        raise HostWorkError("too_large", f"the input is {len(data)} bytes; at most {bounds.input_max_bytes}")
    # setpriv and env (util-linux, coreutils) tie the child to this thread and give it default
    # signals before Python starts, so no signal is missed while the interpreter starts up.
    argv = [
        "setpriv", "--pdeathsig", "KILL", "--", "env", "--default-signal=TERM,INT,HUP", "--",
        sys.executable, "-E", "-s", "-m", MARK, job, str(os.getpid()), str(bounds.cpu_s), str(bounds.memory_mib),
        str(bounds.output_max_bytes), str(bounds.nice),
    ]  # fmt: skip
    # The project's own code first on the path (cwd, with -m), whichever checkout asks; no
    # environment of the caller's (its secrets, PYTHON* variables) reaches the child.
    env = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}
    proc = subprocess.Popen(
        argv, cwd=PROJECT_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = proc.communicate(data, timeout=bounds.wall_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise HostWorkError("wall_time", f"it did not finish within {bounds.wall_s:g} s") from None
    except BaseException:  # interrupted (a task's time limit): the child must not outlive the wait
        proc.kill()
        proc.communicate()
        raise
    return _answer(proc.returncode, out, err, bounds)


def _answer(returncode: int, out: bytes, err: bytes, bounds: Bounds) -> Any:
    if returncode == 0:
        return json.loads(out)
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):  # the soft limit's signal, or the hard one's kill
        raise HostWorkError("cpu_time", f"it used up its {bounds.cpu_s} s of CPU time")
    if returncode == _EXIT_MEMORY:
        raise HostWorkError("memory", f"it ran out of its {bounds.memory_mib} MiB")
    if returncode == _EXIT_OUTPUT:
        raise HostWorkError("output_too_large", f"its answer was over {bounds.output_max_bytes} bytes")
    said = err.decode(errors="replace").strip().splitlines()
    raise HostWorkError("failed", (said[-1] if said else f"exit status {returncode}")[:500])


# --- the child ---------------------------------------------------------------------------


def _bind_to_parent(parent_pid: int) -> None:
    # Again here, for a child started some other way; and signals a caller blocks (a blocked
    # signal stays blocked across exec) are let through.
    stop = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    for signo in stop:
        signal.signal(signo, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before it could tie us to it: nobody waits
        os._exit(_EXIT_ORPHAN)


def _limit_self(cpu_s: int, memory_mib: int, nice: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    memory = memory_mib << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.nice(nice)


def _child(argv: list[str]) -> int:
    job, parent_pid, cpu_s, memory_mib, output_max_bytes, nice = argv
    _bind_to_parent(int(parent_pid))
    _limit_self(int(cpu_s), int(memory_mib), int(nice))
    module_name, _, function_name = job.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        answer = json.dumps(function(**json.loads(sys.stdin.buffer.read()))).encode()
    except MemoryError:
        return _EXIT_MEMORY
    if len(answer) > int(output_max_bytes):
        return _EXIT_OUTPUT
    sys.stdout.buffer.write(answer)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
