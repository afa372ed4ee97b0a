# cordon: {"outcome": "succeeded", "egress": ["allowed.test:8080"], "stdout_has": ["tcp6 to 2001:db8::1: no path", "http to [2001:db8::1]: 403", "http to [::1]: 403", "connect to [::ffff:198.18.7.2]: 403"], "egress_refused": 3, "egress_reasons_have": ["not in the run's egress policy"]}
# IPv6 literals: no IPv6 route out of the sandbox (2001:db8::/32 is documentation-only), and
# through the proxy an address literal, v6 or v4-mapped, is never a destination.
import errno
import os
import socket
import urllib.error
import urllib.request

try:
    socket.create_connection(("2001:db8::1", 80), timeout=3).close()
    print("tcp6 to 2001:db8::1: CONNECTED")
except OSError as exc:
    print(f"tcp6 to 2001:db8::1: no path ({errno.errorcode.get(exc.errno, exc.errno)})")
for literal in ("[2001:db8::1]:8080", "[::1]:3128"):
    try:
        urllib.request.urlopen(f"http://{literal}/", timeout=10)
        print(f"http to {literal.rsplit(':', 1)[0]}: ALLOWED")
    except urllib.error.HTTPError as exc:
        print(f"http to {literal.rsplit(':', 1)[0]}: {exc.code}")
host, port = os.environ["HTTP_PROXY"].removeprefix("http://").rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=10) as conn:
    conn.sendall(b"CONNECT [::ffff:198.18.7.2]:8080 HTTP/1.1\r\n\r\n")
    print(f"connect to [::ffff:198.18.7.2]: {conn.recv(100).split()[1].decode()}")
