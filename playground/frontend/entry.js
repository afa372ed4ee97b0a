// The editor Cordon's notebook uses: CodeMirror 6 with Python and JavaScript modes.
import { EditorView, basicSetup } from "codemirror";
import { keymap } from "@codemirror/view";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";

export function create(parent, { doc, language, onRun, onChange }) {
  const runKey = keymap.of([{ key: "Mod-Enter", run: () => { onRun(); return true; } }]);
  return new EditorView({
    doc,
    parent,
    extensions: [
      runKey,
      basicSetup,
      language === "node" ? javascript() : python(),
      EditorView.lineWrapping,
      EditorView.updateListener.of((update) => { if (update.docChanged) onChange(update.state.doc.toString()); }),
    ],
  });
}
