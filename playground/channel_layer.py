"""The channel layer behind live output: channels_redis's Redis layer with a bounded pool of
Redis connections per event loop that waits for a free connection instead of failing."""

from __future__ import annotations

from typing import Any

from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool


class BoundedRedisChannelLayer(RedisChannelLayer):  # type: ignore[misc]  # channels_redis is untyped
    """channels_redis builds each event loop's pool with `ConnectionPool.from_url`, which (redis-py
    8) holds at most 100 connections and raises "Too many connections" past them: every socket
    that joins or leaves a group at the same moment takes one, so a burst of closing sockets failed
    and left their channels in the group. A blocking pool queues the burst on a few connections.

    A host is a dict: `address` (a redis:// URL), `max_connections`, `timeout` (seconds to wait for
    a free connection) and any redis-py connection option (`socket_timeout`, ...).
    """

    def create_pool(self, index: int) -> BlockingConnectionPool:
        options: dict[str, Any] = dict(self.hosts[index])
        return BlockingConnectionPool.from_url(options.pop("address"), **options)
