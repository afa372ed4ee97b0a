# cordon: {"outcome": "timed_out", "escalated": true, "limits": {"wall_timeout_s": 1}}
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
while True:
    time.sleep(0.05)
