"""Notebooks: a user's cells, saved as one document."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Notebook(models.Model):
    """A user's named notebook: ordered cells (services/notebooks.py has their shape), saved
    whole by the page with the version it read, so that a stale tab cannot overwrite newer work."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notebooks")
    name = models.CharField(max_length=100)
    cells = models.JSONField(default=list)
    # The runtime a new code cell takes ("python" or "node"); each cell keeps its own.
    runtime = models.CharField(max_length=16, default="python")
    # Where its cells run (playground.environments): a code cell of the environment's runtime runs
    # in it, one of another runtime in that runtime's own image. Blank: the site's default.
    environment = models.CharField(max_length=64, blank=True)
    cell_count = models.PositiveIntegerField(default=0)  # len(cells), kept with them: a list reads no cells
    version = models.PositiveIntegerField(default=1)
    # Raised by a cell's run or clear (which set a cell's last run, not a new version): a save that
    # read the cells before one merges them again.
    runs_version = models.PositiveIntegerField(default=0)
    # The notebook's own inputs, staged for every code cell: [{"kind": "dataset", "id", "name"}].
    inputs = models.JSONField(default=list, blank=True)
    # "Restart (clear state)": a cell's run before this passes no state down (the cells below
    # start from nothing until the cells above run again).
    restarted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.name
