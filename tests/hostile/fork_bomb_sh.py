# cordon: {"outcome": "process_limit", "limits": {"max_processes": 32, "wall_timeout_s": 20}, "not_on": {"smolvm": "in a VM the process cap is enforced inside the guest (prlimit); the host has no pids evidence"}}
import subprocess

# check=True: when the shell cannot fork even its `sleep`, its failure is the program's.
subprocess.run(["/bin/sh", "-c", "f() { f | f & }; f; sleep 60"], check=True)
