// The notebook page: cells with an editor, inputs, limits, Run (or Ctrl/Cmd-Enter), live output.
"use strict";

(() => {
  const { api, el, RunView } = Cordon;
  const root = document.getElementById("notebook");
  // The limits a cell offers, by their API names; unit, default and maximum come from /api/limits.
  const LIMITS = [["wall_timeout_s", "wall-clock"], ["cpu_time_s", "CPU"], ["memory_mib", "memory"]];
  let limitInfo = {};
  let cells = [];
  let datasets = [];
  let saveTimer = null;

  function save() {
    clearTimeout(saveTimer);
    saveTimer = setTimeout(async () => {
      try {
        await api("PUT", "/notebook", { cells: cells.map((c) => c.data) });
        status("saved");
      } catch (error) { status(`not saved: ${error.message}`); }
    }, 600);
  }

  function status(text) { document.getElementById("save-status").textContent = text; }

  function newCellData(runtime = "python") {
    return { id: `c${Date.now()}`, runtime, code: "", limits: {}, dataset_ids: [], output_ids: [], last_run: null };
  }

  function renderInputs(cell) {
    const box = cell.inputs;
    box.replaceChildren(el("legend", {}, "Inputs"));
    for (const dataset of datasets) {
      const id = `in-${cell.data.id}-${dataset.id}`;
      const check = el("input", { type: "checkbox", id, value: dataset.id });
      check.checked = cell.data.dataset_ids.includes(dataset.id);
      check.addEventListener("change", () => {
        cell.data.dataset_ids = check.checked ? [...cell.data.dataset_ids, dataset.id]
          : cell.data.dataset_ids.filter((x) => x !== dataset.id);
        save();
      });
      box.append(el("label", { for: id }, check, ` ${dataset.name}`));
    }
    for (const output of cell.chosenOutputs || []) {
      box.append(el("span", { class: "chip" }, `output ${output.name}`, el("button", { type: "button",
        "aria-label": `remove ${output.name}`, onclick: () => {
          cell.data.output_ids = cell.data.output_ids.filter((x) => x !== output.id);
          cell.chosenOutputs = cell.chosenOutputs.filter((o) => o.id !== output.id);
          renderInputs(cell); save();
        } }, "×")));
    }
    if (!datasets.length && !(cell.chosenOutputs || []).length) box.append(el("span", { class: "muted" }, "no datasets yet"));
  }

  function renderCell(data, index) {
    const cell = { data, chosenOutputs: [] };
    const runtime = el("select", { "aria-label": "runtime", class: "runtime" },
      el("option", { value: "python" }, "Python"), el("option", { value: "node" }, "JavaScript"));
    runtime.value = data.runtime;
    const editorBox = el("div", { class: "editor" });
    cell.inputs = el("fieldset", { class: "inputs" });
    const limits = el("details", { class: "limits" }, el("summary", {}, "Limits"));
    for (const [name, label] of LIMITS) {
      const info = limitInfo[name] || {};
      const input = el("input", { type: "number", min: "0", step: info.type === "integer" ? "1" : "any", name,
        placeholder: String(info.default ?? ""), title: info.maximum ? `at most ${info.maximum} ${info.unit}` : "" });
      if (info.maximum) input.max = String(info.maximum);
      if (data.limits[name] !== undefined) input.value = data.limits[name];
      input.addEventListener("change", () => {
        if (input.value === "") delete data.limits[name]; else data.limits[name] = Number(input.value);
        save();
      });
      limits.append(el("label", {}, `${label} ${info.unit || ""} `, input));
    }
    const runButton = el("button", { type: "button", class: "run" }, "Run");
    const view = el("div", { class: "run-view" });
    const node = el("section", { class: "cell", "data-index": String(index) },
      el("div", { class: "cell-bar" }, el("span", { class: "cell-number" }, `[${index + 1}]`), runtime, runButton),
      editorBox, cell.inputs, limits, view);
    cell.node = node;
    cell.view = new RunView(view, { onOutputs: (output) => useInNextCell(cell, output) });
    const makeEditor = () => {
      editorBox.replaceChildren();
      cell.editor = CordonEditor.create(editorBox, { doc: data.code, language: data.runtime,
        onRun: () => runCell(cell), onChange: (code) => { data.code = code; save(); } });
    };
    makeEditor();
    runtime.addEventListener("change", () => { data.runtime = runtime.value; makeEditor(); save(); });
    runButton.addEventListener("click", () => runCell(cell));
    renderInputs(cell);
    return cell;
  }

  function useInNextCell(cell, output) {
    let index = cells.indexOf(cell) + 1;
    if (index >= cells.length) addCell("node");
    const next = cells[index];
    if (!next.data.output_ids.includes(output.id)) {
      next.data.output_ids.push(output.id);
      next.chosenOutputs.push(output);
    }
    renderInputs(next);
    save();
    next.node.scrollIntoView({ block: "nearest" });
  }

  async function runCell(cell) {
    const button = cell.node.querySelector("button.run");
    button.disabled = true;
    try {
      const run = await api("POST", "/runs", { runtime: cell.data.runtime, code: cell.data.code,
        dataset_ids: cell.data.dataset_ids, output_ids: cell.data.output_ids, limits: cell.data.limits });
      cell.data.last_run = run.id;
      save();
      return await cell.view.follow(run.id);
    } catch (error) {
      cell.view.reason.textContent = `not started: ${error.message}`;
      return { outcome: "rejected" };
    } finally {
      button.disabled = false;
    }
  }

  async function runAll() {
    for (const cell of cells) {
      const run = await runCell(cell);
      if (run.outcome !== "succeeded") break;
    }
  }

  function addCell(runtime) {
    const cell = renderCell(newCellData(runtime), cells.length);
    cells.push(cell);
    document.getElementById("cells").append(cell.node);
    save();
    return cell;
  }

  async function start() {
    let described;
    [datasets, { cells: stored }, described] = await Promise.all([api("GET", "/datasets"), api("GET", "/notebook"),
      api("GET", "/limits")]);
    limitInfo = Object.fromEntries(described.map((limit) => [limit.name, limit]));
    const list = document.getElementById("cells");
    cells = stored.map((data, index) => renderCell(data, index));
    list.replaceChildren(...cells.map((c) => c.node));
    document.getElementById("add-python").addEventListener("click", () => addCell("python"));
    document.getElementById("add-node").addEventListener("click", () => addCell("node"));
    document.getElementById("run-all").addEventListener("click", runAll);
    status("loaded");
  }
  let stored;
  start();
})();
