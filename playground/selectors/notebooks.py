"""A user's notebooks, and one as the page shows it: each input says whether its target still
exists and, when not, which of the user's datasets of the same name would fix it."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404

from playground.models import Dataset, Notebook, Run, RunOutputFile
from playground.selectors.cells import CellChain, notebook_chain
from playground.selectors.datasets import current_versions


def notebook_list_for_user(*, user: User) -> QuerySet[Notebook]:
    """The user's notebooks without their cells (up to MAX_NOTEBOOKS of up to 4 MiB each): a list
    shows each one's `cell_count`."""
    return Notebook.objects.filter(owner=user).defer("cells")


def notebook_get_for_user(*, user: User, notebook_id: Any) -> Notebook:
    notebook = Notebook.objects.filter(owner=user, id=notebook_id).first()
    if notebook is None:
        raise Http404("no such notebook")
    return notebook


Found = dict[tuple[str, str], Dataset | RunOutputFile]


def input_key(ref: dict[str, Any]) -> tuple[str, str]:
    return ref["kind"], str(ref["id"])


def inputs_found(*, user: User, refs: list[dict[str, Any]]) -> Found:
    """The user's own datasets and still stored outputs that input references name, by their key."""
    dataset_ids = [str(ref["id"]) for ref in refs if ref["kind"] == "dataset"]
    output_ids = [int(ref["id"]) for ref in refs if ref["kind"] == "output"]
    datasets = current_versions(Dataset.objects.filter(owner=user, course=None, id__in=dataset_ids))
    found: Found = {("dataset", old_id): d for old_id, d in datasets.items()}  # a replaced one: its replacement
    outputs = RunOutputFile.objects.filter(run__in=Run.objects.own(user), id__in=output_ids).exclude(file="")
    found.update({("output", str(o.id)): o for o in outputs})
    return found


def notebook_view(*, notebook: Notebook) -> dict[str, Any]:
    """The notebook as the page and the API show it: each input checked, each code cell's place in
    the chain of state (selectors.cells), and the variables a new cell at the end would start with."""
    refs = [ref for cell in notebook.cells for ref in cell["inputs"]] + list(notebook.inputs)
    found = inputs_found(user=notebook.owner, refs=refs)

    def is_broken(ref: dict[str, Any]) -> bool:
        return input_key(ref) not in found

    broken_names = {ref["name"] for ref in refs if is_broken(ref)}
    by_name = {d.name: d for d in Dataset.objects.filter(owner=notebook.owner, course=None, replaced_at=None,
                                                          name__in=broken_names)}  # fmt: skip

    def input_view(ref: dict[str, Any]) -> dict[str, Any]:
        fix = by_name.get(ref["name"]) if is_broken(ref) else None
        return {**ref, "broken": is_broken(ref),
                "fix": {"kind": "dataset", "id": fix.id, "name": fix.name} if fix else None}  # fmt: skip

    chain, last = notebook_chain(notebook=notebook)
    cells = [{**cell, "html": cell.get("html", "") if cell["kind"] == "markdown" else None,
              "inputs": [input_view(r) for r in cell["inputs"]], "egress": cell.get("egress", []),
              **_chain_view(chain.get(cell["id"])),
              "imported": [_imported_view(notebook, cell["id"], n, o) for n, o in enumerate(cell.get("imported", []))]}
             for cell in notebook.cells]  # fmt: skip
    manifest = last.run.cell.manifest if last is not None else {}
    return {
        "id": notebook.id, "name": notebook.name, "runtime": notebook.runtime,
        "environment": notebook.environment, "version": notebook.version,
        "created_at": notebook.created_at,
        "updated_at": notebook.updated_at, "cells": cells, "inputs": [input_view(r) for r in notebook.inputs],
        "restarted_at": notebook.restarted_at,
        "state": {"starts_from": last.to_json() if last else None, "variables": manifest.get("variables", []),
                  "not_carried": manifest.get("not_carried", []), "modules": manifest.get("modules", {}),
                  "bytes": last.run.cell.state_bytes if last else None},
    }  # fmt: skip


def _imported_view(notebook: Notebook, cell_id: str, index: int, output: dict[str, Any]) -> dict[str, Any]:
    shown = {k: v for k, v in output.items() if k not in ("path", "size")}
    if "path" in output:
        shown["url"] = f"/api/notebooks/{notebook.id}/cells/{cell_id}/imported/{index}"
    return shown


def imported_image(*, notebook: Notebook, cell_id: str, index: int) -> dict[str, Any]:
    """An image an imported cell's outputs kept; 404 for anything else."""
    cell: dict[str, Any] = next((c for c in notebook.cells if c["id"] == cell_id), {})
    outputs = cell.get("imported", [])
    output = outputs[index] if 0 <= index < len(outputs) else {}
    if "path" not in output:
        raise Http404("no such image")
    return dict(output)


def _chain_view(link: CellChain | None) -> dict[str, Any]:
    if link is None:  # a markdown cell
        return {"stale": False, "stale_why": "", "starts_from": None, "fresh_start": ""}
    return {"stale": bool(link.stale), "stale_why": link.stale, "fresh_start": link.fresh_start,
            "starts_from": link.starts_from.to_json() if link.starts_from else None}  # fmt: skip
