// cordon: {"outcome": "succeeded", "inputs": ["data"], "stdout_has": ["lines 4"], "outputs": ["count.json"]}
const fs = require("fs");
const lines = fs.readFileSync("/input/data.csv", "utf8").trim().split("\n");
console.log(`lines ${lines.length}`);
fs.writeFileSync("/output/count.json", JSON.stringify({ lines: lines.length }));
