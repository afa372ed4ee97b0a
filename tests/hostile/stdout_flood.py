# cordon: {"outcome": "output_limit", "stdout_truncated": true, "limits": {"stdout_max_bytes": 65536, "wall_timeout_s": 20}}
while True:
    print("flood " * 20)
