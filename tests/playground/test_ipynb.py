"""Notebooks in and out of Jupyter's format (playground/ipynb.py): round trips, exports with each cell's
last outputs, imports, upgrades, refusals, scripts as one cell. Pure functions: no database."""

from __future__ import annotations

import json
from typing import Any

import nbformat
import pytest
from nbformat import v4

from playground import ipynb
from playground.errors import ServiceError
from playground.ipynb import cells_from_ipynb, cells_from_script, ipynb_from_cells

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
