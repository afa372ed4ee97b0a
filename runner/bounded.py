"""Host-side work on untrusted input (matching a student's output, rendering an instructor's
markdown), done in a child process that carries its own bounds, so no input can stall the process
that asked for it or outlive it.

`call(job, payload, bounds)` runs `job` ("package.module:function", a pure function of JSON values
that imports no Django, in one of runner.bounded_child.JOB_MODULES) in `python -m
runner.bounded_child`, in the caller's process group and cgroup. The child dies with the thread
that started it (PR_SET_PDEATHSIG, set by setpriv before Python starts; that thread waits for it,
so it dies with its parent) and with its process group (SIGTERM, SIGINT and SIGHUP back to their
defaults before Python starts: a Celery pool process ignores SIGTERM, and an ignored signal
survives exec). Before it reads a byte of its input it limits its CPU time (RLIMIT_CPU) and its
address space (RLIMIT_AS), makes no core file, and lowers its CPU priority. The parent adds a wall
deadline and kills it there. Its input and its answer are capped in bytes, the input before it is
sent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from runner.bounded_child import EXIT_MEMORY, EXIT_OUTPUT, EXIT_UNKNOWN_JOB, JOB_MODULES
from runner.config import PROJECT_ROOT
from runner.units import size_words

MARK = "runner.bounded_child"  # the child's module, in its command line: how a test (or an operator) finds them
# The directories this interpreter imports packages from (what `site` would add), for the child.
_PACKAGE_DIRS = sorted({p for p in sys.path if p.endswith(("site-packages", "dist-packages"))})


@dataclass(frozen=True)
class Bounds:
    """What one job may use. `cpu_s` is enforced by the kernel (RLIMIT_CPU), `wall_s` by the
    parent, `memory_mib` as the child's whole address space (the interpreter is about 40 MiB)."""

    cpu_s: int = 2
    wall_s: float = 5.0
    memory_mib: int = 512
    input_max_bytes: int = 4 << 20
    output_max_bytes: int = 4 << 20
    nice: int = 19  # below everything else on the host: a run, a request, the workers


class HostWorkError(Exception):
    """A job that gave no answer. `code`: unknown_job (its module is not a job module) or too_large
    (its input), both refused before a child started; cpu_time, wall_time, memory,
    output_too_large, failed (it raised; `message` says what)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


def call(job: str, payload: Any, bounds: Bounds) -> Any:
    """The job's answer to `payload` (keyword arguments, as JSON), or HostWorkError."""
    if job.partition(":")[0] not in JOB_MODULES:  # a caller's mistake, refused before a child starts
        raise HostWorkError("unknown_job", f"{job}: its module is not one of runner.bounded_child.JOB_MODULES")
    data = json.dumps(payload).encode()
    if len(data) > bounds.input_max_bytes:
        raise HostWorkError(
            "too_large",
            f"the input is {size_words(len(data), exact=True)}; at most {size_words(bounds.input_max_bytes)}",
        )
    # setpriv and env (util-linux, coreutils) tie the child to this thread and give it default
    # signals before Python starts, so no signal is missed while the interpreter starts up. No
    # `site` (-S: a third of a job's start-up): the project's own code is first on the path (cwd,
    # with -m), whichever checkout asks, then this interpreter's own package directories.
    argv = [
        "setpriv", "--pdeathsig", "KILL", "--", "env", "--default-signal=TERM,INT,HUP", "--",
        sys.executable, "-E", "-S", "-m", MARK, job, str(os.getpid()), str(bounds.cpu_s), str(bounds.memory_mib),
        str(bounds.output_max_bytes), str(bounds.nice), *_PACKAGE_DIRS,
    ]  # fmt: skip
    # None of the caller's environment (its secrets, PYTHON* variables) reaches the child.
    # One BLAS thread: numpy's OpenBLAS (a similarity report's) would reserve address space per
    # core, past the child's RLIMIT_AS on a many-core host.
    env = {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1"}
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
    if returncode == EXIT_MEMORY:
        raise HostWorkError("memory", f"it ran out of its {bounds.memory_mib} MiB")
    if returncode == EXIT_UNKNOWN_JOB:
        raise HostWorkError("unknown_job", "its module is not one of runner.bounded_child.JOB_MODULES")
    if returncode == EXIT_OUTPUT:
        raise HostWorkError("output_too_large", f"its answer was over {size_words(bounds.output_max_bytes)}")
    said = err.decode(errors="replace").strip().splitlines()
    raise HostWorkError("failed", (said[-1] if said else f"exit status {returncode}")[:500])
