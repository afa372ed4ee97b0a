# cordon: {"outcome": "process_limit", "limits": {"max_processes": 32, "wall_timeout_s": 20}}
import os

while True:
    try:
        os.fork()
    except OSError:
        pass
