// cordon: {"outcome": "memory_limit", "limits": {"memory_mib": 160, "wall_timeout_s": 30}}
const hoard = [];
for (;;) hoard.push(new Array(1 << 20).fill(1.5));
