// cordon: {"outcome": "succeeded", "inputs": ["host_port"], "stdout_has": ["tcp to host listener: refused"]}
const fs = require("fs");
const net = require("net");
const port = Number(fs.readFileSync("/input/port.txt", "utf8"));
const socket = net.connect(port, "127.0.0.1");
socket.on("connect", () => { console.log("tcp to host listener: CONNECTED"); socket.destroy(); });
socket.on("error", (err) => console.log(`tcp to host listener: refused (${err.code})`));
