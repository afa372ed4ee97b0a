// A notebook cell in JavaScript: restores the names the cells above left, runs the cell's script,
// and leaves its displays, a manifest and a snapshot of its names in /output/.cordon (runner.cells).
//
//   node cell.js SCRIPT [ARGS...]
//
// Each cell is its own sandbox run; state reaches the next cell only as the snapshot file, which the
// host copies out unread. Environment: CORDON_STATE_MAX_BYTES (the snapshot's cap) and, when there is
// a state to start from, CORDON_CELL_STATE (its path, read-only). Session files, in /output/.cordon:
//
//   state      the snapshot, written at exit, also after an uncaught error or process.exit(n): node's
//              REPL keeps what a failed line bound before it threw. Not written when the process is
//              killed (a signal, out of memory). Its format:
//                magic      "cordon-node-state 1\n" (20 bytes)
//                blobs      each carried value through v8.serialize, back to back
//                index      JSON {"node": "v18.20.4",
//                                 "names": [[name, blob length], ...],  in blob order
//                                 "same": {name: earlier name},          bound to the very same object
//                                 "modules": {name: id},                 require(id) again
//                                 "assigned": ["_", "_error"]}           the user's own (see below);
//                                                                        absent in older states: none
//                length     the index's length in bytes, 4 bytes unsigned big-endian
//              One blob per value, so a value that cannot be saved or restored costs only its own
//              name; an object shared *inside* two values comes back as two copies. The index comes
//              last so that each blob is written as it is made and then dropped: the peak is one
//              blob, not the whole snapshot. Over the cap, the file is instead a sparse file of
//              exactly cap + 1 bytes, which the host refuses (output_limit).
//   cell.json  the manifest (version 1), written last, also on failure: the python image's shape,
//              which playground/displays.py reads
//   restoring  present only while the state is restored, so running out of memory there says why
//
// As in node's REPL, `_` is the completion value of the last cell above that ran to its end
// (undefined in the first cell and after a declaration) and `_error` the uncaught error that ended
// the last cell that failed, until the user assigns one of them: node's message says so once, on
// stderr, and from then on it is an ordinary name of theirs, in the cells below too (the index's
// "assigned"). Until then, carried but not listed among the manifest's variables and modules; a
// value that cannot be carried is listed as not carried, as any name's.
//
// The script runs with vm.runInThisContext as a classic script, so its top-level let, const and
// class bindings live in the global lexical scope, where V8's inspector lists them and a later
// vm.runInThisContext(name) reads them. They shadow globals for all code from then on, this
// program's too: everything it uses after the script started is captured here first.

"use strict";

const fs = require("fs");
const vm = require("vm");
const path = require("path");
const Module = require("module");

const proc = process;
const globalObject = globalThis;
const BufferOf = Buffer;
const MapOf = Map;
const SetOf = Set;
const WeakMapOf = WeakMap;
const DataViewOf = DataView;
const toText = String;
const { defineProperty, entries, getOwnPropertyDescriptor, getOwnPropertyNames, getPrototypeOf } = Object;
const { isArray } = Array;
const { isView } = ArrayBuffer;
const ObjectPrototype = Object.prototype;
const stringify = JSON.stringify;
const parse = JSON.parse;

const SESSION_DIR = "/output/.cordon";
const STATE_PATH = `${SESSION_DIR}/state`;
const MANIFEST_PATH = `${SESSION_DIR}/cell.json`;
const RESTORING_PATH = `${SESSION_DIR}/restoring`;
const STATE_MAGIC = "cordon-node-state 1\n";
const KIB = 1024;
const MIB = 1024 * KIB;
const DEFAULT_STATE_MAX_BYTES = 256 * MIB; // runner.spec.Limits' default, for a cell run by hand
const DISPLAYS_MAX = 100;
const TEXT_MAX_BYTES = 64 * KIB;
const JSON_MAX_BYTES = 1 * MIB;
// All displays together, so that cell.json stays well inside its cap of 8 MiB (runner.cells).
const DISPLAYS_MAX_BYTES = 4 * MIB;
const INSPECT_OPTIONS = { depth: 4, maxArrayLength: 100, breakLength: 100 };
// What the script is given to look like a CommonJS module.
const NOT_CARRIED_NAMES = new SetOf(["require", "module", "exports", "__filename", "__dirname", "display"]);

const cell = {
  displays: [],
  displaysDropped: 0,
  displayBytes: 0,
  restored: null,
  error: null,
  // What each module the script required exports, and the id that requires it again: a name holding
  // one that v8.serialize refuses (its functions) is carried as that id instead.
  required: new WeakMapOf(),
};

// node's REPL's own names: the last completion value and the last uncaught error. A name the user
// assigned is theirs (assigned), and no longer replaced.
const repl = {
  values: { __proto__: null, _: undefined, _error: undefined },
  assigned: { __proto__: null, _: false, _error: false },
  getters: { __proto__: null }, // each name's accessor, to tell whether it is still the REPL's
};
const REPL_NAMES = ["_", "_error"];

// Loaded on first use: every cell pays for what it loads at start.
let v8Module = null;
let utilModule = null;
const v8 = () => (v8Module = v8Module || require("v8"));
const util = () => (utilModule = utilModule || require("util"));

function main() {
  const [node, , script, ...args] = proc.argv;
  if (!script) {
    say("usage: cell.js SCRIPT [ARGS...]");
    proc.exit(2);
  }
  const stateFile = proc.env.CORDON_CELL_STATE;
  const stateCap = stateMaxBytes(proc.env.CORDON_STATE_MAX_BYTES);
  // The script sees the environment and argv of a plain run: it is the program.
  delete proc.env.CORDON_CELL_STATE;
  delete proc.env.CORDON_STATE_MAX_BYTES;
  proc.argv = [node, script, ...args];

  const builtins = new SetOf(getOwnPropertyNames(globalObject));
  const scriptModule = giveModuleScope(script);
  if (stateFile) {
    cell.restored = restoreState(stateFile, scriptModule.require);
  }
  giveReplNames();
  proc.on("uncaughtExceptionMonitor", recordFatalError);
  proc.on("exit", () => finish(builtins, stateCap));
  runScript(script);
  scriptModule.loaded = true;
}

function stateMaxBytes(text) {
  const cap = Number(text);
  return Number.isSafeInteger(cap) && cap >= 0 ? cap : DEFAULT_STATE_MAX_BYTES;
}

function say(line) {
  fs.writeSync(2, `cordon: ${line}\n`);
}

// --- the script's scope -------------------------------------------------------------------

function giveModuleScope(script) {
  const scriptModule = new Module(script, null);
  scriptModule.filename = script;
  scriptModule.paths = Module._nodeModulePaths(path.dirname(script));
  const scope = {
    require: requireFor(script, scriptModule),
    module: scriptModule,
    exports: scriptModule.exports,
    __filename: script,
    __dirname: path.dirname(script),
    display,
  };
  scriptModule.require = scope.require;
  for (const name of Object.keys(scope)) {
    defineProperty(globalObject, name, { value: scope[name], writable: true, configurable: true, enumerable: false });
  }
  return scriptModule;
}

// module.createRequire's function, noting what each module exports (cell.required).
function requireFor(script, scriptModule) {
  const resolving = Module.createRequire(script);
  const scriptRequire = (id) => {
    const exported = resolving(id);
    if ((typeof exported === "object" && exported !== null) || typeof exported === "function") {
      if (!cell.required.has(exported)) {
        cell.required.set(exported, Module.isBuiltin(id) ? id : resolving.resolve(id));
      }
    }
    return exported;
  };
  Object.assign(scriptRequire, resolving);
  scriptRequire.main = scriptModule; // `require.main === module` holds, as when node runs the script
  return scriptRequire;
}

// An exception escapes to node, which prints it and exits 1, as it would for the script run alone.
function runScript(script) {
  let source = fs.readFileSync(script, "utf8");
  if (source.charCodeAt(0) === 0xfeff) {
    source = source.slice(1); // as node's module loader does
  }
  const completion = vm.runInThisContext(source, { filename: script });
  if (!repl.assigned._) {
    repl.values._ = completion;
  }
  if (completion !== undefined) {
    addDisplay(completion);
  }
}

// As node's REPL defines them on its context: read from repl.values, and the first assignment says
// that it turns the name into the user's own. Called after the state is restored, so a name the
// user assigned in a cell above is an ordinary restored name instead.
function giveReplNames() {
  for (const name of REPL_NAMES) {
    if (repl.assigned[name]) {
      continue;
    }
    const get = () => repl.values[name];
    const set = (value) => {
      repl.values[name] = value;
      if (!repl.assigned[name]) {
        repl.assigned[name] = true;
        fs.writeSync(2, `Expression assignment to ${name} now disabled.\n`);
      }
    };
    repl.getters[name] = get;
    defineProperty(globalObject, name, { get, set, configurable: true, enumerable: false });
  }
}

// --- restore ------------------------------------------------------------------------------

function restoreState(file, scriptRequire) {
  const restored = { bytes: 0, names: 0, failed: [] };
  let fd;
  try {
    fd = fs.openSync(file, "r");
  } catch (error) {
    say(`could not restore the state: it cannot be opened (${error.code})`);
    restored.failed.push({ name: "(state)", why: "the state file cannot be opened" });
    return restored;
  }
  fs.mkdirSync(SESSION_DIR, { recursive: true });
  fs.writeFileSync(RESTORING_PATH, "");
  try {
    restored.bytes = fs.fstatSync(fd).size;
    restored.names = restoreFrom(fd, restored.bytes, scriptRequire, restored.failed);
  } finally {
    fs.closeSync(fd);
    fs.unlinkSync(RESTORING_PATH);
  }
  return restored;
}

// Modules first, then each blob on its own, then the names bound to a value restored before them.
// Configurable, so that the cell may declare any of the names again with let, const or class.
function restoreFrom(fd, size, scriptRequire, failed) {
  const fail = (name, why) => {
    say(`could not restore \`${name}\`: ${why}`);
    failed.push({ name, why });
  };
  let index;
  try {
    index = readIndex(fd, size);
  } catch (error) {
    fail("(state)", `the state file is damaged: ${oneLine(error.message)}`);
    return 0;
  }
  for (const name of index.assigned || []) {
    if (REPL_NAMES.includes(name)) {
      repl.assigned[name] = true;
    }
  }
  const loaded = new MapOf();
  const load = (name, make) => {
    try {
      loaded.set(name, make());
    } catch (error) {
      fail(name, oneLine(error.message));
    }
  };
  for (const [name, id] of Object.entries(index.modules)) {
    load(name, () => scriptRequire(id));
  }
  let offset = STATE_MAGIC.length;
  for (const [name, length] of index.names) {
    const at = offset;
    load(name, () => v8().deserialize(readAt(fd, at, length)));
    offset += length;
  }
  for (const [name, first] of Object.entries(index.same)) {
    load(name, () => {
      if (!loaded.has(first)) {
        throw new Error(`it is the value of \`${first}\`, which was not restored`);
      }
      return loaded.get(first);
    });
  }
  for (const [name, value] of loaded) {
    if (isReplOwned(name)) {
      repl.values[name] = value;
    } else {
      defineProperty(globalObject, name, { value, writable: true, configurable: true, enumerable: true });
    }
  }
  return loaded.size;
}

function readIndex(fd, size) {
  const lengthAt = size - 4;
  if (lengthAt < STATE_MAGIC.length || readAt(fd, 0, STATE_MAGIC.length).toString("latin1") !== STATE_MAGIC) {
    throw new Error("it is not a node cell's state");
  }
  const indexLength = readAt(fd, lengthAt, 4).readUInt32BE(0);
  const indexAt = lengthAt - indexLength;
  if (indexAt < STATE_MAGIC.length) {
    throw new Error("its index is longer than the file");
  }
  const index = parse(readAt(fd, indexAt, indexLength).toString("utf8"));
  if (!isIndex(index)) {
    throw new Error("its index is not in the expected shape");
  }
  if (STATE_MAGIC.length + index.names.reduce((sum, [, length]) => sum + length, 0) !== indexAt) {
    throw new Error("its index does not match its size");
  }
  return index;
}

function isIndex(index) {
  const isNames = (object) => object !== null && typeof object === "object" && !isArray(object)
    && Object.values(object).every((value) => typeof value === "string");
  return index !== null && typeof index === "object" && isNames(index.same) && isNames(index.modules)
    && isArray(index.names) && index.names.every((entry) => isArray(entry) && typeof entry[0] === "string"
      && Number.isSafeInteger(entry[1]) && entry[1] >= 0)
    && (index.assigned === undefined || (isArray(index.assigned) && index.assigned.every(isString)));
}

function isString(value) {
  return typeof value === "string";
}

function readAt(fd, position, length) {
  const buffer = BufferOf.alloc(length);
  let done = 0;
  while (done < length) {
    const got = fs.readSync(fd, buffer, done, length - done, position + done);
    if (got === 0) {
      throw new Error("it ends early");
    }
    done += got;
  }
  return buffer;
}

// --- displays -----------------------------------------------------------------------------

function display(...values) {
  for (const value of values) {
    addDisplay(value);
  }
}

function addDisplay(value) {
  if (cell.displays.length >= DISPLAYS_MAX) {
    cell.displaysDropped += 1;
    return;
  }
  const text = capped(inspected(value), TEXT_MAX_BYTES);
  const data = { "text/plain": text };
  let bytes = BufferOf.byteLength(text);
  const json = jsonOf(value);
  const jsonBytes = json === null ? 0 : BufferOf.byteLength(json);
  if (json !== null && jsonBytes <= JSON_MAX_BYTES && cell.displayBytes + bytes + jsonBytes <= DISPLAYS_MAX_BYTES) {
    data["application/json"] = parse(json);
    bytes += jsonBytes;
  }
  if (cell.displayBytes + bytes > DISPLAYS_MAX_BYTES) {
    cell.displaysDropped += 1;
    return;
  }
  cell.displayBytes += bytes;
  cell.displays.push({ data });
}

function inspected(value) {
  try {
    return util().inspect(value, INSPECT_OPTIONS);
  } catch (error) {
    return `[cannot be shown: ${error.message}]`;
  }
}

// Plain objects and arrays only: JSON would show anything else as something it is not.
function jsonOf(value) {
  if (value === null || typeof value !== "object") {
    return null;
  }
  try {
    const proto = getPrototypeOf(value);
    if (!isArray(value) && proto !== ObjectPrototype && proto !== null) {
      return null;
    }
    const json = stringify(value);
    return typeof json === "string" ? json : null;
  } catch {
    return null; // a cycle, a BigInt, a proxy that refuses
  }
}

function capped(text, maxBytes) {
  const bytes = BufferOf.from(text);
  if (bytes.length <= maxBytes) {
    return text;
  }
  const marker = `\n… (cut at ${maxBytes / KIB} KiB)`;
  let end = maxBytes - BufferOf.byteLength(marker);
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) {
    end -= 1; // not inside a character
  }
  return bytes.toString("utf8", 0, end) + marker;
}

// --- errors -------------------------------------------------------------------------------

// Called before node's own handling; records the error only when it will end the program.
function recordFatalError(thrown) {
  if (proc.listenerCount("uncaughtException") > 0 || proc.hasUncaughtExceptionCaptureCallback()) {
    return;
  }
  if (!repl.assigned._error) {
    repl.values._error = thrown;
  }
  if (!isErrorLike(thrown)) {
    cell.error = { ename: typeName(thrown), evalue: inspected(thrown), traceback: [] };
    return;
  }
  const stack = typeof thrown.stack === "string" ? thrown.stack : `${thrown.name}: ${thrown.message}`;
  const shown = withoutOwnFrames(stack);
  if (shown !== stack && / {4}at /.test(shown)) {
    trySetStack(thrown, shown); // node prints it next (a stack without frames, it prints in [brackets])
  }
  cell.error = { ename: toText(thrown.name), evalue: toText(thrown.message), traceback: undecorated(shown).split("\n") };
}

function isErrorLike(thrown) {
  try {
    return thrown !== null && typeof thrown === "object" && "name" in thrown && "message" in thrown;
  } catch {
    return false; // a revoked proxy
  }
}

// The frames below the script's (vm, this program, node's loader) are ours, not the user's.
function withoutOwnFrames(stack) {
  const lines = stack.split("\n");
  let cut = lines.findLastIndex((line) => line.startsWith(`    at ${runScript.name} (${__filename}:`));
  if (cut < 0) {
    return stack; // thrown later, from a callback: no frame of ours below it
  }
  while (cut > 0 && /^ {4}at .*\(node:vm:\d+:\d+\)$/.test(lines[cut - 1])) {
    cut -= 1;
  }
  return lines.slice(0, cut).join("\n");
}

function trySetStack(error, stack) {
  try {
    error.stack = stack;
  } catch {
    // a frozen error: node prints it as it is
  }
}

// node has printed it by the time the program exits: the next cell's `_error` is the error as the
// REPL's is, without vm's decoration.
function undecorateLastError() {
  if (cell.error === null || repl.assigned._error) {
    return; // not this cell's error
  }
  const thrown = repl.values._error;
  try {
    if (isErrorLike(thrown) && typeof thrown.stack === "string") {
      trySetStack(thrown, undecorated(thrown.stack));
    }
  } catch {
    // a getter that throws: carried as it is, or not at all
  }
}

// vm puts the failing line of source and a caret above the stack of an error thrown at top level.
function undecorated(stack) {
  return stack.replace(/^[^\n]*:\d+\n[^\n]*\n[ \t]*\^+[ \t]*\n\n/, "");
}

// --- exit ---------------------------------------------------------------------------------

// Sync calls only: nothing queued from an exit listener ever runs. Whatever the exit status: a
// failed cell's names go on, as a REPL's after a line that threw.
function finish(builtins, stateCap) {
  try {
    fs.mkdirSync(SESSION_DIR, { recursive: true });
    undecorateLastError();
    writeManifest(listed(saveState(scriptNames(builtins), stateCap)));
  } catch (error) {
    say(`could not write the cell's session files: ${error.stack}`);
  }
}

// The script's names and how to read each: new own properties of the global object (var, function,
// a bare assignment, the names restored) and the global lexical scope's bindings (let, const, class);
// last, the REPL's `_` and `_error` that are still its own, when they hold something.
function scriptNames(builtins) {
  const readers = new MapOf();
  const lexical = lexicalNames();
  for (const name of getOwnPropertyNames(globalObject)) {
    if (!builtins.has(name) && isCarried(name)) {
      readers.set(name, () => globalObject[name]);
    }
  }
  for (const name of lexical) {
    if (isCarried(name) && isBound(name)) {
      readers.set(name, () => vm.runInThisContext(name)); // it shadows a global property of that name
    }
  }
  for (const name of REPL_NAMES) {
    takeOverIfChanged(name, lexical);
    if (isReplOwned(name)) {
      readers.delete(name);
      if (repl.values[name] !== undefined) {
        readers.set(name, () => repl.values[name]);
      }
    }
  }
  return readers;
}

// A REPL name the script declared (let, const, class), redefined or deleted without assigning it is
// the user's too, though node says nothing then: the REPL no longer replaces what the script reads.
function takeOverIfChanged(name, lexical) {
  if (repl.assigned[name]) {
    return;
  }
  const own = getOwnPropertyDescriptor(globalObject, name);
  if (lexical.includes(name) || own === undefined || own.get !== repl.getters[name]) {
    repl.assigned[name] = true;
  }
}

function isReplOwned(name) {
  return REPL_NAMES.includes(name) && !repl.assigned[name];
}

function isCarried(name) {
  return !NOT_CARRIED_NAMES.has(name);
}

function isBound(name) {
  try {
    vm.runInThisContext(name);
    return true;
  } catch {
    return false; // declared below the point where the script stopped (process.exit)
  }
}

// V8 knows the global lexical scope exactly (the REPL completes names from the same list), and an
// in-process inspector session answers synchronously. Loaded only here, at the end: 1 to 2 ms.
function lexicalNames() {
  let names = null;
  try {
    const { Session } = require("inspector");
    const session = new Session();
    session.connect();
    try {
      session.post("Runtime.globalLexicalScopeNames", {}, (error, result) => {
        names = error ? null : result.names;
      });
    } finally {
      session.disconnect();
    }
    if (names === null) {
      throw new Error("the inspector did not answer");
    }
  } catch (error) {
    say(`cannot list the cell's let, const and class names, so they are not carried: ${error.message}`);
  }
  return names || [];
}

function saveState(readers, cap) {
  const kept = { variables: [], notCarried: [], modules: {}, state: null };
  const assigned = REPL_NAMES.filter((name) => repl.assigned[name]);
  const index = { node: proc.version, names: [], same: {}, modules: kept.modules, assigned };
  const firstBound = new MapOf(); // object -> the variable of the first name bound to it
  const fd = fs.openSync(STATE_PATH, "w", 0o600);
  try {
    let bytes = writeAll(fd, BufferOf.from(STATE_MAGIC), 0);
    for (const [name, read] of readers) {
      const blob = carried(name, read, kept, index, firstBound);
      if (blob !== null) {
        index.names.push([name, blob.length]);
        bytes = bytes + blob.length <= cap ? writeAll(fd, blob, bytes) : bytes + blob.length;
      }
    }
    const indexBytes = BufferOf.from(stringify(index));
    const indexLength = BufferOf.alloc(4);
    indexLength.writeUInt32BE(indexBytes.length, 0);
    const total = bytes + indexBytes.length + indexLength.length;
    if (total > cap) {
      fs.ftruncateSync(fd, 0);
      fs.ftruncateSync(fd, cap + 1); // all hole: no room is spent on saying it is too big
    } else {
      writeAll(fd, BufferOf.concat([indexBytes, indexLength]), bytes);
    }
    kept.state = { bytes: total, over_cap: total > cap };
    return kept;
  } finally {
    fs.closeSync(fd);
  }
}

// The REPL's own `_` and `_error` are carried but are not the user's variables or modules; what
// could not be carried of them is listed, though: the next cell's `_` is not what node's would be.
function listed(kept) {
  const modules = {};
  for (const [name, id] of entries(kept.modules)) {
    if (!isReplOwned(name)) {
      modules[name] = id;
    }
  }
  return { ...kept, variables: kept.variables.filter((variable) => !isReplOwned(variable.name)), modules };
}

function writeAll(fd, buffer, position) {
  let done = 0;
  while (done < buffer.length) {
    done += fs.writeSync(fd, buffer, done, buffer.length - done, position + done);
  }
  return position + buffer.length;
}

// One name's blob; or null, the name carried as a module to require again, as the name of the same
// object, or not carried and why. v8.serialize keeps data (objects, arrays, Map, Set, Date, RegExp,
// typed arrays, Buffers, errors, BigInt) and refuses functions and symbols; a class instance comes
// back a plain object.
function carried(name, read, kept, index, firstBound) {
  let value;
  try {
    value = read();
  } catch (error) {
    kept.notCarried.push({ name, type: "unknown", why: `cannot be read: ${oneLine(error.message)}` });
    return null;
  }
  const first = firstBound.get(value);
  if (first !== undefined) {
    index.same[name] = first.name;
    kept.variables.push(described(name, value, first.bytes));
    return null;
  }
  let why = "function";
  if (typeof value !== "function") {
    try {
      const blob = v8().serialize(value);
      const variable = described(name, value, blob.length);
      kept.variables.push(variable);
      if (typeof value === "object" && value !== null) {
        firstBound.set(value, variable);
      }
      return blob;
    } catch (error) {
      why = `cannot be serialized: ${oneLine(error.message)}`;
    }
  }
  if (cell.required.has(value)) {
    kept.modules[name] = cell.required.get(value);
  } else {
    kept.notCarried.push({ name, type: typeName(value), why });
  }
  return null;
}

function described(name, value, bytes) {
  return { name, type: typeName(value), module: null, shape: null, length: lengthOf(value), bytes };
}

// V8 names what it could not clone by its source text, which may be a whole function; a module
// that cannot be found lists the modules that asked for it. One line of it says enough.
function oneLine(message) {
  const tail = message.endsWith(" could not be cloned.") ? " could not be cloned." : "";
  const text = message.slice(0, message.length - tail.length);
  const first = text.split("\n")[0].slice(0, 120);
  return first === text ? message : `${first}…${tail}`;
}

function typeName(value) {
  if (value === null) {
    return "null";
  }
  if (typeof value !== "object") {
    return typeof value;
  }
  try {
    const proto = getPrototypeOf(value);
    const maker = proto === null ? null : proto.constructor;
    return typeof maker === "function" && maker.name ? maker.name : "Object";
  } catch {
    return "Object"; // a proxy that refuses
  }
}

function lengthOf(value) {
  try {
    if (typeof value === "string" || isArray(value) || (isView(value) && !(value instanceof DataViewOf))) {
      return value.length;
    }
    if (value instanceof MapOf || value instanceof SetOf) {
      return value.size;
    }
  } catch {
    // a proxy that refuses
  }
  return null;
}

function writeManifest({ variables, notCarried, modules, state }) {
  const manifest = {
    version: 1,
    displays: cell.displays,
    displays_dropped: cell.displaysDropped,
    variables,
    not_carried: notCarried,
    modules,
    restored: cell.restored,
    error: cell.error,
    state,
  };
  fs.writeFileSync(MANIFEST_PATH, stringify(manifest), { mode: 0o600 });
}

main();
