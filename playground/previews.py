"""What a run's output or a dataset is shown as (image, table or plain file), and the table
preview of a CSV, TSV or JSON file: its first rows with a type per column and the row count."""

from __future__ import annotations

import codecs
import csv
import json
import math
import re
from collections.abc import Iterator
from datetime import date
from pathlib import PurePosixPath
from typing import Any, BinaryIO, Literal, Protocol

from playground.errors import ServiceError

ColumnType = Literal["integer", "number", "boolean", "date", "datetime", "string", "empty"]

MIB = 1024 * 1024
MAX_COLUMNS = 100
MAX_CELL_CHARS = 200
# A JSON document is parsed whole, so it is the one size refused: parsed, a file of small objects
# takes some 25 times its size in memory (a 15 MiB one peaked at 377 MiB).
MAX_JSON_BYTES = 4 * MIB
MAX_LINE_CHARS = 1 * MIB  # one line held in memory at a time while a CSV is streamed
# A delimited file is parsed this far; past it the rows are counted by their line breaks (fast,
# and exact but for quoted cells that span lines), and no further than MAX_COUNT_BYTES from its
# start (a lower bound, then), so a preview's cost is bounded whatever the size.
MAX_PARSE_BYTES = 1 * MIB
MAX_COUNT_BYTES = 16 * MIB
CHUNK_BYTES = 64 * 1024

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".svg": "image/svg+xml",
}
DELIMITERS = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
TABLE_SUFFIXES = (*DELIMITERS, ".json")

# Numbers are written without leading zeros: "007" or a ZIP code "02139" stays a string.
_INTEGER = re.compile(r"[+-]?(?:0|[1-9][0-9]*)")
_NUMBER = re.compile(r"[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BOOLEANS = {"true": True, "false": False}
# ISO 8601 as files write it: a date, or a date and a time (T or a space; seconds, fractions and a
# zone optional). A value is kept as its text; its column says which it is, for sorting and display.
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATETIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?"
)
_LINE_BREAK = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")  # after \n, or after a \r not followed by \n
# Integers JavaScript cannot hold exactly are shown as numbers, which they are.
_SAFE_INTEGER = 2**53 - 1


def _suffix(name: str) -> str:
    return PurePosixPath(name).suffix.lower()


def is_tabular_name(name: str) -> bool:
    return _suffix(name) in TABLE_SUFFIXES


def output_kind(name: str) -> Literal["image", "table", "file"]:
    if _suffix(name) in IMAGE_TYPES:
        return "image"
    return "table" if is_tabular_name(name) else "file"


def image_content_type(name: str) -> str | None:
    return IMAGE_TYPES.get(_suffix(name))


def empty_table() -> dict[str, Any]:
    """The preview of a table without a row or a column (and of a file that is not a table)."""
    return {"columns": [], "rows": [], "total_rows": 0, "total_rows_exact": True, "total_rows_at_least": False}


def table_preview(handle: BinaryIO, name: str, *, max_rows: int = 50) -> dict[str, Any]:
    """The first `max_rows` rows of a table file, typed per column, and how many rows it has.

    Raises ServiceError not_tabular (422) for anything that is not a table."""
    suffix = _suffix(name)
    if suffix == ".json":
        return _json_preview(handle, max_rows)
    if suffix in DELIMITERS:
        return _delimited_preview(handle, DELIMITERS[suffix], max_rows)
    raise _not_tabular(f"{name!r} is not a table: only .csv, .tsv, .tab and .json files are previewed")


def _not_tabular(message: str) -> ServiceError:
    return ServiceError("not_tabular", message, status=422)


# Delimited text


def _delimited_preview(handle: BinaryIO, delimiter: str, max_rows: int) -> dict[str, Any]:
    bounded = _Bounded(handle, MAX_PARSE_BYTES)
    rows = (row[:MAX_COLUMNS] for row in csv.reader(_text_lines(bounded), delimiter=delimiter) if row)
    header: list[str] | None = None
    head: list[list[str]] = []
    total = 0  # data rows
    try:
        header = next(rows, None)
        for row in rows:
            if len(head) < max_rows:
                head.append(row)
            total += 1
    except csv.Error as error:  # a cell over csv's field size limit, an unclosed quote at the end
        if not bounded.cut:
            raise _not_tabular(f"the file is not readable as a table: {error}") from None
        total += 1  # the cut fell inside a quoted cell: that row was cut short
    if header is None:
        return empty_table()
    counted_all = True
    if bounded.cut:  # the row the cut fell in ends at the first line break of the rest
        lines, counted_all = bounded.lines_in_rest(MAX_COUNT_BYTES - MAX_PARSE_BYTES)
        total += lines - (0 if bounded.ended_line else 1)
    width = min(MAX_COLUMNS, max([len(header), *(len(row) for row in head)]))
    names = [_truncate(header[i]) if i < len(header) else str(i + 1) for i in range(width)]
    cells = [[row[i] if i < len(row) else "" for i in range(width)] for row in head]
    columns = [_text_column([row[i].strip() for row in cells]) for i in range(width)]
    return {
        "columns": [{"name": n, "type": t} for n, t in zip(names, columns, strict=True)],
        "rows": [[_text_value(t, value) for t, value in zip(columns, row, strict=True)] for row in cells],
        "total_rows": total,
        "total_rows_exact": not bounded.cut,
        "total_rows_at_least": not counted_all,
    }


class _Bounded:
    """A binary file read as text no further than `limit` bytes; the rest is only counted."""

    def __init__(self, handle: BinaryIO, limit: int) -> None:
        self.handle, self.left = handle, limit
        self.cut, self.ended_line, self.rest = False, True, b""

    def read(self, size: int) -> bytes:
        if self.left <= 0:
            self.rest = self.rest or self.handle.read(1)
            self.cut = bool(self.rest)
            return b""
        data = self.handle.read(min(size, self.left))
        self.left -= len(data)
        if data:
            self.ended_line = data.endswith(b"\n")
        return data

    def lines_in_rest(self, limit: int) -> tuple[int, bool]:
        """Line breaks in at most `limit` bytes past the cut, and a last line without one; and
        whether that was the whole rest (else the count stops there: a lower bound)."""
        count, last, left = 0, self.rest, limit
        chunk = self.rest
        while chunk:
            count += chunk.count(b"\n")
            last = chunk
            left -= len(chunk)
            chunk = self.handle.read(min(16 * CHUNK_BYTES, left)) if left > 0 else b""
        whole = left > 0 or not self.handle.read(1)
        return count + (1 if last and not last.endswith(b"\n") else 0), whole


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


def _text_lines(handle: _Readable) -> Iterator[str]:
    """The file as lines (ends kept, so a quoted cell may span lines), UTF-8 with bad bytes replaced
    and a byte order mark dropped; refuses binary files and lines too long to hold."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
    pending = ""
    while chunk := handle.read(CHUNK_BYTES):
        if b"\0" in chunk:
            raise _not_tabular("the file is binary (it contains NUL bytes), not a table")
        *lines, pending = _LINE_BREAK.split(pending + decoder.decode(chunk))
        if len(pending) > MAX_LINE_CHARS:
            raise _not_tabular(f"a line is over {MAX_LINE_CHARS} characters; the file is not previewed")
        yield from lines
    yield from filter(None, _LINE_BREAK.split(pending + decoder.decode(b"", final=True)))


def _text_column(values: list[str]) -> ColumnType:
    present = [v for v in values if v]
    if not present:
        return "empty"
    if all(_is_integer(v) for v in present):
        return "integer"
    if all(_NUMBER.fullmatch(v) and math.isfinite(float(v)) for v in present):
        return "number"
    if all(v.lower() in _BOOLEANS for v in present):
        return "boolean"
    return _dated(present)


def _dated(values: list[str]) -> ColumnType:
    """The type "date" or "datetime" when every value is one (a real one: no 2026-02-30), else "string"."""
    for kind, pattern in (("date", _DATE), ("datetime", _DATETIME)):
        if all(pattern.fullmatch(v) and _real_date(v[:10]) for v in values):
            return kind  # type: ignore[return-value]
    return "string"


def _real_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_integer(text: str) -> bool:
    # Length before int(): int() refuses over 4300 digits. JavaScript loses precision past 2**53.
    return bool(_INTEGER.fullmatch(text)) and len(text) <= 17 and abs(int(text)) <= _SAFE_INTEGER


def _text_value(column_type: ColumnType, value: str) -> Any:
    text = value.strip()
    if not text:
        return None
    if column_type == "integer":
        return int(text)
    if column_type == "number":
        return float(text)
    if column_type == "boolean":
        return _BOOLEANS[text.lower()]
    return _truncate(value)  # a string keeps its spaces


# JSON


def _json_preview(handle: BinaryIO, max_rows: int) -> dict[str, Any]:
    data = handle.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise _not_tabular(f"JSON files over {MAX_JSON_BYTES // MIB} MiB are not previewed")
    if b"\0" in data:
        raise _not_tabular("the file is binary (it contains NUL bytes), not a table")
    if not data.strip():
        return empty_table()
    try:
        # NaN, Infinity and 1e999 are kept as their text: JSON answers cannot carry them as numbers.
        document = json.loads(data.decode("utf-8-sig", errors="replace"), parse_constant=str, parse_float=_finite_float)
    except (ValueError, RecursionError) as error:
        raise _not_tabular(f"the file is not valid JSON: {error}") from None
    if not isinstance(document, list):
        raise _not_tabular("the JSON is not a table: expected an array of objects or an array of arrays")
    head = document[:max_rows]
    if all(isinstance(row, dict) for row in head):
        names = list(dict.fromkeys(key for row in head for key in row))[:MAX_COLUMNS]
        cells = [[row.get(key) for key in names] for row in head]
    elif all(isinstance(row, list) for row in head):
        names = [str(i + 1) for i in range(min(MAX_COLUMNS, max((len(row) for row in head), default=0)))]
        cells = [[row[i] if i < len(row) else None for i in range(len(names))] for row in head]
    else:
        raise _not_tabular("the JSON is not a table: expected an array of objects or an array of arrays")
    columns = [_json_column([row[i] for row in cells]) for i in range(len(names))]
    typed = [[_json_value(t, value) for t, value in zip(columns, row, strict=True)] for row in cells]
    return {
        "columns": [{"name": _truncate(n), "type": t} for n, t in zip(names, columns, strict=True)],
        "rows": typed,
        "total_rows": len(document),
        "total_rows_exact": True,
        "total_rows_at_least": False,
    }


def _finite_float(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else text


def _json_column(values: list[Any]) -> ColumnType:
    kinds = {_json_kind(v) for v in values if v is not None}
    if not kinds:
        return "empty"
    present = [v for v in values if v is not None]
    if all(isinstance(v, str) for v in present):
        return _dated([v.strip() for v in present])
    if len(kinds) == 1:
        return kinds.pop()
    return "number" if kinds == {"integer", "number"} else "string"


def _json_kind(value: Any) -> ColumnType:
    if isinstance(value, bool):  # before int: a bool is an int in Python
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _json_value(column_type: ColumnType, value: Any) -> Any:
    if value is None or column_type not in ("string", "date", "datetime"):
        return value
    # Mixed columns, objects and arrays are shown as their JSON text.
    return _truncate(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS] + "…"
