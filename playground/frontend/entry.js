// The editor Cordon's notebook uses: CodeMirror 6 with Python and JavaScript modes (markdown cells
// are plain text). Ctrl/Cmd-Enter calls onRun, Shift-Enter onRunNext; both win over basicSetup's
// own bindings of those keys (insert a blank line, a newline). Tab and Shift-Tab indent and
// dedent (Esc then Tab leaves the editor, CodeMirror's accessible convention); an indent is four
// spaces in Python, two in JavaScript.
import { EditorView, basicSetup } from "codemirror";
import { indentWithTab } from "@codemirror/commands";
import { indentUnit } from "@codemirror/language";
import { keymap } from "@codemirror/view";
import { Prec } from "@codemirror/state";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";

function language(name) {
  if (name === "node") return [javascript(), indentUnit.of("  ")];
  if (name === "python") return [python(), indentUnit.of("    ")];
  return [];
}

export function create(parent, { doc, language: name, label, onRun, onRunNext, onChange }) {
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
      keymap.of([indentWithTab]),
      ...language(name),
      EditorView.lineWrapping,
      EditorView.contentAttributes.of(label ? { "aria-label": label } : {}),
      EditorView.updateListener.of((update) => { if (update.docChanged) onChange(update.state.doc.toString()); }),
    ],
  });
}
