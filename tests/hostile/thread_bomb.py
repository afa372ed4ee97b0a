# cordon: {"outcome": "process_limit", "limits": {"max_processes": 32, "wall_timeout_s": 20}}
import threading
import time

while True:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
