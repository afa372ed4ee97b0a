# cordon: {"outcome": "output_limit", "exit_code": 0, "reason_has": ["output file big.bin is over the cap of 1 MiB"], "rejected_has": {"big.bin": "MiB in all"}, "outputs": [], "limits": {"output_max_bytes": 1048576}}
# Real bytes, one past the cap, left for the interpreter to flush at exit, where Python swallows
# the error. An area exactly the cap's size cut the file to the cap and this ended `succeeded`,
# the file exported silently truncated; it must be refused and named.
open("/output/big.bin", "wb").write(b"\1" * (1048576 + 1))
print("wrote 1048577 bytes")
