# A notebook's number of cells is stored beside them, so that the list of notebooks reads no cells;
# counted here once for the notebooks that exist.

from typing import Any

from django.db import migrations, models


def count_cells(apps: Any, schema_editor: Any) -> None:
    Notebook = apps.get_model("playground", "Notebook")
    for notebook in Notebook.objects.only("id", "cells").iterator(chunk_size=20):
        Notebook.objects.filter(id=notebook.id).update(cell_count=len(notebook.cells))


class Migration(migrations.Migration):

    dependencies = [
        ('playground', '0012_markdown_stored'),
    ]

    operations = [
        migrations.AddField(
            model_name='notebook',
            name='cell_count',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(count_cells, migrations.RunPython.noop),
    ]
