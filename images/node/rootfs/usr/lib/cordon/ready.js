// Cordon's ready sandbox program (node): an interpreter started in a new sandbox before its run is
// known, waiting for the one run it will ever serve (runner.ready on the host).
//
//   node --max-old-space-size=N /usr/lib/cordon/ready.js bare FD
//
// FD is a SOCK_SEQPACKET socket to the host. Node's own modules are loaded first; then, one
// message each way:
//
//   to the host     {"ready": true}
//   from the host   {"argv": [PROGRAM, ARGS...], "env": {...}, "cwd": "/tmp"}
//
// and it becomes `node PROGRAM ARGS`: the run's environment, argv and directory, PROGRAM run as
// the main module. Node cannot take a passed fd, so a run with stdin is never handed to one (the
// host starts it cold). What cannot be made again at hand-over: Math.random's state and the hash
// seed, drawn by V8 when this interpreter started (in this sandbox, for it alone), and the
// process's start time, which is the sandbox's. End of file before a message: the host recycled
// the sandbox; it exits quietly.
'use strict';

const fs = require('fs');

const MESSAGE_MAX_BYTES = 2 << 20; // the run's argv (at most 64 arguments of 4 KiB) and environment
const BUILTINS = [
  'assert', 'buffer', 'child_process', 'crypto', 'events', 'http', 'https', 'net', 'os', 'path',
  'readline', 'stream', 'string_decoder', 'timers', 'url', 'util', 'vm', 'zlib',
];

function main() {
  const fd = Number(process.argv[3]);
  let problem = '';
  if (process.argv[2] !== 'bare') {
    problem = `unknown stack ${JSON.stringify(process.argv[2])}`;
  }
  for (const name of BUILTINS) {
    require(name);
  }
  fs.writeSync(fd, JSON.stringify({ready: !problem, problem}));
  if (problem) {
    process.exit(1);
  }
  const order = receive(fd);
  for (const name of Object.keys(process.env)) {
    delete process.env[name];
  }
  Object.assign(process.env, order.env);
  process.chdir(order.cwd);
  process.argv = [process.execPath, ...order.argv];
  require('module').runMain();
}

function receive(fd) {
  const buffer = Buffer.alloc(MESSAGE_MAX_BYTES);
  let size = 0;
  try {
    size = fs.readSync(fd, buffer, 0, buffer.length, null);
  } catch (error) {
    size = 0;
  }
  fs.closeSync(fd);
  if (!size) {
    process.exit(0);
  }
  return JSON.parse(buffer.toString('utf8', 0, size)); // the buffer is garbage from here on
}

main();
