"""Run receipts through the real parts: a run finished by the namespace engine gets a receipt in
the transaction that ends it, the API serves it and the offline verifier (a child process, no
Django) accepts it; every way a run ends adds to its host's chain, also from several processes at
once; and `manage.py verify_audit` names each run whose row was changed or deleted afterwards."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from playground.models import CleanupCheck, Receipt, ReceiptChain, Run, RunState
from playground.services import execution
from playground.services import runs as run_services
from runner import receipt as receipts
from runner.config import PROJECT_ROOT
from runner.spec import CleanupCheck as RunnerCleanupCheck
from runner.spec import Outcome, RunResult
from tests.conftest import PYTHON, child_env
from tests.playground.conftest import api, in_parallel, json_error
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]
HERE = settings.CORDON_HOST_NAME


def _queued(user: Any = None, **fields: Any) -> Run:
    owner: Any = user or UserFactory()
    fields = {"runtime": "python", "code": "print(1)", "engine_requested": "namespace", "queue": "namespace", **fields}
    return Run.objects.create(owner=owner, **fields)


def _finished(user: Any = None, outcome: Outcome = Outcome.SUCCEEDED, worker: str = "w") -> Run:
    """A run taken to its end by the worker's own services, from a supervisor's result."""
    run = _queued(user)
    claimed = execution.run_claim(run_id=str(run.id), worker=worker)
    assert claimed is not None
    result = RunResult(
        outcome=outcome, run_id="r", exit_code=0 if outcome is Outcome.SUCCEEDED else 1, wall_s=0.5, cpu_s=0.1,
        cleanup=[RunnerCleanupCheck("processes", True, "none left"), RunnerCleanupCheck("cgroup", True, "removed")],
        engine="namespace", isolation="namespace", peak_memory_bytes=1 << 20,
    )  # fmt: skip
    return execution.run_finish(run=claimed, result=result, exported=None, samples=[])


def _audit() -> tuple[int, list[str]]:
    """`manage.py verify_audit`: its exit status and its lines."""
    out = io.StringIO()
    try:
        call_command("verify_audit", stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue().splitlines()
    return 0, out.getvalue().splitlines()


def _verify_offline(document: dict[str, Any], key: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(document))
    argv = [PYTHON, "-m", "runner", "receipt", "verify", str(path), "--key", key]
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(argv, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.images
def test_a_run_through_the_namespace_engine_has_a_receipt_the_offline_verifier_accepts(
    redis_server: Any, tmp_path: Path
) -> None:
    user: Any = UserFactory()
    run = _queued(user, code="import sys; print('hello'); sys.exit(3)")
    final = execution.run_execute(run_id=str(run.id), worker=HERE)
    assert final is not None and (final.outcome, final.exit_code) == ("failed", 3)

    client = api(user)
    key = Client().get("/api/receipts/key").json()  # public: no token
    assert key["key"].startswith("ed25519:") and key["algorithm"] == "Ed25519"
    answer = client.get(f"/api/runs/{run.id}/receipt")
    assert answer.status_code == 200, answer.content
    document = answer.json()
    body = document["receipt"]
    assert body["run"]["id"] == str(run.id) and body["run"]["outcome"] == "failed" and body["run"]["exit_code"] == 3
    assert body["run"]["image"]["digest"] == final.image_digest and final.image_digest.startswith("sha256:")
    assert body["run"]["engine"]["name"] == "namespace"
    assert body["run"]["code_sha256"] == hashlib.sha256(run.code.encode()).hexdigest()
    assert "hello" not in json.dumps(document) and "sys.exit" not in json.dumps(document)  # metadata only
    assert body["run"]["cleanup"]["ok"] is True and body["run"]["cleanup"]["checks"]
    assert body["chain"] == {"host": HERE, "sequence": 1, "prev": None} and body["key_id"] == key["key_id"]

    checked = _verify_offline(document, key["key"], tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert str(run.id) in checked.stdout and "failed" in checked.stdout and final.image_digest in checked.stdout
    document["receipt"]["run"]["exit_code"] = 0
    assert _verify_offline(document, key["key"], tmp_path).returncode == 1
    assert _audit() == (0, [f"key {key['key_id']} ({key['key']})", f"host {HERE}: 1 receipt, head {document['sha256']}",
                            "ok: 1 receipt hold, and so do their runs"])  # fmt: skip


@pytest.mark.usefixtures("no_worker")  # no reaper but the test's (the shared worker's host loop reaps too)
def test_every_way_a_run_ends_adds_a_receipt_to_the_hosts_chain_in_order(redis_server: Any) -> None:
    user: Any = UserFactory()
    ran = _finished(user)
    cancelled = run_services.run_cancel(run=_queued(user), by=user)  # before it started
    lost = _queued(user)
    execution.run_claim(run_id=str(lost.id), worker="gone")
    Run.objects.filter(id=lost.id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert run_services.reap() == 1  # the reaper's end (and its retry, queued)
    unserved = _queued(user)
    Run.objects.filter(id=unserved.id).update(created_at=timezone.now() - timedelta(hours=1), queue="nowhere")
    assert run_services.reject_unserved(older_than_s=60) == 1

    chain = list(Receipt.objects.filter(host=HERE).order_by("sequence"))
    assert [r.run_id for r in chain] == [ran.id, cancelled.id, lost.id, unserved.id]
    assert [r.sequence for r in chain] == [1, 2, 3, 4]
    assert [r.prev_hash for r in chain] == ["", chain[0].sha256, chain[1].sha256, chain[2].sha256]
    outcomes = [json.loads(r.body)["run"]["outcome"] for r in chain]
    assert outcomes == ["succeeded", "cancelled", "sandbox_error", "rejected_capacity"]
    head = ReceiptChain.objects.get(host=HERE)
    assert (head.length, head.head) == (4, chain[-1].sha256)
    assert not Receipt.objects.filter(run__retry_of=lost).exists()  # the retry is queued: no receipt yet
    assert _audit()[0] == 0


def test_runs_finished_at_once_by_several_threads_take_distinct_consecutive_places(redis_server: Any) -> None:
    users = [UserFactory() for _ in range(6)]
    finished = in_parallel(6, lambda i: _finished(users[i], worker=f"w{i}").id, timeout_s=120)
    assert None not in finished
    chain = list(Receipt.objects.filter(host=HERE).order_by("sequence"))
    assert sorted(r.run_id for r in chain) == sorted(finished)
    assert [r.sequence for r in chain] == list(range(1, 7))
    assert all(later.prev_hash == earlier.sha256 for earlier, later in itertools.pairwise(chain))
    assert _audit()[0] == 0


def test_verify_audit_names_a_run_whose_outcome_was_changed_and_one_whose_row_was_deleted(redis_server: Any) -> None:
    user: Any = UserFactory()
    runs = [_finished(user) for _ in range(4)]
    changed, deleted = runs[1], runs[2]
    with connection.cursor() as cursor:  # straight into the database, past every service
        cursor.execute("UPDATE playground_run SET outcome = %s WHERE id = %s", ["failed", changed.id.hex])
    assert Run.objects.get(id=changed.id).outcome == "failed"
    Run.objects.filter(id=deleted.id).delete()
    status, lines = _audit()
    assert status == 1
    problems = [line for line in lines if line.startswith("run ")]
    assert problems == [
        f'run {changed.id}: outcome changed (signed "succeeded", now "failed")',
        f"run {deleted.id}: row deleted (its receipt remains)",
    ]


def test_verify_audit_names_changed_cleanup_and_a_changed_or_deleted_receipt(redis_server: Any) -> None:
    user: Any = UserFactory()
    runs = [_finished(user) for _ in range(5)]
    CleanupCheck.objects.filter(run=runs[0], name="cgroup").update(ok=False)
    receipt_row = Receipt.objects.get(run_id=runs[1].id)
    body = json.loads(receipt_row.body)
    body["run"]["outcome"] = "failed"
    Receipt.objects.filter(id=receipt_row.id).update(body=receipts.canonical(body).decode())
    Receipt.objects.filter(run_id=runs[2].id).delete()  # its run stays
    Receipt.objects.filter(run_id=runs[4].id).delete()  # the last one: only the chain's head knows
    status, lines = _audit()
    assert status == 1
    found = "\n".join(lines)
    assert f"run {runs[0].id}: cleanup changed" in found
    assert f"run {runs[1].id}: receipt {HERE} #2 does not hold: the receipt's body does not match its sha256" in found
    assert f"host {HERE}: receipt #3 deleted" in found
    assert f"host {HERE}: receipt #5 deleted from the end of the chain" in found
    assert f"run {runs[2].id}: finished without a receipt" in found
    assert f"run {runs[4].id}: finished without a receipt" in found


def test_what_retention_deletes_on_purpose_is_not_a_change_but_an_input_unlinked_is(redis_server: Any) -> None:
    from playground.services import retention
    from playground.services.datasets import dataset_create, dataset_delete

    user: Any = UserFactory()
    kept, purged = (dataset_create(user=user, upload=SimpleUploadedFile(n, b"a,b\n1,2\n")) for n in ("k.csv", "p.csv"))
    run = _queued(user)
    run.datasets.set([kept, purged])
    claimed = execution.run_claim(run_id=str(run.id), worker="w")
    assert claimed is not None
    result = RunResult(outcome=Outcome.SUCCEEDED, run_id="r", exit_code=0, cleanup=[])
    execution.run_finish(run=claimed, result=result, exported=None, samples=[])
    assert len(json.loads(Receipt.objects.get(run_id=run.id).body)["run"]["inputs"]) == 2
    retention._purge_run_files(Run.objects.get(id=run.id))  # what retention does to an old run: its code goes
    dataset_delete(dataset=purged)  # and an old dataset: the run loses the link
    assert Run.objects.get(id=run.id).code == "" and run.datasets.count() == 1
    assert _audit()[0] == 0
    run.datasets.remove(kept)  # a link removed while its dataset is still there: not retention's doing
    status, lines = _audit()
    assert status == 1 and any(line.startswith(f"run {run.id}: inputs changed") for line in lines), lines


def test_a_receipt_is_for_whoever_may_read_the_run_and_only_once_it_has_finished(redis_server: Any) -> None:
    owner: Any = UserFactory()
    done = _finished(owner)
    waiting = _queued(owner)
    assert api(owner).get(f"/api/runs/{done.id}/receipt").status_code == 200
    assert json_error(api(UserFactory()).get(f"/api/runs/{done.id}/receipt"), 404)["code"] == "not_found"
    staff: Any = UserFactory(is_staff=True, is_superuser=True)
    assert api(staff).get(f"/api/runs/{done.id}/receipt").json()["receipt"]["run"]["id"] == str(done.id)
    assert json_error(api(owner).get(f"/api/runs/{waiting.id}/receipt"), 409)["code"] == "run_not_finished"
    assert json_error(Client().get(f"/api/runs/{done.id}/receipt"), 401)["code"] == "unauthorized"


def test_a_signing_key_that_cannot_be_read_does_not_stop_a_run_ending_and_the_audit_names_it(
    redis_server: Any, settings: Any, tmp_path: Path
) -> None:
    user: Any = UserFactory()
    first = _finished(user)
    good = settings.CORDON_RECEIPT_KEY_FILE
    settings.CORDON_RECEIPT_KEY_FILE = tmp_path / "broken.pem"
    settings.CORDON_RECEIPT_KEY_FILE.write_text("not a key")
    second = _finished(user)
    assert second.state == RunState.FINISHED and not Receipt.objects.filter(run_id=second.id).exists()
    assert json_error(api(user).get(f"/api/runs/{second.id}/receipt"), 404)["code"] == "not_found"
    settings.CORDON_RECEIPT_KEY_FILE = good
    assert Receipt.objects.filter(run_id=first.id).exists()
    status, lines = _audit()
    assert status == 1 and f"run {second.id}: finished without a receipt" in lines


def test_the_console_overview_shows_the_public_key(redis_server: Any) -> None:
    client = Client()
    staff: Any = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(staff)
    page = client.get("/admin/overview/").content.decode()
    key = Client().get("/api/receipts/key").json()
    assert key["key"] in page and key["key_id"] in page


def test_the_console_lists_receipts_and_a_receipts_page_says_whether_it_still_holds(redis_server: Any) -> None:
    user: Any = UserFactory()
    kept, changed, deleted, last = (_finished(user) for _ in range(4))
    with connection.cursor() as cursor:  # straight into the database, past every service
        cursor.execute("UPDATE playground_run SET outcome = %s WHERE id = %s", ["failed", changed.id.hex])
    Run.objects.filter(id=deleted.id).delete()
    Receipt.objects.filter(run_id=last.id).update(prev_hash="0" * 64)  # its link to #3 broken
    root: Any = UserFactory(is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(root)

    listing = admin.get("/admin/playground/receipt/").content.decode()
    assert listing.count("succeeded") >= 4  # what each receipt states, whatever the rows say now
    assert f'href="/admin/playground/run/{kept.id}/change/"' in listing
    assert f"{deleted.id} (its row deleted)" in listing

    def verdict(run: Run) -> str:
        receipt = Receipt.objects.get(run_id=run.id)
        page = admin.get(f"/admin/playground/receipt/{receipt.pk}/change/")
        assert page.status_code == 200
        html = page.content.decode()
        assert f"code sha256</th><td>{hashlib.sha256(b'print(1)').hexdigest()}" in html  # its facts, as a table
        return html

    assert "holds: signed by the site&#x27;s key" in verdict(kept)
    assert "problems found</strong>: outcome changed (signed &quot;succeeded&quot;, now &quot;failed&quot;)" in (
        verdict(changed)
    )
    assert "problems found</strong>: row deleted (its receipt remains)" in verdict(deleted)
    broken = verdict(last)
    assert "problems found</strong>: " in broken and "its row was changed" in broken and "#3&#x27;s hash" in broken

    # a record: nobody adds, edits or deletes one here; staff without the console's rights see nothing
    some = Receipt.objects.get(run_id=kept.id).pk
    assert admin.get("/admin/playground/receipt/add/").status_code == 403
    assert admin.post(f"/admin/playground/receipt/{some}/delete/", {"post": "yes"}).status_code == 403
    assert Receipt.objects.filter(pk=some).exists()
    person: Any = UserFactory(is_staff=True)
    staff = Client()
    staff.force_login(person)
    assert staff.get("/admin/playground/receipt/").status_code == 403


def test_a_runs_audit_page_shows_its_receipt_verified_with_a_link_and_says_when_its_rows_changed(
    redis_server: Any,
) -> None:
    staff: Any = UserFactory(is_staff=True, is_superuser=True)
    console = Client()
    console.force_login(staff)
    run = _finished()
    receipt = Receipt.objects.get(run_id=run.id)

    def section(run_id: Any) -> str:
        page = console.get(f"/admin/playground/run/{run_id}/change/").content.decode()
        return page[page.index('id="audit-receipt"') : page.index('id="audit-timeline"')]

    shown = section(run.id)
    assert "<strong>Verified</strong>: signed by the site's key" in shown
    assert f'href="/admin/playground/receipt/{receipt.pk}/change/"' in shown and f"host {HERE}" in shown
    Run.objects.filter(id=run.id).update(exit_code=0, cpu_s=9.9)  # its rows no longer what was signed
    assert "<strong>Problems found</strong>" in section(run.id) and "Verified" not in section(run.id)
    assert "not yet: a run&#x27;s receipt is issued as it finishes" in section(_queued().id)
