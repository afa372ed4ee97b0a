"""Image benchmarks: a no-op `make images` (target < 10 s) and `images verify` per image."""

from __future__ import annotations

import subprocess
import sys
import time

from runner.config import PROJECT_ROOT
from runner.images import recipe_names
from tests.bench import Row, p50
from tests.conftest import child_env

REPEAT = 3


def _timed(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, cwd=PROJECT_ROOT, env=child_env(), check=True, capture_output=True)
    return time.monotonic() - started


def run() -> list[Row]:
    noop = p50([_timed(["make", "-s", "images"]) for _ in range(REPEAT)])
    rows = [Row("images", "no-op `make images` (median of 3)", noop, "s", "< 10 s", "pass" if noop < 10 else "FAIL")]
    for name in recipe_names():
        seconds = _timed([sys.executable, "-m", "runner", "images", "verify", name])
        rows.append(Row("images", f"`images verify {name}`", seconds, "s"))
    return rows
