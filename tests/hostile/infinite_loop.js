// cordon: {"outcome": "timed_out", "limits": {"wall_timeout_s": 1.5, "cpu_time_s": 60}}
for (;;) {}
