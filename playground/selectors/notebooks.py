"""A user's notebook (made with one hello-world cell the first time it is asked for)."""

from __future__ import annotations

from django.contrib.auth.models import User

from playground.models import Notebook


def notebook_for_user(*, user: User) -> Notebook:
    notebook, _ = Notebook.objects.get_or_create(
        owner=user, defaults={"cells": [{"id": "c1", "runtime": "python", "code": "print('hello')", "limits": {},
                                         "dataset_ids": [], "output_ids": [], "last_run": None}]},
    )  # fmt: skip
    return notebook
