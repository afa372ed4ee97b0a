"""/api/datasets: a user's uploaded files, their previews, and their deletion."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.http import HttpRequest
from ninja import File, Router, Status
from ninja.files import UploadedFile
from ninja.params.functions import Query

from playground.api.schemas import PREVIEW_ROWS, DatasetOut, DatasetPreviewOut, answers, uploaded_file
from playground.models import Dataset
from playground.selectors import datasets as dataset_selectors
from playground.services import datasets as dataset_services
from playground.signed_in import signed_in

router = Router()

REPLACE_DOC = (
    "when a dataset of this name exists: true makes this upload the dataset of that name (new runs, notebook "
    "cells and assignments that named the earlier one read this one; runs made before keep theirs); false "
    "(the default) refuses it, 409 duplicate_name"
)


@router.post("/datasets", response=answers({201: DatasetOut}, 409, 422), tags=["datasets"])
def dataset_upload(
    request: HttpRequest,
    file: UploadedFile | None = File(None),  # type: ignore[type-arg]  # noqa: B008
    replace: bool = Query(False, description=REPLACE_DOC),
) -> Status[Any]:
    upload = uploaded_file(request, file, "dataset")
    made = dataset_services.dataset_create(user=signed_in(request), upload=upload, replace=replace)
    return Status(201, made)


@router.get("/datasets", response=answers({200: list[DatasetOut]}), tags=["datasets"])
def dataset_list(request: HttpRequest) -> Any:
    return dataset_selectors.dataset_list_for_user(user=signed_in(request))


@router.get("/datasets/{dataset_id}", response=answers({200: DatasetOut}, 404, 422), tags=["datasets"])
def dataset_get(request: HttpRequest, dataset_id: UUID) -> Dataset:
    return dataset_selectors.dataset_get_for_user(user=signed_in(request), dataset_id=dataset_id)


@router.delete("/datasets/{dataset_id}", response=answers({204: None}, 404, 422), tags=["datasets"])
def dataset_delete(request: HttpRequest, dataset_id: UUID) -> Status[Any]:
    dataset = dataset_selectors.dataset_get_for_user(user=signed_in(request), dataset_id=dataset_id)
    dataset_services.dataset_delete(dataset=dataset)
    return Status(204, None)


@router.get("/datasets/{dataset_id}/preview", response=answers({200: DatasetPreviewOut}, 404, 422), tags=["datasets"])
def dataset_preview(request: HttpRequest, dataset_id: UUID, rows: int = PREVIEW_ROWS) -> dict[str, Any]:
    """The first bytes as text and, for a CSV, TSV or JSON table, its first rows typed (else no columns)."""
    dataset = dataset_selectors.dataset_get_for_user(user=signed_in(request), dataset_id=dataset_id)
    return dataset_selectors.dataset_preview(dataset=dataset, rows=rows)
