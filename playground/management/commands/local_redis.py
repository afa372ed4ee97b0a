"""Run the Redis that `make run` needs, unless one already answers at REDIS_URL.

Used as a Procfile entry: it becomes redis-server (same pid, so Ctrl-C reaches it), or, when a
Redis is already there, waits quietly so that honcho keeps the other processes running.
"""

import os
import shutil
import signal
from typing import Any
from urllib.parse import urlparse

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


class Command(BaseCommand):
    help = "Start redis-server for REDIS_URL unless a Redis already answers there."

    def handle(self, *args: Any, **options: Any) -> None:
        url = urlparse(settings.REDIS_URL)
        if _answers(settings.REDIS_URL):
            self.stdout.write(f"using the Redis already answering at {url.hostname}:{url.port or 6379}")
            self.stdout.flush()
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
            return
        if url.hostname not in LOCAL_HOSTS:
            raise CommandError(f"no Redis answers at REDIS_URL ({url.hostname}:{url.port or 6379})")
        server = shutil.which("redis-server")
        if server is None:
            raise CommandError("redis-server is not installed (apt-get install redis-server)")
        workdir = settings.DATA_DIR / "redis"
        workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            server,
            "--bind",
            "127.0.0.1",
            "--port",
            str(url.port or 6379),
            "--dir",
            str(workdir),
            "--save",
            "",
            # Queued runs must survive a Redis restart: append-only file, synced on every write.
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--protected-mode",
            "yes",
        ]
        self.stdout.write(f"starting redis-server on 127.0.0.1:{url.port or 6379}")
        self.stdout.flush()
        os.execv(server, argv)  # noqa: S606 - a fixed argv; exec keeps the pid honcho signals


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False
