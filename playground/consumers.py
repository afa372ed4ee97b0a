"""Live run output over websockets: /ws/runs/<id>/?stdout=N&stderr=N.

On connect: the user must own the run (staff: any, and a staff member's live view of another
user's log is recorded); the socket joins the run's group, then sends the stored log from the
client's byte offsets (at most its last REPLAY_TAIL_BYTES per stream: a client further behind
refills the rest from the log API), then whatever the worker publishes. The messages (`chunk`,
`state`, `final`) are typed and described in playground/live.py. Clients only listen: a socket
that sends anything is closed, unread.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any, ClassVar
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from playground.live import chunk_message, final_message, run_group, state_message
from playground.models import ACTIVE_STATES, Run
from playground.selectors.runs import run_log_read, run_log_replay_span, runs_readable_by
from playground.services.audit import record_staff_access

REPLAY_CHUNK = 64 * 1024
# What a connect replays of each stream at most: a page that is further behind (a long log, a
# first look at a finished run) refills the rest over GET /api/runs/<id>/log, in pieces it asks for.
REPLAY_TAIL_BYTES = 1 << 20
# Sockets one user may hold open on one web process: a notebook's cells (up to 200) each follow
# their run at once. One more is closed with SOCKETS_FULL, and the page reads the log API instead.
SOCKETS_PER_USER = 256
SOCKETS_FULL = 4429
# The close code for a client that sends: clients only listen (RFC 6455's policy violation).
CLIENTS_ONLY_LISTEN = 1008


class RunConsumer(AsyncJsonWebsocketConsumer):
    run: Run
    group: str
    counted: Any = None  # the user whose open sockets this one counts in
    open_sockets: ClassVar[Counter[Any]] = Counter()  # this process's, per user

    async def connect(self) -> None:
        user = self.scope.get("user")
        run = await self._find_run(user, self.scope["url_route"]["kwargs"]["run_id"])
        if run is None or user is None:
            await self.close(code=4404)
            return
        if self.open_sockets[user.pk] >= SOCKETS_PER_USER:
            await self.close(code=SOCKETS_FULL)
            return
        self.counted = user.pk
        self.open_sockets[user.pk] += 1
        try:
            await self._start(run)
        except BaseException:  # a consumer that dies here is never told of its disconnect
            self._uncount()
            raise

    async def _start(self, run: Run) -> None:
        self.run, self.group = run, run_group(run.id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        query = parse_qs(self.scope.get("query_string", b"").decode())
        for stream in ("stdout", "stderr"):
            await self._replay(stream, _offset(query, stream))
        run = await database_sync_to_async(Run.objects.get)(id=run.id)
        await self.send_json(state_message(run.state))
        if run.state not in ACTIVE_STATES:
            await self.send_json(final_message(run))

    def _uncount(self) -> None:
        if self.counted is not None:
            self.open_sockets[self.counted] -= 1
            if self.open_sockets[self.counted] <= 0:
                del self.open_sockets[self.counted]
            self.counted = None

    async def disconnect(self, code: int) -> None:
        self._uncount()
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        """Clients only listen: one that sends is closed, and what it sent is not parsed."""
        await self.close(code=CLIENTS_ONLY_LISTEN)

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        # A log as UTF-8 text: escaped to ASCII, each byte of a non-ASCII log could take 6 bytes.
        return json.dumps(content, ensure_ascii=False)

    async def run_message(self, event: dict[str, Any]) -> None:
        """A message the worker published to the group (live.GROUP_EVENT), passed on as it is."""
        await self.send_json(event["message"])

    async def _replay(self, stream: str, offset: int) -> None:
        # At most the log's last REPLAY_TAIL_BYTES, up to its size now: what the worker writes
        # later comes from the group, which this socket joined before. run_log_read ends each read
        # on a whole character (but at the end of a finished log), so the text never splits one and
        # `length` counts exactly the bytes it decodes from.
        offset, end = await database_sync_to_async(run_log_replay_span)(
            run=self.run, stream=stream, offset=offset, tail=REPLAY_TAIL_BYTES
        )
        while offset < end:
            data, next_offset, _ = await database_sync_to_async(run_log_read)(
                run=self.run, stream=stream, offset=offset, limit=min(REPLAY_CHUNK, end - offset)
            )
            if not data:
                return
            text = data.decode("utf-8", errors="replace")
            await self.send_json(chunk_message(stream=stream, offset=offset, data=text, length=len(data)))
            offset = next_offset

    @database_sync_to_async
    def _find_run(self, user: Any, run_id: str) -> Run | None:
        if user is None or not user.is_authenticated:
            return None
        try:
            # Parsed here: the query would raise ValidationError, a failed handshake.
            key = uuid.UUID(run_id)
        except ValueError:  # no run has that id: refused like another user's run
            return None
        run = runs_readable_by(user).select_related("owner").filter(id=key).first()
        if run is not None:  # the page reconnects whenever a socket drops: a polled read
            path = self.scope.get("path", "")
            record_staff_access(viewer=user, owner=run.owner, what="live log", run=run, path=path, polled=True)
        return run


def _offset(query: dict[str, list[str]], stream: str) -> int:
    try:
        return max(0, int(query.get(stream, ["0"])[0]))
    except ValueError:
        return 0
