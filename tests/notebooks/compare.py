"""What a notebook's code cells printed, in a form two runs can be compared by: Jupyter's stored
outputs (tests/notebooks/*.ipynb, made by make_references.py with Jupyter itself) against Cordon's
export of the same cells run one by one.

A cell's outputs become a list of (kind, text) in Jupyter's order: a stream's text (consecutive
writes of one stream joined), a result's or a display's text/plain, an error's name, value and
traceback; and the number of figures (image/png outputs) apart. What differs between any two runs of
the same code is masked first: ANSI colours, memory addresses (`at 0x7f...`), the kernel's process
id in the name IPython gives a cell's code (`/tmp/ipykernel_<pid>/<hash>.py`, named as ipykernel
names it), and the times %time and %timeit measure (and the loop counts %timeit chooses by them).
Nothing else is forgiven.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
ADDRESS = re.compile(r"0x[0-9a-f]{6,16}")
DURATION = re.compile(r"\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|s|min)\b")
LOOPS = re.compile(r"[\d,]+ loops? each")
SLOWEST = re.compile(r"The slowest run took [\d.]+ times longer than the fastest\. This could mean that an "
                     r"intermediate result is being cached\.\n")  # fmt: skip
KERNEL_PID = re.compile(r"ipykernel_\d+")


def masked(text: str) -> str:
    text = ADDRESS.sub("0x…", ANSI.sub("", text))
    text = SLOWEST.sub("", LOOPS.sub("<n> loops each", DURATION.sub("<time>", text)))
    return KERNEL_PID.sub("ipykernel_<pid>", text)


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
    return list(differing_cells(jupyter, cordon).values())


def differing_cells(jupyter: Mapping[str, Any], cordon: Mapping[str, Any]) -> dict[int, str]:
    """differences() by code cell number (from 1); 0 when the notebooks' code cells do not pair up."""
    theirs = [cell for cell in jupyter["cells"] if cell["cell_type"] == "code"]
    ours = [cell for cell in cordon["cells"] if cell["cell_type"] == "code"]
    if len(theirs) != len(ours):
        return {0: f"{len(theirs)} code cells in Jupyter's notebook, {len(ours)} in Cordon's"}
    found = {}
    for number, (their, our) in enumerate(zip(theirs, ours, strict=True), 1):
        expected, got = printed(their.get("outputs", [])), printed(our.get("outputs", []))
        if expected != got:
            found[number] = f"code cell {number} ({_first_line(their)}):\n  Jupyter: {expected}\n  Cordon:  {got}"
    return found


def _first_line(cell: Mapping[str, Any]) -> str:
    source = _joined(cell.get("source"))
    return (source.splitlines() or [""])[0][:60]
