"""A run's stored, capped log, one per stream: the truth the live messages and every resync are
measured against.

While the run goes, the worker writes each chunk at its byte offset twice: to a spool file on its
own host (the complete copy) and to Redis (SETRANGE: the copy every web process, on any host,
reads while the run goes; best effort, skipped for a few seconds after Redis fails). When the run
ends the worker stores the spool through the storage (`logs/<run>/<stream>.log`: the data
directory on one host, the database on several) and drops both copies. A run whose host died is
stored from Redis by the reaper. Readers: the storage for a finished run, Redis for a running one.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.core.files.base import ContentFile, File
from django.core.files.storage import default_storage

from playground.storage import delete_with_folders

log = logging.getLogger(__name__)

STREAMS = ("stdout", "stderr")
# The Redis copy outlives a run whose worker and reaper both vanished, but not for ever.
REDIS_TTL_S = 24 * 3600
# After Redis fails, the worker stops trying for this long (each try could block a second).
REDIS_BACKOFF_S = 5.0


class _Redis:
    """One client per process (redis-py's pool reconnects after a fork), with a short back-off."""

    def __init__(self) -> None:
        self._client: redis.Redis | None = None
        self._down_until = 0.0
        self._lock = threading.Lock()

    def client(self) -> redis.Redis | None:
        if time.monotonic() < self._down_until:
            return None
        with self._lock:
            if self._client is None:
                self._client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
        return self._client

    def failed(self) -> None:
        if time.monotonic() >= self._down_until:
            log.warning("Redis unreachable: live log copies paused for %g s", REDIS_BACKOFF_S, exc_info=True)
        self._down_until = time.monotonic() + REDIS_BACKOFF_S


_redis = _Redis()


def _key(run_id: Any, stream: str) -> str:
    return f"cordon:log:{run_id}:{stream}"


def stored_name(run_id: Any, stream: str) -> str:
    return f"logs/{run_id}/{stream}.log"


def spool_root() -> Path:
    """Where this worker host spools running runs' logs, a folder per run."""
    return Path(settings.DATA_DIR) / "spool" / "logs"


def spool_path(run_id: Any, stream: str) -> Path:
    """The worker host's complete copy of a running run's log."""
    return spool_root() / str(run_id) / f"{stream}.log"


def log_append(*, run_id: Any, stream: str, offset: int, data: bytes) -> None:
    """Write a chunk at its byte offset (idempotent for a replayed chunk), in the spool and in Redis."""
    path = spool_path(run_id, stream)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "r+b" if path.exists() else "wb") as handle:
        handle.seek(offset)
        handle.write(data)
    client = _redis.client()
    if client is not None:
        try:
            pipe = client.pipeline(transaction=False)
            pipe.setrange(_key(run_id, stream), offset, data)
            pipe.expire(_key(run_id, stream), REDIS_TTL_S)
            pipe.execute()
        except redis.RedisError:
            _redis.failed()


def log_store(*, run_id: Any) -> None:
    """Store the run's log for good: from this host's spool, or (the reaper's case: the host that
    ran it is gone) from Redis. An empty stream is not stored (read as empty)."""
    for stream in STREAMS:
        spool = spool_path(run_id, stream)
        if spool.exists():
            with open(spool, "rb") as handle:
                _store(run_id, stream, File(handle))
        else:
            data = _redis_get(run_id, stream)
            if data:
                _store(run_id, stream, ContentFile(data))


def _store(run_id: Any, stream: str, content: File) -> None:  # type: ignore[type-arg]
    if not content.size:
        return
    name = stored_name(run_id, stream)
    default_storage.delete(name)  # the reaper's copy from Redis, when the worker ends after all
    saved = default_storage.save(name, content)
    if saved != name:  # another writer stored it in between: theirs stands
        default_storage.delete(saved)


def log_release(*, run_id: Any) -> None:
    """Drop the spool and the Redis copy once the log is stored and the run's end committed."""
    shutil.rmtree(spool_root() / str(run_id), ignore_errors=True)
    _redis_delete(run_id)


def log_read(*, run_id: Any, stream: str, offset: int, limit: int, finished: bool) -> tuple[bytes, int]:
    """(up to `limit` bytes from `offset`, the log's size): stored for a finished run, else Redis."""
    name = stored_name(run_id, stream)
    if finished and default_storage.exists(name):
        with default_storage.open(name, "rb") as handle:
            size = handle.size
            if offset >= size:
                return b"", size
            handle.seek(offset)
            return handle.read(limit), size
    client = _redis.client()
    if client is None:
        return b"", 0
    try:
        pipe = client.pipeline(transaction=False)
        pipe.getrange(_key(run_id, stream), offset, offset + limit - 1)
        pipe.strlen(_key(run_id, stream))
        data, size = pipe.execute()
    except redis.RedisError:
        _redis.failed()
        return b"", 0
    return bytes(data), int(size)


def log_delete(*, run_id: Any) -> None:
    """Remove both streams' logs of a run (retention)."""
    for stream in STREAMS:
        delete_with_folders(default_storage, stored_name(run_id, stream))
    _redis_delete(run_id)


def _redis_get(run_id: Any, stream: str) -> bytes:
    client = _redis.client()
    if client is None:
        return b""
    try:
        data = client.get(_key(run_id, stream))
        return data if isinstance(data, bytes) else b""
    except redis.RedisError:
        _redis.failed()
        return b""


def _redis_delete(run_id: Any) -> None:
    client = _redis.client()
    if client is not None:
        try:
            client.delete(*(_key(run_id, stream) for stream in STREAMS))
        except redis.RedisError:
            _redis.failed()
