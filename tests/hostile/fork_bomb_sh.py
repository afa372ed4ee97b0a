# cordon: {"outcome": "process_limit", "limits": {"max_processes": 32, "wall_timeout_s": 20}}
import subprocess

subprocess.run(["/bin/sh", "-c", "f() { f | f & }; f; sleep 60"])
