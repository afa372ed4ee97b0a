"""Completion without a run: what a notebook's editor offers at the cursor, from three sources that
are all names, never values, and never a sandbox run.

(a) The state the cell would start from: the names its cell above carried, and for each its own
    attributes (a frame's columns, a dict's string keys, an instance's attributes), its type's
    attributes and a callable's signature, as the cell program recorded them in its manifest
    (playground.displays._completion cleans them).
(b) The image's index of its importable modules (usr/lib/cordon/completion.json, made when the
    image is built, inside it and so under its digest): each module's public members with their
    kind, signature and first doc line, and the methods of the classes they define.
(c) The cell's own code above the cursor: the names it binds (assignments, defs, classes, imports,
    loop and `with` targets, parameters), read with the tokenizer, which is linear and has no
    recursion to exhaust, over at most SCAN_MAX_CHARS and for at most SCAN_BUDGET_S.

No Django here: the code is plain data in and out, so tests and a bounded child can import it.
"""

from __future__ import annotations

import builtins
import io
import keyword
import re
import time
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_MATCHES = 200
SCAN_MAX_CHARS = 64 * 1024
SCAN_BUDGET_S = 0.05
LINE_MAX_CHARS = 2000  # of the cursor's line, read for its context

# The cursor's context, read from the end of its line.
_IMPORT = re.compile(r"^\s*(?:import\s+(?:[\w.]+(?:\s+as\s+\w+)?\s*,\s*)*|from\s+)([\w.]*)$")
_FROM_IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+(?:\(?\s*(?:\w+(?:\s+as\s+\w+)?\s*,\s*)*)(\w*)$")
_KEY = re.compile(r"(?<![\w.\])])([A-Za-z_]\w*)\[\s*(['\"])([^'\"\]]*)$")
_ATTRIBUTE = re.compile(r"(?<![\w.\])])([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*\.\s*(\w*)$")
_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)?$")
_CALLEE = re.compile(r"(?<![\w.\])])([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*$")
_JS_BINDING = re.compile(r"\b(?:let|const|var|function\*?|class)\s+([A-Za-z_$][\w$]*)")
JS_WORDS = (
    "await", "break", "case", "catch", "class", "const", "continue", "default", "delete", "do", "else", "export",
    "false", "finally", "for", "function", "if", "import", "in", "instanceof", "let", "new", "null", "return",
    "switch", "this", "throw", "true", "try", "typeof", "undefined", "var", "void", "while", "yield",
    "Array", "Boolean", "console", "Date", "Error", "JSON", "Map", "Math", "Number", "Object", "Promise",
    "RegExp", "Set", "String", "require", "process",
)  # fmt: skip


@dataclass(frozen=True)
class Match:
    text: str
    kind: str
    signature: str | None = None
    doc: str | None = None

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"text": self.text, "kind": self.kind}
        if self.signature is not None:
            shown["signature"] = self.signature
        if self.doc:
            shown["doc"] = self.doc
        return shown


@dataclass(frozen=True)
class Index:
    """The image's index (b): {"modules": {name: [[member, kind, signature, doc, ref?]]}, "classes":
    {"module.qualname": [[attribute, kind, signature, doc]]}}; a member's ref names the module or
    class it is, for a chain to follow."""

    modules: dict[str, list[list[Any]]] = field(default_factory=dict)
    classes: dict[str, list[list[Any]]] = field(default_factory=dict)
    importable: list[str] = field(default_factory=list)  # every top-level module, indexed or not

    @classmethod
    def from_json(cls, data: Any) -> Index:
        data = data if isinstance(data, dict) else {}
        modules, classes, importable = data.get("modules"), data.get("classes"), data.get("importable")
        return cls(modules if isinstance(modules, dict) else {}, classes if isinstance(classes, dict) else {},
                   [n for n in importable if isinstance(n, str)] if isinstance(importable, list) else [])  # fmt: skip


@dataclass
class State:
    """What the cell would start with (a): the manifest's variables and modules, and completion."""

    variables: list[dict[str, Any]] = field(default_factory=list)
    modules: dict[str, str] = field(default_factory=dict)
    completion: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> State:
        return cls(list(manifest.get("variables") or []), dict(manifest.get("modules") or {}),
                   dict(manifest.get("completion") or {}))  # fmt: skip


@dataclass
class _Bound:
    """A name the code above binds: its kind, and the module or class it refers to (an import)."""

    kind: str
    ref: str | None = None
    signature: str | None = None
    doc: str | None = None


def complete(*, code: str, cursor: int, runtime: str, state: State, index: Index | None) -> dict[str, Any]:
    """{"matches": [Match.to_json()], "replace": the characters before the cursor a match replaces,
    "call": {"name", "signature", "doc"} | None} at `cursor` (a character offset into `code`, clamped)."""
    cursor = max(0, min(cursor, len(code)))
    above = code[max(0, cursor - SCAN_MAX_CHARS) : cursor]
    line = above[above.rfind("\n") + 1 :][-LINE_MAX_CHARS:]
    if runtime == "node":
        found = re.search(r"[\w$]*$", line)
        prefix = found.group(0) if found else ""
        matches = _rank(_javascript(above, line, state), prefix)
        return {"matches": [m.to_json() for m in matches], "replace": len(prefix), "call": None}
    python = _Python(state, index or Index(), _bindings(above[: len(above) - len(line)]))
    matches, prefix = python.at(line)
    return {"matches": [m.to_json() for m in _rank(matches, prefix)], "replace": len(prefix), "call": python.call(line)}


def _rank(matches: Iterable[Match], prefix: str = "") -> list[Match]:
    """Each name once (its first, richest source wins), in the order given, private names last
    unless asked for, at most MAX_MATCHES."""
    seen: set[str] = set()
    first: list[Match] = []
    private: list[Match] = []
    for match in matches:
        if match.text in seen or not match.text.startswith(prefix):
            continue
        seen.add(match.text)
        (private if match.text.startswith("_") and not prefix.startswith("_") else first).append(match)
    return (first + private)[:MAX_MATCHES]


# --- Python --------------------------------------------------------------------------------------


class _Python:
    def __init__(self, state: State, index: Index, bound: dict[str, _Bound]):
        self.state, self.index = state, index
        self.bound = {name: self._resolved(entry) for name, entry in bound.items()}
        self.variables = {v["name"]: v for v in state.variables if isinstance(v, dict) and "name" in v}
        self.names: dict[str, Any] = state.completion.get("names") or {}
        self.types: dict[str, Any] = state.completion.get("types") or {}

    def at(self, line: str) -> tuple[list[Match], str]:
        """The matches for the cursor's line, and the prefix they complete."""
        if found := _FROM_IMPORT.match(line):
            return self._members(found.group(1)), found.group(2)
        if found := _IMPORT.match(line):
            return self._module_names(found.group(1)), found.group(1)
        if found := _KEY.search(line):
            return self._keys(found.group(1)), found.group(3)
        if found := _ATTRIBUTE.search(line):
            return self._attributes(_chain(found.group(1))), found.group(2)
        if (found := _NAME.search(line)) is not None:
            return self._names(), found.group(1) or ""
        return [], ""

    def call(self, line: str) -> dict[str, Any] | None:
        """The callable whose parentheses the cursor is in (on its line), with its signature."""
        depth, opened = 0, -1
        for at in range(len(line) - 1, -1, -1):
            if line[at] == ")":
                depth += 1
            elif line[at] == "(":
                if depth == 0:
                    opened = at
                    break
                depth -= 1
        callee = _CALLEE.search(line[:opened]) if opened >= 0 else None
        if callee is None:
            return None
        chain = _chain(callee.group(1))
        owner = self._attributes(chain[:-1]) if len(chain) > 1 else self._names()
        match = next((m for m in owner if m.text == chain[-1]), None)
        if match is None or match.signature is None:
            return None
        return {"name": ".".join(chain), "signature": match.signature, "doc": match.doc}

    # the sources

    def _names(self) -> list[Match]:
        out = [Match(name, bound.kind, *self._described(bound)) for name, bound in self.bound.items()]
        for name, variable in self.variables.items():
            entry = self.names.get(name) or {}
            out.append(Match(name, _variable_kind(variable), entry.get("signature"), entry.get("doc")))
        out += [Match(name, "module") for name in self.state.modules]
        builtin = {row[0]: row for row in self.index.modules.get("builtins", [])}
        for name in dir(builtins):
            row = builtin.get(name)
            kind = "class" if isinstance(getattr(builtins, name), type) else "function"
            out.append(Match(name, kind, *(_signature_doc(row) if row else (None, None))))
        out += [Match(word, "keyword") for word in (*keyword.kwlist, *keyword.softkwlist) if word != "_"]
        return out

    def _attributes(self, chain: list[str]) -> list[Match]:
        """What follows `a.b.c.`: a carried value's own attributes then its type's, a module's
        members, a class's attributes."""
        head, rest = chain[0], chain[1:]
        target: tuple[str, str] | None = None  # ("module" | "class", its name)
        if head in self.bound:
            bound = self.bound[head]
            target = ("module", bound.ref) if bound.kind == "module" and bound.ref else None
            if bound.kind == "class" and bound.ref:
                target = ("class", bound.ref)
        elif head in self.state.modules:
            target = ("module", self.state.modules[head])
        elif head in self.variables and not rest:
            return self._value_attributes(head)
        for name in rest:
            target = self._follow(target, name)
        if target is None:
            return []
        kind, ref = target
        rows = self.index.modules.get(ref, []) if kind == "module" else self.index.classes.get(ref, [])
        return [Match(row[0], row[1], *_signature_doc(row)) for row in rows if _row(row)]

    def _value_attributes(self, name: str) -> list[Match]:
        variable, entry = self.variables[name], self.names.get(name) or {}
        key = f"{variable.get('module') or ''}.{variable.get('type') or ''}"
        known = {row[0]: row for row in self.index.classes.get(key, []) if _row(row)}
        out = [Match(attribute, kind) for attribute, kind in entry.get("attributes", [])
               if kind != "key" and attribute.isidentifier()]  # fmt: skip
        for attribute, kind in self.types.get(key, []):
            row = known.get(attribute)
            out.append(Match(attribute, kind, *(_signature_doc(row) if row else (None, None))))
        if key not in self.types:  # a type past the cell program's cap: the index's account of it
            out += [Match(row[0], row[1], *_signature_doc(row)) for row in known.values()]
        return out

    def _keys(self, name: str) -> list[Match]:
        entry = self.names.get(name) or {}
        return [Match(attribute, kind) for attribute, kind in entry.get("attributes", []) if kind in ("column", "key")]

    def _follow(self, target: tuple[str, str] | None, name: str) -> tuple[str, str] | None:
        if target is None:
            return None
        kind, ref = target
        if kind == "module" and f"{ref}.{name}" in self.index.modules:
            return ("module", f"{ref}.{name}")
        rows = self.index.modules.get(ref, []) if kind == "module" else self.index.classes.get(ref, [])
        row = next((r for r in rows if _row(r) and r[0] == name), None)
        if row is None or len(row) < 5 or not isinstance(row[4], str):
            return None
        return ("module" if row[1] == "module" else "class", row[4])

    def _members(self, module: str) -> list[Match]:
        rows = self.index.modules.get(module, [])
        return [Match(row[0], row[1], *_signature_doc(row)) for row in rows if _row(row)]

    def _module_names(self, typed: str) -> list[Match]:
        """`import nu` and `import numpy.ra`: the modules the image has, by their full names."""
        names = sorted({*self.index.modules, *self.index.importable} - {"builtins"})
        return [Match(name, "module") for name in names if name.count(".") == typed.count(".")]

    def _resolved(self, bound: _Bound) -> _Bound:
        """A name `from m import x` bound, as the index knows x: a module, a class, a function."""
        if bound.kind != "member" or not bound.ref:
            return bound
        if bound.ref in self.index.modules:
            return _Bound("module", bound.ref)
        module, _, name = bound.ref.rpartition(".")
        row = next((r for r in self.index.modules.get(module, []) if _row(r) and r[0] == name), None)
        if row is None:
            return _Bound("variable")
        return _Bound(row[1], row[4] if len(row) > 4 and isinstance(row[4], str) else None, *_signature_doc(row))

    def _described(self, bound: _Bound) -> tuple[str | None, str | None]:
        return bound.signature, bound.doc


def _chain(text: str) -> list[str]:
    return [part.strip() for part in text.split(".")]


def _row(row: Any) -> bool:
    return isinstance(row, list) and len(row) >= 2 and isinstance(row[0], str) and isinstance(row[1], str)


def _signature_doc(row: list[Any]) -> tuple[str | None, str | None]:
    signature = row[2] if len(row) > 2 and isinstance(row[2], str) and row[2] else None
    doc = row[3] if len(row) > 3 and isinstance(row[3], str) and row[3] else None
    return signature, doc


def _variable_kind(variable: dict[str, Any]) -> str:
    kind = variable.get("type") or ""
    if kind in ("function", "builtin_function_or_method", "method"):
        return "function"
    return "class" if kind == "type" else "variable"


def _bindings(text: str) -> dict[str, _Bound]:
    """The names `text` binds at any depth of blocks, read token by token: assignment targets
    (a top-level `=` of a line; not a keyword argument's), defs and classes with their parameters,
    imports, loop, `with`, `except` and walrus targets. Stops quietly where the text stops making
    tokens (an unclosed string) or the scan's budget ends."""
    bound: dict[str, _Bound] = {}
    line: list[tokenize.TokenInfo] = []
    deadline = time.monotonic() + SCAN_BUDGET_S
    for count, token in enumerate(_tokens(text)):
        if count % 512 == 0 and time.monotonic() > deadline:
            break
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            _bind_line(line, bound)
            line = []
        elif token.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            line.append(token)
    _bind_line(line, bound)
    return bound


def _tokens(text: str) -> Iterator[tokenize.TokenInfo]:
    try:
        yield from tokenize.generate_tokens(io.StringIO(text).readline)
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket or string, a bad dedent: so far
        return


def _bind_line(tokens: list[tokenize.TokenInfo], bound: dict[str, _Bound]) -> None:
    words = [t.string for t in tokens]
    if not words:
        return
    first = words[0]
    if first in ("def", "class", "async") and len(words) > 1:
        _bind_def(tokens[1:] if first == "async" else tokens, bound)
    elif first == "import":
        _bind_import(words[1:], bound, None)
    elif first == "from" and "import" in words:
        at = words.index("import")
        _bind_import(words[at + 1 :], bound, "".join(words[1:at]))
    depth = 0
    segment: list[tokenize.TokenInfo] = []
    segments: list[list[tokenize.TokenInfo]] = []
    for token in tokens:
        if token.string in "([{" and token.type == tokenize.OP:
            depth += 1
        elif token.string in ")]}" and token.type == tokenize.OP:
            depth = max(0, depth - 1)
        if depth == 0 and token.string == "=":
            segments.append(segment)
            segment = []
        else:
            segment.append(token)
    for target in segments:
        _bind_targets(target, bound)
    for at, token in enumerate(tokens):
        after = tokens[at + 1].string if at + 1 < len(tokens) else ""
        if token.string in ("for", "as") and after.isidentifier() and not keyword.iskeyword(after):
            _bind_targets(_until(tokens[at + 1 :], "in" if token.string == "for" else ":"), bound)
        elif token.type == tokenize.NAME and after == ":=":
            bound.setdefault(token.string, _Bound("variable"))


def _until(tokens: list[tokenize.TokenInfo], stop: str) -> list[tokenize.TokenInfo]:
    """A loop's targets up to `in`; an `as`'s one name, up to `:`, `,` or `)`."""
    out = []
    for token in tokens:
        if token.string == stop or (stop == ":" and token.string in (")", ",")):
            break
        out.append(token)
    return out


def _bind_targets(tokens: list[tokenize.TokenInfo], bound: dict[str, _Bound]) -> None:
    """The names a target list binds: `a`, `a, b`, `(a, b)`; not `obj.attr` nor `x[i]`."""
    for at, token in enumerate(tokens):
        before = tokens[at - 1].string if at else ""
        after = tokens[at + 1].string if at + 1 < len(tokens) else ""
        if token.string == ":" and token.type == tokenize.OP:
            return  # an annotation follows
        if token.type == tokenize.NAME and not keyword.iskeyword(token.string) and before != "." \
                and after not in (".", "[", "("):  # fmt: skip
            bound.setdefault(token.string, _Bound("variable"))


def _bind_def(tokens: list[tokenize.TokenInfo], bound: dict[str, _Bound]) -> None:
    if len(tokens) < 2 or tokens[1].type != tokenize.NAME:
        return
    kind = "function" if tokens[0].string == "def" else "class"
    bound[tokens[1].string] = _Bound(kind)
    if kind != "function":
        return
    depth = 0
    for at, token in enumerate(tokens[2:], start=2):
        if token.string == "(":
            depth += 1
        elif token.string == ")":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1 and token.type == tokenize.NAME and tokens[at - 1].string in ("(", ",", "*", "**"):
            bound.setdefault(token.string, _Bound("param"))


def _bind_import(words: list[str], bound: dict[str, _Bound], module: str | None) -> None:
    """`import a.b as c, d` (words after `import`) or `from m import x as y, z`."""
    parts = " ".join(w for w in words if w not in "()").split(",")
    for part in parts:
        pieces = part.split()
        if not pieces or pieces[0] == "*":
            continue
        name = "".join(pieces[: pieces.index("as")] if "as" in pieces else pieces).replace(" ", "")
        alias = pieces[-1] if "as" in pieces else None
        if module is None:  # import a.b binds a; import a.b as c binds c to a.b
            bound[alias or name.split(".")[0]] = _Bound("module", name if alias else name.split(".")[0])
        else:
            bound[alias or name] = _Bound("member", f"{module}.{name}")


# --- JavaScript ----------------------------------------------------------------------------------


def _javascript(above: str, line: str, state: State) -> Iterator[Match]:
    if re.search(r"[\w$]\s*\.\s*[\w$]*$", line):
        return  # a member of a value: nothing is recorded of a JavaScript cell's values
    for name in dict.fromkeys(_JS_BINDING.findall(above)):
        yield Match(name, "variable")
    for variable in state.variables:
        if isinstance(variable, dict) and isinstance(variable.get("name"), str):
            yield Match(variable["name"], "variable")
    for word in JS_WORDS:
        yield Match(word, "keyword")
