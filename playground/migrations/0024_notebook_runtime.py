from typing import Any

from django.db import migrations, models


def from_first_code_cell(apps: Any, schema_editor: Any) -> None:
    """A notebook made before it had a runtime of its own takes its first code cell's."""
    notebook_model = apps.get_model("playground", "Notebook")
    for notebook in notebook_model.objects.only("id", "cells").iterator():
        runtime = next((c.get("runtime") for c in notebook.cells if c.get("kind") == "code"), "python")
        if runtime != "python":
            notebook_model.objects.filter(id=notebook.id).update(runtime=runtime)


class Migration(migrations.Migration):
    dependencies = [("playground", "0023_operations_metrics_and_purges")]

    operations = [
        migrations.AddField(model_name="notebook", name="runtime", field=models.CharField(default="python", max_length=16)),
        migrations.RunPython(from_first_code_cell, migrations.RunPython.noop),
    ]
