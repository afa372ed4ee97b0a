# cordon: {"outcome": "cpu_limit", "limits": {"wall_timeout_s": 20, "cpu_time_s": 1}}
x = 0
while True:
    x += 1
