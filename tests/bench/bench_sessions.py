"""Notebook sessions: what carrying state from cell to cell costs.

1. On the namespace engine, interleaved (REPEAT rounds of: plain run, cell run that saves, plain
   run, cell run that restores): the time a snapshot adds to the cell that saves it (the cell run
   less the same script as a plain run) and to the cell that restores it (a cell `pass` from the
   state less a plain run importing what the state needs: numpy and pandas), for a 5,000-row,
   8-column frame with a few scalars and for a 1,000,000-row, 10-column frame; the state's size.
2. Through the API on a stack of its own (web server, Redis, Celery worker): submit -> finished of
   `print(n + 1)` after a cell that loaded a 5,000-row CSV into `df`, beside a hello-world cell's.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from runner.cells import SESSION_DIR, STATE_FILE
from runner.spec import Limits, RunSpec
from runner.supervisor import Supervisor
from tests.bench import Row, p50, targeted
from tests.bench.bench_web import Stack

REPEAT = 7
API_REPEAT = 20
LIMITS = Limits(wall_timeout_s=120.0, cpu_time_s=120.0, memory_mib=1536, disk_mib=256)
FRAMES = (  # (label, rows, columns, target for save + restore in ms)
    ("5,000 x 8 frame and scalars", 5_000, 8, 50.0),
    ("1,000,000 x 10 frame", 1_000_000, 10, 1500.0),
)
IMPORTS = b"import numpy, pandas"


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
                "plain": _timed(supervisor, RunSpec(runtime="python", script=make, limits=LIMITS, engine="namespace")),
                "save": _timed(
                    supervisor,
                    RunSpec(runtime="python", script=make, limits=LIMITS, engine="namespace", cell=True),
                    out,
                ),
            }
            state = out / SESSION_DIR / STATE_FILE
            size = state.stat().st_size
            timings["imports"] = _timed(
                supervisor, RunSpec(runtime="python", script=IMPORTS, limits=LIMITS, engine="namespace")
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


def _upload(stack: Stack, name: str, data: bytes) -> Any:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: text/csv\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.port}/api/datasets", method="POST", data=body,
        headers={"Authorization": f"Bearer {stack.token}", "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - our own http URL
        return json.loads(response.read())


def _cell(cell_id: str, source: str) -> dict[str, Any]:
    return {"id": cell_id, "kind": "code", "runtime": "python", "source": source}


def _run_cell(stack: Stack, notebook: dict[str, Any], cell_id: str) -> float:
    started = time.monotonic()
    run = stack.call("POST", f"/api/notebooks/{notebook['id']}/cells/{cell_id}/run")
    state = stack.wait_finished(run["id"])
    if state["outcome"] != "succeeded":
        raise RuntimeError(f"bench cell {cell_id} ended {state['outcome']}: {state['reason']}")
    return time.monotonic() - started


def _api_rows() -> list[Row]:
    stack = Stack()
    try:
        csv = "region,units\n" + "".join(f"r{i % 7},{i}\n" for i in range(5000))
        dataset = _upload(stack, "sales.csv", csv.encode())
        cells = [_cell("load", "import pandas as pd\ndf = pd.read_csv('/input/sales.csv')\nn = len(df)"),
                 _cell("next", "print(n + 1)")]  # fmt: skip
        notebook = stack.call("POST", "/api/notebooks", {"name": "bench", "cells": cells})
        body = {"name": "bench", "version": notebook["version"], "cells": cells, "dataset_ids": [dataset["id"]]}
        notebook = stack.call("PUT", f"/api/notebooks/{notebook['id']}", body)
        hello = stack.call("POST", "/api/notebooks", {"name": "hello", "cells": [_cell("hello", "print('hello')")]})
        _run_cell(stack, notebook, "load")
        _run_cell(stack, hello, "hello")  # warm-up
        after_state, plain = [], []
        for _ in range(API_REPEAT):
            after_state.append(_run_cell(stack, notebook, "next"))
            plain.append(_run_cell(stack, hello, "hello"))
    finally:
        stack.close()
    return [
        Row("sessions", f"API submit -> finished, `print(n + 1)` after a 5,000-row df, p50 of {API_REPEAT}",
            p50(after_state) * 1000, "ms"),
        Row("sessions", f"API submit -> finished, hello-world cell, p50 of {API_REPEAT}", p50(plain) * 1000, "ms"),
    ]  # fmt: skip


def run() -> list[Row]:
    supervisor = Supervisor()
    rows: list[Row] = []
    for label, rows_, columns, target in FRAMES:
        rows += _frame_rows(supervisor, label, rows_, columns, target)
    return rows + _api_rows()
