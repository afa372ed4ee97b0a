// The notebook page's shared state: its fixed nodes, and what changes as the user works, in one
// object (`page`) because an ES module's `let` export cannot be reassigned by the modules importing it.

export const root = document.getElementById("notebook");
export const notebookId = root.dataset.notebookId;
export const cellList = document.getElementById("cells");

export const page = {
  limitInfo: {},
  siteEgress: [],  // the site's egress ceiling: a cell's network box shows only when it allows something
  datasets: [],
  cells: [],
  name: "",
  version: 0,
  leaving: false,  // set once the user chose to leave: no "unsaved changes" prompt then
  notebookInputs: [],  // the notebook's own inputs: every code cell sees them under /input
  inputEdits: 0,  // changes to notebookInputs made here (a save's answer replaces them only if none since)
  sequence: null,  // the Run all / Run from here going on, if any: one at a time
  runtime: "python",  // the notebook's: what a new code cell takes
  environment: "",  // the notebook's: where its cells run ("": each runtime's own image)
  selected: null,  // the cell command mode acts on (the one last focused)
};
