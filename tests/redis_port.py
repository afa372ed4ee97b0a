"""Loaded with `-p` (pyproject's addopts), so before pytest-django reads the settings: the web
tests talk to a Redis of their own, started by a fixture on this free port, never to one that
happens to run on the default port (a `make run` stack, another test session)."""

import os
import socket

with socket.socket() as _sock:
    _sock.bind(("127.0.0.1", 0))
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{_sock.getsockname()[1]}/0"
