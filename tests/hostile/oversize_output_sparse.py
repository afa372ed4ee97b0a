# cordon: {"outcome": "output_limit", "exit_code": 0, "reason_has": ["output file big is over the cap of 1 MiB"], "rejected_has": {"big": "MiB in all"}, "outputs": ["small.txt"], "limits": {"output_max_bytes": 1048576}}
# A sparse output file 2048 times the cap: 2 GiB by size, nothing on disk. It must be refused
# and named at export, not cut to 0 bytes by a file size limit (EFBIG) and exported empty.
with open("/output/small.txt", "w") as handle:
    handle.write("kept")
with open("/output/big", "wb") as handle:
    handle.truncate(2 << 30)
