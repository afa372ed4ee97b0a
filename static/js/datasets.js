// The datasets page: drag-and-drop or pick a file to upload, preview the first bytes, delete.
"use strict";

(() => {
  const { api, el } = Cordon;
  const list = document.getElementById("dataset-list");
  const drop = document.getElementById("drop");
  const picker = document.getElementById("file");
  const message = document.getElementById("upload-status");

  async function refresh() {
    const datasets = await api("GET", "/datasets");
    list.replaceChildren(...datasets.map((d) => el("tr", {},
      el("td", {}, d.name), el("td", {}, `${d.size} B`), el("td", { class: "hash" }, d.sha256.slice(0, 16)),
      el("td", {}, d.sniffed_type),
      el("td", {}, el("button", { type: "button", onclick: () => preview(d) }, "Preview"), " ",
        el("button", { type: "button", onclick: async () => { await api("DELETE", `/datasets/${d.id}`); refresh(); } },
          "Delete")))));
  }

  async function preview(dataset) {
    const { text } = await api("GET", `/datasets/${dataset.id}/preview`);
    const box = document.getElementById("preview");
    box.replaceChildren(el("h2", {}, dataset.name), el("pre", {}, text));  // text, never HTML
  }

  async function upload(files) {
    for (const file of files) {
      const form = new FormData();
      form.append("file", file);
      try {
        await api("POST", "/datasets", form);
        message.textContent = `uploaded ${file.name}`;
      } catch (error) { message.textContent = `${file.name}: ${error.message}`; }
    }
    refresh();
  }

  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => { event.preventDefault(); drop.classList.remove("over"); upload(event.dataTransfer.files); });
  picker.addEventListener("change", () => upload(picker.files));
  refresh();
})();
