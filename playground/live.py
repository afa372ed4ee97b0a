"""A run's live messages — worker -> channel group `run.<id>` -> websocket /ws/runs/<id>/ -> page:
their types, how output is batched into them, and the publisher that sends them.

Every message is a JSON object whose `type` says which of these it is:

chunk  {"type": "chunk", "stream": "stdout" | "stderr", "offset": int, "length": int, "data": str}
       Bytes [offset, offset + length) of the stream's stored log, as text. Offsets and lengths
       count UTF-8 bytes, never characters. `data` holds whole characters only — a character cut
       by a read waits for its rest — so `length` is exactly the bytes `data` decodes from; bytes
       that can never be UTF-8 become U+FFFD, as does a character cut by the output cap at the
       very end. The worker sends a stream's output in batches (about 50 ms or 16 KiB); on connect
       the consumer replays the stored log from the client's offsets (?stdout=N&stderr=N), as
       chunks too, but no more than its last MiB per stream: the first chunk of a client further
       behind starts past its offset, on a whole character. A client keeps the highest offset it
       has per stream: a chunk it has already seen is dropped, and a gap is refilled from
       GET /api/runs/<id>/log.
state  {"type": "state", "state": str, "time"?: float}
       The run reached this state (playground.models.RunState, in order: queued, claimed,
       admitted, starting, running, exporting, finished). `time`, in seconds since the epoch,
       is when the worker recorded it; the state sent on connect (the run's current one) has none.
final  {"type": "final", "outcome", "reason", "exit_code", "signal", "wall_s", "cpu_s",
        "peak_memory_bytes", "stdout_bytes", "stderr_bytes", "stdout_truncated",
        "stderr_truncated", "cleanup_ok"}
       The run's end as stored (the Run fields of those names; a figure nobody measured is
       null): the last message, sent by the worker once it has written the record, and on
       connect to a finished run. The rest of the record is GET /api/runs/<id>.

A socket for a run the user may not see (not theirs, no such run, no session) is closed with
code 4404 before any message, and one over the user's open sockets on that web process with 4429.
The socket is best effort; the stored, capped log is the truth. Clients only listen: a socket that
sends anything is closed (1008), what it sent unread.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast

from channels.layers import get_channel_layer

if TYPE_CHECKING:
    from playground.models import Run

log = logging.getLogger(__name__)
BATCH_S = 0.05
BATCH_BYTES = 16 * 1024


class ChunkMessage(TypedDict):
    type: Literal["chunk"]
    stream: str
    offset: int
    length: int
    data: str


class StateMessage(TypedDict):
    type: Literal["state"]
    state: str
    time: NotRequired[float]


class FinalMessage(TypedDict):
    type: Literal["final"]
    outcome: str | None
    reason: str
    exit_code: int | None
    signal: int | None
    wall_s: float | None
    cpu_s: float | None
    peak_memory_bytes: int | None
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    cleanup_ok: bool | None


LiveMessage = ChunkMessage | StateMessage | FinalMessage


def chunk_message(*, stream: str, offset: int, data: str, length: int) -> ChunkMessage:
    return {"type": "chunk", "stream": stream, "offset": offset, "length": length, "data": data}


def state_message(state: str, *, at: float | None = None) -> StateMessage:
    message: StateMessage = {"type": "state", "state": str(state)}
    if at is not None:
        message["time"] = at
    return message


def final_message(run: Run) -> FinalMessage:
    """The run's end as stored: each field of FinalMessage is the Run field of that name."""
    figures = {name: getattr(run, name) for name in FinalMessage.__annotations__ if name != "type"}
    return cast(FinalMessage, {"type": "final", **figures})


def whole_utf8(data: bytes | bytearray, *, final: bool = False) -> tuple[str, int]:
    """The text of `data` up to its last whole character, and how many bytes that text takes.

    Only the start of a valid multi-byte character is held back (at most 3 bytes), unless
    `final`; bytes that can never be valid UTF-8 are not waited for but become U+FFFD.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final)
    held, _ = decoder.getstate()
    return text, len(data) - len(held)


# --- batching (pure: the clock is given, nothing is sent from here) ----------------------


@dataclass
class _Pending:
    offset: int  # the stream's byte offset of data[0]
    data: bytearray = field(default_factory=bytearray)


class ChunkBatcher:
    """A run's output, as it is read, into chunk messages: a batch opens with the first byte that
    waits and is sent when `max_delay_s` has passed since or a stream holds `max_bytes`, each
    stream's bytes as one message. A character cut by the end of a read waits for its rest."""

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, max_delay_s: float = BATCH_S,
        max_bytes: int = BATCH_BYTES,
    ) -> None:  # fmt: skip
        self.clock, self.max_delay_s, self.max_bytes = clock, max_delay_s, max_bytes
        self._pending: dict[str, _Pending] = {}
        self._opened_at: float | None = None

    def add(self, stream: str, offset: int, data: bytes) -> list[ChunkMessage]:
        """Take `data`, read from `stream` at byte `offset`; returns the messages due now."""
        pending = self._pending.setdefault(stream, _Pending(offset))
        if not pending.data:
            pending.offset = offset
        pending.data += data
        if self._opened_at is None:
            self._opened_at = self.clock()
        if len(pending.data) >= self.max_bytes:
            return self.flush()
        return self.due()

    def due(self) -> list[ChunkMessage]:
        """The batch if its time has come, else nothing (ask on every tick there is)."""
        if self._opened_at is not None and self.clock() - self._opened_at >= self.max_delay_s:
            return self.flush()
        return []

    def flush(self, *, final: bool = False) -> list[ChunkMessage]:
        """Every stream's waiting bytes now. `final`: the streams have ended, so a character cut
        at the end is sent as U+FFFD, as the stored log shows it."""
        messages = []
        for stream, pending in self._pending.items():
            text, length = whole_utf8(pending.data, final=final)
            if length:
                messages.append(chunk_message(stream=stream, offset=pending.offset, data=text, length=length))
                pending.offset += length
                del pending.data[:length]
        self._opened_at = None
        return messages


# --- sending -------------------------------------------------------------------------------


def run_group(run_id: Any) -> str:
    """The channel group of a run's live messages."""
    return f"run.{run_id}"


# What a group message is handed to in the consumer (RunConsumer.run_message).
GROUP_EVENT = "run.message"


class _Sender:
    """The process's one thread that sends live messages, in the order they were handed over, on an
    event loop of its own kept for its life (channels_redis keeps its Redis connections per loop).
    A run's thread hands a message over and goes on: a send is a round trip or two to Redis (about
    1.5 ms here), five of them between a hello's start and its end. At most QUEUE_MAX wait: past
    that, handing one over waits for room (a flood of output is paced as when each send waited).
    Made again in a forked child (a Celery pool process), whose parent's thread is not there."""

    QUEUE_MAX = 1000

    def __init__(self) -> None:
        self.pid = 0
        self.lock = threading.Lock()
        self.queue: queue.Queue[tuple[Any, str, dict[str, Any]] | threading.Event] = queue.Queue(self.QUEUE_MAX)

    def put(self, layer: Any, group: str, payload: dict[str, Any]) -> None:
        self._running().put((layer, group, payload))

    def flush(self, timeout_s: float) -> bool:
        """Whether every message handed over before this call was sent within `timeout_s`."""
        done = threading.Event()
        self._running().put(done)
        return done.wait(timeout_s)

    def _running(self) -> queue.Queue[tuple[Any, str, dict[str, Any]] | threading.Event]:
        with self.lock:
            if self.pid != os.getpid():
                self.pid, self.queue = os.getpid(), queue.Queue(self.QUEUE_MAX)
                threading.Thread(target=self._loop, args=(self.queue,), name="cordon-live-sender", daemon=True).start()
            return self.queue

    @staticmethod
    def _loop(waiting: queue.Queue[tuple[Any, str, dict[str, Any]] | threading.Event]) -> None:
        loop = asyncio.new_event_loop()
        while True:
            item = waiting.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            layer, group, payload = item
            try:
                loop.run_until_complete(layer.group_send(group, payload))
            except Exception:  # live output is best effort; the stored log is the truth
                log.warning("could not publish to %s", group, exc_info=True)


_sender = _Sender()


class LivePublisher:
    """Sends a run's live messages to its group, in order and best effort (a failure is logged, not
    raised), from the process's sender thread: the caller does not wait for Redis."""

    def __init__(self, run_id: Any) -> None:
        self.group = run_group(run_id)
        self.layer = get_channel_layer()

    def send(self, message: LiveMessage) -> None:
        """Send from synchronous code (the worker). Async code awaits the layer's group_send itself:
        from inside a running loop this is a mistake, so it refuses loudly."""
        if self.layer is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no loop runs in this thread
        else:
            raise RuntimeError("LivePublisher.send is for synchronous code; await the channel layer instead")
        _sender.put(self.layer, self.group, {"type": GROUP_EVENT, "message": message})

    def send_all(self, messages: Iterable[LiveMessage]) -> None:
        for message in messages:
            self.send(message)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Whether what was handed over so far (this run's and any other's) has been sent."""
        return self.layer is None or _sender.flush(timeout_s)
