"""A notebook cell's manifest (cell.json, written inside its sandbox by the image's cell program)
made safe to keep and show: parsed, checked for shape, every text capped, HTML sanitised (nh3),
markdown rendered and sanitised, tables reduced to Cordon's own table shape. Nothing of it is
trusted: it is the sandbox's writing. Work on user input, so it runs in a bounded child when the
file is not small (clean_bounded); no Django here, as the child imports it bare.

A kept display is one of, in the order the cell showed them, each with "plain" (its text/plain),
"at" (the bytes of stdout and stderr written before it: {"stdout", "stderr"}) and, when it is the
cell's result (a bare last expression, Jupyter's execute_result), "result" (the execution count):
{"mime": "text/plain" | "application/json" | "text/latex", "text"}, {"mime": "text/html", "text":
sanitised HTML}, {"mime": "text/markdown", "text": source, "html": rendered}, {"mime": TABLE,
"table": {"columns": [{"name", "type"}], "rows", "total_rows", "total_columns"}}, {"mime":
"image/png" | "image/jpeg" | "image/svg+xml", "file": the display file the cell program wrote for
it, DISPLAY_FILE} (the caller stores the file and replaces "file" with where it is).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from typing import Any

import nh3

from playground.markdown import ATTRIBUTES, TAGS, URL_SCHEMES, render_markdown
from runner import bounded

log = logging.getLogger(__name__)

TABLE = "application/vnd.cordon.table+json"
IMAGES = ("image/svg+xml", "image/png", "image/jpeg")
# The only files a display may show: the image the cell program wrote for display <n> in the
# type it shows (cordon_cell's `display-<n>.<png|jpeg|svg>`). Never the cell's state, its
# manifest or any other file it carries, whatever its manifest names.
DISPLAY_FILE = re.compile(r"display-([1-9][0-9]{0,3})\.(png|jpeg|svg)")
IMAGE_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpeg", "image/svg+xml": "svg"}
# The representation a display is shown as, richest first (Jupyter's own order, a table first).
PREFERENCE = (TABLE, "text/html", "text/markdown", *IMAGES, "application/json", "text/latex", "text/plain")
MAX_DISPLAYS = 100
TEXT_MAX_CHARS = 1 << 20
PLAIN_MAX_CHARS = 64 << 10
TABLE_MAX_ROWS = 500
TABLE_MAX_COLUMNS = 50
CELL_MAX_CHARS = 200
MAX_VARIABLES = 500
MAX_NOT_CARRIED = 500
MAX_FILES = 256  # the cell program's own cap on the files it carries
VARIABLE_TABLES = 20
NAME_MAX_CHARS = 200
# What the editor completes after a carried name (the cell program's caps, held here too).
COMPLETION_TYPES, COMPLETION_ATTRIBUTES, COMPLETION_NAME_CHARS, COMPLETION_TEXT_CHARS = 100, 500, 100, 300
ATTRIBUTE_KINDS = ("attribute", "property", "method", "class", "column", "key")
CLEAN_JOB = "playground.displays:clean_manifest"
CLEAN_INLINE_BYTES = 64 * 1024
# The cleaning is the cell's work, bounded by the cell's own budget: the CPU its limits left it, at
# most CLEAN_CPU_MAX_S (at least CLEAN_CPU_MIN_S: a cell that used its all still gets its first
# displays made safe). Past it, the displays not cleaned yet are dropped, and the cell says so.
CLEAN_CPU_MAX_S, CLEAN_CPU_MIN_S = 2.0, 0.25
CLEAN_MEMORY_MIB, CLEAN_INPUT_MAX_BYTES, CLEAN_OUTPUT_MAX_BYTES = 1024, 24 << 20, 48 << 20
# An HTML display of more tags than this is shown as its plain text: sanitising deeply nested HTML
# costs the host time that grows faster than its size.
HTML_MAX_TAGS = 20_000
# A display's HTML may hold more than a markdown cell's (a styled table, a widget's fallback),
# never anything that runs or loads from elsewhere: no scripts, styles, frames, forms or remote images.
HTML_TAGS = TAGS | {
    *("div", "span", "caption", "tfoot", "colgroup", "col", "dl", "dt", "dd", "sub", "sup", "small", "b", "i", "u"),
    *("kbd", "samp", "var", "abbr", "details", "summary", "figure", "figcaption"),
}
HTML_ATTRIBUTES = {**ATTRIBUTES, "td": {"colspan", "rowspan"}, "th": {"colspan", "rowspan", "scope"},
                   "abbr": {"title"}, "img": {"alt", "title"}}  # fmt: skip
_DTYPE_TYPES = (("int", "integer"), ("uint", "integer"), ("float", "number"), ("bool", "boolean"),
                ("datetime", "datetime"), ("date", "date"))  # fmt: skip


def clean_budget_s(cpu_time_s: float, cpu_used_s: float | None) -> float:
    """The CPU a cell's cleaning may use: what its limits left it, within [CLEAN_CPU_MIN_S, CLEAN_CPU_MAX_S]."""
    return max(CLEAN_CPU_MIN_S, min(CLEAN_CPU_MAX_S, cpu_time_s - (cpu_used_s or 0.0)))


def clean_bounded(raw: bytes, *, budget_s: float = CLEAN_CPU_MAX_S) -> dict[str, Any]:
    """clean_manifest's answer for a cell.json, here when it is small, else in a bounded child (at
    the lowest priority, killed a second past the budget); a manifest that cannot be read gives an
    empty one that says why (the run keeps its outcome). "clean_s": the CPU it took."""
    text = raw.decode("utf-8", errors="replace")
    if len(raw) <= CLEAN_INLINE_BYTES:
        return clean_manifest(text=text, budget_s=budget_s)
    bounds = bounded.Bounds(cpu_s=math.ceil(budget_s) + 1, wall_s=2 * budget_s + 3, memory_mib=CLEAN_MEMORY_MIB,
                            input_max_bytes=CLEAN_INPUT_MAX_BYTES, output_max_bytes=CLEAN_OUTPUT_MAX_BYTES)  # fmt: skip
    try:
        answer: dict[str, Any] = bounded.call(CLEAN_JOB, {"text": text, "budget_s": budget_s}, bounds)
    except bounded.HostWorkError as exc:
        log.warning("cell manifest not read: %s", exc)
        why = f"the cell's manifest could not be read ({exc.message})"
        return {"displays": [], "manifest": {"problem": why, "displays_note": why}, "clean_s": float(bounds.cpu_s)}
    return answer


def clean_manifest(*, text: str, budget_s: float | None = None) -> dict[str, Any]:
    """runner.bounded's job: {"displays": [...], "manifest": {...}, "clean_s"} from cell.json's
    text; the displays made safe until `budget_s` of CPU is spent, the rest dropped and said so."""
    started = time.process_time()
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {"displays": [], "manifest": {"problem": f"the cell's manifest is not JSON ({exc})"[:300]}}
    if not isinstance(data, dict):
        return {"displays": [], "manifest": {"problem": "the cell's manifest is not a JSON object"}}
    everything = _list(data.get("displays"))
    raw_displays = everything[:MAX_DISPLAYS]
    files: set[str] = set()  # each display file is shown once
    displays, note = [], ""
    for done, item in enumerate(raw_displays):
        if budget_s is not None and time.process_time() - started > budget_s:
            note = (f"{len(raw_displays) - done} display{'s' if len(raw_displays) - done != 1 else ''} not shown: "
                    f"making them safe to show took more than this cell's budget ({budget_s:g} s of CPU)")  # fmt: skip
            raw_displays = raw_displays[:done]
            break
        if (shown := _display(item, files)) is not None:
            displays.append(shown)
    dropped = _count(data.get("displays_dropped")) + len(everything) - len(raw_displays)
    manifest = {
        "variables": _variables(_list(data.get("variables"))),
        "not_carried": [_not_carried(item) for item in _list(data.get("not_carried"))[:MAX_NOT_CARRIED]],
        "modules": _modules(data.get("modules")),
        "restored": _restored(data.get("restored")),
        "error": _error(data.get("error")),
        "state": _state(data.get("state")),
        "displays_dropped": dropped,
        "execution_count": _count_or_none(data.get("execution_count")),
        "cleared": _at(data.get("cleared")),
        "files": [_file(item) for item in _list(data.get("files"))[:MAX_FILES] if isinstance(item, dict)],
        "completion": _completion(data.get("completion")),
        "displays_note": note,
    }
    return {"displays": displays, "manifest": manifest, "clean_s": round(time.process_time() - started, 4)}


def _display(item: Any, files: set[str]) -> dict[str, Any] | None:
    data = item.get("data") if isinstance(item, dict) else None
    if not isinstance(data, dict):
        return None
    plain = _text(data.get("text/plain"), PLAIN_MAX_CHARS)
    where: dict[str, Any] = {"at": _at(item.get("at"))}
    if (result := _count_or_none(item.get("result"))) is not None:
        where["result"] = result
    for mime in PREFERENCE:
        if mime not in data:
            continue
        shown = _representation(mime, data[mime])
        if shown is not None and "file" in shown:
            if shown["file"] in files:
                continue
            files.add(shown["file"])
        if shown is not None:
            return {"mime": mime, **shown, "plain": plain, **where}
    return None


def _at(value: Any) -> dict[str, int] | None:
    """Where in the streams something came: the bytes of stdout and stderr written before it."""
    if not isinstance(value, dict):
        return None
    return {stream: _count(value.get(stream)) for stream in ("stdout", "stderr")}


def _representation(mime: str, value: Any) -> dict[str, Any] | None:
    if mime == TABLE:
        table = _table(value)
        return None if table is None else {"table": table}
    if mime in IMAGES:
        name = value.get("file") if isinstance(value, dict) else None
        found = DISPLAY_FILE.fullmatch(name) if isinstance(name, str) else None
        return {"file": name} if found is not None and found.group(2) == IMAGE_EXTENSIONS[mime] else None
    if mime == "application/json":
        try:
            return {"text": _text(json.dumps(value, indent=2, ensure_ascii=False), TEXT_MAX_CHARS)}
        except (TypeError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    text = _text(value, PLAIN_MAX_CHARS if mime == "text/plain" else TEXT_MAX_CHARS)
    if mime == "text/html":
        return {"text": sanitise_html(text)} if text.count("<") <= HTML_MAX_TAGS else None  # then its plain text
    if mime == "text/markdown":
        return {"text": text, "html": render_markdown(text)}
    return {"text": text}


def sanitise_html(text: str) -> str:
    """A display's HTML with nothing that runs, styles the page or loads from anywhere."""
    return nh3.clean(
        text, tags=HTML_TAGS, attributes=HTML_ATTRIBUTES, url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow", attribute_filter=_no_images,
    )  # fmt: skip


def _no_images(tag: str, attribute: str, value: str) -> str | None:
    return None if tag == "img" and attribute == "src" else value  # nothing loads; the alt text stays


def _table(value: Any) -> dict[str, Any] | None:
    """The cell program's table ({"columns", "index", "dtypes", "rows", "total_rows",
    "total_columns"}) as Cordon's table view takes it, the index as its first column."""
    if not isinstance(value, dict):
        return None
    names = [_text(c, NAME_MAX_CHARS) for c in _list(value.get("columns"))[:TABLE_MAX_COLUMNS]]
    dtypes = [_text(d, 40) for d in _list(value.get("dtypes"))]
    index = [_cell(i) for i in _list(value.get("index"))[:TABLE_MAX_ROWS]]
    columns = [{"name": "", "type": "index"}] if index else []
    columns += [
        {"name": name, "type": _column_type(dtypes[n] if n < len(dtypes) else "")} for n, name in enumerate(names)
    ]
    rows = []
    for n, row in enumerate(_list(value.get("rows"))[:TABLE_MAX_ROWS]):
        cells = [_cell(c) for c in _list(row)[: len(names)]]
        cells += [None] * (len(names) - len(cells))
        rows.append(([index[n] if n < len(index) else None] if index else []) + cells)
    return {
        "columns": columns, "rows": rows, "total_rows": _count(value.get("total_rows")) or len(rows),
        "total_columns": _count(value.get("total_columns")) or len(names),
    }  # fmt: skip


def _column_type(dtype: str) -> str:
    return next((kind for prefix, kind in _DTYPE_TYPES if dtype.startswith(prefix)), "text")


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, bool | int):
        return value if not isinstance(value, int) or abs(value) < 2**53 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return _text(value if isinstance(value, str) else json.dumps(value)[:CELL_MAX_CHARS], CELL_MAX_CHARS)


def _variables(items: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    tables = 0
    for item in items[:MAX_VARIABLES]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        shape = [_count(n) for n in _list(item.get("shape"))[:8]] if isinstance(item.get("shape"), list) else None
        variable: dict[str, Any] = {
            "name": _text(item["name"], NAME_MAX_CHARS), "type": _text(item.get("type"), NAME_MAX_CHARS),
            "module": _text(item.get("module"), NAME_MAX_CHARS) or None, "shape": shape,
            "length": _count_or_none(item.get("length")), "bytes": _count_or_none(item.get("bytes")),
        }  # fmt: skip
        if tables < VARIABLE_TABLES and (table := _table(item.get("table"))) is not None:
            variable["table"] = table
            tables += 1
        out.append(variable)
    return out


def _completion(value: Any) -> dict[str, Any]:
    """What the editor completes after a carried name (the cell program's _completion): names and
    signatures, each capped, the kinds among a known few; never shown as the run's output."""
    value = _dict(value)
    names: dict[str, Any] = {}
    for name, entry in list(_dict(value.get("names")).items())[:MAX_VARIABLES]:
        if not _fits(name, NAME_MAX_CHARS):
            continue
        entry = _dict(entry)
        names[name] = {
            "attributes": _attributes(entry.get("attributes")),
            **{key: _text(entry[key], COMPLETION_TEXT_CHARS) for key in ("signature", "doc") if key in entry},
        }
    types = list(_dict(value.get("types")).items())[:COMPLETION_TYPES]
    return {"names": names, "types": {key: _attributes(kept) for key, kept in types if _fits(key, 2 * NAME_MAX_CHARS)}}


def _attributes(value: Any) -> list[list[str]]:
    pairs = (item for item in _list(value)[:COMPLETION_ATTRIBUTES] if isinstance(item, list) and len(item) == 2)
    return [[name, kind] for name, kind in pairs if _fits(name, COMPLETION_NAME_CHARS) and kind in ATTRIBUTE_KINDS]


def _fits(name: Any, limit: int) -> bool:
    """A name kept whole or not at all: one cut short would complete to something that is not there."""
    return isinstance(name, str) and 0 < len(name) <= limit and "\0" not in name


def _dict(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _file(item: dict[str, Any]) -> dict[str, Any]:
    """A file the cell left in /tmp, carried to the next cell with its state."""
    return {"name": _text(item.get("name"), NAME_MAX_CHARS), "bytes": _count(item.get("bytes"))}


def _not_carried(item: Any) -> dict[str, str]:
    item = _dict(item)
    return {key: _text(item.get(key), 300) for key in ("name", "type", "why")}


def _modules(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {_text(k, NAME_MAX_CHARS): _text(v, NAME_MAX_CHARS) for k, v in list(value.items())[:MAX_VARIABLES]}


def _restored(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    failed = [{"name": _text(f.get("name"), NAME_MAX_CHARS), "why": _text(f.get("why"), 300)}
              for f in _list(value.get("failed"))[:MAX_NOT_CARRIED] if isinstance(f, dict)]  # fmt: skip
    return {"bytes": _count_or_none(value.get("bytes")), "names": _count(value.get("names")), "failed": failed}


def _error(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    lines = [_text(line, 8000) for line in _list(value.get("traceback"))[-200:]]
    return {"ename": _text(value.get("ename"), NAME_MAX_CHARS), "evalue": _text(value.get("evalue"), 4000),
            "traceback": lines, "line": _count_or_none(value.get("line")) or None,
            "at": _at(value.get("at"))}  # fmt: skip


def _state(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    return {"bytes": _count_or_none(value.get("bytes")), "over_cap": value.get("over_cap") is True}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    text = text.replace("\0", "\ufffd")
    return text if len(text) <= limit else text[:limit] + " …"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else 0


def _count_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None
