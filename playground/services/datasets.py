"""Datasets: upload (name, size and storage quota checked; the content hashed and sniffed, never
parsed), replacement by an upload of the same name, and deletion."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files import File
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from playground.errors import ServiceError
from playground.models import Assignment, Course, Dataset, RunOutputFile
from playground.uploads import check_upload_size
from runner.spec import SAFE_NAME
from runner.units import size_words


def dataset_create(*, user: User, upload: UploadedFile, course: Course | None = None, replace: bool = False) -> Dataset:
    """A dataset of the user's own, or (with `course`) of a course, uploaded by its staff member
    `user` (who owns the file for the storage quota) for the course's runs to read. A name that
    is taken is refused (409) unless `replace`: then this upload becomes the dataset of that name,
    which new runs read wherever the earlier one was named; runs made before keep what they read."""
    name = upload.name or ""
    if "/" in name or "\\" in name or not SAFE_NAME.fullmatch(name):
        raise ServiceError(
            "unsafe_name", f"file name {name!r} is not allowed: letters, digits and ._+- only, no paths", field="file"
        )
    size = check_upload_size(upload, settings.CORDON_DATASET_MAX_BYTES)
    _check_storage_quota(user, size)
    same_name = Dataset.objects.filter(course=course, name=name, replaced_at=None)
    same_name = same_name if course is not None else same_name.filter(owner=user)
    if not replace and same_name.exists():
        raise ServiceError("duplicate_name", _duplicate(name, course), field="file", status=409)
    digest = hashlib.sha256()
    head = b""
    for chunk in upload.chunks():
        digest.update(chunk)
        if len(head) < 4096:
            head += chunk[: 4096 - len(head)]
    upload.seek(0)
    dataset = Dataset(
        owner=user, course=course, name=name, size=size, sha256=digest.hexdigest(), sniffed_type=sniff(head)
    )
    dataset.file.save(secrets.token_hex(16), File(upload), save=False)
    try:
        with transaction.atomic():
            earlier = list(same_name.select_for_update()) if replace else []
            for old in earlier:  # the current one of that name, before the new one takes the name
                Dataset.objects.filter(id=old.id).update(replaced_at=timezone.now())
            dataset.save()
            for old in earlier:
                _replaced(old, by=dataset)
    except IntegrityError:  # a parallel upload of the same name won the constraint
        dataset.file.delete(save=False)
        raise ServiceError("duplicate_name", _duplicate(name, course), field="file", status=409) from None
    return dataset


def _replaced(old: Dataset, *, by: Dataset) -> None:
    """`by` stands for `old` and its own earlier versions from now on (one hop to the newest), in
    the assignments that named it too; the runs that read them keep them."""
    Dataset.objects.filter(Q(id=old.id) | Q(replaced_by=old)).update(replaced_by=by)
    links = Assignment.datasets.through.objects.filter(dataset=old)
    for link in links:
        Assignment.datasets.through.objects.get_or_create(assignment_id=link.assignment_id, dataset=by)
    links.delete()


def _duplicate(name: str, course: Course | None) -> str:
    where = "the course has" if course else "you already have"
    return f"{where} a dataset named {name!r}: upload it with replace=true to replace it (runs made before keep theirs)"


def sniff(head: bytes) -> str:
    """A coarse type from the first bytes only; user files are never parsed on the host."""
    if not head:
        return "empty"
    if b"\0" in head:
        return "binary"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        return "json"
    first = text.splitlines()[0] if text.splitlines() else ""
    if "," in first or "\t" in first:
        return "csv"
    return "text"


def dataset_delete(*, dataset: Dataset) -> None:
    """The dataset and the versions it replaced (the runs that read them lose the link, as they
    do to any deleted dataset)."""
    for version in [*dataset.earlier_versions.all(), dataset]:
        version.file.delete(save=False)
        version.delete()


def _check_storage_quota(user: User, adding: int) -> None:
    used = (Dataset.objects.filter(owner=user).aggregate(total=Sum("size"))["total"] or 0) + (
        RunOutputFile.objects.filter(run__owner=user).exclude(file="").aggregate(total=Sum("size"))["total"] or 0
    )
    quota = settings.CORDON_QUOTA_STORAGE_BYTES
    if used + adding > quota:
        raise ServiceError(
            "quota_exceeded",
            f"storage quota: {size_words(used)} of {size_words(quota)} used; this needs {size_words(adding)} more",
            status=413,
        )
