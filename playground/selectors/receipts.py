"""Run receipts, read: a run's facts as its receipt states them (from its rows, so the audit can
state them again and compare), a receipt for whoever may read its run, the site's public key, and
the audit of every host's chain (`manage.py verify_audit`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Min
from django.http import Http404

from playground.errors import ServiceError
from playground.models import CleanupCheck, Dataset, Receipt, ReceiptChain, Run, RunOutputFile, RunState
from playground.selectors.runs import run_get_for_viewer
from runner import receipt as receipts


def site_signing_key() -> Ed25519PrivateKey:
    """The site's signing key (CORDON_RECEIPT_KEY_FILE), made on first use."""
    return receipts.site_key(settings.CORDON_RECEIPT_KEY_FILE)


def site_public_key() -> dict[str, str]:
    """What anyone may know of the site's key: its public text and its id."""
    key = site_signing_key()
    return {"algorithm": "Ed25519", "key": receipts.public_key_text(key), "key_id": receipts.key_id(key)}


# --- a run's facts ---------------------------------------------------------------------------


def run_facts(run: Run) -> dict[str, Any]:
    """What a receipt states of a finished run, read from its rows: metadata only (the code's and
    the files' sha256, never their bytes or names). The same function states them again when the
    audit compares, so anything it reads is what a receipt can vouch for."""
    return {
        "id": str(run.id),
        "kind": run.kind,
        "owner": run.owner_id,
        "runtime": run.runtime,
        "code_sha256": hashlib.sha256(run.code.encode()).hexdigest(),
        "inputs": _inputs(run),
        "outputs": _outputs(run),
        "limits": receipts.plain(run.limits),
        "image": {"name": run.image_name, "digest": run.image_digest},
        "engine": {"name": run.engine, "version": run.engine_version, "isolation": run.isolation},
        "worker_host": run.worker_host,
        "outcome": run.outcome,
        "reason": run.reason,
        "charged": run.charged,
        "error_code": run.error_code,
        "exit_code": run.exit_code,
        "signal": run.signal,
        "wall_s": receipts.decimal(run.wall_s),
        "cpu_s": receipts.decimal(run.cpu_s),
        "peak_memory_bytes": run.peak_memory_bytes,
        "peak_file_bytes": run.peak_file_bytes,
        "stdout_bytes": run.stdout_bytes,
        "stderr_bytes": run.stderr_bytes,
        "stdout_truncated": run.stdout_truncated,
        "stderr_truncated": run.stderr_truncated,
        "cleanup": {"ok": run.cleanup_ok, "checks": _cleanup_checks(run)},
        "egress": _egress_summary(run),
        "times": {
            "created_at": _time(run.created_at),
            "started_at": _time(run.started_at),
            "finished_at": _time(run.finished_at),
        },
    }


def _inputs(run: Run) -> list[dict[str, Any]]:
    """Each input by kind, id and sha256, in a fixed order (never by its name)."""
    found = [{"kind": "dataset", "id": str(i), "sha256": s} for i, s in run.datasets.values_list("id", "sha256")]
    found += [{"kind": "output", "id": i, "sha256": s} for i, s in run.input_outputs.values_list("id", "sha256")]
    found += [{"kind": "file", "sha256": str(f.get("sha256", ""))} for f in run.staged_files]
    return sorted(found, key=lambda i: (i["kind"], str(i.get("id", "")), i["sha256"]))


def _outputs(run: Run) -> list[dict[str, Any]]:
    """Each output file by sha256 and size, in that order (its name is the program's: not stated)."""
    found = RunOutputFile.objects.filter(run=run).values_list("sha256", "size")
    return [{"sha256": sha, "size": size} for sha, size in sorted(found)]


def _cleanup_checks(run: Run) -> list[dict[str, Any]]:
    """The cleanup audit, check by check, in the order it was recorded."""
    return [{"name": name, "ok": ok} for name, ok in CleanupCheck.objects.filter(run=run).values_list("name", "ok")]


def _egress_summary(run: Run) -> dict[str, Any] | None:
    """The policy and the proxy's totals; not each attempt (the run's record keeps those)."""
    record = run.egress_record
    if record is None:
        return None
    totals = ("connections", "refused", "bytes_out", "bytes_in", "limit")
    summary: dict[str, Any] = receipts.plain({"policy": list(run.egress), **{k: record.get(k) for k in totals}})
    return summary


def _time(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat(timespec="microseconds")


# --- a receipt, read -------------------------------------------------------------------------


def receipt_document(receipt: Receipt) -> dict[str, Any]:
    """The receipt file, as GET /api/runs/{id}/receipt answers and `runner receipt verify` reads."""
    return {
        "format": receipts.FORMAT,
        "receipt": json.loads(receipt.body),
        "sha256": receipt.sha256,
        "signature": receipt.signature,
    }


def receipt_for_viewer(*, user: User, run_id: Any) -> dict[str, Any]:
    """The run's receipt for whoever may read the run (404 for anyone else); 409 while it runs."""
    run = run_get_for_viewer(user=user, run_id=run_id)
    if run.state != RunState.FINISHED:
        raise ServiceError("run_not_finished", "a run has a receipt once it has finished", status=409)
    found = Receipt.objects.filter(run_id=run.id).first()
    if found is None:
        raise Http404("this run has no receipt (it finished before receipts were kept, or its signing failed)")
    return receipt_document(found)


# --- the audit ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing the audit found: about a run (its id) or, without one, about a host's chain."""

    what: str
    run_id: str = ""
    host: str = ""

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.what}" if self.run_id else f"host {self.host}: {self.what}"


@dataclass(frozen=True)
class ChainState:
    host: str
    receipts: int
    head: str


def audit_receipts() -> tuple[list[ChainState], list[Problem]]:
    """Every host's chain walked in order, each receipt checked (its hash, its signature by the
    site's key, its link to the one before, its row) and its run stated again from its rows and
    compared; then the finished runs that have no receipt. Problems in chain order."""
    public = site_signing_key().public_key()
    hosts = sorted(
        set(ReceiptChain.objects.values_list("host", flat=True)) | set(Receipt.objects.values_list("host", flat=True))
    )
    states, problems = [], []
    for host in hosts:
        state, found = _audit_chain(host, public)
        states.append(state)
        problems += found
    problems += list(_runs_without_receipts())
    return states, problems


def receipt_check(receipt: Receipt) -> list[str]:
    """What the audit finds of one receipt (the console's receipt page): its hash, its signature by
    the site's key, its row, its run's rows now, and its link to the receipt before it in its host's
    chain. Empty: it holds."""
    found = [problem.what for problem in _audit_receipt(receipt, site_signing_key().public_key())]
    if receipt.sequence > 1:
        before = Receipt.objects.filter(host=receipt.host, sequence=receipt.sequence - 1)
        prev = before.values_list("sha256", flat=True).first()
        if prev is None:
            found.append(_gap(receipt.sequence - 1, receipt.sequence - 1))
        elif prev != receipt.prev_hash:
            found.append(_unlinked(receipt))
    return found


def _audit_chain(host: str, public: Ed25519PublicKey) -> tuple[ChainState, list[Problem]]:
    problems: list[Problem] = []
    expected, prev, last_hash = 1, "", ""
    for receipt in Receipt.objects.filter(host=host).order_by("sequence").iterator():
        if receipt.sequence != expected:
            problems.append(Problem(_gap(expected, receipt.sequence - 1), host=host))
        elif receipt.prev_hash != prev:
            problems.append(Problem(_unlinked(receipt), host=host))
        problems += _audit_receipt(receipt, public)
        expected, prev = receipt.sequence + 1, receipt.sha256
        last_hash = receipt.sha256
    head = ReceiptChain.objects.filter(host=host).first()
    length = expected - 1
    if head is not None and head.length > length:
        problems.append(Problem(f"{_gap(length + 1, head.length)} from the end of the chain", host=host))
    elif head is not None and (head.length, head.head) != (length, last_hash):
        problems.append(Problem(f"the chain's head row says #{head.length} {head.head[:16]}, not its last receipt",
                                host=host))  # fmt: skip
    return ChainState(host, length, last_hash), problems


def _unlinked(receipt: Receipt) -> str:
    return f"receipt #{receipt.sequence} does not name #{receipt.sequence - 1}'s hash"


def _gap(first: int, last: int) -> str:
    return f"receipt #{first} deleted" if first == last else f"receipts #{first} to #{last} deleted"


def _audit_receipt(receipt: Receipt, public: Ed25519PublicKey) -> list[Problem]:
    """One receipt against itself (hash, signature, its row's chain columns) and against its run."""
    where = f"receipt {receipt.host} #{receipt.sequence}"
    document = {"format": receipts.FORMAT, "sha256": receipt.sha256, "signature": receipt.signature}
    try:
        body = receipts.verify({**document, "receipt": json.loads(receipt.body)}, public)
    except (receipts.ReceiptError, json.JSONDecodeError) as exc:
        return [Problem(f"{where} does not hold: {getattr(exc, 'message', exc)}", run_id=str(receipt.run_id))]
    chain = body.get("chain") or {}
    stated = (chain.get("host"), chain.get("sequence"), chain.get("prev") or "", (body.get("run") or {}).get("id"))
    if stated != (receipt.host, receipt.sequence, receipt.prev_hash, str(receipt.run_id)):
        return [
            Problem(f"{where}: its row was changed (it no longer says what was signed)", run_id=str(receipt.run_id))
        ]
    run = Run.objects.filter(id=receipt.run_id).first()
    if run is None:
        return [Problem("row deleted (its receipt remains)", run_id=str(receipt.run_id))]
    return [Problem(what, run_id=str(run.id)) for what in _changes(body["run"], run)]


def _changes(signed: dict[str, Any], run: Run) -> Iterator[str]:
    """What differs between what was signed and the run's rows now, field by field. What
    retention deletes on purpose (the code of a run whose logs were purged, a deleted dataset)
    is not a change."""
    now = run_facts(run)
    if run.logs_purged and not run.code:
        now["code_sha256"] = signed.get("code_sha256")
    present = set(map(str, Dataset.objects.filter(id__in=_dataset_ids(signed)).values_list("id", flat=True)))
    signed_inputs = [i for i in signed.get("inputs", []) if i.get("kind") != "dataset" or i.get("id") in present]
    signed = {**signed, "inputs": signed_inputs}
    for name in sorted(set(signed) | set(now)):
        if signed.get(name) != now.get(name):
            yield f"{name.replace('_', ' ')} changed (signed {_short(signed.get(name))}, now {_short(now.get(name))})"


def _dataset_ids(signed: dict[str, Any]) -> list[str]:
    return [str(i["id"]) for i in signed.get("inputs", []) if i.get("kind") == "dataset" and i.get("id")]


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _runs_without_receipts() -> Iterator[Problem]:
    """Finished runs with no receipt, since receipts began (runs finished before are not counted)."""
    began = Receipt.objects.aggregate(first=Min("issued_at"))["first"]
    if began is None:
        return
    finished = Run.objects.filter(state=RunState.FINISHED, finished_at__gte=began, receipt__isnull=True)
    for run_id in finished.order_by("finished_at").values_list("id", flat=True):
        yield Problem("finished without a receipt", run_id=str(run_id))
