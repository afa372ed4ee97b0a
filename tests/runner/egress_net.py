"""The egress tests' own test host and names: a server in a network namespace the test makes
(198.18.7.2, reached over a veth pair from 198.18.7.1), and a test resolver mapping names to it
and to addresses a proxy must refuse. No traffic goes anywhere else."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.config import PROJECT_ROOT
from runner.egress.proxy import StaticResolver

TEST_NET = ipaddress.ip_network("198.18.7.0/30")  # benchmark range: the test treats it as public
HOST_SIDE, TEST_HOST = "198.18.7.1", "198.18.7.2"


@dataclass
class EgressTestHost:
    namespace: str
    ca: Path


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def can_make_test_host() -> tuple[bool, str]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("openssl") is None:
        return False, "needs root, ip (iproute2) and openssl to make a test host in a network namespace"
    return True, ""


@contextlib.contextmanager
def running_test_host(folder: Path) -> Iterator[EgressTestHost]:
    """Start the test host (tests.runner.egress_host) in a network namespace of its own, reached
    from this host's namespace over a veth pair; its certificate for allowed.test made in `folder`."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=allowed.test",
            "-addext",
            "subjectAltName=DNS:allowed.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    namespace, veth = f"cordon-egress-{os.getpid()}", f"ceg{os.getpid() % 100000}"
    _ip("netns", "add", namespace)
    server = None
    try:
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("addr", "add", f"{HOST_SIDE}/30", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("-n", namespace, "addr", "add", f"{TEST_HOST}/30", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        server = subprocess.Popen(
            ["ip", "netns", "exec", namespace, sys.executable, "-m", "tests.runner.egress_host", str(cert), str(key)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield EgressTestHost(namespace, cert)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", veth], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)


class RecordingResolver(StaticResolver):
    """The test resolver, which also keeps every name it was asked (a refused name never is)."""

    def __init__(self, names: dict[str, list[str]]):
        super().__init__(names)
        self.asked: list[str] = []

    def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        return super().resolve(host, port)


RESOLVER = RecordingResolver(
    {
        "allowed.test": [TEST_HOST],
        "other.test": [TEST_HOST],
        "loop.test": ["127.0.0.1"],
        "meta.test": ["169.254.169.254"],
        "private.test": ["10.1.2.3"],
        "mixed.test": [TEST_HOST, "10.1.2.3"],
        "v6.test": ["::1"],
    }
)
