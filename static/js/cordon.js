// Shared browser code: API calls, the API's errors beside form fields, limit fields, table
// previews, ANSI-coloured text and a notebook cell's displays (the live view of one run is
// run_view.js). The pages import what they use.

import { known } from "./format.js";
import { ansiSegments } from "./run_output.js";
import { isNumeric, nextOrder, pageCount, rowsCaption, sortRows } from "./table_rows.js";

function csrf() {
  const match = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

// A JSON API call under /api. A 4xx/5xx throws an Error carrying `status` and the answer's
// {"code", "message", "field"} as `data` (null when the body was not JSON, e.g. a proxy's page).
export async function api(method, path, body, { keepalive = false } = {}) {
  const options = { method, headers: { "X-CSRFToken": csrf() }, credentials: "same-origin", keepalive };
  if (body instanceof FormData) options.body = body;
  else if (body !== undefined) {
    options.body = JSON.stringify(body);
    options.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(`/api${path}`, options);
  let data = null;
  if (response.status !== 204) {
    try { data = await response.json(); } catch { data = null; }
  }
  if (!response.ok) {
    const message = data && data.message ? data.message : `${response.status} ${response.statusText}`;
    throw Object.assign(new Error(message), { status: response.status, data });
  }
  return data;
}

// The page's status line (#message): a text, and buttons for what can be done about it.
export function message(text = "", ...actions) {
  document.getElementById("message").replaceChildren(text, ...actions);
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A path under /api with each part of a file name escaped (an output may sit in a folder).
export function pathPart(name) {
  return name.split("/").map(encodeURIComponent).join("/");
}

// A markdown cell as the server rendered and sanitised it (playground/markdown.py), as nodes.
// Parsed into an inert document (nothing in it runs or loads), and what could be active is
// dropped here as well, in case a sanitiser ever lets something through.
const ACTIVE = "script, style, iframe, frame, object, embed, form, input, button, base, meta, link, svg, math";
export function markdownNodes(html) {
  const parsed = new DOMParser().parseFromString(html, "text/html");
  for (const node of parsed.body.querySelectorAll(ACTIVE)) node.remove();
  for (const node of parsed.body.querySelectorAll("*")) {
    for (const { name, value } of [...node.attributes]) {
      const script = /^\s*(javascript|data|vbscript):/i.test(value) && /^(href|src|srcset|action|formaction|xlink:href)$/i.test(name);
      if (/^on/i.test(name) || name === "style" || script) node.removeAttribute(name);
    }
  }
  return [...parsed.body.childNodes];
}

// An API error's message beside the field it names ({"field": "tests.1.points"}): the element
// under `root` whose data-field is that path, or else its nearest named parent ("tests.1", then
// "tests"). Returns false when no field matched (the caller shows the message elsewhere).
export function showFieldError(root, error) {
  const parts = error && error.data && error.data.field ? String(error.data.field).split(".") : [];
  for (let n = parts.length; n > 0; n -= 1) {
    const path = parts.slice(0, n).join(".");
    const field = [...root.querySelectorAll("[data-field]")].find((node) => node.dataset.field === path);
    if (!field) continue;
    field.classList.add("invalid");
    field.append(el("p", { class: "field-error", role: "alert" }, error.message));
    return true;
  }
  return false;
}

export function clearFieldErrors(root) {
  for (const node of root.querySelectorAll(".field-error")) node.remove();
  for (const node of root.querySelectorAll("[data-field].invalid")) node.classList.remove("invalid");
}

// --- limit fields ---------------------------------------------------------------------------

// The limits a user may set on a run, by their API names; unit, default and maximum come from
// /api/limits.
export const LIMITS = [["wall_timeout_s", "wall-clock"], ["cpu_time_s", "CPU"], ["memory_mib", "memory"]];

// A number field per limit in LIMITS (`info`: /api/limits by name), each in a data-field named
// `${prefix}.${name}` where the API's error about it is shown. Empty means "not set": the
// placeholder says what applies then (`unset`: "default" or "maximum").
export function limitFields(info, values = {}, { prefix = "limits", unset = "default" } = {}) {
  return LIMITS.map(([name, label]) => {
    const about = info[name] || {};
    const input = el("input", { type: "number", min: "0", step: about.type === "integer" ? "1" : "any", name,
      id: `${prefix}-${name}`, placeholder: known(about[unset]) ? String(about[unset]) : null,
      max: known(about.maximum) ? String(about.maximum) : null,
      title: known(about.maximum) ? `at most ${about.maximum} ${about.unit} on this service` : null });
    if (known(values[name])) input.value = values[name];
    return el("div", { class: "field limit", "data-field": `${prefix}.${name}` },
      el("label", { for: input.id }, `${label} (${about.unit || ""})`), input);
  });
}

// The limits set in fields made by limitFields, by name.
export function limitValues(container) {
  const values = {};
  for (const input of container.querySelectorAll("input[type=number]")) {
    if (input.value !== "") values[input.name] = Number(input.value);
  }
  return values;
}

// --- table previews -------------------------------------------------------------------------

function cellText(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

// A table preview ({"columns": [{"name", "type"}], "rows", "total_rows"}) as a table sorted by
// clicking a column's header (again: the other way), `pageSize` rows a page (Previous, Next) when
// it has more. `whole` names what the rows come from ("file", "frame") where the caption says
// how much of it is shown. Every value is text, never HTML. The order and the caption's words are
// table_rows.js's.
const PAGE_ROWS = 20;
export function tableView(preview, { pageSize = PAGE_ROWS, whole = "file" } = {}) {
  const columns = preview.columns || [];
  let rows = (preview.rows || []).map((row, index) => ({ row, index }));
  const body = el("tbody");
  const headers = columns.map((column, position) => {
    const button = el("button", { type: "button", class: "sort", "aria-label": `sort by ${column.name || column.type}` },
      column.name, el("span", { class: "sort-mark", "aria-hidden": "true" }), el("span", { class: "col-type" }, column.type));
    const th = el("th", { scope: "col", "aria-sort": "none", "data-type": column.type }, button);
    button.addEventListener("click", () => sortBy(position, th));
    return th;
  });
  let order = { position: -1, direction: 1 };
  let page = 0;
  const pages = pageCount(rows.length, pageSize);
  const captionNode = el("caption", {});
  const previous = el("button", { type: "button", class: "page-previous", onclick: () => turn(-1) }, "Previous");
  const next = el("button", { type: "button", class: "page-next", onclick: () => turn(1) }, "Next");

  function fill() {
    const slice = rows.slice(page * pageSize, (page + 1) * pageSize);
    body.replaceChildren(...slice.map(({ row }) => el("tr", {}, ...columns.map((column, position) =>
      el("td", { class: isNumeric(column.type) ? "num" : column.type === "index" ? "index" : null },
        cellText(row[position]))))));
    captionNode.textContent = rowsCaption(preview, { page, pageSize, whole, sorted: order.position >= 0 });
    previous.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }
  function turn(step) {
    page = Math.min(pages - 1, Math.max(0, page + step));
    fill();
  }
  function sortBy(position, th) {
    order = nextOrder(order, position);
    rows = sortRows(rows, position, columns[position].type, order.direction);
    for (const other of headers) other.setAttribute("aria-sort", "none");
    th.setAttribute("aria-sort", order.direction === 1 ? "ascending" : "descending");
    page = 0;
    fill();
  }
  fill();
  const box = el("div", { class: "table-preview" },
    el("table", { class: "table preview" }, captionNode, el("thead", {}, el("tr", {}, ...headers)), body));
  if (pages === 1) return box;
  // The buttons sit outside the scrolling box, so they stay in view whatever the table's width.
  return el("div", { class: "table-view" }, box,
    el("div", { class: "pager", role: "group", "aria-label": "pages of rows" }, previous, " ", next));
}

// --- ANSI colours ---------------------------------------------------------------------------

// `text` appended to `target` as spans: ANSI SGR colours become classes (run_output.js reads them),
// other control sequences are left out, and the text itself is only ever textContent. `state`
// ({fg, bold}) is the colour a stream is in, carried from one call to the next.
export function appendAnsi(target, text, state = { fg: null, bold: false }) {
  for (const segment of ansiSegments(text, state)) {
    const span = document.createElement("span");
    if (segment.fg !== null) span.classList.add(`ansi-${segment.fg}`);
    if (segment.bold) span.classList.add("ansi-bold");
    span.textContent = segment.text;
    target.append(span);
  }
  return target;
}

// --- a notebook cell's displays ---------------------------------------------------

const TABLE = "application/vnd.cordon.table+json";
const TEXTS = new Set(["text/plain", "application/json", "text/latex"]);

// One thing a cell displayed (the API's DisplayOut), as nodes. HTML and markdown come sanitised
// from the server and go through the same inert parsing as a markdown cell; a data frame is
// Cordon's own table, never the library's HTML.
export function displayNode(display) {
  const mime = display.mime || "";
  if (mime === TABLE && display.table) {
    return el("div", { class: "display display-table" }, tableView(display.table, { whole: "frame" }));
  }
  if (mime === "text/html" && known(display.text)) {
    return el("div", { class: "display display-html" }, ...markdownNodes(display.text));
  }
  if (mime === "text/markdown" && known(display.html)) {
    return el("div", { class: "display display-markdown markdown-view" }, ...markdownNodes(display.html));
  }
  if (mime.startsWith("image/")) {
    if (display.url) return el("img", { class: "display display-image", src: display.url, alt: display.plain || mime, loading: "lazy" });
    return el("pre", { class: "display display-text" }, display.plain || `${mime} (not kept)`);
  }
  const text = TEXTS.has(mime) && known(display.text) ? display.text : display.plain;
  // Text may be coloured (IPython's `?` help is): its colours as spans, never its escape codes.
  return appendAnsi(el("pre", { class: "display display-text", "data-mime": mime }), text || "");
}
