# cordon: {"outcome": "succeeded", "inputs": ["host_port"], "stdout_has": ["tcp to host listener: refused"]}
import socket

port = int(open("/input/port.txt").read())
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    print("tcp to host listener: CONNECTED")
except OSError as exc:
    print(f"tcp to host listener: refused ({exc.errno})")
