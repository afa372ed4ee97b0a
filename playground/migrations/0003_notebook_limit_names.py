"""Notebook cells stored limits by the API's old short names; they now use runner.spec.Limits's
names, as every other place does. Only `timeout_s` differed (-> `wall_timeout_s`). The old API
stored any value; one the typed schema would refuse (not a positive, finite number, e.g. the
null a browser's Infinity became) is dropped, so the cell takes the default instead of
breaking the notebook page."""

import math
from typing import Any

from django.db import migrations

RENAMED = {"timeout_s": "wall_timeout_s"}


def rename(apps: Any, schema_editor: Any, names: dict[str, str] = RENAMED) -> None:
    Notebook = apps.get_model("playground", "Notebook")
    for notebook in Notebook.objects.all():
        for cell in notebook.cells:
            limits = cell.get("limits") or {}
            cell["limits"] = {names.get(key, key): value for key, value in limits.items() if _usable(value)}
        notebook.save(update_fields=["cells"])


def _usable(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value > 0


def rename_back(apps: Any, schema_editor: Any) -> None:
    rename(apps, schema_editor, {new: old for old, new in RENAMED.items()})


class Migration(migrations.Migration):
    dependencies = [("playground", "0002_notebook")]
    operations = [migrations.RunPython(rename, rename_back)]
