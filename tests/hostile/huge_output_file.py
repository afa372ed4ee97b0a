# cordon: {"outcome": "output_limit", "exit_code": 0, "reason_has": ["output file huge.bin is over the cap of 16 MiB"], "rejected_has": {"huge.bin": "MiB in all"}, "outputs": ["small.txt"]}
import os

with open("/output/small.txt", "w") as handle:
    handle.write("kept")
fd = os.open("/output/huge.bin", os.O_WRONLY | os.O_CREAT)
os.truncate(fd, 32 << 20)  # sparse: 32 MiB by size (over the cap of 16 MiB), nothing on disk
os.close(fd)
