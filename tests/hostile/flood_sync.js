// cordon: {"outcome": "memory_limit", "outcome_in": ["memory_limit", "output_limit"], "limits": {"memory_mib": 128, "stdout_max_bytes": 1048576, "wall_timeout_s": 30}}
// Never yields to the event loop, and every write is a fresh 64 KiB buffer. Where stdout is a
// pipe node writes straight through and the 1 MiB cap stops it; where node treats it as
// asynchronous (a socket, as in a microVM's exec stream) the writes queue in memory and the OOM
// stops it. Either way the evidence must back it. (One shared buffer made the queue grow by a
// few hundred bytes a write: a slow guest then ran out of CPU time before memory.)
for (;;) process.stdout.write(Buffer.alloc(65536, 122));
