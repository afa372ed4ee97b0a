"""Run receipts, written: when a run finishes, in the transaction that finishes it, its facts are
signed with the site's key and added to the chain of the host writing it (runner/receipt.py says
the form; selectors/receipts.py what is stated and how the audit checks it)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from playground.models import Receipt, ReceiptChain, Run
from playground.selectors.receipts import run_facts, site_signing_key
from runner import receipt as receipts

log = logging.getLogger(__name__)


def receipt_issue(*, run_id: Any) -> Receipt | None:
    """The finished run's receipt, added to this host's chain. Called by every path that finishes a
    run, inside its transaction, after its last row is written: the receipt and the end commit
    together or not at all. A key that cannot be read does not stop the run's end from being
    recorded: it is logged, and the audit names the run as finished without a receipt."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("a receipt is issued inside the transaction that finishes its run")
    try:
        key = site_signing_key()
    except (OSError, receipts.ReceiptError) as exc:
        log.error("run %s finished without a receipt: the signing key %s could not be used: %s",
                  run_id, settings.CORDON_RECEIPT_KEY_FILE, getattr(exc, "message", exc))  # fmt: skip
        return None
    chain = _chain_head(settings.CORDON_HOST_NAME)
    sequence = chain.length + 1
    run = Run.objects.get(id=run_id)  # as committed with this end: what the audit will read again
    now, signer = timezone.now(), receipts.key_id(key)
    body = {
        "version": receipts.VERSION,
        "key_id": signer,
        "chain": {"host": chain.host, "sequence": sequence, "prev": chain.head or None},
        "issued_at": now.isoformat(timespec="microseconds"),
        "run": run_facts(run),
    }
    signed = receipts.sign(body, key)
    receipt = Receipt.objects.create(
        run_id=run.id, host=chain.host, sequence=sequence, prev_hash=chain.head, body=receipts.canonical(body).decode(),
        sha256=signed["sha256"], signature=signed["signature"], key_id=signer, issued_at=now,
    )  # fmt: skip
    ReceiptChain.objects.filter(pk=chain.pk).update(length=sequence, head=receipt.sha256)
    return receipt


def _chain_head(host: str) -> ReceiptChain:
    """The host's chain head, locked until the transaction ends (on PostgreSQL a row lock; on
    SQLite every write transaction is IMMEDIATE and serialises already). Made on first use:
    get_or_create takes a savepoint, so of two first receipts at once one makes it, both use it."""
    head = ReceiptChain.objects.select_for_update().filter(host=host).first()
    if head is not None:  # every receipt but a host's first: one query, no savepoint
        return head
    ReceiptChain.objects.get_or_create(host=host)
    return ReceiptChain.objects.select_for_update().get(host=host)
