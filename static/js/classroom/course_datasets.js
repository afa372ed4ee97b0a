// A course's datasets (its staff's part of the page): the list, deleting one, and uploading (a
// name the course has already is offered as a replacement).
import { api, el } from "../cordon.js";
import { formatBytes, formatWhen } from "../format.js";
import { emptyRow } from "./courses_shared.js";

// Course datasets.
export async function loadDatasets(page) {
  const datasets = await api("GET", `${page.base}/datasets`);
  const tbody = document.querySelector("#course-datasets tbody");
  tbody.replaceChildren(...datasets.map((d) => el("tr", {},
    el("td", {}, d.name), el("td", {}, formatBytes(d.size)), el("td", {}, d.sniffed_type),
    el("td", {}, formatWhen(d.created_at)),
    el("td", {}, d.can_delete ? el("button", { type: "button", class: "danger", "aria-label": `delete ${d.name}`,
      onclick: () => deleteDataset(page, d) }, "Delete") : ""))));
  if (!datasets.length) tbody.replaceChildren(emptyRow(5, "No course datasets."));
}

async function deleteDataset(page, dataset) {
  if (!confirm(`Delete ${dataset.name}? Assignments that attach it will no longer have it.`)) return;
  const status = document.getElementById("dataset-status");
  try {
    await api("DELETE", `${page.base}/datasets/${dataset.id}`);
    status.textContent = `deleted ${dataset.name}`;
  } catch (error) { status.textContent = `${dataset.name} not deleted: ${error.message}`; }
  loadDatasets(page);
}

export function setUpDatasetUpload(page) {
  const picker = document.getElementById("dataset-file");
  picker.addEventListener("change", () => {
    const files = [...picker.files];
    picker.value = "";
    send(page, files, false);
  });
}

// A name the course has already is refused; the status then offers to replace it (the
// assignments that use it read the new file; runs made before keep theirs).
async function send(page, files, replace) {
  const status = document.getElementById("dataset-status");
  const taken = [];
  for (const file of files) {
    const data = new FormData();
    data.append("file", file);
    status.textContent = `uploading ${file.name}…`;
    try {
      await api("POST", `${page.base}/datasets${replace ? "?replace=true" : ""}`, data);
      status.textContent = `${replace ? "replaced" : "uploaded"} ${file.name}`;
    } catch (error) {
      if (error.data && error.data.code === "duplicate_name") taken.push(file);
      else status.textContent = `${file.name}: ${error.message}`;
    }
  }
  if (taken.length) {
    const names = taken.map((file) => file.name).join(", ");
    status.replaceChildren(`The course has ${names} already. `,
      el("button", { type: "button", onclick: () => send(page, taken, true) }, `Replace ${names}`),
      " (its assignments read the new file; runs made before keep theirs)");
  }
  loadDatasets(page);
}
