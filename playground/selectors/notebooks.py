"""A user's notebooks, and one as the page shows it: each input says whether its target still
exists and, when not, which of the user's datasets of the same name would fix it."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404

from playground.models import Dataset, Notebook, RunOutputFile


def notebook_list_for_user(*, user: User) -> QuerySet[Notebook]:
    return Notebook.objects.filter(owner=user)


def notebook_get_for_user(*, user: User, notebook_id: Any) -> Notebook:
    notebook = Notebook.objects.filter(owner=user, id=notebook_id).first()
    if notebook is None:
        raise Http404("no such notebook")
    return notebook


def notebook_view(*, notebook: Notebook) -> dict[str, Any]:
    refs = [ref for cell in notebook.cells for ref in cell["inputs"]]
    dataset_ids = [ref["id"] for ref in refs if ref["kind"] == "dataset"]
    output_ids = [ref["id"] for ref in refs if ref["kind"] == "output"]
    datasets = {str(d.id) for d in Dataset.objects.filter(owner=notebook.owner, id__in=dataset_ids)}
    outputs = {
        str(o.id) for o in RunOutputFile.objects.filter(run__owner=notebook.owner, id__in=output_ids).exclude(file="")
    }

    def is_broken(ref: dict[str, Any]) -> bool:
        return str(ref["id"]) not in (datasets if ref["kind"] == "dataset" else outputs)

    broken_names = {ref["name"] for ref in refs if is_broken(ref)}
    by_name = {d.name: d for d in Dataset.objects.filter(owner=notebook.owner, name__in=broken_names)}

    def input_view(ref: dict[str, Any]) -> dict[str, Any]:
        fix = by_name.get(ref["name"]) if is_broken(ref) else None
        return {**ref, "broken": is_broken(ref),
                "fix": {"kind": "dataset", "id": fix.id, "name": fix.name} if fix else None}  # fmt: skip

    cells = [{**cell, "html": cell.get("html"), "inputs": [input_view(r) for r in cell["inputs"]]}
             for cell in notebook.cells]  # fmt: skip
    return {
        "id": notebook.id, "name": notebook.name, "version": notebook.version, "created_at": notebook.created_at,
        "updated_at": notebook.updated_at, "cells": cells,
    }  # fmt: skip
