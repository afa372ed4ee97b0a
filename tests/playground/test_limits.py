"""A run's limits have one shape from the API to the runner: runner.spec.Limits's names and units,
typed in the OpenAPI document with their defaults and this service's maxima, and checked the same
way for a new run, a rerun and a retry."""

from __future__ import annotations

import importlib
import json
from dataclasses import fields, replace
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings

from playground.limits import limits_from_record
from playground.models import Run, RunEvent
from playground.services import runs as run_services
from runner.spec import Limits, Outcome
from tests.playground.conftest import api
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def submit(client: Client, limits: dict[str, Any]) -> Any:
    body = json.dumps({"runtime": "python", "code": "print(1)", "limits": limits})
    return client.post("/api/runs", body, content_type="application/json")


def test_the_openapi_document_types_every_limit_with_its_unit_default_and_maximum(redis_server: Any) -> None:
    schema = Client().get("/api/openapi.json").json()["components"]["schemas"]["LimitsIn"]
    assert schema["additionalProperties"] is False
    maxima: Limits = settings.CORDON_MAXIMA
    assert set(schema["properties"]) == {f.name for f in fields(Limits)}
    for f in fields(Limits):
        prop = schema["properties"][f.name]
        assert prop["type"] == ("integer" if isinstance(getattr(Limits(), f.name), int) else "number")
        assert prop["default"] == getattr(Limits(), f.name)
        assert prop["maximum"] == getattr(maxima, f.name)
        assert prop["exclusiveMinimum"] == 0
        assert prop["x-unit"] == f.metadata["unit"]


def test_the_limits_endpoint_lists_each_limit_as_the_notebook_shows_it(redis_server: Any) -> None:
    listed = {item["name"]: item for item in api(UserFactory()).get("/api/limits").json()}
    assert listed["wall_timeout_s"] == {
        "name": "wall_timeout_s", "unit": "s", "type": "number", "default": 10.0,
        "maximum": settings.CORDON_MAXIMA.wall_timeout_s, "description": listed["wall_timeout_s"]["description"],
    }  # fmt: skip
    assert listed["memory_mib"]["unit"] == "MiB" and listed["memory_mib"]["type"] == "integer"


def test_a_run_takes_and_shows_limits_by_the_runners_names(redis_server: Any) -> None:
    created = submit(api(UserFactory()), {"wall_timeout_s": 3, "memory_mib": 128.0})
    assert created.status_code == 201, created.content
    shown = created.json()["limits"]
    assert shown == Limits(wall_timeout_s=3.0, memory_mib=128).to_json()
    stored = Run.objects.get(id=created.json()["id"]).limits
    assert limits_from_record(stored) == Limits(wall_timeout_s=3.0, memory_mib=128)


@pytest.mark.parametrize(
    ("limits", "code", "field", "words"),
    [
        ({"timeout_s": 5}, "unknown_limit", "limits.timeout_s", "known: wall_timeout_s"),
        ({"memory_mib": 1.5}, "invalid_limit", "limits.memory_mib", "whole number"),
        ({"memory_mib": True}, "invalid_limit", "limits.memory_mib", "must be a number"),
        ({"cpus": "2"}, "invalid_limit", "limits.cpus", "must be a number"),
        ({"disk_mib": 0}, "invalid_limit", "limits.disk_mib", "greater than 0"),
        ({"cpus": 64}, "limit_over_maximum", "limits.cpus", "maximum 4"),
    ],
)
def test_a_bad_limit_is_a_422_naming_it(
    redis_server: Any, limits: dict[str, Any], code: str, field: str, words: str
) -> None:
    response = submit(api(UserFactory()), limits)
    assert response.status_code == 422, response.content
    error = response.json()
    assert (error["code"], error["field"]) == (code, field)
    assert words in error["message"]
    assert Run.objects.count() == 0


def test_a_rerun_is_checked_against_todays_maxima_like_a_new_run(redis_server: Any) -> None:
    user = UserFactory()
    first = submit(api(user), {"memory_mib": 1024}).json()
    lowered = replace(settings.CORDON_MAXIMA, memory_mib=512)
    with override_settings(CORDON_MAXIMA=lowered):
        response = api(user).post(f"/api/runs/{first['id']}/rerun")
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "limit_over_maximum" and response.json()["field"] == "limits.memory_mib"
    assert Run.objects.count() == 1


def test_a_retry_is_refused_and_says_why_when_its_limits_are_now_over_the_maxima(redis_server: Any) -> None:
    user = UserFactory()
    run = Run.objects.get(id=submit(api(user), {"memory_mib": 1024}).json()["id"])
    Run.objects.filter(id=run.id).update(state="finished", outcome=Outcome.SANDBOX_ERROR.value)
    with override_settings(CORDON_MAXIMA=replace(settings.CORDON_MAXIMA, memory_mib=512)):
        assert run_services.retry_once(run=run) is None
    assert Run.objects.count() == 1
    refused = RunEvent.objects.get(run=run, state="retry_refused")
    assert "limits.memory_mib is over the maximum" in refused.detail["reason"]
    assert run_services.retry_once(run=run) is not None  # within today's maxima it is retried


def _save_cells(client: Client, cells: list[dict[str, Any]]) -> Any:
    notebook = client.post("/api/notebooks", {"name": "limits"}, content_type="application/json").json()
    body = json.dumps({"name": "limits", "version": notebook["version"], "cells": cells})
    return client.put(f"/api/notebooks/{notebook['id']}", body, content_type="application/json")


def test_a_notebook_cell_keeps_only_the_limits_set_for_it(redis_server: Any) -> None:
    client = api(UserFactory())
    cell = {"id": "c1", "runtime": "python", "source": "1", "limits": {"wall_timeout_s": 5}}
    saved = _save_cells(client, [cell])
    assert saved.status_code == 200, saved.content
    assert saved.json()["cells"][0]["limits"] == {"wall_timeout_s": 5.0}
    assert client.get(f"/api/notebooks/{saved.json()['id']}").json()["cells"][0]["limits"] == {"wall_timeout_s": 5.0}
    cell["limits"] = {"timeout_s": 5}
    refused = _save_cells(client, [cell])
    assert refused.status_code == 422 and refused.json()["code"] == "unknown_limit"


def test_a_cell_saved_under_higher_maxima_stays_editable_and_is_checked_when_it_runs(redis_server: Any) -> None:
    client = api(UserFactory())
    cell = {"id": "c1", "runtime": "python", "source": "1", "limits": {"memory_mib": 1024}}
    with override_settings(CORDON_MAXIMA=replace(settings.CORDON_MAXIMA, memory_mib=512)):
        saved = _save_cells(client, [cell])
        assert saved.status_code == 200, saved.content
        ran = client.post(f"/api/notebooks/{saved.json()['id']}/cells/c1/run")
        assert ran.status_code == 422 and ran.json()["code"] == "limit_over_maximum"


def test_the_migration_renames_old_limit_names_and_drops_values_the_schema_would_refuse(redis_server: Any) -> None:
    from django.apps import apps

    from playground.models import Notebook

    migration = importlib.import_module("playground.migrations.0003_notebook_limit_names")
    limits = {"timeout_s": 5, "memory_mib": None, "cpus": True, "disk_mib": -1, "cpu_time_s": 2.5}
    owner: Any = UserFactory()
    notebook = Notebook.objects.create(
        owner=owner, name="n", cells=[{"id": "c1", "runtime": "python", "limits": limits}]
    )
    migration.rename(apps, None)
    notebook.refresh_from_db()
    assert notebook.cells[0]["limits"] == {"wall_timeout_s": 5, "cpu_time_s": 2.5}
