# cordon: {"outcome": "output_limit", "reason_has": ["output file fill.bin is over the cap of 4 MiB"], "stderr_has": ["No space left on device"], "limits": {"output_max_bytes": 4194304, "wall_timeout_s": 20}}
with open("/output/fill.bin", "wb") as handle:
    while True:
        handle.write(b"\1" * 65536)
        handle.flush()
