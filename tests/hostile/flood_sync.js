// cordon: {"outcome": "memory_limit", "limits": {"memory_mib": 128, "stdout_max_bytes": 1048576, "wall_timeout_s": 30}}
// Never yields to the event loop, so Node queues the writes in memory: the memory limit stops it.
const chunk = Buffer.alloc(65536, 122);
for (;;) process.stdout.write(chunk);
