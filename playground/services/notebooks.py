"""A user's notebook: its cells replaced as a whole on autosave, each checked first."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from playground.limits import limits_from_record
from playground.models import Notebook
from playground.services.errors import ServiceError
from playground.services.runs import MAX_CODE_BYTES
from runner.spec import RUNTIMES

MAX_CELLS = 50


def notebook_save(*, user: User, cells: list[dict[str, Any]]) -> Notebook:
    """Replace the user's cells (autosave). Each cell is checked; nothing half-valid is stored."""
    if len(cells) > MAX_CELLS:
        raise ServiceError("too_many_cells", f"at most {MAX_CELLS} cells", field="cells", status=422)
    notebook, _ = Notebook.objects.update_or_create(
        owner=user, defaults={"cells": [_clean_cell(index, cell) for index, cell in enumerate(cells)]}
    )
    return notebook


def _clean_cell(index: int, cell: dict[str, Any]) -> dict[str, Any]:
    if cell.get("runtime") not in RUNTIMES:
        raise ServiceError("unknown_runtime", f"cell {index + 1}: runtime must be python or node",
                           field=f"cells.{index}.runtime", status=422)  # fmt: skip
    code = str(cell.get("code", ""))
    if len(code.encode()) > MAX_CODE_BYTES:
        raise ServiceError("code_too_large", f"cell {index + 1}: code is over {MAX_CODE_BYTES} bytes",
                           field=f"cells.{index}.code", status=422)  # fmt: skip
    # Only the limits set for the cell are kept (checked for range and type by the API's schema,
    # and against today's maxima when the cell runs); the others take their defaults then.
    limits = limits_from_record(dict(cell.get("limits") or {}))  # refuses a name that is no limit
    set_names = set(cell.get("limits") or {})
    limits_json = {k: v for k, v in limits.to_json().items() if k in set_names}
    return {
        "id": str(cell.get("id", ""))[:64], "runtime": cell["runtime"], "code": code, "limits": limits_json,
        "dataset_ids": [str(x) for x in cell.get("dataset_ids") or []][:64],
        "output_ids": [int(x) for x in cell.get("output_ids") or []][:64],
        "last_run": str(cell["last_run"]) if cell.get("last_run") else None,
    }  # fmt: skip
