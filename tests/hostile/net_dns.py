# cordon: {"outcome": "succeeded", "stdout_has": ["dns: failed"]}
import socket

try:
    print(f"dns: RESOLVED {socket.getaddrinfo('deb.debian.org', 80)[0][4]}")
except OSError as exc:
    print(f"dns: failed ({exc})")
