// cordon: {"outcome": "output_limit", "exit_code": 0, "reason_has": ["output file big is over the cap of 1 MiB"], "rejected_has": {"big": "MiB in all"}, "outputs": [], "limits": {"output_max_bytes": 1048576}}
// The sparse case from node, which (unlike Python) may die of SIGXFSZ where a file size limit
// refuses: either way it must end output_limit, naming the file.
const fs = require("fs");
const fd = fs.openSync("/output/big", "w");
fs.ftruncateSync(fd, 2 * 2 ** 30);
fs.closeSync(fd);
