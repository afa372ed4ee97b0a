// cordon: {"outcome": "memory_limit", "outcome_in": ["memory_limit", "output_limit"], "limits": {"memory_mib": 128, "stdout_max_bytes": 1048576, "wall_timeout_s": 30}}
// Never yields to the event loop. While the pipe has room libuv writes straight through, and the
// rest queues in memory: whichever limit is reached first stops it (the OOM when the supervisor
// drains slowly, the 1 MiB cap when it drains fast); either way the evidence must back it.
const chunk = Buffer.alloc(65536, 122);
for (;;) process.stdout.write(chunk);
