"""The child runner.bounded starts for one job: it ties itself to its parent, limits itself, then
runs the job on its input (JSON keyword arguments on stdin) and writes its answer (JSON on stdout).

Started as `python -E -S -m runner.bounded_child JOB PARENT_PID CPU_S MEMORY_MIB OUTPUT_MAX_BYTES
NICE [PACKAGE_DIR ...]`; it imports only the standard library before it is bounded (its start-up
is most of a small job's cost), then the job's module, which must be one of JOB_MODULES.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import resource
import signal
import sys

EXIT_MEMORY = 3  # the job ran out of its address space (MemoryError)
EXIT_OUTPUT = 4  # the job's answer was over the cap
EXIT_ORPHAN = 5  # the parent was gone before the child could tie itself to it
EXIT_UNKNOWN_JOB = 6  # the job's module is not one of JOB_MODULES: nothing was imported
# The modules whose functions are jobs: pure functions of JSON values that import no Django (an
# import-linter contract in pyproject.toml holds that, over this same list), and the tests' own.
# A child imports no other module by name, whatever its command line says.
JOB_MODULES = frozenset({
    "playground.displays", "playground.markdown", "playground.ipynb", "playground.matching",
    "playground.classroom.similarity",
    "tests.runner.bounded_jobs",  # present only in a checkout: runner.bounded's own tests
})  # fmt: skip
_PR_SET_PDEATHSIG = 1


def bind_to_parent(parent_pid: int) -> None:
    # setpriv and env did this before Python started; again here for a child started some other
    # way, and signals a caller blocks (a blocked signal stays blocked across exec) let through.
    stop = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    for signo in stop:
        signal.signal(signo, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before it could tie us to it: nobody waits
        os._exit(EXIT_ORPHAN)


def limit_self(cpu_s: int, memory_mib: int, nice: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    memory = memory_mib << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.nice(nice)


def main(argv: list[str]) -> int:
    job, parent_pid, cpu_s, memory_mib, output_max_bytes, nice, *package_dirs = argv
    bind_to_parent(int(parent_pid))
    limit_self(int(cpu_s), int(memory_mib), int(nice))
    sys.path.extend(package_dirs)
    module_name, _, function_name = job.partition(":")
    if module_name not in JOB_MODULES:
        return EXIT_UNKNOWN_JOB
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        answer = json.dumps(function(**json.loads(sys.stdin.buffer.read()))).encode()
    except MemoryError:
        return EXIT_MEMORY
    if len(answer) > int(output_max_bytes):
        return EXIT_OUTPUT
    sys.stdout.buffer.write(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
