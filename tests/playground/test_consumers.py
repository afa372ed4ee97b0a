"""The live-output websocket: owner checks, resuming from an offset, a capped flood, a bounded
replay of a long log, clients that only listen, and a cap on one user's sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from playground import consumers
from playground.asgi import application
from playground.models import Run, RunState
from playground.services import runs as run_services
from runner.spec import Limits
from tests.playground.conftest import api, session_cookie
from tests.playground.factories import UserFactory, stored_logs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.asyncio]


async def _connect(user: Any, run_id: Any, query: str = "") -> WebsocketCommunicator:
    cookie = await sync_to_async(session_cookie)(user)
    communicator = WebsocketCommunicator(
        application, f"/ws/runs/{run_id}/{query}", headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1")]
    )
    return communicator


async def _collect(communicator: WebsocketCommunicator, timeout: float = 60) -> list[dict[str, Any]]:
    """Messages until the `final` one."""
    messages = []
    while True:
        message = await communicator.receive_json_from(timeout=timeout)
        messages.append(message)
        if message["type"] == "final":
            return messages


def _stdout(messages: list[dict[str, Any]], start: int = 0) -> str:
    """Reassemble stdout as a client does: keep chunks that continue it, drop repeated bytes."""
    text, position = "", start
    for message in messages:
        if message["type"] == "chunk" and message["stream"] == "stdout":
            assert message["offset"] <= position, f"gap: expected {position}, got {message['offset']}"
            skip = position - message["offset"]
            text += message["data"].encode()[skip:].decode()
            position = max(position, message["offset"] + message["length"])
    return text


@pytest.mark.usefixtures("redis_server")
async def test_another_users_run_is_refused() -> None:
    owner, stranger = await sync_to_async(UserFactory)(), await sync_to_async(UserFactory)()
    run = await sync_to_async(Run.objects.create)(owner=owner, runtime="python", code="1", state=RunState.FINISHED)
    communicator = await _connect(stranger, run.id)
    connected, code = await communicator.connect()
    assert not connected and code == 4404
    mine = await _connect(owner, run.id)
    connected, _ = await mine.connect()
    assert connected
    await mine.disconnect()


@pytest.mark.usefixtures("redis_server")
@pytest.mark.parametrize("is_staff", [False, True], ids=["user", "staff"])
async def test_a_run_id_that_is_not_a_uuid_is_refused_like_another_users_run(is_staff: bool) -> None:
    user = await sync_to_async(UserFactory)(is_staff=is_staff)
    for run_id in ("not-a-uuid", "1", "0" * 33, "%00"):
        communicator = await _connect(user, run_id)
        connected, code = await communicator.connect()
        assert not connected and code == 4404, run_id


@pytest.mark.usefixtures("worker")
async def test_reconnecting_with_an_offset_resumes_without_duplicates_or_gaps() -> None:
    user: Any = await sync_to_async(UserFactory)()
    code = "import time\nfor i in range(30):\n    print(f'line {i:02}', flush=True)\n    time.sleep(0.05)\n"
    run = await sync_to_async(run_services.run_create)(user=user, runtime="python", code=code, dataset_ids=[])
    first = await _connect(user, run.id)
    assert (await first.connect())[0]
    seen: list[dict[str, Any]] = []
    while len(_stdout(seen)) < 40:  # part of the output, live
        seen.append(await first.receive_json_from(timeout=30))
    await first.disconnect()
    resume_at = len(_stdout(seen).encode())
    second = await _connect(user, run.id, f"?stdout={resume_at}")
    assert (await second.connect())[0]
    rest = await _collect(second)
    await second.disconnect()
    whole = _stdout(seen) + _stdout(rest, start=resume_at)
    assert whole == "".join(f"line {i:02}\n" for i in range(30))
    assert rest[-1]["outcome"] == "succeeded"


@pytest.mark.usefixtures("worker")
async def test_multi_byte_characters_printed_by_a_run_arrive_live_whole() -> None:
    user: Any = await sync_to_async(UserFactory)()
    code = "import time\ntime.sleep(1)\nprint('€' * 100000)\n"  # 300001 bytes, read in pieces
    run = await sync_to_async(run_services.run_create)(user=user, runtime="python", code=code, dataset_ids=[])
    communicator = await _connect(user, run.id)
    assert (await communicator.connect())[0]
    messages = await _collect(communicator)
    await communicator.disconnect()
    chunks = [m for m in messages if m["type"] == "chunk"]
    assert [m["data"].count("\ufffd") for m in chunks if "\ufffd" in m["data"]] == []
    assert all(m["length"] == len(m["data"].encode()) for m in chunks)
    assert _stdout(messages) == "€" * 100000 + "\n"
    assert messages[-1]["outcome"] == "succeeded"


@pytest.mark.usefixtures("worker")
async def test_a_stdout_flood_arrives_capped_and_ends_with_final_output_limit() -> None:
    user: Any = await sync_to_async(UserFactory)()
    run = await sync_to_async(run_services.run_create)(
        user=user, runtime="python", code="while True:\n    print('flood ' * 50)\n", dataset_ids=[],
        limits=Limits(stdout_max_bytes=65536, wall_timeout_s=30),
    )  # fmt: skip
    communicator = await _connect(user, run.id)
    assert (await communicator.connect())[0]
    messages = await _collect(communicator)
    await communicator.disconnect()
    text = _stdout(messages)
    assert len(text.encode()) == 65536
    final = messages[-1]
    assert final["outcome"] == "output_limit" and final["stdout_truncated"] is True
    assert json.dumps(final)  # plain JSON, no objects


@pytest.mark.usefixtures("redis_server")
async def test_a_connect_replays_only_the_last_mib_of_a_long_log_and_the_page_refills_the_rest() -> None:
    user: Any = await sync_to_async(UserFactory)()
    run = await sync_to_async(Run.objects.create)(owner=user, runtime="python", code="1", state=RunState.FINISHED)
    log = ("€" * 1_000_000).encode()  # 3,000,000 bytes: the last MiB starts inside a character
    await sync_to_async(stored_logs)(run.id, stdout=log)
    communicator = await _connect(user, run.id)
    assert (await communicator.connect())[0]
    frames: list[str] = []
    while True:
        frames.append(str(await communicator.receive_from(timeout=30)))
        if json.loads(frames[-1])["type"] == "final":
            break
    await communicator.disconnect()
    messages = [json.loads(frame) for frame in frames]
    chunks = [m for m in messages if m["type"] == "chunk"]
    start = chunks[0]["offset"]
    tail_start = len(log) - consumers.REPLAY_TAIL_BYTES
    assert tail_start < start <= tail_start + 3 and start % 3 == 0  # the first whole character of the tail
    assert _stdout(messages, start=start) == log[start:].decode()
    # Sent as text, not escaped: a frame is about as long as the bytes it carries.
    assert sum(len(frame.encode()) for frame in frames) < consumers.REPLAY_TAIL_BYTES + 64 * 1024
    # The page refills what comes before from the stored log, as it does any gap.
    client = await sync_to_async(api)(user)
    refilled, offset = b"", 0
    while offset < start:
        page = await sync_to_async(client.get)(f"/api/runs/{run.id}/log?stream=stdout&offset={offset}&limit=1048576")
        refilled += page.json()["data"].encode()
        offset = page.json()["next_offset"]
    assert refilled[:start] + log[start:] == log


@pytest.mark.usefixtures("redis_server")
@pytest.mark.parametrize("frame", [{"text_data": '{"type": "hello"}'}, {"text_data": "{not json"},
                                   {"bytes_data": b"\0" * 1000}])  # fmt: skip
async def test_a_client_that_sends_anything_is_closed_and_what_it_sent_is_not_parsed(frame: dict[str, Any]) -> None:
    user: Any = await sync_to_async(UserFactory)()
    run = await sync_to_async(Run.objects.create)(owner=user, runtime="python", code="1", state=RunState.RUNNING)
    communicator = await _connect(user, run.id)
    assert (await communicator.connect())[0]
    assert (await communicator.receive_json_from(timeout=10))["type"] == "state"
    await communicator.send_to(**frame)
    assert await communicator.receive_output(timeout=10) == {"type": "websocket.close", "code": 1008}
    await communicator.disconnect()


@pytest.mark.usefixtures("redis_server")
async def test_one_users_open_sockets_on_a_web_process_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumers, "SOCKETS_PER_USER", 2)
    user: Any = await sync_to_async(UserFactory)()
    other: Any = await sync_to_async(UserFactory)()
    run = await sync_to_async(Run.objects.create)(owner=user, runtime="python", code="1", state=RunState.RUNNING)
    theirs = await sync_to_async(Run.objects.create)(owner=other, runtime="python", code="1", state=RunState.RUNNING)
    held = [await _connect(user, run.id) for _ in range(2)]
    for socket in held:
        assert (await socket.connect())[0]
    refused = await _connect(user, run.id)
    assert await refused.connect() == (False, consumers.SOCKETS_FULL)
    another = await _connect(other, theirs.id)  # another user's are their own
    assert (await another.connect())[0]
    await held[0].disconnect()
    again = await _connect(user, run.id)  # a closed one makes room
    assert (await again.connect())[0]
    for socket in (held[1], another, again):
        await socket.disconnect()
    assert consumers.RunConsumer.open_sockets == {}


@pytest.mark.usefixtures("redis_server")
async def test_a_socket_whose_connect_fails_is_not_left_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    user: Any = await sync_to_async(UserFactory)()
    run = await sync_to_async(Run.objects.create)(owner=user, runtime="python", code="1", state=RunState.FINISHED)

    def broken(**_: Any) -> tuple[int, int]:
        raise RuntimeError("the log store failed")

    monkeypatch.setattr(consumers, "run_log_replay_span", broken)
    communicator = await _connect(user, run.id)
    assert (await communicator.connect())[0]  # accepted, then its replay fails
    with pytest.raises(RuntimeError, match="the log store failed"):
        await communicator.receive_from(timeout=2)  # the consumer's end, raised once the wait is over
    assert consumers.RunConsumer.open_sockets == {}
