# Markdown is rendered when it is saved and the HTML stored beside it (reads never render): the
# assignments' instructions_html, and each markdown cell's "html", rendered here for what exists.

from typing import Any

from django.db import migrations, models


def render_existing(apps: Any, schema_editor: Any) -> None:
    from playground.markdown import render_bounded

    Assignment = apps.get_model("playground", "Assignment")
    for assignment in Assignment.objects.exclude(instructions="").iterator():
        (assignment.instructions_html,) = render_bounded([assignment.instructions])
        assignment.save(update_fields=["instructions_html"])
    Notebook = apps.get_model("playground", "Notebook")
    for notebook in Notebook.objects.iterator():
        markdown = [cell for cell in notebook.cells if cell.get("kind") == "markdown"]
        if markdown:
            for cell, html in zip(markdown, render_bounded([cell.get("source", "") for cell in markdown]), strict=True):
                cell["html"] = html
            Notebook.objects.filter(id=notebook.id).update(cells=notebook.cells)


class Migration(migrations.Migration):

    dependencies = [
        ('playground', '0011_egress'),
    ]

    operations = [
        migrations.AddField(
            model_name='assignment',
            name='instructions_html',
            field=models.TextField(blank=True),
        ),
        migrations.RunPython(render_existing, migrations.RunPython.noop),
    ]
