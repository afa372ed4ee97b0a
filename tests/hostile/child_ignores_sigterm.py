# cordon: {"outcome": "timed_out", "limits": {"wall_timeout_s": 1}}
import os
import signal
import time

if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.05)
print("parent waits on a child that ignores SIGTERM", flush=True)
os.wait()
