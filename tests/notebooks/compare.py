"""What a notebook's code cells printed, in a form two runs can be compared by: Jupyter's stored
outputs (tests/notebooks/*.ipynb, made by make_references.py with Jupyter itself) against Cordon's
export of the same cells run one by one.

A cell's outputs become a list of (kind, text) in Jupyter's order: a stream's text (consecutive
writes of one stream joined), a result's or a display's text/plain, an error's name, value and
traceback; and the number of figures (image/png outputs) apart. What differs between any two runs of
the same code is masked first: ANSI colours, memory addresses (`at 0x7f...`), and the times %time
and %timeit measure. Nothing else is forgiven.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
ADDRESS = re.compile(r"0x[0-9a-f]{6,16}")
DURATION = re.compile(r"\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|s|min)\b")


def masked(text: str) -> str:
    return DURATION.sub("<time>", ADDRESS.sub("0x…", ANSI.sub("", text)))


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


@dataclass(frozen=True)
class Printed:
    """One code cell's outputs as compared: what it printed, and how many figures it showed."""

    texts: tuple[tuple[str, str], ...]
    figures: int


def printed(outputs: Iterable[Mapping[str, Any]]) -> Printed:
    texts: list[tuple[str, str]] = []
    figures = 0
    for output in outputs:
        kind = output.get("output_type")
        if kind == "stream":
            name, text = f"stream:{output.get('name')}", _joined(output.get("text"))
            if texts and texts[-1][0] == name:
                texts[-1] = (name, texts[-1][1] + text)
            else:
                texts.append((name, text))
        elif kind in ("execute_result", "display_data"):
            data = output.get("data") or {}
            figures += "image/png" in data
            label = "result" if kind == "execute_result" else "display"
            texts.append((label, _joined(data.get("text/plain"))))
        elif kind == "error":
            lines = "\n".join(_joined(line) for line in output.get("traceback") or [])
            texts.append(("error", f"{output.get('ename')}: {output.get('evalue')}\n{lines}"))
    return Printed(tuple((kind, masked(text)) for kind, text in texts), figures)


def differences(jupyter: Mapping[str, Any], cordon: Mapping[str, Any]) -> list[str]:
    """For each code cell (in order) whose printed text or figure count differs, what differs."""
    theirs = [cell for cell in jupyter["cells"] if cell["cell_type"] == "code"]
    ours = [cell for cell in cordon["cells"] if cell["cell_type"] == "code"]
    if len(theirs) != len(ours):
        return [f"{len(theirs)} code cells in Jupyter's notebook, {len(ours)} in Cordon's"]
    found = []
    for number, (their, our) in enumerate(zip(theirs, ours, strict=True), 1):
        expected, got = printed(their.get("outputs", [])), printed(our.get("outputs", []))
        if expected != got:
            found.append(f"code cell {number} ({_first_line(their)}):\n  Jupyter: {expected}\n  Cordon:  {got}")
    return found


def _first_line(cell: Mapping[str, Any]) -> str:
    source = _joined(cell.get("source"))
    return (source.splitlines() or [""])[0][:60]
