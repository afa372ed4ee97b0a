"""Ready sandboxes (runner.ready) against cold starts and bare bwrap, on the namespace engine.

Every ratio is measured interleaved in one loop (a ready run, then its counterpart, ...): this
machine's speed drifts within minutes. A ready run is timed once its class's sandbox is ready, as
a run that finds one waiting (the pool makes the next in the background, between the runs); the
cold runs come from a supervisor with ready sandboxes off. The web rows start the stack twice,
with CORDON_READY on and off.
"""

from __future__ import annotations

import time
from typing import Any

from runner.config import paths_from_env
from runner.images import ImageStore, load_recipe, recipe_names
from runner.ready import ReadyPool, ReadySettings, ready_class
from runner.spec import Limits, RunSpec
from runner.supervisor import Supervisor
from tests.bench import Row, p50, targeted
from tests.bench.bench_classroom import STUDENTS, burst_p95
from tests.bench.bench_runner import STARTUP_PROGRAMS, bare_bwrap_argv, wall
from tests.bench.bench_web import Stack, sustained

REPEAT = 30
CELL_REPEAT = 8
ENVIRONMENT_REPEAT = 10
SUSTAIN_S = 30.0
SEQUENTIAL = 30
ANALYST = b"import pandas, numpy, matplotlib.pyplot\nprint(1)\n"


def _timed(supervisor: Supervisor, spec: RunSpec, start: str) -> float:
    started = time.monotonic()
    result = supervisor.run(spec)
    took = time.monotonic() - started
    assert result.cleanup_ok and result.outcome.value == "succeeded", result.to_json()
    assert result.sandbox_start == start, (result.sandbox_start, result.engine_note)
    return took


def _when_ready(supervisor: Supervisor, spec: RunSpec, timeout_s: float = 60.0) -> None:
    pool = ReadyPool.here(supervisor)
    cls, why = ready_class(spec, supervisor.images.resolve(spec.image_name), supervisor.engines["namespace"])
    assert cls is not None, why
    if pool.wait_ready(cls, timeout_s) is None:
        raise RuntimeError(f"no ready sandbox of {cls.label}: {pool.status()}")


def _in_process(ready: Supervisor, cold: Supervisor) -> list[Row]:
    store = ImageStore(paths_from_env())
    rows: list[Row] = []
    for runtime, (argv, script) in STARTUP_PROGRAMS.items():
        rootfs = str(store.resolve(runtime).rootfs)
        bare_bwrap = bare_bwrap_argv(rootfs, argv)
        spec = RunSpec(runtime=runtime, script=script, engine="namespace")
        _timed(cold, spec, "cold")  # warm-up: image verification, caches
        _when_ready(ready, spec)
        series: dict[str, list[float]] = {"ready": [], "bwrap": [], "cold": []}
        for _ in range(REPEAT):
            _when_ready(ready, spec)
            series["ready"].append(_timed(ready, spec, "ready"))
            series["bwrap"].append(wall(bare_bwrap))
            series["cold"].append(_timed(cold, spec, "cold"))
        took = {k: p50(v) for k, v in series.items()}
        label = " ".join(argv).replace("/usr/bin/", "")
        rows += [
            Row("ready", f"supervised `{label}`, ready sandbox (median of {REPEAT})", took["ready"] * 1000, "ms"),
            Row("ready", f"supervised `{label}`, cold", took["cold"] * 1000, "ms"),
            Row("ready", f"bare bwrap `{label}`", took["bwrap"] * 1000, "ms"),
            targeted(
                "ready", f"{runtime}: ready / bare bwrap (interleaved)", took["ready"] / took["bwrap"], "x", at_most=0.8
            ),
        ]
    cell = RunSpec(
        runtime="python", script=ANALYST, engine="namespace", cell=True, limits=Limits(wall_timeout_s=60, cpu_time_s=60)
    )
    _timed(cold, cell, "cold")
    series = {"ready": [], "cold": []}
    for _ in range(CELL_REPEAT):
        _when_ready(ready, cell)
        series["ready"].append(_timed(ready, cell, "ready"))
        series["cold"].append(_timed(cold, cell, "cold"))
    took = {k: p50(v) for k, v in series.items()}
    cell_label = "cell `import pandas, numpy, matplotlib.pyplot; print(1)`"
    rows += [
        Row("ready", f"{cell_label}, ready (median of {CELL_REPEAT})", took["ready"] * 1000, "ms"),
        Row("ready", f"{cell_label}, cold", took["cold"] * 1000, "ms"),
        targeted(
            "ready",
            "cell with the analyst stack: ready / cold (interleaved)",
            took["ready"] / took["cold"],
            "x",
            at_most=0.2,
        ),
    ]
    # The web's own cost is measured against this: the same hello world, in process.
    hello = RunSpec(runtime="python", script=b"print('hello')", engine="namespace")
    hellos = []
    for _ in range(SEQUENTIAL):
        _when_ready(ready, hello)
        hellos.append(_timed(ready, hello, "ready"))
    rows.append(Row("ready", f"in-process supervised hello, ready (median of {SEQUENTIAL})", p50(hellos) * 1000, "ms"))
    return rows + _environments(ready, cold)


def _environments(ready: Supervisor, cold: Supervisor) -> list[Row]:
    """A run's start cost in each environment (images/<name>), ready and cold: a program that does
    nothing, in its runtime; interleaved."""
    rows: list[Row] = []
    for name in recipe_names():
        runtime = load_recipe(name).runtime
        spec = RunSpec(runtime=runtime, image=name, script=STARTUP_PROGRAMS[runtime][1], engine="namespace")
        _timed(cold, spec, "cold")  # warm-up: the image's verification
        series: dict[str, list[float]] = {"ready": [], "cold": []}
        for _ in range(ENVIRONMENT_REPEAT):
            _when_ready(ready, spec)
            series["ready"].append(_timed(ready, spec, "ready"))
            series["cold"].append(_timed(cold, spec, "cold"))
        rows += [
            Row("ready", f"environment {name}: a run's start, ready (median of {ENVIRONMENT_REPEAT})",
                p50(series["ready"]) * 1000, "ms"),
            Row("ready", f"environment {name}: a run's start, cold", p50(series["cold"]) * 1000, "ms"),
        ]  # fmt: skip
    return rows


def _web(ready_on: bool) -> dict[str, Any]:
    """p50 of sequential hello runs through the API, and sustained runs per second."""
    stack = Stack(env={"CORDON_READY": "true" if ready_on else "false"})
    try:
        stack.one_run()
        latencies = []
        for _ in range(SEQUENTIAL):
            time.sleep(0.1)  # a ready sandbox's replacement is made between a person's runs
            latencies.append(stack.one_run())
        return {"p50": p50(latencies), "rate": sustained(stack, SUSTAIN_S)}
    finally:
        stack.close()


def run() -> list[Row]:
    ready = Supervisor(ready=ReadySettings(enabled=True, wait_s=30.0))
    cold = Supervisor(ready=ReadySettings(enabled=False))
    try:
        rows = _in_process(ready, cold)
    finally:
        ReadyPool.here(ready).close()
    in_process = next(r.value for r in rows if r.metric.startswith("in-process supervised hello")) or 0.0
    on, off = _web(True), _web(False)
    rows += [
        Row("ready", f"API submit -> finished, hello, ready sandboxes, p50 of {SEQUENTIAL}", on["p50"] * 1000, "ms"),
        targeted(
            "ready",
            "API hello p50 (ready) minus in-process supervised hello p50: the web's own cost",
            on["p50"] * 1000 - in_process,
            "ms",
            at_most=25,
        ),
        Row("ready", f"sustained hello runs/s over {SUSTAIN_S:.0f} s, ready sandboxes", on["rate"], "runs/s"),
        Row("ready", f"sustained hello runs/s over {SUSTAIN_S:.0f} s, cold", off["rate"], "runs/s"),
        targeted("ready", "sustained hello runs/s: ready / cold", on["rate"] / off["rate"], "x", at_least=2.0),
    ]
    (burst_on, on_runs), (burst_off, off_runs) = burst_p95(ready=True), burst_p95(ready=False)
    what = f"classroom deadline burst ({STUDENTS} students x 3 tests): submit->graded p95"
    rows += [
        Row("ready", f"{what}, ready sandboxes", burst_on, "s"),
        Row("ready", f"{what}, cold", burst_off, "s"),
        Row("ready", f"{what}: ready / cold", burst_on / burst_off if burst_on and burst_off else None, "x"),
        Row("ready", "classroom burst: grading runs handed a ready sandbox", on_runs["starts"].get("ready", 0), "runs"),
    ]
    for label, runs in (("ready sandboxes", on_runs), ("cold", off_runs)):
        for key in ("start_s", "total_s"):
            rows.append(Row("ready", f"classroom burst, {label}: grading run {key} p50", p50(runs[key]) * 1000, "ms"))
    return rows
