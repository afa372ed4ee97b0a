"""A run's stored, capped log: one file per stream, written at byte offsets as the worker reads
it. It is the truth the live messages and every resync are measured against."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.conf import settings


def log_path(run_id: Any, stream: str) -> Path:
    return Path(settings.MEDIA_ROOT) / "logs" / str(run_id) / f"{stream}.log"


def log_append(*, run_id: Any, stream: str, offset: int, data: bytes) -> None:
    """Write a chunk at its byte offset (idempotent for a replayed chunk)."""
    path = log_path(run_id, stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "r+b" if path.exists() else "wb") as handle:
        handle.seek(offset)
        handle.write(data)


def log_delete(*, run_id: Any) -> None:
    """Remove both streams' logs of a run (retention)."""
    directory = log_path(run_id, "stdout").parent
    if directory.exists():
        shutil.rmtree(directory)
