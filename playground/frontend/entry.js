// The editor Cordon's notebook uses: CodeMirror 6 with Python and JavaScript modes (markdown cells
// are plain text). Ctrl/Cmd-Enter calls onRun, Shift-Enter onRunNext; both win over basicSetup's
// own bindings of those keys (insert a blank line, a newline). Tab and Shift-Tab indent and
// dedent (Esc then Tab leaves the editor, CodeMirror's accessible convention); an indent is four
// spaces in Python, two in JavaScript. Esc calls onEscape (the notebook's command mode, whose cell
// takes the focus, so Tab then moves on as CodeMirror's convention has it), once basicSetup's own
// uses of Esc (closing a completion list or the search panel) have had it. markErrorLine marks the
// line a run's error names (the line and its number, with a title saying why) until the code is edited.
// Completion: Tab after a name (or a dot, a bracket's quote) and Ctrl-Space ask `complete(code,
// cursor)` (the server's answer: matches, how many characters they replace, the call the cursor is
// in), showing each match's signature beside it and its doc line in the info panel; completion
// while typing stays the language's own (local names), with no request. Typing `(` after a name
// calls onCall with the server's call (its signature), or null.
import { EditorView, basicSetup } from "codemirror";
import { acceptCompletion, autocompletion, completeFromList, completionStatus, startCompletion }
  from "@codemirror/autocomplete";
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

// CodeMirror's option types, by the server's kinds of match.
const OPTION_TYPES = { module: "namespace", column: "property", key: "text", attribute: "property", param: "variable" };

// Characters before `pos` as the server counts them (code points), and back.
function codePoints(text) { return [...text].length; }
function unitsBefore(text, pos, points) {
  const before = [...text.slice(0, pos)];
  return before.slice(before.length - points).join("").length;
}

// Asked (Tab, Ctrl-Space): the server's matches; while typing: the language's own sources.
function completionSource(complete) {
  return async (context) => {
    if (context.explicit && complete) {
      const code = context.state.doc.toString();
      const answer = await complete(code, codePoints(code.slice(0, context.pos)));
      if (context.aborted) return null;
      if (answer && answer.matches.length) {
        return {
          from: context.pos - unitsBefore(code, context.pos, answer.replace),
          // The server's order (a frame's columns before its methods), which CodeMirror keeps by boost.
          options: answer.matches.map((match, index) => ({ label: match.text,
            type: OPTION_TYPES[match.kind] || match.kind, boost: 99 - Math.min(index, 198),
            detail: match.signature || undefined, info: match.doc || undefined })),
          validFor: /^[\w]*$/,
        };
      }
    }
    for (const source of context.state.languageDataAt("autocomplete", context.pos)) {
      const result = await (typeof source === "function" ? source : completeFromList(source))(context);
      if (result) return result;
    }
    return null;
  };
}

// Tab completes after a name, a dot or a key's opening quote, and indents elsewhere.
function tabCompletes(view) {
  const { from, empty } = view.state.selection.main;
  if (!empty) return false;
  const before = view.state.sliceDoc(Math.max(0, from - 1), from);
  return /[\w.'"]/.test(before);
}

// Whether a line's text up to the cursor leaves a call's parenthesis open (the signature shown
// under the editor stays while it does: typing the arguments, not after `)` or a new text).
function inCall(before) {
  let depth = 0;
  for (const ch of before) {
    if (ch === "(") depth += 1;
    else if (ch === ")") depth = Math.max(0, depth - 1);
  }
  return depth > 0;
}

export function create(parent, { doc, language: name, label, onRun, onRunNext, onEscape, onChange, complete, onCall }) {
  const keys = Prec.highest(keymap.of([
    { key: "Mod-Enter", run: () => { if (onRun) onRun(); return Boolean(onRun); } },
    { key: "Shift-Enter", run: () => { if (onRunNext) onRunNext(); return Boolean(onRunNext); } },
    { key: "Tab", run: (view) => {
      if (completionStatus(view.state) === "active") return acceptCompletion(view);
      return complete && tabCompletes(view) ? startCompletion(view) : false;
    } },
  ]));
  // `(` typed after a name: the call's signature, asked once.
  const calls = EditorView.updateListener.of((update) => {
    if (!onCall || !complete || !update.docChanged) return;
    let typed = "";
    update.changes.iterChanges((fromA, toA, fromB, toB, inserted) => { typed = inserted.toString(); });
    const code = update.state.doc.toString();
    const pos = update.state.selection.main.head;
    if (typed !== "(" && typed !== "()") {
      const line = update.state.doc.lineAt(pos);
      if (!inCall(line.text.slice(0, pos - line.from))) onCall(null);
      return;
    }
    complete(code, codePoints(code.slice(0, pos))).then((answer) => onCall(answer ? answer.call : null));
  });
  return new EditorView({
    doc,
    parent,
    extensions: [
      keys,
      basicSetup,
      autocompletion({ override: [completionSource(complete)] }),
      calls,
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
