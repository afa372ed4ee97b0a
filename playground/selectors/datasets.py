"""A user's datasets, and the first bytes of one as text."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404

from playground.models import Dataset


def dataset_list_for_user(*, user: User) -> QuerySet[Dataset]:
    return Dataset.objects.filter(owner=user)


def dataset_get_for_user(*, user: User, dataset_id: Any) -> Dataset:
    dataset = Dataset.objects.filter(owner=user, id=dataset_id).first()
    if dataset is None:
        raise Http404("no such dataset")
    return dataset


def dataset_preview(*, dataset: Dataset, limit: int = 4096) -> str:
    """The first bytes as text, replaced where not UTF-8: no parsing of user files on the host."""
    with dataset.file.open("rb") as handle:
        head: bytes = handle.read(limit)
    return head.decode("utf-8", errors="replace")
