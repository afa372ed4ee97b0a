"""Live messages, without Redis, a worker or images: whole characters however the bytes were
read, byte offsets, and batches of about 50 ms or 16 KiB on a clock the test turns by hand."""

from __future__ import annotations

from typing import Any

import pytest

from playground.live import BATCH_BYTES, BATCH_S, ChunkBatcher, ChunkMessage, FinalMessage, state_message, whole_utf8
from playground.models import RunState
from runner.spec import Phase

EUROS = "€" * 100_000  # 3 bytes each
MIXED = "naïve €uro 😀 " * 20_000  # 1-, 2-, 3- and 4-byte characters


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _shown(messages: list[ChunkMessage]) -> list[tuple[str, int, str, int]]:
    return [(m["stream"], m["offset"], m["data"], m["length"]) for m in messages]


# --- the cut itself ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["€", "😀", "ï"])
def test_a_character_cut_by_a_read_is_held_back_until_the_rest_arrives(text: str) -> None:
    encoded = ("ab" + text).encode()
    for cut in range(3, len(encoded)):
        assert whole_utf8(encoded[:cut]) == ("ab", 2)
    assert whole_utf8(encoded) == ("ab" + text, len(encoded))


def test_bytes_that_can_never_be_utf8_become_replacement_characters_without_waiting() -> None:
    assert whole_utf8(b"a\xff") == ("a\ufffd", 2)
    assert whole_utf8(b"a\x80") == ("a\ufffd", 2)
    assert whole_utf8(b"\xe2(") == ("\ufffd(", 2)


def test_at_the_end_a_cut_character_is_sent_as_the_stored_log_shows_it() -> None:
    assert whole_utf8("a€".encode()[:-1], final=True) == ("a\ufffd", 3)


# --- batching ----------------------------------------------------------------------------


def test_output_waits_for_the_batch_window_then_goes_as_one_message(clock: Clock) -> None:
    batcher = ChunkBatcher(clock=clock)
    assert batcher.add("stdout", 0, b"tick 0\n") == []
    clock.advance(BATCH_S / 2)
    assert batcher.add("stdout", 7, b"tick 1\n") == []
    assert batcher.due() == []
    clock.advance(BATCH_S / 2)
    assert _shown(batcher.due()) == [("stdout", 0, "tick 0\ntick 1\n", 14)]
    assert batcher.due() == []  # nothing is sent twice


def test_a_lone_line_is_sent_once_its_window_has_passed_without_waiting_for_more_output(clock: Clock) -> None:
    batcher = ChunkBatcher(clock=clock)
    assert batcher.add("stdout", 0, b"up\n") == []
    clock.advance(BATCH_S)
    assert _shown(batcher.due()) == [("stdout", 0, "up\n", 3)]


def test_a_stream_holding_the_byte_threshold_is_sent_at_once(clock: Clock) -> None:
    batcher = ChunkBatcher(clock=clock)
    assert batcher.add("stdout", 0, b"x" * (BATCH_BYTES - 1)) == []
    [message] = batcher.add("stdout", BATCH_BYTES - 1, b"y")
    assert (message["offset"], message["length"]) == (0, BATCH_BYTES)
    assert message["data"].endswith("xy")


def test_each_stream_goes_in_its_own_message_at_its_own_offsets(clock: Clock) -> None:
    batcher = ChunkBatcher(clock=clock)
    batcher.add("stdout", 0, b"out 1\n")
    batcher.add("stderr", 0, b"err\n")
    batcher.add("stdout", 6, b"out 2\n")
    assert _shown(batcher.flush()) == [("stdout", 0, "out 1\nout 2\n", 12), ("stderr", 0, "err\n", 4)]
    batcher.add("stdout", 12, b"more\n")
    assert _shown(batcher.flush()) == [("stdout", 12, "more\n", 5)]


def test_a_character_cut_between_two_reads_waits_and_offsets_stay_in_bytes(clock: Clock) -> None:
    batcher = ChunkBatcher(clock=clock)
    euro = "€".encode()
    batcher.add("stdout", 0, b"ab" + euro[:1])
    assert _shown(batcher.flush()) == [("stdout", 0, "ab", 2)]
    assert batcher.due() == []  # the held part opens no window of its own
    clock.advance(1)
    assert batcher.due() == []
    batcher.add("stdout", 3, euro[1:] + b"c")
    assert _shown(batcher.flush()) == [("stdout", 2, "€c", 4)]


def test_at_the_end_a_character_cut_by_the_output_cap_is_sent_as_a_replacement(clock: Clock) -> None:
    batcher = ChunkBatcher(clock=clock)
    batcher.add("stdout", 0, b"ab\xe2")
    assert _shown(batcher.flush()) == [("stdout", 0, "ab", 2)]
    batcher.add("stdout", 3, b"\x82")  # the cap cut the rest of the character
    assert _shown(batcher.flush(final=True)) == [("stdout", 2, "\ufffd", 2)]


@pytest.mark.parametrize("text", [EUROS, MIXED], ids=["euros", "mixed"])
@pytest.mark.parametrize("read", [65_536, 4097, 7])
def test_batches_never_split_a_character_and_cover_every_byte_once(clock: Clock, text: str, read: int) -> None:
    data = text[: 100_000 if read > 100 else 5_000].encode()
    batcher = ChunkBatcher(clock=clock)
    messages: list[ChunkMessage] = []
    for offset in range(0, len(data), read):
        messages += batcher.add("stdout", offset, data[offset : offset + read])
        clock.advance(0.01)
    messages += batcher.flush(final=True)
    position = 0
    for message in messages:
        assert "\ufffd" not in message["data"]
        assert message["offset"] == position
        assert message["length"] == len(message["data"].encode())
        position += message["length"]
    assert "".join(m["data"] for m in messages).encode() == data


# --- the messages ------------------------------------------------------------------------


def test_every_supervisor_phase_is_a_run_state_between_claimed_and_finished() -> None:
    order = list(RunState)
    assert order[:2] == [RunState.QUEUED, RunState.CLAIMED] and order[-1] == RunState.FINISHED
    assert [RunState.of(phase) for phase in Phase] == order[2:-1]


def test_a_state_message_carries_the_time_only_when_the_worker_recorded_it() -> None:
    assert state_message(RunState.CLAIMED) == {"type": "state", "state": "claimed"}
    assert state_message(RunState.RUNNING, at=1.5) == {"type": "state", "state": "running", "time": 1.5}


def test_the_final_message_names_only_fields_a_run_has() -> None:
    from playground.models import Run

    names: dict[str, Any] = FinalMessage.__annotations__
    run_fields = {f.name for f in Run._meta.get_fields()}
    assert set(names) - {"type"} <= run_fields


def test_the_publisher_refuses_to_send_from_inside_a_running_event_loop() -> None:
    """Its per-thread loop cannot run inside another one: every message would be dropped quietly."""
    import asyncio

    from playground.live import LivePublisher

    publisher = LivePublisher("00000000-0000-0000-0000-000000000000")
    assert publisher.layer is not None

    async def inside() -> None:
        publisher.send(state_message("running"))

    with pytest.raises(RuntimeError, match="synchronous code"):
        asyncio.run(inside())
