"""Live output from the worker's side to the socket: whole characters however the program's bytes
were read, every byte in the stored log, and a channel layer whose Redis connections stay few
however many sockets come and go at once. (The batching itself: test_live.py.)"""

from __future__ import annotations

import asyncio
import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from playground.asgi import application
from playground.live import LiveMessage, LivePublisher
from playground.logs import spool_path
from playground.models import Run, RunState
from playground.services.execution import RunEvents
from runner.config import PROJECT_ROOT
from tests.conftest import free_port
from tests.playground.conftest import RedisServer, session_cookie
from tests.playground.factories import UserFactory, stored_logs

EUROS = "€" * 100_000  # 3 bytes each: the reproduction
MIXED = "naïve €uro 😀 " * 20_000  # 1-, 2-, 3- and 4-byte characters
READ = 65_536  # a pipe read; 65536 is no multiple of 3, so most reads end inside a '€'
SOCKETS = 200
CHROMIUM = shutil.which("chromium")


# --- the worker's side ----------------------------------------------------------------------


def _feed(events: RunEvents, data: bytes, read: int = READ) -> None:
    """Give `data` to the run's events as the supervisor does: in reads of `read` bytes, then the end."""
    for offset in range(0, len(data), read):
        events({"type": "chunk", "stream": "stdout", "offset": offset, "data": data[offset : offset + read]})
    events({"type": "final", "result": {}})


class RecordingPublisher(LivePublisher):
    """Keeps the chunk messages it would send to the channel layer."""

    def __init__(self, run_id: Any):
        super().__init__(run_id)
        self.chunks: list[Any] = []

    def send(self, message: LiveMessage) -> None:
        if message["type"] == "chunk":
            self.chunks.append(message)


def _publish(run: Run, data: bytes, read: int = READ) -> list[dict[str, Any]]:
    """The chunk messages a run's events send for `data`."""
    live = RecordingPublisher(run.id)
    _feed(RunEvents(run=run, live=live), data, read)
    return live.chunks


def _assert_whole_and_contiguous(chunks: list[dict[str, Any]], text: str, start: int = 0) -> None:
    """Each chunk's text is whole and its offset and length are the bytes it came from."""
    position = start
    for chunk in chunks:
        assert "\ufffd" not in chunk["data"]
        assert chunk["offset"] == position
        assert chunk["length"] == len(chunk["data"].encode())
        position += chunk["length"]
    assert "".join(chunk["data"] for chunk in chunks) == text


@pytest.mark.django_db
@pytest.mark.parametrize("text", [EUROS, MIXED], ids=["euros", "mixed"])
def test_the_worker_never_splits_a_character_between_two_messages_and_logs_every_byte(text: str) -> None:
    user: Any = UserFactory()
    run = Run.objects.create(owner=user, runtime="python", code="1", state=RunState.RUNNING)
    _assert_whole_and_contiguous(_publish(run, text.encode()), text)
    _assert_whole_and_contiguous(_publish(run, text.encode(), read=4097), text)
    assert spool_path(run.id, "stdout").read_bytes() == text.encode()  # the worker's complete copy


@pytest.mark.django_db
def test_a_phase_sends_what_is_pending_first_and_the_cut_character_goes_at_the_end() -> None:
    user: Any = UserFactory()
    run = Run.objects.create(owner=user, runtime="python", code="1", state=RunState.RUNNING)
    live = RecordingPublisher(run.id)
    events = RunEvents(run=run, live=live)
    events({"type": "chunk", "stream": "stdout", "offset": 0, "data": b"ab\xe2"})
    events({"type": "state", "state": "exporting"})  # sends what is pending: the whole part
    events({"type": "chunk", "stream": "stdout", "offset": 3, "data": b"\x82"})  # the cap cut the rest
    events({"type": "final", "result": {}})
    chunks = [(m["offset"], m["data"], m["length"]) for m in live.chunks]
    assert chunks == [(0, "ab", 2), (2, "\ufffd", 2)]  # one U+FFFD for the cut character, as the log API
    events.write_phases()
    assert Run.objects.get(id=run.id).state == RunState.EXPORTING


# --- through the socket -------------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis for this test alone, so that what it counts is this test's doing."""
    server = RedisServer(f"redis://127.0.0.1:{free_port()}/0", tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def layer_redis(own_redis: RedisServer, settings: Any) -> RedisServer:
    """The channel layer as configured (backend and options), pointed at `own_redis`."""
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    config = layers["default"]["CONFIG"]
    config["hosts"] = [_pointed_at(host, own_redis.url) for host in config["hosts"]]
    settings.CHANNEL_LAYERS = layers  # channels drops its cached layers when this setting changes
    return own_redis


def _pointed_at(host: str | dict[str, Any], url: str) -> str | dict[str, Any]:
    return {**host, "address": url} if isinstance(host, dict) else url


async def _socket(user: Any, run_id: Any, query: str = "") -> WebsocketCommunicator:
    cookie = await sync_to_async(session_cookie)(user)
    headers = [(b"cookie", cookie), (b"origin", b"http://127.0.0.1")]
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/{query}", headers=headers)


async def _chunks_until(socket: WebsocketCommunicator, end: int) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    while not chunks or chunks[-1]["offset"] + chunks[-1]["length"] < end:
        message = await socket.receive_json_from(timeout=30)
        if message["type"] == "chunk":
            chunks.append(message)
    return chunks


async def _new_run(state: RunState) -> tuple[Any, Run]:
    user: Any = await sync_to_async(UserFactory)()
    run = await sync_to_async(Run.objects.create)(owner=user, runtime="python", code="1", state=state)
    return user, run


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.asyncio
async def test_live_text_through_the_socket_never_splits_a_character(layer_redis: RedisServer) -> None:
    user, run = await _new_run(RunState.RUNNING)
    socket = await _socket(user, run.id)
    assert (await socket.connect())[0]
    assert (await socket.receive_json_from())["type"] == "state"
    data = MIXED.encode()
    await sync_to_async(_feed)(
        RunEvents(run=run, live=LivePublisher(run.id)), data
    )  # the worker's side, through the layer
    _assert_whole_and_contiguous(await _chunks_until(socket, len(data)), MIXED)
    await socket.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.asyncio
async def test_the_replay_of_the_stored_log_never_splits_a_character(layer_redis: RedisServer) -> None:
    user, run = await _new_run(RunState.FINISHED)
    data = MIXED.encode()
    await sync_to_async(stored_logs)(run.id, stdout=data)
    socket = await _socket(user, run.id, "?stdout=5")  # resuming after "naïv"
    assert (await socket.connect())[0]
    _assert_whole_and_contiguous(await _chunks_until(socket, len(data)), MIXED.encode()[5:].decode(), start=5)
    await socket.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_an_idle_socket_stays_open_longer_than_the_redis_clients_default_read_timeout(
    layer_redis: RedisServer,
) -> None:
    """redis-py 8 reads with a 5 s timeout by default; the layer's blocking receive waits 5 s."""
    user, run = await _new_run(RunState.RUNNING)
    socket = await _socket(user, run.id)
    assert (await socket.connect())[0]
    assert (await socket.receive_json_from())["type"] == "state"
    assert await socket.receive_nothing(timeout=7, interval=0.5)
    message = {"type": "chunk", "stream": "stdout", "offset": 0, "data": "late", "length": 4}
    await get_channel_layer().group_send(f"run.{run.id}", {"type": "run.message", "message": message})  # type: ignore[union-attr]
    assert await socket.receive_json_from(timeout=10) == message
    await socket.disconnect()


# --- many sockets at once -----------------------------------------------------------------


class ClientCounter:
    """The most client connections Redis saw at once while the block ran, not counting its own."""

    def __init__(self, url: str):
        self.redis = aioredis.Redis.from_url(url, socket_timeout=None)
        self.peak = 0
        self.running = True
        self.task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while self.running:
            clients = await self.redis.info("clients")
            self.peak = max(self.peak, int(clients["connected_clients"]) - 1)
            await asyncio.sleep(0.002)

    async def __aenter__(self) -> ClientCounter:
        self.task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.running = False  # stopped between two samples, never cancelled in the middle of one
        assert self.task is not None
        await self.task
        await self.redis.aclose()


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_two_hundred_sockets_closing_together_leave_no_group_members_and_use_few_redis_connections(
    layer_redis: RedisServer, settings: Any
) -> None:
    user, run = await _new_run(RunState.FINISHED)
    sockets = [await _socket(user, run.id) for _ in range(SOCKETS)]
    async with ClientCounter(layer_redis.url) as counter:
        opened = await asyncio.gather(*(s.connect(timeout=30) for s in sockets), return_exceptions=True)
        assert [o for o in opened if o != (True, None)] == []
        for socket in sockets:  # each is live: it was sent the run's state and its final message
            assert (await socket.receive_json_from(timeout=10))["type"] == "state"
            assert (await socket.receive_json_from(timeout=10))["type"] == "final"
        closed = await asyncio.gather(*(s.disconnect(timeout=30) for s in sockets), return_exceptions=True)
        await get_channel_layer().close_pools()  # type: ignore[union-attr]
    assert [repr(c) for c in closed if c is not None] == []
    redis = aioredis.Redis.from_url(layer_redis.url)
    assert await redis.zrange(f"asgi:group:run.{run.id}", 0, -1) == []  # nobody left in the group
    await redis.aclose()
    pool_size = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["max_connections"]
    assert counter.peak <= pool_size + 1, f"Redis saw {counter.peak} client connections at once"


# --- the page -----------------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_the_page_drops_the_bytes_a_message_repeats_not_as_many_characters() -> None:
    from playwright.sync_api import Route, sync_playwright

    # run_view.js is an ES module that imports its neighbours by URL: a made-up origin serves the page
    # and static/js, as the site serves them.
    def serve(route: Route) -> None:
        path = route.request.url.removeprefix("http://cordon.test")
        if path == "/":
            route.fulfill(body='<div id="run"></div>', content_type="text/html")
        elif path.startswith("/static/js/"):
            route.fulfill(path=PROJECT_ROOT / "static" / "js" / path.removeprefix("/static/js/"))
        else:
            route.fulfill(status=404)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.route("http://cordon.test/**", serve)
        page.goto("http://cordon.test/")
        shown = page.evaluate(
            """async () => {
                const { RunView } = await import("/static/js/run_view.js");
                const view = new RunView(document.getElementById("run"));
                view.offsets = { stdout: 0, stderr: 0 };
                view.ansi = { stdout: { fg: null, bold: false }, stderr: { fg: null, bold: false } };
                const chunk = (offset, data) => view.chunk(
                    { type: "chunk", stream: "stdout", offset, data, length: new TextEncoder().encode(data).length });
                chunk(0, "€".repeat(100));     // bytes 0-300, from the replay
                chunk(150, "€".repeat(100));   // bytes 150-450, live: its first 50 characters were shown
                chunk(450, "😀 done");
                const before = view.out.textContent;  // the chunks wait for the next frame, drawn together
                await new Promise((resolve) => { requestAnimationFrame(() => resolve()); });
                return [before, view.out.textContent, view.out.childElementCount, view.offsets.stdout];
            }"""
        )
        browser.close()
    assert shown == ["", "€" * 150 + "😀 done", 1, 450 + len("😀 done".encode())]
