"""A run's network namespace for scoped egress: loopback only, and on it one listener, the run's
egress proxy (runner.egress.proxy), which the supervisor serves from outside the namespace.

The namespace has no other interface and so no route anywhere: a program in it can reach
127.0.0.1:PROXY_PORT and nothing else (no resolver, no raw TCP or UDP path off the machine). The
listener is made inside the namespace and served by the supervisor's own thread, whose outgoing
connections leave from the host's namespace, after the proxy's checks. A sandbox joins the
namespace in its launcher before exec with runner.host.spawner.join_netns (bubblewrap then unshares
no network; a microVM's child, and so its VMM, likewise).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
from dataclasses import dataclass

from runner.host.spawner import CLONE_NEWNET

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PROXY_PORT = 3128
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class EgressNamespace:
    """An open network namespace (`fd`) and the proxy's listener in it; close() lets both go."""

    fd: int
    listener: socket.socket

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{PROXY_PORT}"

    def close(self) -> None:
        self.listener.close()
        os.close(self.fd)


def create() -> EgressNamespace:
    """A new network namespace with loopback up and the proxy's listener bound in it. Made in a
    thread of its own, which alone enters the namespace (a namespace change is per thread)."""
    made: list[EgressNamespace | BaseException] = []

    def make() -> None:
        try:
            if _libc.unshare(CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
            fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _loopback_up()
                listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listener.bind(("127.0.0.1", PROXY_PORT))
                listener.listen(64)
            except BaseException:
                os.close(fd)
                raise
            made.append(EgressNamespace(fd, listener))
        except BaseException as exc:  # handed to the caller's thread
            made.append(exc)

    thread = threading.Thread(target=make, name="cordon-netns")
    thread.start()
    thread.join()
    result = made[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH", fcntl.ioctl(probe, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))
