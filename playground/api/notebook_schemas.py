"""The notebook API's bodies and answers: a notebook, its cells and their inputs, its state,
and completion's request and matches (playground/api/notebooks.py answers with them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from ninja import Field, Schema

from playground.api.schemas import (
    EnvironmentName,
    NotCarriedOut,
    OutputId,
    RuntimeName,
    StartsFromOut,
    VariableOut,
)
from playground.bodies import (
    JSON_INT_MAX,
    NOT_BLANK,
    BodyIn,
    Int,
    Text,
)
from playground.egress import EgressPolicy
from playground.limits import (
    CellLimitsIn,
    LimitsSet,
)
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
