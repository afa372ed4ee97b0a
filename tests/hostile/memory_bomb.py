# cordon: {"outcome": "memory_limit", "limits": {"memory_mib": 128, "wall_timeout_s": 20}}
hoard = []
while True:
    hoard.append(bytearray(16 * 1024 * 1024))
