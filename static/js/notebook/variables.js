// The variables panel: the notebook's variables, what a new cell at the end would start with; a
// data frame's first rows open beneath its row.
import { el, tableView } from "../cordon.js";
import { formatBytes } from "../format.js";
import { runWords } from "./chain.js";

// Drawn again only when the state changed; a frame the user opened stays open.
let variablesShown = "";
const openFrames = new Set();

export function renderVariables(state) {
  const drawn = JSON.stringify(state);
  if (drawn === variablesShown) return;
  variablesShown = drawn;
  const variables = state.variables || [];
  document.getElementById("variables-count").textContent = variables.length ? `(${variables.length})` : "";
  const body = document.getElementById("variables-body");
  if (!variables.length) {
    body.replaceChildren(el("p", { class: "muted" }, "No variables yet: run a cell."));
    return;
  }
  const headings = ["Name", "Type", "Shape or length", "Size"].map((heading) => el("th", { scope: "col" }, heading));
  const parts = [
    el("p", { class: "small muted" }, `from ${runWords(state.starts_from)}, ${formatBytes(state.bytes)} in all`),
    el("div", { class: "table-scroll" }, el("table", { class: "table variables-table" },
      el("thead", {}, el("tr", {}, ...headings)), el("tbody", {}, ...variables.flatMap(variableRows))))];
  const modules = Object.entries(state.modules || {});
  if (modules.length) {
    parts.push(el("p", { class: "small muted" }, "modules: ", ...modules.flatMap(([alias, module], index) =>
      [index ? ", " : "", el("code", {}, alias), alias === module ? "" : ` (${module})`])));
  }
  if ((state.not_carried || []).length) {
    parts.push(el("p", { class: "small muted" }, "not carried: ", ...state.not_carried.flatMap((item, index) =>
      [index ? ", " : "", el("code", {}, item.name), item.why ? ` (${item.why})` : ""])));
  }
  body.replaceChildren(...parts);
}

// A variable's row; a data frame's has a button that opens its first rows in a row beneath.
function variableRows(variable) {
  const module = variable.module && variable.module !== "builtins" ? ` (${variable.module.split(".")[0]})` : "";
  const size = variable.shape ? variable.shape.join(" × ") : variable.length !== null && variable.length !== undefined
    ? `length ${variable.length}` : "";
  const nameCell = el("td", { class: "variable-name" }, el("code", {}, variable.name));
  const row = el("tr", { "data-name": variable.name }, nameCell, el("td", {}, `${variable.type}${module}`),
    el("td", {}, size), el("td", { class: "num" }, formatBytes(variable.bytes)));
  if (!variable.table) return [row];
  const open = openFrames.has(variable.name);
  const shown = el("tr", { class: "variable-table", hidden: !open },
    el("td", { colspan: "4" }, tableView(variable.table, { whole: "frame" })));
  const toggle = el("button", { type: "button", class: "link show-table", "aria-expanded": String(open),
    "aria-label": `show ${variable.name} as a table` }, "view table");
  toggle.addEventListener("click", () => {
    shown.hidden = !shown.hidden;
    toggle.setAttribute("aria-expanded", String(!shown.hidden));
    if (shown.hidden) openFrames.delete(variable.name); else openFrames.add(variable.name);
  });
  nameCell.append(" ", toggle);
  return [row, shown];
}
