"""Markdown cells rendered to HTML on the server, safe to assign to innerHTML: raw HTML is escaped
by the parser, and its output is sanitised again against an allow-list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

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


def render_markdown(source: str) -> str:
    """Sanitised HTML for a markdown cell (CommonMark and tables; the caller caps the size)."""
    return _CLEANER.clean(_PARSER.render(source))


def _is_relative(url: str) -> bool:
    # "//host/x" and "/\host/x" are relative in form but load from another host in a browser.
    parts = urlsplit(url)
    return not (parts.scheme or parts.netloc or url.startswith("//") or "\\" in url)


def _render_image(renderer: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    # Images load only from this site: one from elsewhere would tell its host who read the notebook
    # and when (and the site's CSP blocks it anyway). It is shown as a link to the image instead,
    # whose text is the image's alt text.
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    if _is_relative(src):
        return str(renderer.image(tokens, idx, options, env))
    alt = renderer.renderInlineAsText(token.children or [], options, env) or src
    return f'<a href="{escapeHtml(src)}">{escapeHtml(alt)}</a>'


def _keep_relative_images(tag: str, attribute: str, value: str) -> str | None:
    # Defence in depth for the rule above, in case an image reaches the output some other way.
    if tag == "img" and attribute == "src" and not _is_relative(value):
        return None
    return value


_PARSER = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    ["table", "strikethrough"]
)
_PARSER.add_render_rule("image", _render_image)
_CLEANER = nh3.Cleaner(
    tags=TAGS,
    attributes=ATTRIBUTES,
    attribute_filter=_keep_relative_images,
    url_schemes=URL_SCHEMES,
    filter_style_properties=STYLE_PROPERTIES,
    link_rel="noopener noreferrer",
)
