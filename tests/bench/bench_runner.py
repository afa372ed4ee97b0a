"""Supervisor overhead and stopping power on the namespace engine.

Medians over REPEAT runs: a supervised `python3 -c pass` (the whole path: admission, staging,
cgroups, mounts, bwrap, export, teardown and audit) next to bare bwrap and bare python in the
same image, the same for node; the kill latency after a wall deadline; the bytes a flood got
past the stdout cap before it was stopped.

This machine's speed drifts within minutes, so the three are measured interleaved (supervised,
bare bwrap, bare, supervised, ...) in one loop, never as separate series: a ratio compares
runs made under the same conditions.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from runner.config import paths_from_env
from runner.images import ImageStore
from runner.spec import MIB, Limits, RunSpec
from runner.supervisor import Supervisor
from tests.bench import Row, p50, targeted

REPEAT = 30
# Issue 12's targets: supervised / bare bwrap.
RATIO_TARGET = {"python": 1.3, "node": 1.15}


# The empty program of each runtime: its argv in a bare sandbox, and the same as a run's script.
STARTUP_PROGRAMS = {
    "python": (["/usr/bin/python3", "-c", "pass"], b"pass"),
    "node": (["/usr/bin/node", "-e", "0"], b"0"),
}


def wall(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    return time.monotonic() - started


def bare_bwrap_argv(rootfs: str, argv: list[str]) -> list[str]:
    """`argv` in a bare bwrap sandbox of the image: what a supervised run is measured against."""
    bwrap = shutil.which("bwrap") or "bwrap"
    return [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", rootfs, "/",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--clearenv", "--", *argv]  # fmt: skip


def _supervised(supervisor: Supervisor, runtime: str, script: bytes, limits: Limits | None = None) -> float:
    started = time.monotonic()
    result = supervisor.run(RunSpec(runtime=runtime, script=script, limits=limits or Limits(), engine="namespace"))
    assert result.cleanup_ok and result.outcome.value == "succeeded", result.to_json()
    return time.monotonic() - started


def run() -> list[Row]:
    supervisor = Supervisor()
    store = ImageStore(paths_from_env())
    rows: list[Row] = []
    for runtime, (argv, script) in STARTUP_PROGRAMS.items():
        rootfs = str(store.resolve(runtime).rootfs)
        bare_bwrap = bare_bwrap_argv(rootfs, argv)
        _supervised(supervisor, runtime, script)  # warm-up (image verification, caches)
        wall(bare_bwrap)
        series: dict[str, list[float]] = {"supervised": [], "bwrap": [], "bare": []}
        for _ in range(REPEAT):
            series["supervised"].append(_supervised(supervisor, runtime, script))
            series["bwrap"].append(wall(bare_bwrap))
            series["bare"].append(wall(["chroot", rootfs, *argv]))
        supervised, bwrap_only, bare = (p50(series[k]) for k in ("supervised", "bwrap", "bare"))
        label = " ".join(argv[:1] + argv[1:]).replace("/usr/bin/", "")
        rows += [
            Row("startup", f"supervised `{label}` (median of {REPEAT})", supervised * 1000, "ms"),
            Row("startup", f"bare bwrap `{label}`", bwrap_only * 1000, "ms"),
            Row("startup", f"bare `{label}` (chroot, same image)", bare * 1000, "ms"),
            Row("startup", f"{runtime}: supervised / bare ratio", supervised / bare, "x"),
            targeted(
                "startup",
                f"{runtime}: supervised / bare bwrap ratio (interleaved)",
                supervised / bwrap_only,
                "x",
                at_most=RATIO_TARGET[runtime],
            ),
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
    rows.append(targeted("flood", "same, worst of 5", max(past), "bytes", at_most=64 * 1024))
    return rows
