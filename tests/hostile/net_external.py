# cordon: {"outcome": "succeeded", "stdout_has": ["ipv4 routes off the machine: none", "tcp to 192.0.2.1: unreachable", "udp to 192.0.2.1: unreachable"]}
# 192.0.2.1 is TEST-NET-1 (documentation only). It is tried only after checking that no IPv4
# route leads off the sandbox (the main table is empty; loopback lives in the local table), so
# no packet can leave it. Interfaces are listed for the record: a microVM's kernel has a
# dummy0, which carries no route and drops whatever it is given.
import socket
import sys

names = sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:])
print(f"interfaces: {names}")
routes = [line.split()[:2] for line in open("/proc/net/route").read().splitlines()[1:] if line.strip()]
print(f"ipv4 routes off the machine: {routes or 'none'}")
if routes:
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
