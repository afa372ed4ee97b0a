// The editor Cordon's notebook uses: CodeMirror 6 with Python and JavaScript modes (markdown cells
// are plain text). Ctrl/Cmd-Enter calls onRun, Shift-Enter onRunNext; both win over basicSetup's
// own bindings of those keys (insert a blank line, a newline). Tab and Shift-Tab indent and
// dedent (Esc then Tab leaves the editor, CodeMirror's accessible convention); an indent is four
// spaces in Python, two in JavaScript. Esc calls onEscape (the notebook's command mode, whose cell
// takes the focus, so Tab then moves on as CodeMirror's convention has it), once basicSetup's own
// uses of Esc (closing a completion list or the search panel) have had it. markErrorLine marks the
// line a run's error names (the line and its number, with a title saying why) until the code is edited.
import { EditorView, basicSetup } from "codemirror";
import { indentWithTab } from "@codemirror/commands";
import { indentUnit } from "@codemirror/language";
import { Decoration, GutterMarker, gutterLineClass, keymap } from "@codemirror/view";
import { Prec, RangeSet, StateEffect, StateField } from "@codemirror/state";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";

function language(name) {
  if (name === "node") return [javascript(), indentUnit.of("  ")];
  if (name === "python") return [python(), indentUnit.of("    ")];
  return [];
}

const errorGutter = new (class extends GutterMarker {
  constructor() { super(); this.elementClass = "cm-error-gutter"; }
})();

function markedLine(state, field) {
  const marked = state.field(field);
  return marked && marked.line >= 1 && marked.line <= state.doc.lines ? marked : null;
}

// The marked line: {line (1-based), title}, or null. An edit drops it: it named a line of the code
// that ran, which the edited code no longer is.
const setErrorLine = StateEffect.define();
const errorLine = StateField.define({
  create: () => null,
  update(value, transaction) {
    for (const effect of transaction.effects) if (effect.is(setErrorLine)) return effect.value;
    return transaction.docChanged ? null : value;
  },
  provide: (field) => [
    EditorView.decorations.compute([field], (state) => {
      const marked = markedLine(state, field);
      if (!marked) return Decoration.none;
      return Decoration.set(Decoration.line({ class: "cm-error-line", attributes: { title: marked.title } })
        .range(state.doc.line(marked.line).from));
    }),
    gutterLineClass.compute([field], (state) => {
      const marked = markedLine(state, field);
      return marked ? RangeSet.of(errorGutter.range(state.doc.line(marked.line).from)) : RangeSet.empty;
    }),
  ],
});

// Marks line `line` (1-based; null: no line) of `view`'s code, `title` saying why.
export function markErrorLine(view, line, title = "") {
  view.dispatch({ effects: setErrorLine.of(Number.isInteger(line) ? { line, title } : null) });
}

export function create(parent, { doc, language: name, label, onRun, onRunNext, onEscape, onChange }) {
  const keys = Prec.highest(keymap.of([
    { key: "Mod-Enter", run: () => { if (onRun) onRun(); return Boolean(onRun); } },
    { key: "Shift-Enter", run: () => { if (onRunNext) onRunNext(); return Boolean(onRunNext); } },
  ]));
  return new EditorView({
    doc,
    parent,
    extensions: [
      keys,
      basicSetup,
      keymap.of([{ key: "Escape", run: () => { if (onEscape) onEscape(); return Boolean(onEscape); } }]),
      errorLine,
      keymap.of([indentWithTab]),
      ...language(name),
      EditorView.lineWrapping,
      EditorView.contentAttributes.of(label ? { "aria-label": label } : {}),
      EditorView.updateListener.of((update) => { if (update.docChanged) onChange(update.state.doc.toString()); }),
    ],
  });
}
