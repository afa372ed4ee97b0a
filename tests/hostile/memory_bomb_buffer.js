// cordon: {"outcome": "memory_limit", "limits": {"memory_mib": 128, "wall_timeout_s": 20}}
const hoard = [];
for (;;) hoard.push(Buffer.alloc(16 * 1024 * 1024, 1));
