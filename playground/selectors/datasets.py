"""A user's datasets, and a preview of one: its first bytes as text, its first rows as a table."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404

from playground.errors import ServiceError
from playground.models import Dataset
from playground.previews import empty_table, is_tabular_name, table_preview


def dataset_list_for_user(*, user: User) -> QuerySet[Dataset]:
    return Dataset.objects.filter(owner=user, course=None, replaced_at=None)


def dataset_get_for_user(*, user: User, dataset_id: Any) -> Dataset:
    dataset = Dataset.objects.filter(owner=user, course=None, replaced_at=None, id=dataset_id).first()
    if dataset is None:
        raise Http404("no such dataset")
    return dataset


def current_versions(datasets: Iterable[Dataset]) -> dict[str, Dataset]:
    """Each dataset by its id (as text): itself, or, once replaced, the upload that replaced it
    (what a new run reads where the earlier one is named)."""
    found = list(datasets)
    newer_ids = {d.replaced_by_id for d in found if d.replaced_by_id}
    newer = {d.id: d for d in Dataset.objects.filter(id__in=newer_ids)} if newer_ids else {}
    return {str(d.id): newer.get(d.replaced_by_id, d) if d.replaced_by_id else d for d in found}


def dataset_preview(*, dataset: Dataset, rows: int = 50, limit: int = 4096) -> dict[str, Any]:
    """The first bytes as text (replaced where not UTF-8) and, for a table by its name (CSV, TSV,
    JSON), its first rows typed; a file that is no table has no columns."""
    with dataset.file.open("rb") as handle:
        head: bytes = handle.read(limit)
        table = empty_table()
        if is_tabular_name(dataset.name):
            handle.seek(0)
            try:
                table = table_preview(handle, dataset.name, max_rows=rows)
            except ServiceError:  # not a table after all (e.g. a .json that is one object): text only
                pass
    return {**table, "text": head.decode("utf-8", errors="replace")}
