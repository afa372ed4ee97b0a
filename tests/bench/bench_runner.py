"""Supervisor overhead and stopping power on the namespace engine.

Medians over REPEAT runs: a supervised `python3 -c pass` (the whole path: admission, staging,
cgroups, mounts, bwrap, export, teardown and audit) next to bare bwrap and bare python in the
same image, the same for node; the kill latency after a wall deadline; the bytes a flood got
past the stdout cap before it was stopped.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from runner.config import paths_from_env
from runner.images import ImageStore
from runner.spec import MIB, Limits, RunSpec
from runner.supervisor import Supervisor
from tests.bench import Row, p50

REPEAT = 20


def _wall(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    return time.monotonic() - started


def _supervised(supervisor: Supervisor, runtime: str, script: bytes, limits: Limits | None = None) -> float:
    started = time.monotonic()
    result = supervisor.run(RunSpec(runtime=runtime, script=script, limits=limits or Limits(), engine="namespace"))
    assert result.cleanup_ok and result.outcome.value == "succeeded", result.to_json()
    return time.monotonic() - started


def run() -> list[Row]:
    supervisor = Supervisor()
    store = ImageStore(paths_from_env())
    bwrap = shutil.which("bwrap") or "bwrap"
    rows: list[Row] = []
    programs = {"python": (["/usr/bin/python3", "-c", "pass"], b"pass"), "node": (["/usr/bin/node", "-e", "0"], b"0")}
    for runtime, (argv, script) in programs.items():
        rootfs = str(store.resolve(runtime).rootfs)
        bare_bwrap = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", rootfs, "/",
                      "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--clearenv", "--", *argv]  # fmt: skip
        _supervised(supervisor, runtime, script)  # warm-up (image verification, caches)
        supervised = p50([_supervised(supervisor, runtime, script) for _ in range(REPEAT)])
        bwrap_only = p50([_wall(bare_bwrap) for _ in range(REPEAT)])
        bare = p50([_wall(["chroot", rootfs, *argv]) for _ in range(REPEAT)])
        label = " ".join(argv[:1] + argv[1:]).replace("/usr/bin/", "")
        rows += [
            Row("startup", f"supervised `{label}` (median of {REPEAT})", supervised * 1000, "ms"),
            Row("startup", f"bare bwrap `{label}`", bwrap_only * 1000, "ms"),
            Row("startup", f"bare `{label}` (chroot, same image)", bare * 1000, "ms"),
            Row("startup", f"{runtime}: supervised / bare ratio", supervised / bare, "x"),
            Row("startup", f"{runtime}: supervised / bare bwrap ratio", supervised / bwrap_only, "x"),
        ]
    overshoot, stop_latency = [], []
    for _ in range(5):
        result = supervisor.run(RunSpec(runtime="python", script=b"while True: pass", engine="namespace",
                                        limits=Limits(wall_timeout_s=1.0)))  # fmt: skip
        assert result.outcome.value == "timed_out"
        overshoot.append((result.wall_s or 0) - 1.0)
        stop_latency.append(result.evidence["stop_latency_s"])
    rows.append(Row("stop", "wall past a 1 s deadline until the sandbox was empty (median of 5)",
                    p50(overshoot) * 1000, "ms"))  # fmt: skip
    rows.append(Row("stop", "stop latency: kill request to cgroup empty (median of 5)", p50(stop_latency) * 1000, "ms"))
    past = []
    for _ in range(5):
        result = supervisor.run(RunSpec(runtime="python", engine="namespace",
                                        script=b"import sys\nwhile True: sys.stdout.write('x' * 65536)",
                                        limits=Limits(stdout_max_bytes=1 * MIB)))  # fmt: skip
        assert result.outcome.value == "output_limit" and len(result.stdout) == MIB
        past.append(result.evidence["bytes_read_past_cap"])
    rows.append(Row("flood", "bytes read past a 1 MiB stdout cap before the flood stopped (median of 5)",
                    p50(past), "bytes"))  # fmt: skip
    rows.append(Row("flood", "same, worst of 5", max(past), "bytes"))
    return rows
