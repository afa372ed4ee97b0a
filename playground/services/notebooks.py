"""A user's notebook: its cells replaced as a whole on autosave, each checked first."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from playground.limits import LIMIT_FIELDS, limits_from_record, over_maximum
from playground.models import Notebook
from playground.services.errors import ServiceError
from playground.services.runs import MAX_CODE_BYTES
from runner.spec import RUNTIMES

MAX_CELLS = 50
LIMIT_NAMES = frozenset(f.name for f in LIMIT_FIELDS)


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
    # Only the limits set for the cell are kept; the others take their defaults when it runs.
    limits = {k: v for k, v in dict(cell.get("limits") or {}).items() if k in LIMIT_NAMES}
    for field, message in over_maximum(limits_from_record(limits)):
        raise ServiceError("limit_over_maximum", f"cell {index + 1}: {message}", field=f"cells.{index}.{field}",
                           status=422)  # fmt: skip
    return {
        "id": str(cell.get("id", ""))[:64], "runtime": cell["runtime"], "code": code, "limits": limits,
        "dataset_ids": [str(x) for x in cell.get("dataset_ids") or []][:64],
        "output_ids": [int(x) for x in cell.get("output_ids") or []][:64],
        "last_run": str(cell["last_run"]) if cell.get("last_run") else None,
    }  # fmt: skip
