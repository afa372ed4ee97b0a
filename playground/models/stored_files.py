"""The database storage's files (playground/storage.py, CORDON_STORAGE=database)."""

from __future__ import annotations

from django.db import models


class StoredFile(models.Model):
    """A file kept by the database storage (playground/storage.py, CORDON_STORAGE=database): its
    name, size and sha256, the content in StoredChunk rows. A file and its chunks are written in
    one transaction, so a writer that dies mid-upload leaves nothing visible."""

    name = models.CharField(max_length=255, unique=True)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class StoredChunk(models.Model):
    file = models.ForeignKey(StoredFile, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["file", "index"], name="stored_chunk_unique_index")]
