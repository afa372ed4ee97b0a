# cordon: {"outcome": "succeeded", "egress": ["allowed.test:8443"], "stdout_has": ["connect allowed.test:22: 403", "connect allowed.test:8443: 200"], "egress_refused": 1, "egress_allowed": 1, "egress_reasons_have": ["not in the run's egress policy"]}
# CONNECT to port 22 of an allowed host: a rule names a port, and a tunnel to any other is
# refused at once (peers that filter only ports 80/443 let such a connection appear to succeed).
import os
import socket

host, port = os.environ["HTTPS_PROXY"].removeprefix("http://").rsplit(":", 1)
for target in ("allowed.test:22", "allowed.test:8443"):
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        print(f"connect {target}: {conn.recv(100).split()[1].decode()}")
