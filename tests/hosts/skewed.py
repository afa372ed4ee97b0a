"""`python -m tests.hosts.skewed FILE celery ARGS...`: Celery, on a host whose wall clock is off by
the seconds FILE holds (read again each second; missing or empty: 0).

One kernel has one wall clock, and a time namespace offsets only the monotonic clocks, so a
single host's clock step cannot be made on one machine; libfaketime, which could, breaks
Python's sleep with the monotonic clock left alone (EINVAL from clock_nanosleep, 0.9.10). So the
wall clock is skewed where Cordon reads it: time.time and Django's timezone.now, in this process
and the pool's forked children. The monotonic clock (deadlines, timers) stays true, as it does
when an operator's clock steps. The chaos part of tests/hosts uses it (tests/hosts/chaos.py).
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

_true_time = time.time
_read = [-10.0, 0.0]  # (monotonic time of the last read, the offset read)


def offset(path: Path) -> float:
    now = time.monotonic()
    if now - _read[0] >= 1.0:
        _read[0] = now
        try:
            _read[1] = float(path.read_text().strip() or 0)
        except (OSError, ValueError):
            _read[1] = 0.0
    return _read[1]


def main() -> None:
    path = Path(sys.argv[1])
    from django.utils import timezone

    true_now = timezone.now

    def skewed_now() -> datetime:
        return true_now() + timedelta(seconds=offset(path))

    time.time = lambda: _true_time() + offset(path)
    timezone.now = skewed_now
    sys.argv = sys.argv[2:]
    from celery.__main__ import main as celery

    celery()


if __name__ == "__main__":
    main()
