# cordon: {"outcome": "succeeded", "max_wall_s": 5, "limits": {"wall_timeout_s": 30}}
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in (0, 1, 2):
            os.close(fd)
        while True:  # a daemon that means to outlive the run
            time.sleep(0.1)
    os._exit(0)
os.wait()
print("parent done; daemon left behind")
