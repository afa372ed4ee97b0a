"""Markdown cells and assignment instructions rendered to HTML on the server, safe to assign to
innerHTML: cmark-gfm parses in linear time, raw HTML becomes text, an allow-list cleans the rest.
Sources are capped (SOURCE_MAX_BYTES) and rendered when they are saved, in a bounded child
(render_bounded); the HTML is stored beside them and reads never render."""

from __future__ import annotations

import html
import logging
import re
import threading
from enum import IntEnum
from typing import Any
from urllib.parse import urlsplit

import cffi  # type: ignore[import-untyped]
import nh3
from cmarkgfm import _cmark  # type: ignore[import-untyped]
from cmarkgfm.cmark import Options  # type: ignore[import-untyped]

from runner import bounded

log = logging.getLogger(__name__)

TAGS = {
    *("p", "h1", "h2", "h3", "h4", "h5", "h6", "em", "strong", "code", "pre", "blockquote"),
    *("ul", "ol", "li", "a", "img", "table", "thead", "tbody", "tr", "th", "td", "hr", "br", "del", "s"),
}
ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "ol": {"start"},
    "th": {"style"},  # only text-align survives (STYLE_PROPERTIES): a table column's alignment
    "td": {"style"},
}
STYLE_PROPERTIES = {"text-align"}
URL_SCHEMES = {"http", "https", "mailto"}


SOURCE_MAX_BYTES = 64 * 1024  # a markdown cell's source, an assignment's instructions
RENDER_JOB = "playground.markdown:render_all"
# One save's new sources together (at most the 4 MiB request body): about 0.3 s of CPU for 4 MiB of
# the costliest shapes measured (runs of "&", which nh3's serialiser re-scans), a second at worst.
RENDER_BOUNDS = bounded.Bounds(cpu_s=5, wall_s=10.0, memory_mib=768, input_max_bytes=32 << 20,
                               output_max_bytes=128 << 20)  # fmt: skip
# A save's new sources up to this many bytes together render in the caller: at most a few
# milliseconds on the costliest shapes measured (a child costs some 60 ms to start).
RENDER_INLINE_BYTES = 16 * 1024


def render_markdown(source: str) -> str:
    """Sanitised HTML for a markdown cell (CommonMark, tables, ~~strikethrough~~; the caller caps the size)."""
    return _CLEANER.clean(_cmark_html(source))


def render_all(*, sources: list[str]) -> list[str]:
    """runner.bounded's job: each source rendered."""
    return [render_markdown(source) for source in sources]


def render_bounded(sources: list[str]) -> list[str]:
    """Each source's HTML, all rendered in one bounded child (RENDER_BOUNDS), or here when they
    are small together (RENDER_INLINE_BYTES). If the child gives no answer, each source is kept as
    its text, escaped, with a note saying why: a save never fails on its markdown, and nothing
    unsanitised is ever stored."""
    if not sources:
        return []
    if sum(len(source.encode()) for source in sources) <= RENDER_INLINE_BYTES:
        return render_all(sources=sources)
    try:
        rendered = bounded.call(RENDER_JOB, {"sources": sources}, RENDER_BOUNDS)
    except bounded.HostWorkError as exc:
        log.warning("markdown: %d sources not rendered: %s", len(sources), exc)
        note = html.escape(f"This markdown could not be rendered ({exc.message}); it is shown as written.")
        return [f"<p><em>{note}</em></p>\n<pre><code>{html.escape(source)}</code></pre>\n" for source in sources]
    return [str(item) for item in rendered]


def _is_relative(url: str) -> bool:
    # "//host/x" and "/\host/x" are relative in form but load from another host in a browser.
    parts = urlsplit(url)
    return not (parts.scheme or parts.netloc or url.startswith("//") or "\\" in url)


def _keep_relative_images(tag: str, attribute: str, value: str) -> str | None:
    # Defence in depth for _image_as_link, in case an image reaches the output some other way.
    if tag == "img" and attribute == "src" and not _is_relative(value):
        return None
    # cmark writes href="" for a javascript:, vbscript:, file: or data: link; that would point here.
    if tag == "a" and attribute == "href" and not value:
        return None
    return value


# cmarkgfm declares only cmark's parse-and-render calls; the tree API is in the same compiled
# library, so it is declared here and called through the library that cmarkgfm loaded.
_FFI = cffi.FFI()
_FFI.cdef("""
    typedef struct cmark_node cmark_node;
    typedef struct cmark_parser cmark_parser;
    typedef struct cmark_iter cmark_iter;
    typedef struct cmark_syntax_extension cmark_syntax_extension;
    typedef struct cmark_llist cmark_llist;
    typedef struct cmark_mem {
        void *(*calloc)(size_t, size_t);
        void *(*realloc)(void *, size_t);
        void (*free)(void *);
    } cmark_mem;
    cmark_mem *cmark_get_default_mem_allocator(void);
    void cmark_gfm_core_extensions_ensure_registered(void);
    cmark_syntax_extension *cmark_find_syntax_extension(const char *name);
    cmark_parser *cmark_parser_new(int options);
    int cmark_parser_attach_syntax_extension(cmark_parser *parser, cmark_syntax_extension *extension);
    cmark_llist *cmark_parser_get_syntax_extensions(cmark_parser *parser);
    void cmark_parser_feed(cmark_parser *parser, const char *buffer, size_t len);
    cmark_node *cmark_parser_finish(cmark_parser *parser);
    void cmark_parser_free(cmark_parser *parser);
    cmark_iter *cmark_iter_new(cmark_node *root);
    int cmark_iter_next(cmark_iter *iter);
    cmark_node *cmark_iter_get_node(cmark_iter *iter);
    void cmark_iter_reset(cmark_iter *iter, cmark_node *current, int event_type);
    void cmark_iter_free(cmark_iter *iter);
    cmark_node *cmark_node_new(int type);
    void cmark_node_free(cmark_node *node);
    int cmark_node_get_type(cmark_node *node);
    const char *cmark_node_get_type_string(cmark_node *node);
    const char *cmark_node_get_literal(cmark_node *node);
    int cmark_node_set_literal(cmark_node *node, const char *content);
    const char *cmark_node_get_url(cmark_node *node);
    int cmark_node_set_url(cmark_node *node, const char *url);
    int cmark_node_append_child(cmark_node *node, cmark_node *child);
    int cmark_node_insert_before(cmark_node *node, cmark_node *sibling);
    int cmark_node_replace(cmark_node *oldnode, cmark_node *newnode);
    char *cmark_render_html(cmark_node *root, int options, cmark_llist *extensions);
""")
_LIB: Any = _FFI.dlopen(_cmark.__file__)
_NULL: Any = _FFI.NULL
_MEM: Any = _LIB.cmark_get_default_mem_allocator()  # what cmark_parser_new's trees are allocated with

# Safe mode stays on as a second guard (it omits raw HTML and blanks dangerous URLs); column
# alignment as a style, which STYLE_PROPERTIES lets through; ~~two tildes~~ only, as markdown-it.
_OPTIONS: int = Options.CMARK_OPT_TABLE_PREFER_STYLE_ATTRIBUTES | Options.CMARK_OPT_STRIKETHROUGH_DOUBLE_TILDE


class _Node(IntEnum):
    # cmark_node_type, from cmark-gfm.h
    CODE_BLOCK = 0x8005
    HTML_BLOCK = 0x8006
    PARAGRAPH = 0x8008
    THEMATIC_BREAK = 0x800A
    TEXT = 0xC001
    SOFTBREAK = 0xC002
    LINEBREAK = 0xC003
    CODE = 0xC004
    HTML_INLINE = 0xC005
    LINK = 0xC009
    IMAGE = 0xC00A


_DONE, _EXIT = 1, 3  # cmark_event_type
_INLINE = 0x4000  # the bit of cmark_node_type that marks an inline node
_PLAIN_TEXT = {_Node.TEXT, _Node.CODE, _Node.HTML_INLINE}  # what cmark writes of an image's alt, as text
_PLAIN_SPACE = {_Node.SOFTBREAK, _Node.LINEBREAK}
_LEAVES = {_Node.CODE_BLOCK, _Node.HTML_BLOCK, _Node.THEMATIC_BREAK, *_PLAIN_TEXT, *_PLAIN_SPACE}  # no EXIT event
# Deeper than notes are written. An HTML parser (the sanitiser's, a browser's) spends time in
# proportion to the depth on each element, and cmark has no limit: ">" * n is n nested quotes
# (32,768 of them took nh3 24 s). markdown-it cut at 20.
_MAX_DEPTH = 64
_BLANK_LINE = re.compile(rb"\n[ \t]*\n\s*")


def _extensions() -> list[Any]:
    _LIB.cmark_gfm_core_extensions_ensure_registered()
    found = [_LIB.cmark_find_syntax_extension(name) for name in (b"table", b"strikethrough")]
    if _NULL in found:
        raise ImportError("cmark-gfm lacks its table or strikethrough extension")
    return found


def _check_node_types() -> None:
    # The values are copied from the header: a cmark that numbered them otherwise fails here, at import.
    for kind in _Node:
        node = _LIB.cmark_node_new(kind)
        try:
            name = _FFI.string(_LIB.cmark_node_get_type_string(node)).decode()
        finally:
            _LIB.cmark_node_free(node)
        if name != kind.name.lower():
            raise ImportError(f"cmark-gfm's node type {kind:#x} is {name!r}, not {kind.name.lower()!r}")


_check_node_types()
_EXTENSIONS = _extensions()
# cmark-gfm marks the extensions' characters (~ and |) special in a process-wide table while it
# parses inlines, and unmarks them after: a parse in another thread meanwhile would miss them.
_PARSING = threading.Lock()


def _cmark_html(source: str) -> str:
    data = source.encode("utf-8", "replace")
    parser = _LIB.cmark_parser_new(_OPTIONS)
    root = _NULL
    try:
        for extension in _EXTENSIONS:
            _LIB.cmark_parser_attach_syntax_extension(parser, extension)
        with _PARSING:
            _LIB.cmark_parser_feed(parser, data, len(data))
            root = _LIB.cmark_parser_finish(parser)
        if root == _NULL:
            raise MemoryError("cmark returned no document")
        _transform(root)
        html = _LIB.cmark_render_html(root, _OPTIONS, _LIB.cmark_parser_get_syntax_extensions(parser))
        try:
            return str(_FFI.string(html).decode("utf-8", "replace"))
        finally:
            _MEM.free(html)
    finally:
        if root != _NULL:
            _LIB.cmark_node_free(root)
        _LIB.cmark_parser_free(parser)


def _transform(root: Any) -> None:
    """Raw HTML becomes text, as markdown-it showed it with html off; an image from elsewhere, a link;
    what nests too deep is cut or flattened. All are found in one walk and changed after it."""
    walk = _walk(root)
    for node in walk.cut:
        _LIB.cmark_node_free(node)
    for node in walk.raw_html:
        _html_as_text(node)
    for node, text in walk.flattened:
        _replace(node, _text(b"".join(text)))
    for node, src, alt in walk.images:
        _image_as_link(node, src, b"".join(alt) or src)


def _walk(root: Any) -> _Walk:
    walk = _Walk()
    iterator = _LIB.cmark_iter_new(root)
    try:
        while (event := _LIB.cmark_iter_next(iterator)) != _DONE:
            node = _LIB.cmark_iter_get_node(iterator)
            if event == _EXIT:
                walk.exit(node)
            elif not walk.enter(node, _LIB.cmark_node_get_type(node)):
                _LIB.cmark_iter_reset(iterator, node, _EXIT)  # on past it, its subtree unwalked
    finally:
        _LIB.cmark_iter_free(iterator)
    return walk


class _Walk:
    """What one walk of the tree finds to change, each node visited once. Nothing is found inside an
    image or a flattened node: all they hold is text (cmark writes a kept image's alt as text too)."""

    def __init__(self) -> None:
        self.raw_html: list[Any] = []
        self.images: list[tuple[Any, bytes, list[bytes]]] = []  # from elsewhere, with src and alt text
        self.cut: list[Any] = []  # blocks nested too deep: gone, as markdown-it cut them
        self.flattened: list[tuple[Any, list[bytes]]] = []  # inlines nested too deep: their text stays
        self._depth = 0
        self._flat: Any = None  # the image or flattened node being walked, whose text is gathered
        self._text: list[bytes] = []

    def enter(self, node: Any, kind: int) -> bool:
        """Whether to walk into the node; not when it is cut."""
        if self._flat is not None:
            self._text.extend(_plain_text(node, kind))
        elif kind == _Node.HTML_BLOCK or kind == _Node.HTML_INLINE:
            self.raw_html.append(node)
        elif kind in _LEAVES:
            pass
        elif self._depth >= _MAX_DEPTH and not kind & _INLINE:
            self.cut.append(node)
            return False
        elif self._depth >= _MAX_DEPTH:
            self._flatten(node)
            self.flattened.append((node, self._text))
        elif kind == _Node.IMAGE:
            self._flatten(node)
            src = _FFI.string(_LIB.cmark_node_get_url(node))
            if not _is_relative(src.decode("utf-8", "replace")):
                self.images.append((node, src, self._text))
        if kind not in _LEAVES:
            self._depth += 1
        return True

    def exit(self, node: Any) -> None:
        self._depth -= 1
        if node == self._flat:
            self._flat = None

    def _flatten(self, node: Any) -> None:
        self._flat, self._text = node, []


def _plain_text(node: Any, kind: int) -> list[bytes]:
    if kind in _PLAIN_TEXT:
        return [_FFI.string(_LIB.cmark_node_get_literal(node))]
    return [b" "] if kind in _PLAIN_SPACE else []


def _html_as_text(node: Any) -> None:
    # A tag inside a paragraph becomes its text; a block of HTML, paragraphs of its text split at its
    # blank lines, which markdown-it made paragraphs of too (an unclosed "<!--" runs to the end).
    literal = _FFI.string(_LIB.cmark_node_get_literal(node))
    if _LIB.cmark_node_get_type(node) == _Node.HTML_INLINE:
        _replace(node, _text(literal))
        return
    for chunk in _BLANK_LINE.split(literal.strip()):
        paragraph = _LIB.cmark_node_new(_Node.PARAGRAPH)
        _append(paragraph, _text(chunk))
        if not _LIB.cmark_node_insert_before(node, paragraph):
            _LIB.cmark_node_free(paragraph)
            raise RuntimeError("cmark refused a paragraph in place of HTML")
    _LIB.cmark_node_free(node)


def _image_as_link(node: Any, src: bytes, text: bytes) -> None:
    # Images load only from this site: one from elsewhere would tell its host who read the notebook
    # and when (and the site's CSP blocks it anyway). It is shown as a link to the image instead,
    # whose text is the image's alt text.
    link = _LIB.cmark_node_new(_Node.LINK)
    _LIB.cmark_node_set_url(link, src)
    _append(link, _text(text))
    _replace(node, link)


def _text(literal: bytes) -> Any:
    node = _LIB.cmark_node_new(_Node.TEXT)
    _LIB.cmark_node_set_literal(node, literal)
    return node


def _append(parent: Any, child: Any) -> None:
    if not _LIB.cmark_node_append_child(parent, child):
        _LIB.cmark_node_free(child)
        _LIB.cmark_node_free(parent)
        raise RuntimeError("cmark refused a node's child")


def _replace(old: Any, new: Any) -> None:
    # The new node is in the tree, freed with it; the old one is out, freed here.
    if not _LIB.cmark_node_replace(old, new):
        _LIB.cmark_node_free(new)
        raise RuntimeError("cmark refused a node in place of another")
    _LIB.cmark_node_free(old)


_CLEANER = nh3.Cleaner(
    tags=TAGS,
    attributes=ATTRIBUTES,
    attribute_filter=_keep_relative_images,
    url_schemes=URL_SCHEMES,
    filter_style_properties=STYLE_PROPERTIES,
    link_rel="noopener noreferrer",
)
