"""A user's dataset: a file kept for runs, staged read-only into /input."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Dataset(models.Model):
    """A user's file, staged read-only into /input of the runs that name it. A course dataset
    (course set) is uploaded by the course's staff (its owner) and read by its members' runs."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets")
    course = models.ForeignKey("Course", null=True, blank=True, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=128)
    file = models.FileField(upload_to="datasets/%Y/%m/", max_length=300)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    sniffed_type = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)
    # An upload of the same name that replaced this one: new runs read it instead (a notebook
    # cell's input, a run's or an assignment's dataset_ids naming this one); runs made before
    # keep this version, which stays stored until the dataset is deleted. Always the newest.
    replaced_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="earlier_versions"
    )
    replaced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "name"], condition=models.Q(course=None, replaced_at=None),
                name="dataset_name_per_owner_current",
            ),
            models.UniqueConstraint(
                fields=["course", "name"], condition=~models.Q(course=None) & models.Q(replaced_at=None),
                name="dataset_name_per_course_current",
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        return self.name
