"""The web server: daphne, with request bodies capped before they are read.

Daphne receives a whole request body, then hands all of it to the application at once, in
memory, before the application can refuse it: an 80 MB upload cost the server about 900 MB
whatever the answer. Here the cap (playground.bodies.body_cap, per route) is enforced in the
HTTP protocol instead: a body whose Content-Length is over it is answered 413 before a byte of
it is read, a chunked one as soon as it passes the cap; whatever the client still sends is
discarded, for a short while, so that it reads the answer rather than a reset. A chunked body
within the cap is handed on with its Content-Length, which Django needs to parse it. And Twisted
does not parse form bodies itself (it read them whole into memory, and answered a malformed
one with an empty 400): Django does, with uploads streamed to disk.

Response bodies are flow-controlled: Twisted buffers whatever is written to a connection, so a
large download to a client that reads slowly, or not at all, would pile up in this process. While
a body streams, its request is the connection's producer: when the connection's send buffer is
full it is paused, and the application's next send waits until the client has read it.

Run it with daphne's arguments: `python -m playground.server -b 127.0.0.1 -p 8000
playground.asgi:application`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from daphne import server as daphne_server
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from twisted.internet import reactor
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer  # type: ignore[import-untyped]

from playground.apierrors import error_body
from runner.units import size_words

# How long a refused client may go on sending (discarded) before the connection is cut.
LINGER_S = 5.0


@implementer(IPushProducer)
class CappedRequest(WebRequest):  # type: ignore[misc]
    body_cap = 0
    body_seen = 0
    refused = False
    linger: Any = None
    # Set while the client keeps up with a streamed body; cleared while the connection is full.
    writable: asyncio.Event | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Twisted would parse a form or multipart body into request.args (which daphne never
        # reads): all of it read into memory and copied, a malformed one answered with an empty
        # 400. Django parses the body, streaming files to disk.
        self._parsePOSTFormSubmission = False

    def gotLength(self, length: int | None) -> None:
        from playground.bodies import body_cap

        method, path = self._method_and_path()
        self.body_cap = body_cap(method, path)
        if length is not None and length > self.body_cap:
            # Refused from the header alone: no "100 Continue", so a client that waits for one
            # sends nothing at all.
            self.requestHeaders.removeHeader(b"expect")
            super().gotLength(0)
            self._refuse(path)
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self.refused:
            return
        self.body_seen += len(data)
        if self.body_seen > self.body_cap:
            self._refuse(self._method_and_path()[1])
            self.content.truncate(0)
            return
        super().handleContentChunk(data)

    def process(self) -> Any:
        if self.refused:
            self.channel.transport.loseConnection()
            return None
        if self.requestHeaders.hasHeader(b"transfer-encoding"):
            # Twisted has decoded the chunks; Django needs the length to parse the body.
            self.requestHeaders.removeHeader(b"transfer-encoding")
            size = self.content.seek(0, os.SEEK_END)
            self.content.seek(0)
            self.requestHeaders.setRawHeaders(b"content-length", [str(size).encode()])
        return super().process()

    def _method_and_path(self) -> tuple[str, str]:
        # The channel holds the request line until the body is complete (twisted.web.http).
        method = getattr(self.channel, "_command", b"") or b""
        uri = getattr(self.channel, "_path", b"") or b""
        return method.decode("latin-1"), uri.split(b"?", 1)[0].decode("latin-1")

    def _refuse(self, path: str) -> None:
        self.refused = True
        body = error_body("too_large", f"the request body is over the {size_words(self.body_cap)} limit for {path}")
        head = (
            "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        transport = self.channel.transport
        transport.write(head.encode() + body)
        clock: Any = reactor  # twisted types the global reactor as a module
        self.linger = clock.callLater(LINGER_S, transport.abortConnection)

    def connectionLost(self, reason: Any) -> None:
        if self.linger is not None and self.linger.active():
            self.linger.cancel()
        self.stopProducing()
        super().connectionLost(reason)

    # A streamed response body, flow-controlled (see the module's docstring).

    def handle_reply(self, message: dict[str, Any]) -> None:
        streams = message.get("type") == "http.response.body" and message.get("more_body", False)
        if streams and self.writable is None and self.channel is not None and not self.finished:
            self.writable = asyncio.Event()
            self.writable.set()
            self.registerProducer(self, True)
        super().handle_reply(message)

    def finish(self) -> Any:
        if self.producer is not None and self.channel is not None:
            self.unregisterProducer()
        return super().finish()

    async def drained(self) -> None:
        """Until the connection can take more of the body (or is gone)."""
        if self.writable is not None:
            await self.writable.wait()

    def pauseProducing(self) -> None:
        if self.writable is not None:
            self.writable.clear()

    def resumeProducing(self) -> None:
        if self.writable is not None:
            self.writable.set()

    def stopProducing(self) -> None:
        if self.writable is not None:
            self.writable.set()  # the connection is gone: nothing waits for it


class CappedHTTPFactory(HTTPFactory):  # type: ignore[misc]
    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = CappedRequest
        return protocol


class FlowControlledServer(daphne_server.Server):  # type: ignore[misc]
    async def handle_reply(self, protocol: Any, message: dict[str, Any]) -> None:
        """The application's send: a piece of a streamed body returns once the client can take more."""
        await super().handle_reply(protocol, message)
        if isinstance(protocol, CappedRequest) and message.get("more_body", False):
            await protocol.drained()


class WebServerCommand(CommandLineInterface):  # type: ignore[misc]
    server_class = FlowControlledServer


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "playground.settings")
    daphne_server.HTTPFactory = CappedHTTPFactory  # daphne's Server builds its factory by this name
    WebServerCommand().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
