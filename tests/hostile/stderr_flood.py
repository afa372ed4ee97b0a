# cordon: {"outcome": "output_limit", "stderr_truncated": true, "limits": {"stderr_max_bytes": 65536, "wall_timeout_s": 20}}
import sys

while True:
    sys.stderr.write("err " * 50 + "\n")
