"""Several named notebooks per user (a UUID each, a version for safe saves), cells in one shape:
{"id", "kind", "runtime", "source", "inputs", "limits", "last_run_id"}, inputs as references
that carry the name they were made with (so that one to something deleted can say what it was).
Each user's one notebook becomes their "Notebook 1"."""

import re
import uuid
from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def to_named_notebooks(apps: Any, schema_editor: Any) -> None:
    OldNotebook = apps.get_model("playground", "OldNotebook")
    Notebook = apps.get_model("playground", "Notebook")
    Dataset = apps.get_model("playground", "Dataset")
    RunOutputFile = apps.get_model("playground", "RunOutputFile")
    for old in OldNotebook.objects.all():
        cells: list[dict[str, Any]] = []
        used: set[str] = set()
        for index, cell in enumerate(old.cells):
            inputs = []
            for dataset_id in filter(_is_uuid, cell.get("dataset_ids") or []):  # an old id that is none: dropped
                dataset = Dataset.objects.filter(id=dataset_id, owner_id=old.owner_id).first()
                inputs.append({"kind": "dataset", "id": str(dataset_id), "name": dataset.name if dataset else ""})
            for output_id in filter(_is_id, cell.get("output_ids") or []):
                output = RunOutputFile.objects.filter(id=output_id, run__owner_id=old.owner_id).first()
                name = output.name.rsplit("/", 1)[-1] if output else ""
                inputs.append({"kind": "output", "id": int(output_id), "name": name})
            cell_id = str(cell.get("id") or "")
            if not CELL_ID.fullmatch(cell_id) or cell_id in used:  # every id valid and once only
                cell_id = next(f"c{n}" for n in range(index + 1, index + 2 + len(old.cells)) if f"c{n}" not in used)
            used.add(cell_id)
            cells.append({
                "id": cell_id, "kind": "code",
                "runtime": cell.get("runtime") or "python", "source": cell.get("code") or "", "inputs": inputs,
                "limits": cell.get("limits") or {}, "last_run_id": cell.get("last_run"),
            })  # fmt: skip
        Notebook.objects.create(owner_id=old.owner_id, name="Notebook 1", cells=cells)


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


class Migration(migrations.Migration):
    dependencies = [
        ("playground", "0005_run_peak_file_bytes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameModel("Notebook", "OldNotebook"),
        migrations.AlterField(
            model_name="oldnotebook",
            name="owner",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.CASCADE, related_name="old_notebook", to=settings.AUTH_USER_MODEL
            ),
        ),
        migrations.CreateModel(
            name="Notebook",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=100)),
                ("cells", models.JSONField(default=list)),
                ("version", models.PositiveIntegerField(default=1)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True, db_index=True)),
                (
                    "owner",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notebooks",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["-updated_at"]},
        ),
        migrations.RunPython(to_named_notebooks, migrations.RunPython.noop),
        migrations.DeleteModel("OldNotebook"),
    ]
