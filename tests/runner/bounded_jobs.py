"""Jobs for tests/runner/test_bounded.py, run in runner.bounded's children: each one does what a
hostile input could make real work do (spin, sleep, allocate, answer at length, raise)."""

from __future__ import annotations

import os
import time
from typing import Any


def echo(**payload: Any) -> dict[str, Any]:
    return {"payload": payload, "pid": os.getpid(), "ppid": os.getppid(), "nice": os.nice(0)}


def environment() -> list[str]:
    return sorted(os.environ)


def spin(*, seconds: float = 3600.0) -> int:
    end, count = time.process_time() + seconds, 0
    while time.process_time() < end:
        count += 1
    return count


def sleep(*, seconds: float) -> None:
    time.sleep(seconds)


def allocate(*, mib: int) -> int:
    return len(bytearray(mib << 20))


def answer(*, chars: int) -> str:
    return "x" * chars


def fail(*, why: str) -> None:
    raise ValueError(why)
