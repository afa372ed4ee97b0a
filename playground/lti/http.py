"""Every call Cordon makes to an LMS (keysets, tokens, rosters, scores): a requests session with a
timeout and a cap on the response's size and on the time it may take to arrive, whatever library
drives it (pylti1p3 takes this session)."""

from __future__ import annotations

import time
from typing import Any

import requests
from django.conf import settings

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
TOTAL_TIMEOUT_S = 20.0  # a server that drips its answer a byte at a time is cut here
RESPONSE_MAX_BYTES = 2 * 1024 * 1024
_CHUNK = 64 * 1024


class ResponseTooLarge(requests.RequestException):
    pass


class ResponseTooSlow(requests.RequestException):
    pass


class BoundedSession(requests.Session):
    def __init__(self) -> None:
        super().__init__()
        self.headers["User-Agent"] = "Cordon-LTI"
        self.max_bytes = int(getattr(settings, "CORDON_LTI_RESPONSE_MAX_BYTES", RESPONSE_MAX_BYTES))
        self.max_redirects = 3

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["timeout"] = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
        kwargs["stream"] = True
        started = time.monotonic()
        response = super().request(str(method), str(url), *args, **kwargs)
        try:
            body = bytearray()
            for chunk in response.iter_content(_CHUNK):
                body += chunk
                if len(body) > self.max_bytes:
                    raise ResponseTooLarge(f"the answer from {response.url} is over {self.max_bytes} bytes")
                if time.monotonic() - started > TOTAL_TIMEOUT_S:
                    raise ResponseTooSlow(f"the answer from {response.url} took over {TOTAL_TIMEOUT_S:g} s")
        finally:
            response.close()
        response._content = bytes(body)
        response._content_consumed = True
        return response
