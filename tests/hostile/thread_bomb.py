# cordon: {"outcome": "process_limit", "limits": {"max_processes": 32, "wall_timeout_s": 20}, "not_on": {"smolvm": "in a VM the process cap is enforced inside the guest (prlimit); the host has no pids evidence"}}
import threading
import time

while True:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
