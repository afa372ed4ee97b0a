"""Per-user quotas refuse with 429/413 and a message naming the limit; retention purges data
but keeps run metadata and audits."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.utils import timezone

from playground import logs
from playground.errors import ServiceError
from playground.models import CleanupCheck, Dataset, Run, RunCell, RunState
from playground.services import datasets as dataset_services
from playground.services import retention
from playground.services import runs as run_services
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@override_settings(CORDON_QUOTA_CONCURRENT_RUNS=2)
def test_the_concurrent_run_quota_names_its_limit(redis_server: Any) -> None:
    user: Any = UserFactory()
    for _ in range(2):
        Run.objects.create(owner=user, runtime="python", code="1", state=RunState.RUNNING)
    with pytest.raises(ServiceError) as refused:
        run_services.run_create(user=user, runtime="python", code="1", dataset_ids=[])
    assert refused.value.status == 429 and "at most 2 at once" in refused.value.message


@override_settings(CORDON_QUOTA_CONCURRENT_RUNS=2)
def test_grading_runs_count_in_no_quota_of_their_student(redis_server: Any) -> None:
    """A student's submission being graded (its runs are the grading queue's, owned by the
    student) leaves their own run quota whole."""
    from playground.models import RunKind

    user: Any = UserFactory()
    for kind in (RunKind.TEST, RunKind.CHECK, RunKind.TEST):
        Run.objects.create(owner=user, kind=kind, runtime="python", code="1", state=RunState.RUNNING)
    Run.objects.create(owner=user, runtime="python", code="1", state=RunState.RUNNING)
    assert run_services.run_create(user=user, runtime="python", code="1", dataset_ids=[]).kind == RunKind.RUN
    with pytest.raises(ServiceError):  # two of their own now: the quota of 2 is reached
        run_services.run_create(user=user, runtime="python", code="1", dataset_ids=[])


def test_a_course_run_is_refused_once_its_user_left_the_course(redis_server: Any) -> None:
    from playground.models import Course

    user: Any = UserFactory()
    course = Course.objects.create(title="Gone", allowed_runtimes=["python"])
    old = Run.objects.create(owner=user, course=course, runtime="python", code="1", state=RunState.FINISHED)
    with pytest.raises(ServiceError) as refused:
        run_services.run_rerun(run=old, by=user)
    assert refused.value.status == 404 and refused.value.code == "not_a_member"


@override_settings(CORDON_QUOTA_STORAGE_BYTES=10)
def test_the_storage_quota_counts_existing_data(redis_server: Any) -> None:
    user: Any = UserFactory()
    dataset_services.dataset_create(user=user, upload=SimpleUploadedFile("a.csv", b"12345678"))
    with pytest.raises(ServiceError) as refused:
        dataset_services.dataset_create(user=user, upload=SimpleUploadedFile("b.csv", b"12345"))
    assert refused.value.status == 413 and "8 bytes of 10 bytes used" in refused.value.message
    assert Dataset.objects.filter(owner=user).count() == 1


def test_retention_purges_old_data_but_keeps_metadata_and_audits(redis_server: Any) -> None:
    user: Any = UserFactory()
    old = dataset_services.dataset_create(user=user, upload=SimpleUploadedFile("old.csv", b"x"))
    Dataset.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(days=40))
    run = Run.objects.create(owner=user, runtime="python", code="secret()", state=RunState.FINISHED,
                             outcome="succeeded", finished_at=timezone.now() - timedelta(days=40))  # fmt: skip
    CleanupCheck.objects.create(run=run, name="processes", ok=True)
    logs.log_append(run_id=run.id, stream="stdout", offset=0, data=b"user data")
    logs.log_store(run_id=run.id)  # as the worker does at the run's end
    logs.log_release(run_id=run.id)
    assert default_storage.exists(logs.stored_name(run.id, "stdout"))
    counts = retention.purge_expired(days=30)
    assert counts["datasets"] == 1 and counts["logs"] == 1
    assert not Dataset.objects.filter(id=old.id).exists()
    run.refresh_from_db()
    assert run.outcome == "succeeded" and run.logs_purged and run.code == ""
    assert run.cleanup_checks.count() == 1
    assert not default_storage.exists(logs.stored_name(run.id, "stdout"))


def test_a_cells_state_is_purged_as_a_snapshot_and_its_displayed_images_as_outputs(redis_server: Any) -> None:
    user: Any = UserFactory()
    run = Run.objects.create(owner=user, runtime="python", code="df = 1", state=RunState.FINISHED,
                             outcome="succeeded", finished_at=timezone.now() - timedelta(days=40))  # fmt: skip
    state = default_storage.save("states/old", ContentFile(b"pickled"))
    image = default_storage.save("displays/old", ContentFile(b"\x89PNG"))
    RunCell.objects.create(
        run=run, state_file=state, state_bytes=7, state_sha256="0" * 64,
        displays=[{"mime": "image/png", "path": image, "size": 4, "sha256": "0" * 64, "plain": "<Figure>"},
                  {"mime": "text/plain", "text": "42", "plain": "42"}],
    )  # fmt: skip
    counts = retention.purge_expired(days=30)
    assert counts["outputs"] == 1 and counts["snapshots"] == 1
    record = RunCell.objects.get(run=run)
    assert not record.state_file and not default_storage.exists(state) and not default_storage.exists(image)
    assert record.displays == [{"mime": "text/plain", "text": "<Figure>", "plain": ""},
                               {"mime": "text/plain", "text": "42", "plain": "42"}]  # fmt: skip
