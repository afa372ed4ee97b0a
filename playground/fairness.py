"""A request with a large body (a notebook saved whole, an upload) is handled at a lower CPU
priority than the others in its web process: parsing, checking and storing megabytes is real work,
and a small request (a poll, a run's submit) must not wait behind it.

The priority is the thread's (Linux keeps a nice value per thread): under ASGI, Django gives each
request a thread of its own for its sync code, so what this lowers is that request's work alone.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

log = logging.getLogger(__name__)
LARGE_BODY_BYTES = 256 * 1024
LARGE_BODY_NICE = 10


class LargeBodiesYield:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        try:
            size = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0
        if size < LARGE_BODY_BYTES:
            return self.get_response(request)
        thread = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, max(before, LARGE_BODY_NICE))
        try:
            return self.get_response(request)
        finally:
            try:  # back up needs CAP_SYS_NICE (make run is root); without it the thread stays lower
                os.setpriority(os.PRIO_PROCESS, thread, before)
            except PermissionError:
                log.debug("could not raise thread %s's priority back to %s", thread, before)
