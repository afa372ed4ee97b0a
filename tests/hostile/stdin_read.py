# cordon: {"outcome": "succeeded", "stdout_has": ["stdin gave ''"], "limits": {"wall_timeout_s": 5}}
import sys

data = sys.stdin.read()  # a blocking read: stdin is /dev/null, so it ends at once
print(f"stdin gave {data!r}")
