// A table preview's rows in order and in pages: the typed order of two cells, a sort by one column
// (empty cells last whichever way, equal rows as they came), and the caption that says which rows
// a page shows of how many. The table itself is cordon.js's tableView; no DOM here: node's tests
// (tests/js) import it.

import { known } from "./format.js";

const NUMERIC = new Set(["integer", "number"]);

export function isNumeric(type) { return NUMERIC.has(type); }

function isEmpty(value) { return value === null || value === undefined || value === ""; }

// The typed order of two cells that are not empty: numbers as numbers, booleans false first, dates
// and times in time (ISO 8601 text, its zone taken into account), text by the user's locale (and
// whatever does not read as its column's type: a number column's "n/a" sorts as text).
export function compareCells(a, b, type) {
  if (NUMERIC.has(type)) {
    const [numberA, numberB] = [Number(a), Number(b)];
    if (!Number.isNaN(numberA) && !Number.isNaN(numberB)) return numberA - numberB;
  }
  if (type === "boolean") return Number(a === true || a === "true") - Number(b === true || b === "true");
  if (type === "date" || type === "datetime") {
    const [timeA, timeB] = [Date.parse(String(a).replace(" ", "T")), Date.parse(String(b).replace(" ", "T"))];
    if (!Number.isNaN(timeA) && !Number.isNaN(timeB) && timeA !== timeB) return timeA - timeB;
  }
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

// Rows ([{row, index}], index: the row's place as it came) sorted by the cell at `position`
// (a column of `type`), ascending (`direction` 1) or descending (-1). An empty cell sorts last
// either way; rows that compare equal keep their first order. Returns a new array.
export function sortRows(rows, position, type, direction) {
  return [...rows].sort((a, b) => {
    const [cellA, cellB] = [a.row[position], b.row[position]];
    const [emptyA, emptyB] = [isEmpty(cellA), isEmpty(cellB)];
    if (emptyA || emptyB) return emptyA === emptyB ? a.index - b.index : emptyA ? 1 : -1;
    return compareCells(cellA, cellB, type) * direction || a.index - b.index;
  });
}

// A click on a column's header: that column ascending, or the other way when it is sorted by it already.
export function nextOrder(order, position) {
  return { position, direction: order.position === position ? -order.direction : 1 };
}

export function pageCount(rowCount, pageSize) {
  return Math.max(1, Math.ceil(rowCount / pageSize));
}

// What a page of a preview ({"columns", "rows", "total_rows", ...}) shows of the whole: "3 rows",
// "first 20 of about 1200 rows", "rows 21–40 of 500 shown (of 1200 in the file)", with how many
// columns when not all of them came, and, once sorted, that only the rows the page has were. `whole`
// names what the rows come from ("file", "frame").
export function rowsCaption(preview, { page = 0, pageSize, whole = "file", sorted = false }) {
  const shown = (preview.rows || []).length;
  const total = preview.total_rows;
  const partial = known(total) && total > shown;
  // A large file's rows are counted by line; a very large one's no further than its first 16 MiB.
  const about = preview.total_rows_at_least ? "at least " : preview.total_rows_exact === false ? "about " : "";
  const dataColumns = (preview.columns || []).filter((column) => column.type !== "index").length;
  const narrowed = known(preview.total_columns) && preview.total_columns > dataColumns
    ? `; ${dataColumns} of ${preview.total_columns} columns` : "";
  let rows;
  if (pageCount(shown, pageSize) === 1) {
    rows = partial ? `first ${shown} of ${about}${total} rows` : `${shown} row${shown === 1 ? "" : "s"}`;
  } else {
    const first = page * pageSize + 1;
    const last = Math.min(shown, first + pageSize - 1);
    const of = partial ? ` (of ${about}${total} in the ${whole})` : "";
    rows = `rows ${first}–${last} of ${shown} shown${of}`;
  }
  // Sorting reorders only the rows the page has: when that is not all of them, the caption says so.
  const onlyThese = partial && sorted ? `; sorted: these ${shown} rows only, not the whole ${whole}` : "";
  return `${rows}${narrowed}${onlyThese}`;
}
