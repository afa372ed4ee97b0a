// One pair of a similarity report, side by side: each submission's code with the lines that match
// the other side highlighted (text nodes and <mark>s: the code is never parsed as HTML). Whole
// lines: a match's fingerprints stop a few characters short of its tokens' edges.

import { api, el } from "../cordon.js";

const root = document.getElementById("similarity-pair");
const pct = (x) => `${Math.round(x * 100)}%`;

function highlighted(code, regions) {
  const matched = new Set();
  for (const [, , first, last] of regions) for (let line = first; line <= last; line += 1) matched.add(line);
  const nodes = [];
  code.split(/\r\n|\r|\n/).forEach((line, index) => {
    const text = `${line}\n`;
    nodes.push(matched.has(index + 1) ? el("mark", { "data-line": index + 1 }, text) : document.createTextNode(text));
  });
  return nodes;
}

function side(name, data) {
  document.getElementById(`side-${name}-heading`).replaceChildren(
    el("a", { href: `/submissions/${data.submission_id}/` }, data.student), ` · ${pct(data.share)} matches`);
  const box = document.getElementById(`side-${name}`);
  if (data.gone) box.replaceChildren(el("span", { class: "muted" }, "this submission has been deleted"));
  else box.replaceChildren(...highlighted(data.code, data.regions));
}

async function start() {
  const pair = await api("GET", `/similarity/${root.dataset.reportId}/pairs/${root.dataset.index}`);
  document.getElementById("pair-heading").textContent = `${pair.a.student} and ${pair.b.student}: ${pct(pair.similarity)} similar`;
  side("a", pair.a);
  side("b", pair.b);
  root.dataset.ready = "true";
}

start().catch((error) => { document.getElementById("message").textContent = `could not be loaded: ${error.message}`; });
