# cordon: {"outcome": "disk_limit", "stderr_has": ["No space left on device"], "limits": {"disk_mib": 16, "wall_timeout_s": 20}, "not_on": {"smolvm": "in a VM scratch is guest memory, invisible from the host; the guest's own disk is the bound"}}
with open("/tmp/fill", "wb") as handle:
    while True:
        handle.write(b"\0" * 1048576)
        handle.flush()
