"""Run receipts: each host's signed chain of finished runs' facts."""

from __future__ import annotations

from django.db import models

from playground.models.runs import Run


class ReceiptChain(models.Model):
    """The head of one host's chain of run receipts (the host that wrote them: CORDON_HOST_NAME).
    Its row is locked while a receipt is added, so two processes, on one host or, with PostgreSQL,
    on several, never take the same place in a chain; and it says how long the chain is, so a
    receipt deleted from its end is missed (playground/selectors/receipts.py)."""

    host = models.CharField(max_length=128, unique=True)
    length = models.PositiveBigIntegerField(default=0)
    head = models.CharField(max_length=64, blank=True)  # the sha256 of its last receipt

    def __str__(self) -> str:
        return f"{self.host}: {self.length} receipts"


class Receipt(models.Model):
    """A finished run's receipt (runner/receipt.py): its facts as signed canonical JSON, chained to
    the previous receipt of the host that wrote it. Metadata only, never user data. It outlives
    its run (no constraint on `run`), so a deleted run row is named by the audit, not hidden."""

    run = models.OneToOneField(
        Run, on_delete=models.DO_NOTHING, db_constraint=False, related_name="receipt", editable=False
    )
    host = models.CharField(max_length=128)
    sequence = models.PositiveBigIntegerField()  # 1, 2, ... in its host's chain
    prev_hash = models.CharField(max_length=64, blank=True)  # the previous receipt's sha256; blank for the first
    body = models.TextField()  # the canonical JSON that was hashed and signed, exactly
    sha256 = models.CharField(max_length=64, unique=True)
    signature = models.CharField(max_length=128)  # Ed25519, base64
    key_id = models.CharField(max_length=32)
    issued_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["host", "sequence"]
        constraints = [models.UniqueConstraint(fields=["host", "sequence"], name="receipt_place_per_host")]

    def __str__(self) -> str:
        return f"receipt {self.host} #{self.sequence}"
