# cordon: {"outcome": "timed_out", "limits": {"wall_timeout_s": 1}}
import time

time.sleep(10**6)
