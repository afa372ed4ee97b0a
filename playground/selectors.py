"""Every read Cordon makes for a user: keyword-only, and scoped to the owner, so that another
user's dataset, run, log or output is simply not found (404)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import Http404

from playground.models import ACTIVE_STATES, Dataset, Notebook, Run, RunOutputFile, RuntimeImage
from playground.services import log_path


def dataset_list_for_user(*, user: User) -> QuerySet[Dataset]:
    return Dataset.objects.filter(owner=user)


def dataset_get_for_user(*, user: User, dataset_id: Any) -> Dataset:
    dataset = Dataset.objects.filter(owner=user, id=dataset_id).first()
    if dataset is None:
        raise Http404("no such dataset")
    return dataset


def run_list_for_user(
    *, user: User, state: str | None = None, outcome: str | None = None, runtime: str | None = None
) -> QuerySet[Run]:
    runs = Run.objects.filter(owner=user).prefetch_related("outputs", "cleanup_checks")
    if state:
        runs = runs.filter(state=state)
    if outcome:
        runs = runs.filter(outcome=outcome)
    if runtime:
        runs = runs.filter(runtime=runtime)
    return runs


def run_get_for_user(*, user: User, run_id: Any) -> Run:
    run = Run.objects.filter(owner=user, id=run_id).prefetch_related("outputs", "events", "cleanup_checks").first()
    if run is None:
        raise Http404("no such run")
    return run


def run_log_read(*, run: Run, stream: str, offset: int, limit: int) -> tuple[bytes, int, bool]:
    """(bytes from `offset`, the next offset, whether the log is complete). Cut at a UTF-8
    boundary unless at the end, so a client never sees half a character between two reads."""
    path = log_path(run.id, stream)
    data = b""
    if path.exists():
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(limit)
    complete = run.state not in ACTIVE_STATES
    size = path.stat().st_size if path.exists() else 0
    if offset + len(data) < size or not complete:
        data = _whole_utf8(data)
    return data, offset + len(data), complete and offset + len(data) >= size


def _whole_utf8(data: bytes) -> bytes:
    """Drop a trailing partial UTF-8 sequence (at most 3 bytes)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte or ASCII: is its sequence complete?
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return data if need <= back else data[:-back]
    return data


def output_get_for_user(*, user: User, run_id: Any, name: str) -> RunOutputFile:
    output = RunOutputFile.objects.filter(run__owner=user, run_id=run_id, name=name).exclude(file="").first()
    if output is None:
        raise Http404("no such output")
    return output


def notebook_for_user(*, user: User) -> Notebook:
    notebook, _ = Notebook.objects.get_or_create(
        owner=user, defaults={"cells": [{"id": "c1", "runtime": "python", "code": "print('hello')", "limits": {},
                                         "dataset_ids": [], "output_ids": [], "last_run": None}]},
    )  # fmt: skip
    return notebook


def dataset_preview(*, dataset: Dataset, limit: int = 4096) -> str:
    """The first bytes as text, replaced where not UTF-8: no parsing of user files on the host."""
    with dataset.file.open("rb") as handle:
        head: bytes = handle.read(limit)
    return head.decode("utf-8", errors="replace")


def image_list() -> QuerySet[RuntimeImage]:
    return RuntimeImage.objects.filter(active=True)
