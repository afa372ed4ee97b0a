"""Real notebooks whose outputs Jupyter itself stored (tests/notebooks, made here by
make_references.py with Debian's Jupyter and the image's own libraries): imported into Cordon, run
cell by cell through the API and a real Celery worker, each cell its own sandbox; then exported,
and every code cell's printed text and figure count compared with Jupyter's (tests/notebooks/
compare.py says what is masked: colours, memory addresses, measured times)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.notebooks.compare import differences, printed
from tests.playground.conftest import api
from tests.playground.factories import UserFactory
from tests.playground.test_runs_end_to_end import wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]

NOTEBOOKS = Path(__file__).parents[1] / "notebooks"
REFERENCES = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_reference_notebooks_hold_what_the_issue_names() -> None:
    """The references exercise what a kernel keeps: inline figures, seeded randomness, views,
    deliberate errors, magics; each was run by Jupyter (execution counts, outputs stored)."""
    assert len(REFERENCES) == 3
    sources = "\n".join(cell.source for path in REFERENCES for cell in nbformat.read(path, 4).cells)
    for needle in ("%matplotlib inline", "np.random.seed", "random.seed", "v = x[:2]", "1 / 0", "%%writefile",
                   "%%time", "!echo", "In[3]", "Out[2]"):  # fmt: skip
        assert needle in sources, needle
    for path in REFERENCES:
        cells = nbformat.read(path, 4).cells
        assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1)), path.name
    kinds = {kind for path in REFERENCES for cell in nbformat.read(path, 4).cells
             for kind, _ in printed(cell.outputs).texts}  # fmt: skip
    assert {"result", "display", "error", "stream:stdout"} <= kinds
    assert sum(printed(cell.outputs).figures for path in REFERENCES for cell in nbformat.read(path, 4).cells) == 6


@pytest.mark.usefixtures("worker")
@pytest.mark.parametrize("reference", REFERENCES, ids=[path.stem for path in REFERENCES])
def test_a_notebook_run_cell_by_cell_prints_what_jupyter_printed(reference: Path) -> None:
    client = api(UserFactory())
    upload = SimpleUploadedFile(reference.name, reference.read_bytes())
    response = client.post("/api/notebooks/import", {"file": upload})
    assert response.status_code == 201, response.content
    notebook = response.json()
    for cell in notebook["cells"]:
        if cell["kind"] != "code":
            continue
        started = client.post(f"/api/notebooks/{notebook['id']}/cells/{cell['id']}/run")
        assert started.status_code == 201, started.content
        run = wait_finished(client, started.json()["id"], timeout=120)
        assert run["outcome"] in ("succeeded", "failed"), (cell["source"], run["outcome"], run["reason"])
    exported = client.get(f"/api/notebooks/{notebook['id']}/ipynb")
    assert exported.status_code == 200
    ours: dict[str, Any] = json.loads(exported.content)
    theirs: dict[str, Any] = json.loads(reference.read_text())
    assert differences(theirs, ours) == []
    counts = [cell["execution_count"] for cell in ours["cells"] if cell["cell_type"] == "code"]
    assert counts == [cell["execution_count"] for cell in theirs["cells"]]
