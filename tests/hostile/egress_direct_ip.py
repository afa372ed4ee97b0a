# cordon: {"outcome": "succeeded", "egress": ["allowed.test:8080"], "stdout_has": ["tcp to the test host: ENETUNREACH", "http by address: 403", "connect by address: 403", "http by name: 200"], "egress_refused": 2, "egress_allowed": 1, "egress_reasons_have": ["not in the run's egress policy"]}
# Direct IP: the allowed host's own address, reached directly (no route: the sandbox's only
# network is its loopback) and through the proxy by address instead of by name (refused: a
# policy names hosts, never addresses). By name, through the proxy, it works.
import errno
import os
import socket
import urllib.error
import urllib.request

try:
    socket.create_connection(("198.18.7.2", 8080), timeout=3).close()
    print("tcp to the test host: CONNECTED")
except OSError as exc:
    print(f"tcp to the test host: {errno.errorcode.get(exc.errno, exc.errno)}")
try:
    urllib.request.urlopen("http://198.18.7.2:8080/hello", timeout=10)
    print("http by address: ALLOWED")
except urllib.error.HTTPError as exc:
    print(f"http by address: {exc.code}")
host, port = os.environ["HTTP_PROXY"].removeprefix("http://").rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=10) as conn:
    conn.sendall(b"CONNECT 198.18.7.2:8080 HTTP/1.1\r\n\r\n")
    print(f"connect by address: {conn.recv(100).split()[1].decode()}")
print(f"http by name: {urllib.request.urlopen('http://allowed.test:8080/hello', timeout=10).status}")
