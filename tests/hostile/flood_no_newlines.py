# cordon: {"outcome": "output_limit", "stdout_truncated": true, "limits": {"stdout_max_bytes": 100000, "wall_timeout_s": 20}}
import sys

chunk = "x" * 65536
while True:
    sys.stdout.write(chunk)
