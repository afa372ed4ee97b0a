"""What cells and files are shown as: table previews of CSV/TSV/JSON, markdown rendered safely,
and notebooks in and out of Jupyter's format. Pure functions: no database, no services."""

from __future__ import annotations

import concurrent.futures
import io
import json
import random
from typing import Any

import nbformat
import pytest
from nbformat import v4

from playground import ipynb, markdown, previews
from playground.errors import ServiceError
from playground.ipynb import cells_from_ipynb, cells_from_script, ipynb_from_cells
from playground.markdown import render_markdown
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


# Markdown


def test_markdown_renders_headings_lists_emphasis_and_tables():
    html = render_markdown(
        "# Title\n\nSome *em* and **strong** and ~~gone~~.\n\n- one\n- two\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n"
    )
    assert "<h1>Title</h1>" in html
    assert "<em>em</em>" in html and "<strong>strong</strong>" in html and "<del>gone</del>" in html
    assert "<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in html
    assert "<th>a</th>" in html and '<td style="text-align:right">2</td>' in html


def test_code_blocks_keep_their_text_escaped():
    html = render_markdown("```python\nif a < b and c > d: print('&')\n```\n")
    assert "<pre><code>if a &lt; b and c &gt; d: print('&amp;')\n</code></pre>" in html


@pytest.mark.parametrize(
    ("source", "tag"),
    [
        ("<script>alert(1)</script>", "script"),
        ("before <script>alert(1)</script> after", "script"),
        ('<img src="x" onerror="alert(1)">', "img"),
        ("<div onclick='alert(1)'>hi</div>", "div"),
        ('<a href="javascript:alert(1)">x</a>', "a"),
        ("<iframe src='https://evil.example'></iframe>", "iframe"),
        ("- <div onclick='alert(1)'>in a list</div>\n- next", "div"),
        ("> <script>alert(1)</script>", "script"),
        ("| a |\n|---|\n| <img src=x onerror=alert(1)> |", "img"),
        ("[<iframe>](/page)", "iframe"),
        ("![<script>alert(1)</script>](https://x.example/p.png)", "script"),
        ("<!-- a comment -->", "!--"),
    ],
)
def test_raw_html_is_escaped_never_rendered(source, tag):
    html = render_markdown(source)
    assert f"<{tag}" not in html
    assert f"&lt;{tag}" in html


def test_an_escaped_script_reads_as_its_text():
    assert render_markdown("<script>alert(1)</script>") == "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n"


@pytest.mark.parametrize(
    "link", ["[x](javascript:alert(1))", "[x](JaVaScRiPt:alert(1))", "[x](vbscript:msgbox)", "[x](data:text/html,hi)"]
)
def test_script_links_carry_no_href(link):
    assert "href" not in render_markdown(link)


def test_an_html_block_becomes_a_paragraph_of_its_text():
    html = render_markdown("<div>\n*not emphasis*\n</div>\n\nafter")
    assert html == "<p>&lt;div&gt;\n*not emphasis*\n&lt;/div&gt;</p>\n<p>after</p>\n"


def test_an_unclosed_html_comment_runs_on_as_text_in_paragraphs():
    html = render_markdown("<!-- a note\n\n# Heading\n\ntext")
    assert html == "<p>&lt;!-- a note</p>\n<p># Heading</p>\n<p>text</p>\n"


def test_single_tildes_are_not_strikethrough():
    assert render_markdown("~one~ ~~two~~") == "<p>~one~ <del>two</del></p>\n"


def test_links_keep_their_href_and_do_not_leak_the_opener():
    html = render_markdown("[site](https://example.org/a?b=1&c=2) [mail](mailto:a@example.org) [page](../other)")
    assert '<a href="https://example.org/a?b=1&amp;c=2" rel="noopener noreferrer">site</a>' in html
    assert 'href="mailto:a@example.org"' in html
    assert 'href="../other"' in html


@pytest.mark.parametrize("src", ["https://tracker.example/p.png", "http://x.example/p.png", "//x.example/p.png"])
def test_an_image_from_another_site_is_not_loaded_but_linked(src):
    html = render_markdown(f"![a chart]({src})")
    assert "<img" not in html
    assert "a chart</a>" in html


def test_a_data_url_image_is_not_loaded():
    html = render_markdown("![dot](data:image/png;base64,iVBORw0KGgo=)")
    assert "<img" not in html and "data:" not in html


def test_an_image_inside_an_images_alt_text_is_text():
    html = render_markdown("![a ![b](https://x.example/b.png) <i>c</i>](https://y.example/a.png)")
    assert html == '<p><a href="https://y.example/a.png" rel="noopener noreferrer">a b &lt;i&gt;c&lt;/i&gt;</a></p>\n'


def test_an_image_from_another_site_without_alt_text_is_linked_by_its_address():
    html = render_markdown("![](https://x.example/p.png)")
    assert '<a href="https://x.example/p.png" rel="noopener noreferrer">https://x.example/p.png</a>' in html


def test_a_relative_image_is_kept():
    html = render_markdown('![plot](/api/runs/1/outputs/plot.png "the plot")')
    assert '<img src="/api/runs/1/outputs/plot.png" alt="plot" title="the plot">' in html


def test_the_sanitiser_alone_drops_what_the_parser_should_never_produce():
    cleaned = markdown._CLEANER.clean(
        '<img src="https://x.example/p.png" onerror="alert(1)"><img src="/ok.png">'
        '<a href="javascript:alert(1)" onclick="x">l</a><script>alert(2)</script><span style="color:red">s</span>'
    )
    assert "x.example" not in cleaned and "onerror" not in cleaned and "onclick" not in cleaned
    assert '<img src="/ok.png">' in cleaned
    assert "javascript" not in cleaned and "alert(2)" not in cleaned and "<span" not in cleaned


# Markdown on hostile input: shapes that took markdown-it-py seconds. What is asserted is the
# output (text stays text, nesting is bounded); speed is measured outside the unit tests.

HOSTILE_BYTES = 64 * 1024


@pytest.mark.parametrize(
    "source",
    [
        "[" * HOSTILE_BYTES,
        "![" * (HOSTILE_BYTES // 2),
        "[" * (HOSTILE_BYTES // 2) + "a" + "]" * (HOSTILE_BYTES // 2),
    ],
    ids=["open", "image", "nested"],
)
def test_unclosed_brackets_render_as_text(source):
    assert render_markdown(source) == f"<p>{source}</p>\n"


def test_unmatched_emphasis_renders_as_text():
    source = "*a _a " * (HOSTILE_BYTES // 6)
    assert render_markdown(source) == f"<p>{source.rstrip()}</p>\n"


def test_unfinished_entities_render_as_escaped_text():
    assert render_markdown("&#" * (HOSTILE_BYTES // 2)) == "<p>" + "&amp;#" * (HOSTILE_BYTES // 2) + "</p>\n"


def test_backticks_pair_into_flat_code_spans():
    html = render_markdown("`a" * (HOSTILE_BYTES // 2))
    assert html == "<p>" + "<code>a</code>a" * (HOSTILE_BYTES // 4) + "</p>\n"


def test_double_tildes_pair_into_flat_strikethroughs():
    html = render_markdown("~~a" * (HOSTILE_BYTES // 3 + 1))
    assert html == "<p>" + "<del>a</del>a" * (HOSTILE_BYTES // 6 + 1) + "</p>\n"


def test_a_table_of_many_rows_keeps_every_row_and_its_alignment():
    rows = HOSTILE_BYTES // 10
    html = render_markdown("| a | b |\n|---|--:|\n" + "| 1 | 2 |\n" * rows)
    assert html.count("<tr>") == rows + 1
    assert html.count('<td style="text-align:right">2</td>') == rows


@pytest.mark.parametrize(("source", "tag"), [(">" * HOSTILE_BYTES, "blockquote"), ("- " * (HOSTILE_BYTES // 2), "ul")])
def test_blocks_nested_past_the_depth_limit_are_cut_and_what_follows_stays(source, tag):
    html = render_markdown(source + "deep\n\nafter")
    assert html.count(f"<{tag}>") < markdown._MAX_DEPTH
    assert "deep" not in html and html.endswith("<p>after</p>\n")
    assert len(html) < 2048


def test_emphasis_nested_past_the_depth_limit_keeps_its_text():
    html = render_markdown("*a _b " * 5000 + "deep" + " b_ a*" * 5000)
    assert html.count("<em>") < markdown._MAX_DEPTH
    assert "deep" in html and html.count("a b ") > 4000


def test_renders_in_parallel_threads_agree():
    # cmark-gfm marks ~ and | special in a process-wide table for the length of a parse.
    source = "~~gone~~ and | a |\n" * 2000
    expected = render_markdown(source)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(render_markdown, [source] * 40))
    assert results == [expected] * 40


# Notebooks


CELLS: list[dict[str, str | None]] = [
    {"id": "intro", "kind": "markdown", "runtime": "python", "source": "# Report\n\nSome *text*.", "last_run_id": None},
    {"id": "load", "kind": "code", "runtime": "python", "source": "print('hello')\nx = 1", "last_run_id": "run-a"},
    {"id": "js", "kind": "code", "runtime": "node", "source": "console.log(2)", "last_run_id": "run-b"},
    {"id": "never-run", "kind": "code", "runtime": "python", "source": "pass", "last_run_id": None},
]


def test_a_notebook_survives_a_round_trip_through_ipynb():
    streams = {"run-a": "hello\n", "run-b": "2\n"}
    text = ipynb_from_cells("Report", CELLS, lambda run_id: (None, [stream_output(streams[run_id])]))
    runtime, cells = cells_from_ipynb(text.encode())
    assert runtime == "python"
    outputs = [cell.pop("outputs", None) for cell in cells]
    assert cells == [{"kind": c["kind"], "runtime": c["runtime"], "source": c["source"]} for c in CELLS]
    assert outputs == [None, [{"mime": "text/plain", "text": "hello\n", "plain": "", "stream": "stdout"}],
                       [{"mime": "text/plain", "text": "2\n", "plain": "", "stream": "stdout"}], None]  # fmt: skip


def stream_output(text: str) -> dict[str, str]:
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_export_carries_each_cells_last_run_outputs():
    asked: list[str] = []

    def outputs_for(run_id: str) -> tuple[int | None, list[dict[str, Any]]]:
        asked.append(run_id)
        return (3, [stream_output("hello\n")]) if run_id == "run-a" else (None, [])

    notebook = nbformat.reads(ipynb_from_cells("Report", CELLS, outputs_for), as_version=4)
    nbformat.validate(notebook)
    assert sorted(asked) == ["run-a", "run-b"]
    outputs = {cell.id: cell.get("outputs") for cell in notebook.cells}
    assert outputs["load"] == [{"output_type": "stream", "name": "stdout", "text": "hello\n"}]
    assert outputs["js"] == [] and outputs["never-run"] == [] and outputs["intro"] is None
    counts = {cell.id: cell.get("execution_count") for cell in notebook.cells}
    assert counts == {"intro": None, "load": 3, "js": None, "never-run": None}
    assert notebook.metadata.kernelspec.name == "python3"


def test_a_javascript_cell_in_a_python_notebook_is_exported_for_jupyter_to_run_with_node_and_read_back():
    notebook = nbformat.reads(ipynb_from_cells("Mixed", CELLS, lambda _: (None, [])), as_version=4)
    js = next(cell for cell in notebook.cells if cell.id == "js")
    assert js.source == "%%script node\nconsole.log(2)"
    _, cells = cells_from_ipynb(nbformat.writes(notebook).encode())
    assert [(c["runtime"], c["source"]) for c in cells if c["kind"] == "code"] == [
        ("python", "print('hello')\nx = 1"), ("node", "console.log(2)"), ("python", "pass")]  # fmt: skip
    # One that Jupyter wrote (no Cordon metadata) reads as JavaScript too; other cell magics stay Python.
    foreign = v4.new_notebook(cells=[v4.new_code_cell("%%script node\nlet a = 1\na"), v4.new_code_cell("%%bash\nls")])
    foreign.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    _, read = cells_from_ipynb(nbformat.writes(foreign).encode())
    assert [(c["runtime"], c["source"]) for c in read] == [("node", "let a = 1\na"), ("python", "%%bash\nls")]


def test_the_first_code_cells_runtime_names_the_kernel():
    cells = [dict(CELLS[2], id="first"), dict(CELLS[1], id="second")]
    notebook = json.loads(ipynb_from_cells("JS", cells, lambda _: (None, [])))
    assert notebook["metadata"]["kernelspec"]["language"] == "javascript"
    assert notebook["metadata"]["language_info"]["name"] == "javascript"
    assert cells_from_ipynb(json.dumps(notebook).encode())[0] == "node"


def notebook_bytes(language: str | None = None, cells=(), **metadata) -> bytes:
    notebook = v4.new_notebook(cells=list(cells), metadata=metadata)
    if language:
        notebook.metadata["kernelspec"] = {"name": language, "display_name": language, "language": language}
    return nbformat.writes(notebook).encode()


@pytest.mark.parametrize(
    ("metadata", "runtime"),
    [
        ({"kernelspec": {"name": "js", "display_name": "JS", "language": "javascript"}}, "node"),
        ({"kernelspec": {"name": "tslab", "display_name": "TS", "language": "TypeScript"}}, "node"),
        ({"language_info": {"name": "javascript"}}, "node"),
        ({"kernelspec": {"name": "python3", "display_name": "P", "language": "python"}}, "python"),
        ({"kernelspec": {"name": "ir", "display_name": "R", "language": "R"}}, "python"),
        ({}, "python"),
    ],
)
def test_an_imported_notebooks_runtime_comes_from_its_kernel(metadata, runtime):
    data = notebook_bytes(None, [v4.new_code_cell("x")], **metadata)
    found, cells = cells_from_ipynb(data)
    assert found == runtime
    assert cells == [{"kind": "code", "runtime": runtime, "source": "x"}]


def test_import_keeps_code_and_markdown_and_the_outputs_a_page_can_show_and_drops_raw_cells():
    data = notebook_bytes(
        "python",
        [
            v4.new_markdown_cell("## Notes"),
            v4.new_raw_cell("raw text"),
            v4.new_code_cell("print(1)", outputs=[v4.new_output("stream", name="stdout", text="1\n")]),
        ],
    )
    _, cells = cells_from_ipynb(data)
    assert cells == [
        {"kind": "markdown", "runtime": "python", "source": "## Notes"},
        {"kind": "code", "runtime": "python", "source": "print(1)",
         "outputs": [{"mime": "text/plain", "text": "1\n", "plain": "", "stream": "stdout"}]},
    ]  # fmt: skip


def test_a_version_3_notebook_is_upgraded():
    v3 = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {"name": "old"},
        "worksheets": [
            {
                "metadata": {},
                "cells": [
                    {"cell_type": "heading", "level": 2, "source": "Old", "metadata": {}},
                    {
                        "cell_type": "code",
                        "language": "python",
                        "input": ["a = 1\n", "print(a)"],
                        "outputs": [],
                        "collapsed": False,
                        "metadata": {},
                    },
                ],
            }
        ],
    }
    runtime, cells = cells_from_ipynb(json.dumps(v3).encode())
    assert runtime == "python"
    assert cells == [
        {"kind": "markdown", "runtime": "python", "source": "## Old"},
        {"kind": "code", "runtime": "python", "source": "a = 1\nprint(a)"},
    ]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"not json at all", id="not-json"),
        pytest.param(b"\xff\xfe{}", id="not-utf8"),
        pytest.param(b"[1, 2]", id="json-array"),
        pytest.param(b'{"cells": []}', id="no-nbformat"),
        pytest.param(b'{"nbformat": "4", "cells": []}', id="nbformat-a-string"),
        pytest.param(b'{"nbformat": 2, "worksheets": []}', id="nbformat-2"),
        pytest.param(b'{"nbformat": 4, "nbformat_minor": 4}', id="v4-without-cells"),
        pytest.param(
            b'{"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": [{"cell_type": "code"}]}',
            id="v4-cell-without-source",
        ),
        pytest.param(b'{"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": 7}', id="v4-cells-not-a-list"),
        pytest.param(b'{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": 5}', id="v3-bad-worksheets"),
        pytest.param(b"[" * 100_000, id="deeply-nested"),
    ],
)
def test_what_is_not_a_notebook_is_refused_as_invalid(data):
    with pytest.raises(ServiceError) as refused:
        cells_from_ipynb(data)
    assert (refused.value.code, refused.value.status, refused.value.field) == ("invalid_notebook", 422, "file")
    assert len(refused.value.message) < 400


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b'{"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": [{"cell_type": "code", "metadata": {}}]}',
         "'source' is a required property"),
        (b'{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": 5}', "5 is not of type 'array'"),
    ],
)  # fmt: skip
def test_an_invalid_notebook_is_refused_with_what_is_wrong(data, said):
    with pytest.raises(ServiceError) as refused:
        cells_from_ipynb(data)
    assert said in refused.value.message


def test_a_notebook_with_too_many_cells_is_refused():
    cells = [v4.new_markdown_cell(str(i)) for i in range(ipynb.MAX_CELLS + 1)]
    with pytest.raises(ServiceError) as refused:
        cells_from_ipynb(notebook_bytes("python", cells))
    assert (refused.value.code, refused.value.status) == ("too_many_cells", 422)
    assert len(cells_from_ipynb(notebook_bytes("python", cells[:-1]))[1]) == ipynb.MAX_CELLS


def test_a_cell_over_the_code_cap_is_refused():
    cells = [v4.new_code_cell("x"), v4.new_code_cell("#" * (ipynb.MAX_CODE_BYTES + 1))]
    with pytest.raises(ServiceError) as refused:
        cells_from_ipynb(notebook_bytes("python", cells))
    assert (refused.value.code, refused.value.status) == ("code_too_large", 422)
    assert "cell 2" in refused.value.message


@pytest.mark.parametrize(("name", "runtime"), [("helper.py", "python"), ("main.js", "node"), ("LOUD.PY", "python")])
def test_a_script_opens_as_one_code_cell_of_its_runtime(name, runtime):
    source = f"# {name}\nprint('é')\n"
    assert cells_from_script(name, ("\ufeff" + source).encode()) == (
        runtime,
        [{"kind": "code", "runtime": runtime, "source": source}],
    )


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("a.py", b"print('\xe9')", "invalid_script"),
        ("a.js", b"x" * (ipynb.MAX_CODE_BYTES + 1), "code_too_large"),
        ("a.txt", b"print(1)", "unsupported_file"),
        ("a.ipynb", b"{}", "unsupported_file"),
    ],
)
def test_a_script_that_cannot_be_a_cell_is_refused(name, data, code):
    with pytest.raises(ServiceError) as refused:
        cells_from_script(name, data)
    assert (refused.value.code, refused.value.status, refused.value.field) == (code, 422, "file")
