"""What files are shown as: table previews of CSV/TSV/JSON (playground/previews.py) and each output's
kind. Markdown: test_markdown.py; notebooks: test_ipynb.py. Pure functions: no database, no services."""

from __future__ import annotations

import io
import json
import random

import pytest

from playground import previews
from playground.errors import ServiceError
from playground.previews import image_content_type, is_tabular_name, output_kind, table_preview


def preview(data: bytes | str, name: str, **kwargs):
    raw = data.encode() if isinstance(data, str) else data
    return table_preview(io.BytesIO(raw), name, **kwargs)


def types_of(result) -> dict[str, str]:
    return {column["name"]: column["type"] for column in result["columns"]}


# Table previews


def test_csv_columns_are_typed_from_their_cells_and_values_converted():
    result = preview("id,price,ok,label,blank\n1, 2.5 ,true,a\n-3,1e3,FALSE, b \n", "t.csv")
    assert types_of(result) == {
        "id": "integer",
        "price": "number",
        "ok": "boolean",
        "label": "string",
        "blank": "empty",
    }
    assert result["rows"] == [[1, 2.5, True, "a", None], [-3, 1000.0, False, " b ", None]]
    assert result["total_rows"] == 2


def test_one_odd_cell_makes_a_column_a_string_column():
    result = preview("n,m\n1,1\n2,x\n3,\n", "t.csv")
    assert types_of(result) == {"n": "integer", "m": "string"}
    assert [row[1] for row in result["rows"]] == ["1", "x", None]


def test_iso_dates_and_datetimes_are_typed_as_such_and_kept_as_their_text():
    data = ("day,at,zoned,not_a_day,mixed\n"
            "2026-12-01,2026-12-01T09:30:00,2026-12-01 09:30:00.123+01:00,2026-02-30,2026-12-01\n"
            "2025-01-31,2025-01-31T23:59,2025-01-31T23:59:59Z,2026-01-01,2026-12-01T10:00\n")  # fmt: skip
    result = preview(data, "t.csv")
    assert types_of(result) == {"day": "date", "at": "datetime", "zoned": "datetime", "not_a_day": "string",
                                "mixed": "string"}  # fmt: skip
    assert result["rows"][0][:2] == ["2026-12-01", "2026-12-01T09:30:00"]
    json_rows = preview(
        '[{"d": "2026-12-01", "t": "2026-12-01T09:30:00Z", "n": 1}, {"d": null, "t": "2026-12-02T01:00:00Z"}]', "t.json"
    )
    assert types_of(json_rows) == {"d": "date", "t": "datetime", "n": "integer"}


def test_integers_with_leading_zeros_stay_strings_and_huge_ones_are_numbers():
    result = preview(f"zip,big\n02139,{2**60}\n10001,1\n", "t.csv")
    assert types_of(result) == {"zip": "string", "big": "number"}
    assert result["rows"][0] == ["02139", float(2**60)]


def test_total_rows_counts_every_row_beyond_the_preview():
    count = random.randint(120, 400)  # noqa: S311 - a size, not a secret
    body = "".join(f"{i},{i * 2}\n" for i in range(count))
    result = preview("a,b\n" + body + "\n\n", "t.csv", max_rows=7)
    assert result["total_rows"] == count
    assert result["rows"] == [[i, i * 2] for i in range(7)]


@pytest.mark.parametrize("limit", range(8, 70))  # a cut after the header, at every byte of the rows
def test_past_the_parsed_bytes_rows_are_counted_by_line_and_said_to_be(monkeypatch, limit):
    monkeypatch.setattr(previews, "MAX_PARSE_BYTES", limit)
    data = 'name,n\nada,1\n"al\nan",2\ngrace,3\n' + "".join(f"p{i},{i}\n" for i in range(4, 9))
    for body in (data, data.rstrip("\n")):  # with and without a last line break
        result = preview(body, "t.csv", max_rows=2)
        exact = len(body) <= limit
        assert result["total_rows_exact"] is exact
        # Counted by line, a quoted line break past the cut counts as a row: never fewer rows.
        assert result["total_rows"] == 8 or (not exact and result["total_rows"] == 9 and limit < 18)


def test_a_huge_csv_is_previewed_in_bounded_time_and_memory():
    import time
    import tracemalloc

    big = b"a,b\n" + b"".join(b"%d,%d\n" % (i, i) for i in range(2_000_000))  # ~26 MiB
    tracemalloc.start()
    started = time.perf_counter()
    result = table_preview(io.BytesIO(big), "big.csv", max_rows=5)
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # Counted by line over the first 16 MiB only: a lower bound, said to be.
    counted = big[: previews.MAX_COUNT_BYTES]
    assert result["total_rows"] == counted.count(b"\n") - 1 + (0 if counted.endswith(b"\n") else 1)
    assert result["total_rows_exact"] is False and result["total_rows_at_least"] is True
    assert result["rows"] == [[i, i] for i in range(5)]
    assert peak < 16 * previews.MIB, peak  # not the file's size, nor a multiple of it
    assert elapsed < 10, elapsed  # a bound against parsing it all, not a benchmark


class _ReadCounted(io.BytesIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.read_bytes += len(data)
        return data


def test_rows_are_counted_no_further_than_the_first_16_mib_and_then_said_to_be_at_least():
    huge = _ReadCounted(b"n\n" + b"1\n" * (32 << 20))  # 64 MiB, 32 Mi rows
    result = table_preview(huge, "huge.csv", max_rows=3)
    assert huge.read_bytes <= previews.MAX_COUNT_BYTES + 1  # not the rest of the file
    assert result["total_rows"] == previews.MAX_COUNT_BYTES // 2 - 1  # the rows in those 16 MiB, header aside
    assert (result["total_rows_exact"], result["total_rows_at_least"]) == (False, True)
    assert result["rows"] == [[1], [1], [1]]
    within = _ReadCounted(b"n\n" + b"1\n" * (previews.MAX_COUNT_BYTES // 2 - 1))  # exactly 16 MiB: counted whole
    result = table_preview(within, "within.csv", max_rows=3)
    assert result["total_rows"] == previews.MAX_COUNT_BYTES // 2 - 1
    assert (result["total_rows_exact"], result["total_rows_at_least"]) == (False, False)


def test_quoted_cells_span_lines_even_across_read_chunks():
    filler = "x" * (previews.CHUNK_BYTES - len('n,text\n1,"line one\r'))
    data = f'n,text\n1,"line one\r\nline two"\n2,{filler}\r\n3,last\r\n'
    result = preview(data, "t.csv")
    assert result["rows"][0] == [1, "line one\r\nline two"]
    assert result["total_rows"] == 3
    assert result["rows"][2] == [3, "last"]


@pytest.mark.parametrize("name", ["t.tsv", "t.tab", "T.TSV"])
def test_tsv_and_tab_files_split_on_tabs(name):
    result = preview("a b\tc,d\n1\t2,5\n", name)
    assert [c["name"] for c in result["columns"]] == ["a b", "c,d"]
    assert result["rows"] == [[1, "2,5"]]


def test_a_byte_order_mark_is_not_part_of_the_first_column_name():
    result = preview(b"\xef\xbb\xbfname,n\nx,1\n", "t.csv")
    assert result["columns"][0]["name"] == "name"


def test_bad_utf8_is_replaced_not_refused():
    result = preview(b"name\ncaf\xe9\n", "t.csv")
    assert result["rows"] == [["caf\ufffd"]]


def test_long_cells_and_names_are_cut_with_an_ellipsis():
    long = "y" * 500
    result = preview(f"{long}\n{long}\n", "t.csv")
    cell = result["rows"][0][0]
    assert cell == "y" * previews.MAX_CELL_CHARS + "…"
    assert result["columns"][0]["name"] == cell


def test_at_most_100_columns_are_shown():
    header = ",".join(f"c{i}" for i in range(150))
    result = preview(header + "\n" + ",".join("1" * 150) + "\n", "t.csv")
    assert len(result["columns"]) == previews.MAX_COLUMNS
    assert len(result["rows"][0]) == previews.MAX_COLUMNS


def test_ragged_rows_are_padded_and_extra_cells_get_numbered_columns():
    result = preview("a,b\n1\n2,3,4\n", "t.csv")
    assert [c["name"] for c in result["columns"]] == ["a", "b", "3"]
    assert result["rows"] == [[1, None, None], [2, 3, 4]]


@pytest.mark.parametrize(("name", "data"), [("e.csv", b""), ("e.json", b""), ("e.json", b"[]"), ("e.tsv", b"\n\n")])
def test_an_empty_file_is_a_table_without_columns(name, data):
    assert preview(data, name) == {
        "columns": [], "rows": [], "total_rows": 0, "total_rows_exact": True, "total_rows_at_least": False,
    }  # fmt: skip


def test_a_header_alone_is_columns_without_rows():
    result = preview("a,b\n", "t.csv")
    assert result == {
        "columns": [{"name": "a", "type": "empty"}, {"name": "b", "type": "empty"}],
        "rows": [],
        "total_rows": 0,
        "total_rows_exact": True,
        "total_rows_at_least": False,
    }


def test_json_objects_give_the_union_of_their_keys_in_first_seen_order():
    rows = [{"b": 1, "a": "x"}, {"c": 2.5, "b": 2}, {"a": None, "d": [1, 2], "c": 3}]
    result = preview(json.dumps(rows), "t.json")
    assert types_of(result) == {"b": "integer", "a": "string", "c": "number", "d": "string"}
    assert result["rows"] == [[1, "x", None, None], [2, None, 2.5, None], [None, None, 3, "[1, 2]"]]


def test_json_arrays_give_columns_named_by_position():
    result = preview('[[1, true], [2, false, "z"]]', "t.json")
    assert types_of(result) == {"1": "integer", "2": "boolean", "3": "string"}
    assert result["rows"] == [[1, True, None], [2, False, "z"]]


def test_json_mixed_values_are_shown_as_their_json_text_and_nan_as_text():
    result = preview('[{"v": 1}, {"v": "one"}, {"v": true}, {"v": NaN}, {"v": 1e999}]', "t.json")
    assert types_of(result) == {"v": "string"}
    assert [row[0] for row in result["rows"]] == ["1", "one", "true", "NaN", "1e999"]


def test_json_total_rows_counts_the_whole_array():
    count = random.randint(60, 300)  # noqa: S311
    result = preview(json.dumps([{"i": i} for i in range(count)]), "t.json", max_rows=4)
    assert result["total_rows"] == count
    assert result["rows"] == [[0], [1], [2], [3]]


@pytest.mark.parametrize(
    ("name", "data"),
    [
        pytest.param("t.csv", b"a,b\n\x00\x01\x02,\xff\n", id="binary-csv"),
        pytest.param("t.json", b'[{"a": 1}, \x00]', id="binary-json"),
        pytest.param("t.json", b'[{"a": 1},', id="bad-json"),
        pytest.param("t.json", b"42", id="json-scalar"),
        pytest.param("t.json", b'{"rows": [{"a": 1}]}', id="json-object"),
        pytest.param("t.json", b"[1, 2, 3]", id="json-array-of-scalars"),
        pytest.param("t.json", b'[{"a": 1}, [1]]', id="json-mixed-rows"),
        pytest.param("t.txt", b"a,b\n1,2\n", id="wrong-extension"),
        pytest.param("csv", b"a,b\n1,2\n", id="no-extension"),
    ],
)
def test_what_is_not_a_table_is_refused_as_not_tabular(name, data):
    with pytest.raises(ServiceError) as refused:
        preview(data, name)
    assert (refused.value.code, refused.value.status) == ("not_tabular", 422)
    assert refused.value.message


def test_json_over_the_size_cap_is_refused():
    data = b"[" + b"[1]," * (previews.MAX_JSON_BYTES // 4) + b"[1]]"
    with pytest.raises(ServiceError) as refused:
        preview(data, "big.json")
    assert refused.value.code == "not_tabular"


@pytest.mark.parametrize(
    ("name", "kind", "content_type"),
    [
        ("plot.png", "image", "image/png"),
        ("Photo.JPG", "image", "image/jpeg"),
        ("a.jpeg", "image", "image/jpeg"),
        ("d.svg", "image", "image/svg+xml"),
        ("g.gif", "image", "image/gif"),
        ("w.webp", "image", "image/webp"),
        ("t.csv", "table", None),
        ("t.tsv", "table", None),
        ("t.tab", "table", None),
        ("t.json", "table", None),
        ("notes.txt", "file", None),
        ("png", "file", None),
        ("archive.tar.gz", "file", None),
    ],
)
def test_output_kinds_follow_the_file_extension(name, kind, content_type):
    assert output_kind(name) == kind
    assert image_content_type(name) == content_type
    assert is_tabular_name(name) == (kind == "table")
