"""/api/notebooks: notebooks kept on the server, their cells run, imported and exported as .ipynb."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from django.core.files.storage import default_storage
from django.http import HttpRequest, HttpResponse
from django.utils.http import content_disposition_header
from ninja import Field, File, Schema, Status
from ninja.files import UploadedFile

from playground.api.base import api
from playground.api.schemas import (
    EnvironmentName,
    NotCarriedOut,
    OutputId,
    RunOut,
    RuntimeName,
    StartsFromOut,
    VariableOut,
    answers,
    inline_image,
    run_out,
)
from playground.bodies import (
    JSON_INT_MAX,
    NOT_BLANK,
    BodyIn,
    Int,
    Text,
)
from playground.downloads import FileStream
from playground.egress import EgressPolicy
from playground.errors import ServiceError
from playground.ipynb import ipynb_from_cells
from playground.limits import (
    CellLimitsIn,
    LimitsSet,
    limits_set,
)
from playground.models import Notebook
from playground.selectors import cells as cell_selectors
from playground.selectors import completion as completion_selectors
from playground.selectors import notebooks as notebook_selectors
from playground.services import notebooks as notebook_services

CellId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class DatasetRef(BodyIn):
    kind: Literal["dataset"]
    id: UUID


class OutputRef(BodyIn):
    kind: Literal["output"]
    id: OutputId


class CellIn(BodyIn):
    id: CellId
    kind: Literal["code", "markdown"] = "code"
    runtime: RuntimeName = "python"
    source: Text = ""
    inputs: list[Annotated[DatasetRef | OutputRef, Field(discriminator="kind")]] = Field(
        default=[], max_length=notebook_services.MAX_INPUTS
    )
    # Only the limits set for this cell (the others take their defaults when it runs).
    limits: CellLimitsIn = Field(default_factory=CellLimitsIn)  # type: ignore[valid-type]
    # Checked for shape here, against today's ceiling when the cell runs (a ceiling may change meanwhile).
    egress: EgressPolicy = []
    last_run_id: UUID | None = Field(None, description="read-only: set by running the cell, emptied by clearing it")


NotebookName = Annotated[str, Field(min_length=1, max_length=100, pattern=NOT_BLANK)]
Cells = Annotated[list[CellIn], Field(max_length=notebook_services.MAX_CELLS)]


class NotebookCreateIn(BodyIn):
    name: NotebookName
    cells: Cells | None = None
    runtime: RuntimeName | None = Field(None, description="what a new code cell takes; omitted: the first code cell's")
    environment: EnvironmentName | None = Field(
        None,
        description="where its cells run (GET /api/environments): "
        "a code cell of the environment's runtime runs in it; omitted: each runtime's own image",
    )
    dataset_ids: list[UUID] | None = Field(
        None, max_length=notebook_services.MAX_INPUTS, description="the notebook's own inputs (see PUT)"
    )


class NotebookPutIn(BodyIn):
    name: NotebookName
    version: Int = Field(ge=1, le=JSON_INT_MAX, description="the version this page read; a stale one is refused (409)")
    cells: Cells
    dataset_ids: list[UUID] | None = Field(
        None, max_length=notebook_services.MAX_INPUTS,
        description="the notebook's own inputs (every code cell sees them under /input); omitted: unchanged",
    )  # fmt: skip
    runtime: RuntimeName | None = Field(None, description="what a new code cell takes; omitted: unchanged")
    environment: EnvironmentName | None = Field(
        None,
        description="where its cells run (GET /api/environments): "
        "a code cell of the environment's runtime runs in it; omitted: unchanged; blank: each runtime's own image",
    )


class InputFixOut(Schema):
    kind: Literal["dataset"]
    id: UUID
    name: str


class InputOut(Schema):
    kind: Literal["dataset", "output"]
    id: UUID | int
    name: str
    broken: bool = Field(description="its dataset or output no longer exists")
    fix: InputFixOut | None = Field(description="when broken: your current dataset of the same name, if any")


class CellOut(Schema):
    id: str
    kind: str
    runtime: str
    source: str
    inputs: list[InputOut]
    limits: LimitsSet
    egress: list[str] = Field(description="the destinations the cell's runs may reach (empty: no network)")
    last_run_id: UUID | None
    html: str | None = Field(description="a markdown cell, rendered and sanitised on the server")
    stale: bool = Field(description="its run is out of date: its code, or the state it started from, changed since")
    stale_why: str = Field(description="why it is stale, in words")
    starts_from: StartsFromOut | None = Field(
        description="the run whose state it starts from if run now (null: nothing)"
    )
    imported: list[ImportedOutputOut] = Field(
        [], description="outputs an imported .ipynb had for this cell, shown until the cell runs"
    )
    fresh_start: str = Field(
        description="why it starts from nothing although a cell above has state (a runtime change)"
    )


class ImportedOutputOut(Schema):
    mime: str
    text: str | None = None
    html: str | None = None
    url: str | None = None
    plain: str = ""
    stream: str | None = Field(None, description='"stdout" or "stderr" for a stream')
    error: dict[str, str] | None = Field(None, description="an error's ename and evalue (its traceback is `text`)")


class NotebookStateOut(Schema):
    starts_from: StartsFromOut | None = Field(description="the run a new cell at the end would start from")
    variables: list[VariableOut]
    not_carried: list[NotCarriedOut]
    modules: dict[str, str]
    bytes: int | None


class NotebookOut(Schema):
    id: UUID
    name: str
    runtime: str = Field(description="what a new code cell takes (each cell keeps its own runtime)")
    environment: str = Field(description="where its cells run (blank: each runtime's own image)")
    version: int
    created_at: datetime
    updated_at: datetime
    cells: list[CellOut]
    inputs: list[InputOut] = Field(description="the notebook's own inputs: every code cell sees them under /input")
    restarted_at: datetime | None = Field(description="the last Restart: runs before it pass no state down")
    state: NotebookStateOut = Field(description="the variables a new cell at the end would start with")


class NotebookSummaryOut(Schema):
    id: UUID
    name: str
    cell_count: int
    created_at: datetime
    updated_at: datetime


def _notebook(request: HttpRequest, notebook_id: UUID) -> Notebook:
    return notebook_selectors.notebook_get_for_user(user=request.user, notebook_id=notebook_id)  # type: ignore[arg-type]


def _cells(cells: list[CellIn]) -> list[dict[str, Any]]:
    return [{**cell.model_dump(), "limits": limits_set(cell.limits)} for cell in cells]


@api.get("/notebooks", response=answers({200: list[NotebookSummaryOut]}), tags=["notebooks"])
def notebook_list(request: HttpRequest) -> list[dict[str, Any]]:
    notebooks = notebook_selectors.notebook_list_for_user(user=request.user)  # type: ignore[arg-type]
    return [{"id": n.id, "name": n.name, "cell_count": n.cell_count, "created_at": n.created_at,
             "updated_at": n.updated_at} for n in notebooks]  # fmt: skip


@api.post("/notebooks", response=answers({201: NotebookOut}, 404, 409, 422), tags=["notebooks"])
def notebook_create(request: HttpRequest, payload: NotebookCreateIn) -> Status[Any]:
    cells = None if payload.cells is None else _cells(payload.cells)
    notebook = notebook_services.notebook_create(
        user=request.user,  # type: ignore[arg-type]
        name=payload.name, cells=cells, dataset_ids=payload.dataset_ids, runtime=payload.runtime,
        environment=payload.environment or "",
    )  # fmt: skip
    return Status(201, notebook_selectors.notebook_view(notebook=notebook))


@api.post("/notebooks/import", response=answers({201: NotebookOut}, 409, 422), tags=["notebooks"])
def notebook_import(request: HttpRequest, file: UploadedFile | None = File(None)) -> Status[Any]:  # type: ignore[type-arg]  # noqa: B008
    """A .ipynb notebook (its code and markdown cells) or a .py or .js script (one code cell)."""
    if file is None:
        raise ServiceError("file_required", "send the file as a multipart field named 'file'", field="file", status=422)
    notebook = notebook_services.notebook_import(user=request.user, upload=file)  # type: ignore[arg-type]
    return Status(201, notebook_selectors.notebook_view(notebook=notebook))


@api.get("/notebooks/{notebook_id}", response=answers({200: NotebookOut}, 404, 422), tags=["notebooks"])
def notebook_get(request: HttpRequest, notebook_id: UUID) -> dict[str, Any]:
    return notebook_selectors.notebook_view(notebook=_notebook(request, notebook_id))


@api.put("/notebooks/{notebook_id}", response=answers({200: NotebookOut}, 404, 409, 422), tags=["notebooks"])
def notebook_put(request: HttpRequest, notebook_id: UUID, payload: NotebookPutIn) -> dict[str, Any]:
    """Replace the name and cells (the page's autosave). `last_run_id` is not changed by a save."""
    notebook = notebook_services.notebook_save(
        notebook=_notebook(request, notebook_id), name=payload.name, version=payload.version,
        cells=_cells(payload.cells), dataset_ids=payload.dataset_ids, runtime=payload.runtime,
        environment=payload.environment,
    )  # fmt: skip
    return notebook_selectors.notebook_view(notebook=notebook)


@api.delete("/notebooks/{notebook_id}", response=answers({204: None}, 404, 422), tags=["notebooks"])
def notebook_delete(request: HttpRequest, notebook_id: UUID) -> Status[Any]:
    notebook_services.notebook_delete(notebook=_notebook(request, notebook_id))
    return Status(204, None)


@api.post("/notebooks/{notebook_id}/duplicate", response=answers({201: NotebookOut}, 404, 409, 422),
          tags=["notebooks"])  # fmt: skip
def notebook_duplicate(request: HttpRequest, notebook_id: UUID) -> Status[Any]:
    copy = notebook_services.notebook_duplicate(notebook=_notebook(request, notebook_id))
    return Status(201, notebook_selectors.notebook_view(notebook=copy))


@api.post("/notebooks/{notebook_id}/cells/{cell_id}/run", response=answers({201: RunOut}, 404, 422, 503),
          tags=["notebooks"])  # fmt: skip
def notebook_cell_run(request: HttpRequest, notebook_id: UUID, cell_id: CellId) -> Status[Any]:
    """Run a code cell as it is stored (save first) and record the run as the cell's last."""
    run = notebook_services.cell_run(notebook=_notebook(request, notebook_id), cell_id=cell_id)
    return Status(201, run_out(run))


class CompleteIn(BodyIn):
    cell_id: CellId
    code: Annotated[Text, Field(max_length=notebook_services.MAX_SOURCE_BYTES)] = Field(
        description="the cell's text as the editor has it (saved or not)"
    )
    cursor: Annotated[Int, Field(ge=0, le=notebook_services.MAX_SOURCE_BYTES)] = Field(
        description="the cursor's place in code, in characters"
    )
    above_cell_id: CellId | None = Field(
        None,
        description="the cell above it on the page: for a cell the notebook does not hold yet (added, not "
        "saved), the state that cell leaves is the one completed from (without it, the notebook's last)",
    )


class MatchOut(Schema):
    text: str
    kind: str = Field(description="variable, function, class, module, method, property, attribute, column, key, "
                                  "param or keyword")  # fmt: skip
    signature: str | None = None
    doc: str | None = Field(None, description="the first line of its documentation")


class CallOut(Schema):
    name: str
    signature: str
    doc: str | None = None


class CompleteOut(Schema):
    matches: list[MatchOut]
    replace: int = Field(description="how many characters before the cursor a match replaces")
    call: CallOut | None = Field(None, description="the callable whose parentheses the cursor is in")


@api.post("/notebooks/{notebook_id}/complete", response=answers({200: CompleteOut}, 404, 422), tags=["notebooks"])
def notebook_complete(request: HttpRequest, notebook_id: UUID, payload: CompleteIn) -> dict[str, Any]:
    """What the editor offers at the cursor: the names the cell would start with and their
    attributes (a frame's columns, a dict's keys), the image's modules and their members with
    signatures, and the names the cell's code above the cursor binds. Never runs anything."""
    return completion_selectors.notebook_complete(notebook=_notebook(request, notebook_id), cell_id=payload.cell_id,
                                                  code=payload.code, cursor=payload.cursor,
                                                  above_cell_id=payload.above_cell_id)  # fmt: skip


@api.get(
    "/notebooks/{notebook_id}/cells/{cell_id}/imported/{index}",
    response=answers({200: None}, 404, 422),
    tags=["notebooks"],
    openapi_extra={"responses": {200: {"description": "an image an imported cell's outputs kept (PNG or JPEG), inline",
                                         "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}}},
)  # fmt: skip
def notebook_imported_image(request: HttpRequest, notebook_id: UUID, cell_id: CellId, index: int) -> FileStream:
    output = notebook_selectors.imported_image(notebook=_notebook(request, notebook_id), cell_id=cell_id, index=index)
    return inline_image(default_storage.open(output["path"], "rb"), output["mime"])


@api.post("/notebooks/{notebook_id}/restart", response=answers({200: NotebookOut}, 404, 422), tags=["notebooks"])
def notebook_restart(request: HttpRequest, notebook_id: UUID) -> dict[str, Any]:
    """Restart (clear state): every run so far passes no state down; cells run again start from nothing."""
    notebook = notebook_services.notebook_restart(notebook=_notebook(request, notebook_id))
    return notebook_selectors.notebook_view(notebook=notebook)


@api.post("/notebooks/{notebook_id}/cells/{cell_id}/clear", response=answers({200: NotebookOut}, 404, 409, 422),
          tags=["notebooks"])  # fmt: skip
def notebook_cell_clear(request: HttpRequest, notebook_id: UUID, cell_id: CellId) -> dict[str, Any]:
    notebook = notebook_services.cell_clear(notebook=_notebook(request, notebook_id), cell_id=cell_id)
    return notebook_selectors.notebook_view(notebook=notebook)


@api.get(
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
