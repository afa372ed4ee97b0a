// static/js/table_rows.js: a table preview's typed sort, its pages and the caption that says what
// a page shows.
import assert from "node:assert/strict";
import { test } from "node:test";

import { compareCells, nextOrder, pageCount, rowsCaption, sortRows } from "../../static/js/table_rows.js";

// One column's values as rows ({row, index}), and back.
const column = (values) => values.map((value, index) => ({ row: [value], index }));
const values = (rows) => rows.map(({ row }) => row[0]);
const sorted = (cells, type, direction = 1) => values(sortRows(column(cells), 0, type, direction));

test("a number column sorts by value, not by its text", () => {
  assert.deepEqual(sorted(["1.10", "1.5", "-20", "-3", "10", "9"], "number"), ["-20", "-3", "1.10", "1.5", "9", "10"]);
  assert.deepEqual(sorted([10, 9, 100], "integer", -1), [100, 10, 9]);
});

test("a cell of a number column that is not a number sorts as text, after the digits", () => {
  assert.deepEqual(sorted([3, "n/a", 1], "integer"), [1, 3, "n/a"]);
});

test("booleans sort false first, whether they came as booleans or as text", () => {
  assert.deepEqual(sorted([true, "false", false, "true"], "boolean"), ["false", false, true, "true"]);
});

test("dates and times sort in time, their zones taken into account", () => {
  // 09:30 at +01:00 is 08:30 UTC, before 09:00 UTC though its text sorts after it; a time with a space
  // and no zone is local time, on the day before in any zone.
  assert.equal(compareCells("2026-12-01T09:30:00+01:00", "2026-12-01T09:00:00Z", "datetime") < 0, true);
  assert.deepEqual(sorted(["2026-12-01T09:00:00Z", "2026-12-01T09:30:00+01:00", "2026-11-30 12:00"], "datetime"),
    ["2026-11-30 12:00", "2026-12-01T09:30:00+01:00", "2026-12-01T09:00:00Z"]);
  assert.deepEqual(sorted(["2026-12-02", "2025-01-31", "2026-02-01"], "date"), ["2025-01-31", "2026-02-01", "2026-12-02"]);
});

test("text sorts as a reader would, with numbers inside it in order", () => {
  assert.deepEqual(sorted(["file10", "file9", "File1"], "string"), ["File1", "file9", "file10"]);
});

test("empty cells sort last whichever way the column is sorted", () => {
  const cells = [2, null, 1, "", undefined, 3];
  assert.deepEqual(sorted(cells, "integer", 1), [1, 2, 3, null, "", undefined]);
  assert.deepEqual(sorted(cells, "integer", -1), [3, 2, 1, null, "", undefined]);
});

test("rows that compare equal keep the order they came in, either way", () => {
  const rows = [["b", 1], ["a", 2], ["c", 1], ["d", 2]].map((row, index) => ({ row, index }));
  assert.deepEqual(sortRows(rows, 1, "integer", 1).map(({ row }) => row[0]), ["b", "c", "a", "d"]);
  assert.deepEqual(sortRows(rows, 1, "integer", -1).map(({ row }) => row[0]), ["a", "d", "b", "c"]);
});

test("sorting returns new rows and leaves the ones it was given as they were", () => {
  const rows = column([3, 1, 2]);
  const before = structuredClone(rows);
  sortRows(rows, 0, "integer", 1);
  assert.deepEqual(rows, before);
});

test("a header clicked sorts its column ascending, clicked again the other way", () => {
  const none = { position: -1, direction: 1 };
  const first = nextOrder(none, 2);
  assert.deepEqual(first, { position: 2, direction: 1 });
  const second = nextOrder(first, 2);
  assert.deepEqual(second, { position: 2, direction: -1 });
  assert.deepEqual(nextOrder(second, 2), { position: 2, direction: 1 });
  assert.deepEqual(nextOrder(second, 0), { position: 0, direction: 1 });  // another column starts ascending
});

test("a table has at least one page, and a page more for any rows past a full page", () => {
  assert.equal(pageCount(0, 20), 1);
  assert.equal(pageCount(20, 20), 1);
  assert.equal(pageCount(21, 20), 2);
  assert.equal(pageCount(500, 20), 25);
});

const preview = (rowCount, more = {}) => ({
  columns: [{ name: "a", type: "integer" }], rows: Array.from({ length: rowCount }, (_, i) => [i]), ...more,
});

test("a one-page caption counts its rows, one row singular", () => {
  assert.equal(rowsCaption(preview(0), { pageSize: 20 }), "0 rows");
  assert.equal(rowsCaption(preview(1), { pageSize: 20 }), "1 row");
  assert.equal(rowsCaption(preview(3, { total_rows: 3 }), { pageSize: 20 }), "3 rows");
});

test("a one-page caption of part of a file says how much of it, exactly or not", () => {
  assert.equal(rowsCaption(preview(3, { total_rows: 100 }), { pageSize: 20 }), "first 3 of 100 rows");
  assert.equal(rowsCaption(preview(3, { total_rows: 100, total_rows_exact: false }), { pageSize: 20 }),
    "first 3 of about 100 rows");
  assert.equal(rowsCaption(preview(3, { total_rows: 100, total_rows_at_least: true, total_rows_exact: false }),
    { pageSize: 20 }), "first 3 of at least 100 rows");
});

test("a page's caption says which rows it shows, the last page only those it has", () => {
  assert.equal(rowsCaption(preview(45), { page: 0, pageSize: 20 }), "rows 1–20 of 45 shown");
  assert.equal(rowsCaption(preview(45), { page: 2, pageSize: 20 }), "rows 41–45 of 45 shown");
});

test("a sorted part of a frame says only its rows were sorted; a whole one says nothing of it", () => {
  const part = preview(500, { total_rows: 1200 });
  assert.equal(rowsCaption(part, { page: 0, pageSize: 20, whole: "frame", sorted: true }),
    "rows 1–20 of 500 shown (of 1200 in the frame); sorted: these 500 rows only, not the whole frame");
  assert.equal(rowsCaption(preview(45, { total_rows: 45 }), { page: 0, pageSize: 20, sorted: true }),
    "rows 1–20 of 45 shown");
});

test("a caption says how many columns came when not all did, not counting the index", () => {
  const narrow = { columns: [{ name: "", type: "index" }, { name: "a", type: "integer" }, { name: "b", type: "string" }],
    rows: [[0, 1, "x"], [1, 2, "y"]], total_columns: 5, total_rows: 10 };
  assert.equal(rowsCaption(narrow, { pageSize: 20, sorted: true }),
    "first 2 of 10 rows; 2 of 5 columns; sorted: these 2 rows only, not the whole file");
  assert.equal(rowsCaption({ ...narrow, total_columns: 2 }, { pageSize: 20 }), "first 2 of 10 rows");
});
