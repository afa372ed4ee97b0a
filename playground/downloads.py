"""File downloads (a run's outputs and images) sent as they are read, a bounded chunk at a time.

Django's FileResponse reads its file synchronously; under ASGI Django drains such a body whole
into a list before it sends a byte ("StreamingHttpResponse must consume synchronous iterators"), so
each download of a 256 MiB output held all of it in the web process. FileStream keeps everything
FileResponse sets (length, type, disposition) and its synchronous reading (WSGI, the test client);
under ASGI it reads CHUNK_BYTES at a time in the request's worker thread, each sent before the next
is read (the web server holds the application's next send until the client has taken the last).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.http import FileResponse

CHUNK_BYTES = 64 * 1024


class FileStream(FileResponse):
    block_size = CHUNK_BYTES

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.file_to_stream is None:  # not a file (or a middleware replaced the content): Django's way
            async for part in super().__aiter__():
                yield part
            return
        read = sync_to_async(self.file_to_stream.read)  # thread-sensitive: the database storage's queries
        while chunk := await read(CHUNK_BYTES):
            yield chunk
