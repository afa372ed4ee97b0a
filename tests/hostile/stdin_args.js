// cordon: {"outcome": "succeeded", "stdin": "21\nline two \u00fc\n", "args": ["--n", "two words"], "inputs": ["nested"], "stdout_has": ["double 42", "rest \"line two \u00fc\\n\"", "args [\"--n\",\"two words\"]", "nested n,double"], "limits": {"wall_timeout_s": 10}}
const fs = require("fs");
const [first, ...rest] = fs.readFileSync(0, "utf8").split(/(?<=\n)/);
console.log("double", Number(first) * 2);
console.log("rest", JSON.stringify(rest.join("")));
console.log("args", JSON.stringify(process.argv.slice(2)));
console.log("nested", fs.readFileSync("/input/outputs/result.csv", "utf8").split("\n")[0]);
