"""/api/notebooks: notebooks kept on the server, their cells run, imported and exported as .ipynb."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.core.files.storage import default_storage
from django.http import HttpRequest, HttpResponse
from django.utils.http import content_disposition_header
from ninja import File, Router, Status
from ninja.files import UploadedFile

from playground.api.notebook_schemas import (
    CellId,
    CellIn,
    CellOut,
    CompleteIn,
    CompleteOut,
    DatasetRef,
    InputOut,
    NotebookCreateIn,
    NotebookOut,
    NotebookPutIn,
    NotebookSummaryOut,
    OutputRef,
)
from playground.api.schemas import (
    RunOut,
    answers,
    inline_image,
    run_out,
)
from playground.downloads import FileStream
from playground.errors import ServiceError
from playground.ipynb import ipynb_from_cells
from playground.limits import (
    limits_set,
)
from playground.models import Notebook
from playground.selectors import cells as cell_selectors
from playground.selectors import completion as completion_selectors
from playground.selectors import notebooks as notebook_selectors
from playground.services import notebooks as notebook_services
from playground.signed_in import signed_in

router = Router()


def _notebook(request: HttpRequest, notebook_id: UUID) -> Notebook:
    return notebook_selectors.notebook_get_for_user(user=signed_in(request), notebook_id=notebook_id)


def _cells(cells: list[CellIn]) -> list[dict[str, Any]]:
    return [{**cell.model_dump(), "limits": limits_set(cell.limits)} for cell in cells]


@router.get("/notebooks", response=answers({200: list[NotebookSummaryOut]}), tags=["notebooks"])
def notebook_list(request: HttpRequest) -> list[dict[str, Any]]:
    notebooks = notebook_selectors.notebook_list_for_user(user=signed_in(request))
    return [{"id": n.id, "name": n.name, "cell_count": n.cell_count, "created_at": n.created_at,
             "updated_at": n.updated_at} for n in notebooks]  # fmt: skip


@router.post("/notebooks", response=answers({201: NotebookOut}, 404, 409, 422), tags=["notebooks"])
def notebook_create(request: HttpRequest, payload: NotebookCreateIn) -> Status[Any]:
    cells = None if payload.cells is None else _cells(payload.cells)
    notebook = notebook_services.notebook_create(
        user=signed_in(request),
        name=payload.name, cells=cells, dataset_ids=payload.dataset_ids, runtime=payload.runtime,
        environment=payload.environment or "",
    )  # fmt: skip
    return Status(201, notebook_selectors.notebook_view(notebook=notebook))


@router.post("/notebooks/import", response=answers({201: NotebookOut}, 409, 422), tags=["notebooks"])
def notebook_import(request: HttpRequest, file: UploadedFile | None = File(None)) -> Status[Any]:  # type: ignore[type-arg]  # noqa: B008
    """A .ipynb notebook (its code and markdown cells) or a .py or .js script (one code cell)."""
    if file is None:
        raise ServiceError("file_required", "send the file as a multipart field named 'file'", field="file", status=422)
    notebook = notebook_services.notebook_import(user=signed_in(request), upload=file)
    return Status(201, notebook_selectors.notebook_view(notebook=notebook))


@router.get("/notebooks/{notebook_id}", response=answers({200: NotebookOut}, 404, 422), tags=["notebooks"])
def notebook_get(request: HttpRequest, notebook_id: UUID) -> dict[str, Any]:
    return notebook_selectors.notebook_view(notebook=_notebook(request, notebook_id))


@router.put("/notebooks/{notebook_id}", response=answers({200: NotebookOut}, 404, 409, 422), tags=["notebooks"])
def notebook_put(request: HttpRequest, notebook_id: UUID, payload: NotebookPutIn) -> dict[str, Any]:
    """Replace the name and cells (the page's autosave). `last_run_id` is not changed by a save."""
    notebook = notebook_services.notebook_save(
        notebook=_notebook(request, notebook_id), name=payload.name, version=payload.version,
        cells=_cells(payload.cells), dataset_ids=payload.dataset_ids, runtime=payload.runtime,
        environment=payload.environment,
    )  # fmt: skip
    return notebook_selectors.notebook_view(notebook=notebook)


@router.delete("/notebooks/{notebook_id}", response=answers({204: None}, 404, 422), tags=["notebooks"])
def notebook_delete(request: HttpRequest, notebook_id: UUID) -> Status[Any]:
    notebook_services.notebook_delete(notebook=_notebook(request, notebook_id))
    return Status(204, None)


@router.post("/notebooks/{notebook_id}/duplicate", response=answers({201: NotebookOut}, 404, 409, 422),
          tags=["notebooks"])  # fmt: skip
def notebook_duplicate(request: HttpRequest, notebook_id: UUID) -> Status[Any]:
    copy = notebook_services.notebook_duplicate(notebook=_notebook(request, notebook_id))
    return Status(201, notebook_selectors.notebook_view(notebook=copy))


@router.post("/notebooks/{notebook_id}/cells/{cell_id}/run", response=answers({201: RunOut}, 404, 422, 503),
          tags=["notebooks"])  # fmt: skip
def notebook_cell_run(request: HttpRequest, notebook_id: UUID, cell_id: CellId) -> Status[Any]:
    """Run a code cell as it is stored (save first) and record the run as the cell's last."""
    run = notebook_services.cell_run(notebook=_notebook(request, notebook_id), cell_id=cell_id)
    return Status(201, run_out(run))


@router.post("/notebooks/{notebook_id}/complete", response=answers({200: CompleteOut}, 404, 422), tags=["notebooks"])
def notebook_complete(request: HttpRequest, notebook_id: UUID, payload: CompleteIn) -> dict[str, Any]:
    """What the editor offers at the cursor: the names the cell would start with and their
    attributes (a frame's columns, a dict's keys), the image's modules and their members with
    signatures, and the names the cell's code above the cursor binds. Never runs anything."""
    return completion_selectors.notebook_complete(notebook=_notebook(request, notebook_id), cell_id=payload.cell_id,
                                                  code=payload.code, cursor=payload.cursor,
                                                  above_cell_id=payload.above_cell_id)  # fmt: skip


@router.get(
    "/notebooks/{notebook_id}/cells/{cell_id}/imported/{index}",
    response=answers({200: None}, 404, 422),
    tags=["notebooks"],
    openapi_extra={"responses": {200: {"description": "an image an imported cell's outputs kept (PNG or JPEG), inline",
                                         "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}}},
)  # fmt: skip
def notebook_imported_image(request: HttpRequest, notebook_id: UUID, cell_id: CellId, index: int) -> FileStream:
    output = notebook_selectors.imported_image(notebook=_notebook(request, notebook_id), cell_id=cell_id, index=index)
    return inline_image(default_storage.open(output["path"], "rb"), output["mime"])


@router.post("/notebooks/{notebook_id}/restart", response=answers({200: NotebookOut}, 404, 422), tags=["notebooks"])
def notebook_restart(request: HttpRequest, notebook_id: UUID) -> dict[str, Any]:
    """Restart (clear state): every run so far passes no state down; cells run again start from nothing."""
    notebook = notebook_services.notebook_restart(notebook=_notebook(request, notebook_id))
    return notebook_selectors.notebook_view(notebook=notebook)


@router.post("/notebooks/{notebook_id}/cells/{cell_id}/clear", response=answers({200: NotebookOut}, 404, 409, 422),
          tags=["notebooks"])  # fmt: skip
def notebook_cell_clear(request: HttpRequest, notebook_id: UUID, cell_id: CellId) -> dict[str, Any]:
    notebook = notebook_services.cell_clear(notebook=_notebook(request, notebook_id), cell_id=cell_id)
    return notebook_selectors.notebook_view(notebook=notebook)


@router.get(
    "/notebooks/{notebook_id}/ipynb",
    response=answers({200: None}, 404, 422),
    tags=["notebooks"],
    openapi_extra={"responses": {200: {"description": "the notebook as a Jupyter .ipynb file (nbformat 4)",
                                         "content": {"application/x-ipynb+json": {"schema": {"type": "object"}}}}}},
)  # fmt: skip
def notebook_export(request: HttpRequest, notebook_id: UUID) -> HttpResponse:
    notebook = _notebook(request, notebook_id)
    budget = cell_selectors.ExportBudget()  # every cell's outputs together, so an export's size is bounded

    def outputs_for(run_id: str) -> tuple[int | None, list[dict[str, Any]]]:
        return cell_selectors.run_outputs_for_export(user=notebook.owner, run_id=run_id, budget=budget)

    document = ipynb_from_cells(notebook.name, notebook.cells, outputs_for, notebook.inputs, notebook.runtime)
    response = HttpResponse(document, content_type="application/x-ipynb+json")
    response["Content-Disposition"] = content_disposition_header(True, f"{notebook.name}.ipynb") or "attachment"
    return response


# What GET answers of each may be sent back as it is (bodies.BodyIn.answered_by).
DatasetRef.answered_by = OutputRef.answered_by = InputOut
CellIn.answered_by = CellOut
NotebookPutIn.answered_by = NotebookOut
