// Inputs, a cell's and the notebook's own: a chip per dataset or chained output, a picker of the
// user's datasets (read again when the user comes back to the page), and the notebook's own list.
import { api, el } from "../cordon.js";
import { changed } from "./saving.js";
import { page } from "./state.js";

// Datasets uploaded in another tab appear in the cells' pickers when the user comes back.
export async function refreshDatasets() {
  try { page.datasets = await api("GET", "/datasets"); } catch { return; }
  for (const cell of page.cells) if (cell.isCode) cell.renderInputs();
  renderNotebookInputs();
}

// An input's chip: its name; when what it names is gone, "(deleted)" and a fix (the current
// dataset of the same name) or a remove button.
export function inputChip(ref, { remove, replace }) {
  const label = ref.name || String(ref.id);
  const chip = el("span", { class: `chip chip-${ref.kind}${ref.broken ? " broken" : ""}`,
    title: ref.kind === "output" ? "an output of an earlier run" : "a dataset" },
    ref.kind === "output" ? el("span", { class: "chip-kind" }, "output ") : null, label);
  if (ref.broken) {
    chip.append(el("span", { class: "chip-broken" }, " (deleted)"));
    if (ref.fix) {
      chip.append(" ", el("button", { type: "button", class: "fix", onclick: () => replace(ref.fix) },
        `use current ${ref.fix.name}`));
    } else {
      chip.append(" ", el("button", { type: "button", class: "fix", onclick: remove }, "remove"));
    }
  }
  chip.append(el("button", { type: "button", class: "remove", "aria-label": `remove input ${label}`, onclick: remove },
    "×"));
  return chip;
}

// "+ dataset…": the user's datasets not taken yet.
export function datasetPicker(label, taken, add) {
  const picker = el("select", { class: "add-dataset", "aria-label": label }, el("option", { value: "" }, "+ dataset…"));
  for (const dataset of page.datasets.filter((d) => !taken(d))) {
    picker.append(el("option", { value: dataset.id }, dataset.name));
  }
  if (!page.datasets.length) {
    picker.append(el("option", { value: "", disabled: true }, "no datasets yet (see Datasets)"));
  }
  picker.addEventListener("change", () => {
    const dataset = page.datasets.find((d) => d.id === picker.value);
    if (dataset) add(dataset);
  });
  return picker;
}

export function renderNotebookInputs() {
  const input = (dataset) => ({ kind: "dataset", id: dataset.id, name: dataset.name, broken: false, fix: null });
  const taken = (dataset) => page.notebookInputs.some((ref) => String(ref.id) === String(dataset.id));
  const chips = page.notebookInputs.map((ref) => inputChip(ref, {
    remove: () => setNotebookInputs(page.notebookInputs.filter((r) => String(r.id) !== String(ref.id))),
    // The current dataset in the deleted one's place, once (it may be an input already).
    replace: (fix) => setNotebookInputs(page.notebookInputs.filter((r) => String(r.id) !== String(fix.id))
      .map((r) => (String(r.id) === String(ref.id) ? input(fix) : r))) }));
  const picker = datasetPicker("add a dataset to the notebook's inputs", taken,
    (dataset) => setNotebookInputs([...page.notebookInputs, input(dataset)]));
  document.getElementById("notebook-inputs").replaceChildren(
    el("span", { class: "inputs-label" }, "Notebook inputs"),
    el("span", { class: "muted small" }, "(every cell sees these under /input)"), ...chips, picker);
}

function setNotebookInputs(refs) {
  page.notebookInputs = refs;
  page.inputEdits += 1;
  renderNotebookInputs();
  changed();
}

// The server's word on the notebook's inputs: `whole` (a save's answer, with no change here since
// it was sent) takes its list as it is (a replaced dataset comes back as its current version);
// otherwise only what it says of the inputs this page has (each one's name, whether it is gone).
export function adoptNotebookInputs(stored, { whole }) {
  const before = JSON.stringify(page.notebookInputs);
  if (whole) page.notebookInputs = stored.map((ref) => ({ ...ref }));
  else {
    const byId = new Map(stored.map((ref) => [String(ref.id), ref]));
    for (const ref of page.notebookInputs) {
      const known = byId.get(String(ref.id));
      if (known) Object.assign(ref, { name: known.name, broken: known.broken, fix: known.fix });
    }
  }
  if (JSON.stringify(page.notebookInputs) !== before) renderNotebookInputs();
}
