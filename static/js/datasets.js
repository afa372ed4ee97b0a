// The datasets page: drag-and-drop or pick a file to upload; preview one (a table for CSV, TSV and
// JSON, its first bytes as text otherwise); delete.
import { api, el, tableView } from "./cordon.js";
import { formatBytes } from "./format.js";

const list = document.getElementById("dataset-list");
const drop = document.getElementById("drop");
const picker = document.getElementById("file");
const message = document.getElementById("upload-status");
const box = document.getElementById("preview");

async function refresh() {
  const datasets = await api("GET", "/datasets");
  list.replaceChildren(...datasets.map((d) => el("tr", {},
    el("td", {}, d.name), el("td", {}, formatBytes(d.size)), el("td", { class: "hash" }, d.sha256.slice(0, 16)),
    el("td", {}, d.sniffed_type),
    el("td", {}, el("button", { type: "button", "aria-label": `preview ${d.name}`, onclick: () => preview(d) }, "Preview"),
      " ", el("button", { type: "button", "aria-label": `delete ${d.name}`, onclick: () => remove(d) }, "Delete")))));
  if (!datasets.length) list.replaceChildren(el("tr", {}, el("td", { colspan: "5", class: "muted" }, "No datasets yet.")));
}

async function preview(dataset) {
  box.replaceChildren(el("h2", {}, dataset.name), el("p", { class: "muted" }, "loading…"));
  try {
    const found = await api("GET", `/datasets/${dataset.id}/preview`);
    const shown = found.columns && found.columns.length ? tableView(found) : el("pre", {}, found.text || "");  // text, never HTML
    box.replaceChildren(el("h2", {}, dataset.name), shown);
  } catch (error) {
    box.replaceChildren(el("h2", {}, dataset.name), el("p", { class: "error" }, `no preview: ${error.message}`));
  }
}

async function remove(dataset) {
  if (!confirm(`Delete ${dataset.name}? Cells that use it will show it as deleted.`)) return;
  try {
    await api("DELETE", `/datasets/${dataset.id}`);
    message.textContent = `deleted ${dataset.name}`;
  } catch (error) { message.textContent = `${dataset.name} not deleted: ${error.message}`; }
  box.replaceChildren();
  refresh();
}

// A name already taken is refused; the message then offers to replace that dataset with this
// file (new runs and notebook cells that use it read the new one; runs made before keep theirs).
async function upload(files, { replace = false } = {}) {
  const taken = [];
  for (const file of files) {
    const form = new FormData();
    form.append("file", file);
    try {
      await api("POST", `/datasets${replace ? "?replace=true" : ""}`, form);
      message.replaceChildren(`${replace ? "replaced" : "uploaded"} ${file.name}`);
    } catch (error) {
      if (error.data && error.data.code === "duplicate_name") taken.push(file);
      else message.replaceChildren(`${file.name}: ${error.message}`);
    }
  }
  if (taken.length) {
    const names = taken.map((file) => file.name).join(", ");
    message.replaceChildren(`You already have ${names}. `,
      el("button", { type: "button", onclick: () => upload(taken, { replace: true }) }, `Replace ${names}`),
      " (new runs and cells that use it read the new file; runs made before keep theirs)");
  }
  refresh();
}

drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => { event.preventDefault(); drop.classList.remove("over"); upload([...event.dataTransfer.files]); });
picker.addEventListener("change", () => { const files = [...picker.files]; picker.value = ""; upload(files); });
refresh().catch((error) => { message.textContent = `datasets could not be loaded: ${error.message}`; });
