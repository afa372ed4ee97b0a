"""One kernel's behaviour through the API and a real Celery worker, each cell its own run: magics
and `!`, the display hook and `_`, a figure shown once, the random states, views, what a failed
cell bound, the notebook's own `display`, tracebacks in cell terms, JavaScript cells exported for
Jupyter to run with node and read back. (tests/runner/test_cells_kernel.py holds each behaviour in
detail on every engine; test_notebook_fidelity.py compares whole notebooks with Jupyter's.)"""

from __future__ import annotations

import json
import re
from typing import Any

import nbformat
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from tests.playground.conftest import api
from tests.playground.factories import UserFactory
from tests.playground.test_notebooks import code_cell, create
from tests.playground.test_runs_end_to_end import wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_all(client: Client, notebook: dict[str, Any]) -> list[dict[str, Any]]:
    runs = []
    for cell in notebook["cells"]:
        started = client.post(f"/api/notebooks/{notebook['id']}/cells/{cell['id']}/run")
        assert started.status_code == 201, started.content
        runs.append(wait_finished(client, started.json()["id"], timeout=120))
    return runs


def log(client: Client, run: dict[str, Any], stream: str = "stdout") -> str:
    return ANSI.sub("", str(client.get(f"/api/runs/{run['id']}/log?stream={stream}").json()["data"]))


@pytest.mark.usefixtures("worker")
def test_a_notebook_behaves_as_one_kernel_cell_after_cell() -> None:
    client = api(UserFactory())
    sources = [
        "%matplotlib inline\nimport numpy as np, matplotlib.pyplot as plt\nnp.random.seed(1)\n"
        "x = np.zeros(4)\nv = x[1:3]",
        "v[:] = 7\nplt.plot(np.random.rand(3))\nprint(x.tolist())\n!echo from the shell\n6 * 7",
        "print(_, Out[2], np.random.rand(1).round(4).tolist())\n%pip install numpy",
        "class display:\n    def __init__(self, *args):\n        print('my display', *args)\ndisplay(1);",
        "kept = 'yes'\ndef half(n):\n    return n / 0\nhalf(4)\nlost = 1",
        "print(kept, 'lost' in dir())\ndisplay(2);\n%connect_info",
    ]
    notebook = create(client, cells=[code_cell(f"c{n}", source) for n, source in enumerate(sources, 1)])
    first, second, third, fourth, fifth, sixth = run_all(client, notebook)
    assert first["outcome"] == "succeeded" and first["displays"] == [], log(client, first, "stderr")
    assert log(client, second) == "[0.0, 7.0, 7.0, 0.0]\nfrom the shell\r\n", log(client, second, "stderr")
    result, figure = second["displays"]  # the result, then the figure the cell drew (as Jupyter orders them)
    assert figure["mime"] == "image/png" and figure["result"] is None
    assert (result["text"], result["result"], second["cell"]["execution_count"]) == ("42", 2, 2)
    assert log(client, third) == "42 42 [0.3023]\n"  # np.random.seed(1): the fourth number, as one kernel
    assert "%pip: packages come from this sandbox's image" in log(client, third, "stderr")
    assert third["displays"] == [] and third["outcome"] == "succeeded"
    assert log(client, fourth) == "my display 1\n"
    assert fifth["outcome"] == "failed" and fifth["cell"]["state_bytes"] is not None
    error = fifth["cell"]["error"]
    assert (error["ename"], error["line"]) == ("ZeroDivisionError", 4)
    trace = ANSI.sub("", "\n".join(error["traceback"]))
    assert "Cell In [5], line 4" in trace and "Cell In [5], line 3, in half(n)" in trace
    assert sixth["outcome"] == "failed" and log(client, sixth) == "yes False\nmy display 2\n"
    assert "UsageError: %connect_info: refused" in log(client, sixth, "stderr")


@pytest.mark.usefixtures("worker")
def test_a_mixed_notebook_exports_its_javascript_cells_for_jupyter_and_reads_them_back() -> None:
    client = api(UserFactory())
    cells = [code_cell("py", "x = 6\nx * 7"), code_cell("js", "const y = 5;\ny * 2", runtime="node"),
             code_cell("js2", "_ + y", runtime="node")]  # fmt: skip
    notebook = create(client, cells=cells)
    py, js, js2 = run_all(client, notebook)
    assert [run["outcome"] for run in (py, js, js2)] == ["succeeded"] * 3
    assert js2["displays"][0]["text"] == "15"  # `_` is the cell above's value, as node's REPL has it
    document = nbformat.reads(client.get(f"/api/notebooks/{notebook['id']}/ipynb").content.decode(), 4)
    assert [cell.source for cell in document.cells] == ["x = 6\nx * 7", "%%script node\nconst y = 5;\ny * 2",
                                                        "%%script node\n_ + y"]  # fmt: skip
    assert document.metadata.kernelspec.language == "python"
    upload = SimpleUploadedFile("mixed.ipynb", nbformat.writes(document).encode())
    back = client.post("/api/notebooks/import", {"file": upload})
    assert back.status_code == 201, back.content
    assert [(c["runtime"], c["source"]) for c in back.json()["cells"]] == [
        ("python", "x = 6\nx * 7"), ("node", "const y = 5;\ny * 2"), ("node", "_ + y")]  # fmt: skip
    outputs = [cell.outputs for cell in document.cells]
    assert outputs[0][0]["output_type"] == "execute_result" and outputs[0][0]["execution_count"] == 1
    assert json.loads(json.dumps(outputs[2]))[0]["data"]["text/plain"] == "15"
