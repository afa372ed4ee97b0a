"""Markdown rendered safely (playground/markdown.py): what it renders, what it escapes, links and
images, and hostile shapes kept linear. Pure functions: no database."""

from __future__ import annotations

import concurrent.futures

import pytest

from playground import markdown
from playground.markdown import render_markdown

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
