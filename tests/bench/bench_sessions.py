"""Notebook sessions: what carrying state from cell to cell costs.

1. On the namespace engine, interleaved (REPEAT rounds of: a cell that drops its names, a cell that
   saves them, a cell importing what the state needs, a cell that restores): the time a snapshot
   adds to the cell that saves it (the cell less the same cell ending `del` of its names: both
   IPython cells, so only the state differs) and to the cell that restores it (a cell `pass` from
   the state less a cell importing numpy and pandas), for a 5,000-row, 8-column frame with a few
   scalars and for a 1,000,000-row, 10-column frame; the state's size.
2. Through the API on a stack of its own (web server, Redis, Celery worker): submit -> finished of
   `print(n + 1)` after a cell that loaded a 5,000-row CSV into `df`, interleaved with a hello-world
   cell's; twice: with ready sandboxes, as `make run` serves (a cell a second, as a person runs
   them: the pool has made the next one; a cell's IPython is imported there, not on its path), and
   back to back with them off (every cell starts cold and imports IPython itself).
3. "Run all" through the API with ready sandboxes: RUN_ALL cells over the same state, each posted
   as the one before finishes, against a hello-world cell run a second apart: how many were handed
   a ready sandbox (the pool makes a notebook's next one beside the running cell, at the lowest CPU
   weight) and the p50 of one against the spaced hello's.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from runner.spec import SESSION_DIR, STATE_FILE, Limits, RunSpec
from runner.supervisor import Supervisor
from tests.bench import Row, p50, targeted
from tests.bench.bench_web import Stack

REPEAT = 7
API_REPEAT = 20
PACE_S = 1.0  # between two cells, with ready sandboxes: the pool makes the next meanwhile
# The `print(n + 1)` cell against the hello-world one, both from ready sandboxes: what the state
# (restored, then saved again) adds to a trivial cell.
STATE_CELL_AT_MOST = 1.5
RUN_ALL = 12
RUN_ALL_READY_AT_LEAST = 11
RUN_ALL_AT_MOST = 1.5  # a back-to-back cell's p50 / a spaced hello cell's
LIMITS = Limits(wall_timeout_s=120.0, cpu_time_s=120.0, memory_mib=1536, disk_mib=256)
FRAMES = (  # (label, rows, columns, target for save + restore in ms)
    ("5,000 x 8 frame and scalars", 5_000, 8, 50.0),
    ("1,000,000 x 10 frame", 1_000_000, 10, 1500.0),
)
IMPORTS = b"import numpy, pandas"
DROP = b"\ndel df, x, y, label"  # nothing left to save but the modules


def _make(rows: int, columns: int) -> bytes:
    return (
        "import numpy as np\nimport pandas as pd\n"
        f"df = pd.DataFrame(np.random.default_rng(1).random(({rows}, {columns})), "
        f"columns=[f'c{{i}}' for i in range({columns})])\n"
        "x, y, label = 1, 2.5, 'abc'\n"
    ).encode()


def _timed(supervisor: Supervisor, spec: RunSpec, output_dir: Path | None = None) -> float:
    started = time.monotonic()
    result = supervisor.run(spec, output_dir=output_dir)
    elapsed = time.monotonic() - started
    assert result.outcome.value == "succeeded" and result.cleanup_ok, result.to_json()
    return elapsed


def _frame_rows(supervisor: Supervisor, label: str, rows: int, columns: int, target_ms: float) -> list[Row]:
    make = _make(rows, columns)
    series: dict[str, list[float]] = {"plain": [], "save": [], "imports": [], "restore": []}
    size = 0
    with tempfile.TemporaryDirectory(prefix="cordon-bench-state-") as tmp:
        for round_ in range(REPEAT + 1):  # the first round warms caches and is not counted
            out = Path(tmp) / f"out-{round_}"
            timings = {
                "plain": _timed(
                    supervisor,
                    RunSpec(runtime="python", script=make + DROP, limits=LIMITS, engine="namespace", cell=True),
                ),
                "save": _timed(
                    supervisor,
                    RunSpec(runtime="python", script=make, limits=LIMITS, engine="namespace", cell=True),
                    out,
                ),
            }
            state = out / SESSION_DIR / STATE_FILE
            size = state.stat().st_size
            timings["imports"] = _timed(
                supervisor, RunSpec(runtime="python", script=IMPORTS, limits=LIMITS, engine="namespace", cell=True)
            )
            timings["restore"] = _timed(
                supervisor,
                RunSpec(runtime="python", script=b"pass", limits=LIMITS, engine="namespace", cell=True, state=state),
                Path(tmp) / f"restored-{round_}",
            )
            if round_:
                for key, value in timings.items():
                    series[key].append(value)
    save_ms = (p50(series["save"]) - p50(series["plain"])) * 1000
    restore_ms = (p50(series["restore"]) - p50(series["imports"])) * 1000
    return [
        Row("sessions", f"{label}: state size", size / 1e6, "MB"),
        Row("sessions", f"{label}: added to the cell that saves it (median of {REPEAT})", save_ms, "ms"),
        Row("sessions", f"{label}: added to the cell that restores it", restore_ms, "ms"),
        targeted("sessions", f"{label}: save + restore added", save_ms + restore_ms, "ms", at_most=target_ms),
    ]


def _cell(cell_id: str, source: str) -> dict[str, Any]:
    return {"id": cell_id, "kind": "code", "runtime": "python", "source": source}


def _run_cell(stack: Stack, notebook: dict[str, Any], cell_id: str, starts: list[str] | None = None) -> float:
    started = time.monotonic()
    run = stack.call("POST", f"/api/notebooks/{notebook['id']}/cells/{cell_id}/run")
    state = stack.wait_finished(run["id"])
    if state["outcome"] != "succeeded":
        raise RuntimeError(f"bench cell {cell_id} ended {state['outcome']}: {state['reason']}")
    if starts is not None:
        starts.append(state["sandbox_start"])
    return time.monotonic() - started


def _api_rows(*, ready: bool) -> list[Row]:
    stack = Stack(env={"CORDON_READY": "true" if ready else "false"})
    pace = PACE_S if ready else 0.0
    try:
        csv = "region,units\n" + "".join(f"r{i % 7},{i}\n" for i in range(5000))
        dataset = stack.post_file("/api/datasets", "sales.csv", csv.encode(), "text/csv")
        cells = [_cell("load", "import pandas as pd\ndf = pd.read_csv('/input/sales.csv')\nn = len(df)"),
                 _cell("next", "print(n + 1)")]  # fmt: skip
        notebook = stack.call("POST", "/api/notebooks", {"name": "bench", "cells": cells})
        body = {"name": "bench", "version": notebook["version"], "cells": cells, "dataset_ids": [dataset["id"]]}
        notebook = stack.call("PUT", f"/api/notebooks/{notebook['id']}", body)
        hello = stack.call("POST", "/api/notebooks", {"name": "hello", "cells": [_cell("hello", "print('hello')")]})
        _run_cell(stack, notebook, "load")
        _run_cell(stack, hello, "hello")  # warm-up
        after_state: list[float] = []
        plain: list[float] = []
        starts: list[str] = []
        for _ in range(API_REPEAT):
            time.sleep(pace)
            after_state.append(_run_cell(stack, notebook, "next", starts))
            time.sleep(pace)
            plain.append(_run_cell(stack, hello, "hello", starts))
    finally:
        stack.close()
    how = f"ready sandboxes, a cell every {pace:g} s" if ready else "back to back, cold (ready sandboxes off)"
    ready_share = f"{starts.count('ready')} of {len(starts)} from a ready sandbox"
    rows = [
        Row("sessions", f"API submit -> finished, `print(n + 1)` after a 5,000-row df, {how}, p50 of {API_REPEAT}",
            p50(after_state) * 1000, "ms"),
        Row("sessions", f"API submit -> finished, hello-world cell, {how}, p50 of {API_REPEAT} ({ready_share})",
            p50(plain) * 1000, "ms"),
    ]  # fmt: skip
    if ready:
        rows.append(targeted("sessions", "the state cell / the hello-world cell, ready sandboxes",
                             p50(after_state) / p50(plain), "x", at_most=STATE_CELL_AT_MOST))  # fmt: skip
    return rows


def _run_all_rows() -> list[Row]:
    stack = Stack(env={"CORDON_READY": "true"})
    try:
        csv = "region,units\n" + "".join(f"r{i % 7},{i}\n" for i in range(5000))
        dataset = stack.post_file("/api/datasets", "sales.csv", csv.encode(), "text/csv")
        cells = [_cell("load", "import pandas as pd\ndf = pd.read_csv('/input/sales.csv')\nn = len(df)")]
        cells += [_cell(f"c{i}", f"x{i} = n + {i}\nprint(x{i}, len(df))") for i in range(RUN_ALL)]
        notebook = stack.call("POST", "/api/notebooks", {"name": "run all", "cells": cells})
        body = {"name": "run all", "version": notebook["version"], "cells": cells, "dataset_ids": [dataset["id"]]}
        notebook = stack.call("PUT", f"/api/notebooks/{notebook['id']}", body)
        hello = stack.call("POST", "/api/notebooks", {"name": "hello", "cells": [_cell("hello", "print('hello')")]})
        _run_cell(stack, notebook, "load")
        spaced = []
        for _ in range(5):
            time.sleep(PACE_S)
            spaced.append(_run_cell(stack, hello, "hello"))
        time.sleep(PACE_S)  # the notebook's class is made ready meanwhile, as when a person opens it
        starts: list[str] = []
        back_to_back = [_run_cell(stack, notebook, f"c{i}", starts) for i in range(RUN_ALL)]
    finally:
        stack.close()
    what = f"Run all, {RUN_ALL} cells back to back over a 5,000-row df's state, ready sandboxes"
    return [
        targeted("sessions", f"{what}: handed a ready sandbox", starts.count("ready"), f"of {RUN_ALL}",
                 at_least=RUN_ALL_READY_AT_LEAST),
        Row("sessions", f"{what}: p50 submit -> finished", p50(back_to_back) * 1000, "ms"),
        targeted("sessions", f"{what}: p50 / a hello cell's a second apart ({p50(spaced) * 1000:.0f} ms)",
                 p50(back_to_back) / p50(spaced), "x", at_most=RUN_ALL_AT_MOST),
    ]  # fmt: skip


def run() -> list[Row]:
    supervisor = Supervisor()
    rows: list[Row] = []
    for label, rows_, columns, target in FRAMES:
        rows += _frame_rows(supervisor, label, rows_, columns, target)
    return rows + _api_rows(ready=True) + _api_rows(ready=False) + _run_all_rows()
