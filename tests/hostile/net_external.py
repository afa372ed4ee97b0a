# cordon: {"outcome": "succeeded", "stdout_has": ["interfaces: ['lo']", "tcp to 192.0.2.1: unreachable", "udp to 192.0.2.1: unreachable"]}
# 192.0.2.1 is TEST-NET-1 (documentation only). It is tried only after checking that the
# sandbox has no interface but loopback, so no packet can leave it.
import socket
import sys

names = sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:])
print(f"interfaces: {names}")
if names != ["lo"]:
    sys.exit(3)
try:
    socket.create_connection(("192.0.2.1", 80), timeout=2).close()
    print("tcp to 192.0.2.1: CONNECTED")
except OSError as exc:
    print(f"tcp to 192.0.2.1: unreachable ({exc.errno})")
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"probe", ("192.0.2.1", 53))
    print("udp to 192.0.2.1: SENT")
except OSError as exc:
    print(f"udp to 192.0.2.1: unreachable ({exc.errno})")
