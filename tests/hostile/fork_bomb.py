# cordon: {"outcome": "process_limit", "limits": {"max_processes": 32, "wall_timeout_s": 20}, "not_on": {"smolvm": "in a VM the process cap is enforced inside the guest (prlimit); the host has no pids evidence"}}
import os

while True:
    try:
        os.fork()
    except OSError:
        pass
