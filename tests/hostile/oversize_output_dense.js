// cordon: {"outcome": "output_limit", "reason_has": ["output file flood.bin is over the cap of 1 MiB"], "rejected_has": {"flood.bin": "MiB in all"}, "outputs": [], "stderr_has": ["ENOSPC"], "limits": {"output_max_bytes": 1048576, "wall_timeout_s": 20}}
// Real bytes until the output area refuses (ENOSPC): the file that filled it is named.
const fs = require("fs");
const fd = fs.openSync("/output/flood.bin", "w");
const chunk = Buffer.alloc(65536, 1);
for (;;) fs.writeSync(fd, chunk);
