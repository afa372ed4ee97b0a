// cordon: {"outcome": "output_limit", "stdout_truncated": true, "limits": {"stdout_max_bytes": 100000, "wall_timeout_s": 20}}
const chunk = "y".repeat(65536);
function again() { process.stdout.write(chunk, again); }
again();
