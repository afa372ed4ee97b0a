"""A notebook code cell's egress policy: saved with the cell (shape checked), checked against the
site's ceiling of the day when the cell runs, and never carried in or out by a .ipynb."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from playground.models import Notebook, Run
from runner.egress.policy import Policy
from tests.playground.conftest import api, json_error
from tests.playground.factories import UserFactory
from tests.playground.test_notebooks import code_cell, create, save

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

SITE = Policy.parse(["api.example.org:443", "*.example.net:443"])


@pytest.fixture
def site(settings: Any) -> Policy:
    settings.CORDON_EGRESS_CEILING = SITE
    return SITE


def test_a_cells_egress_is_saved_with_it_and_a_cell_without_one_has_none(redis_server: Any) -> None:
    client = api(UserFactory())
    notebook = create(client, cells=[code_cell("c1", "1", egress=["api.example.org:443"]), code_cell("c2", "2")])
    assert [c["egress"] for c in notebook["cells"]] == [["api.example.org:443"], []]
    saved = save(client, notebook, [{**notebook["cells"][0], "egress": ["nohost:443"]}, notebook["cells"][1]])
    assert saved.status_code == 200, saved.content  # only the shape is checked on save; the rules when it runs
    stored = client.get(f"/api/notebooks/{notebook['id']}").json()
    assert [c["egress"] for c in stored["cells"]] == [["nohost:443"], []]


def test_a_notebook_saved_before_egress_loads_with_empty_policies_and_saves_back(redis_server: Any) -> None:
    user: Any = UserFactory()
    client = api(user)
    old_cell = {"id": "c1", "kind": "code", "runtime": "python", "source": "1", "inputs": [], "limits": {}}
    notebook = Notebook.objects.create(owner=user, name="old", cells=[{**old_cell, "last_run_id": None}])
    read = client.get(f"/api/notebooks/{notebook.id}").json()
    assert read["cells"][0]["egress"] == []
    again = save(client, read, read["cells"])
    assert again.status_code == 200 and again.json()["cells"][0]["egress"] == []


@pytest.mark.parametrize(
    "egress",
    ["api.example.org:443", ["a:1"] * 33, ["x" * 261], [443], {"host": "a:1"}],
    ids=["not-a-list", "too-many", "too-long", "not-text", "an-object"],
)
def test_a_cell_with_a_malformed_egress_list_is_refused_like_a_malformed_limit(redis_server: Any, egress: Any) -> None:
    client = api(UserFactory(), raise_request_exception=False)
    body = {"name": "n", "cells": [code_cell("c1", "1", egress=egress)]}
    error = json_error(client.post("/api/notebooks", json.dumps(body), content_type="application/json"), 422)
    assert error["code"] == "egress_invalid" and error["field"].startswith("cells.0.egress"), error
    assert Notebook.objects.count() == 0


@pytest.mark.usefixtures("no_worker")
@pytest.mark.parametrize(
    ("egress", "code"),
    [(["evil.example.com:443"], "egress_outside_ceiling"), (["nohost:443"], "egress_invalid")],
)
def test_running_a_cell_whose_egress_is_not_within_the_ceiling_is_refused(
    site: Policy, redis_server: Any, egress: list[str], code: str
) -> None:
    client = api(UserFactory())
    notebook = create(client, cells=[code_cell("c1", "print(1)", egress=egress)])
    error = json_error(client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run"), 422)
    assert error["code"] == code and error["field"] == "egress"
    assert Run.objects.count() == 0
    assert client.get(f"/api/notebooks/{notebook['id']}").json()["cells"][0]["last_run_id"] is None


@pytest.mark.usefixtures("no_worker")
def test_running_a_cell_within_the_ceiling_makes_a_run_with_its_normalised_policy(
    site: Policy, redis_server: Any, settings: Any
) -> None:
    client = api(UserFactory())
    egress = ["API.example.org:443", "pkg.example.net:443", "api.example.org:443"]
    notebook = create(client, cells=[code_cell("c1", "print(1)", egress=egress), code_cell("c2", "print(2)")])
    ran = client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run")
    assert ran.status_code == 201, ran.content
    assert Run.objects.get(id=ran.json()["id"]).egress == ["api.example.org:443", "pkg.example.net:443"]
    without = client.post(f"/api/notebooks/{notebook['id']}/cells/c2/run")
    assert without.status_code == 201 and Run.objects.get(id=without.json()["id"]).egress == []

    # Today's ceiling, not the one of the day it was saved: lowered, the same cell is refused.
    settings.CORDON_EGRESS_CEILING = Policy.parse([])
    refused = json_error(client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run"), 422)
    assert refused["code"] == "egress_outside_ceiling"


def test_a_cells_egress_is_not_exported_to_ipynb_nor_imported_from_one(redis_server: Any) -> None:
    # Like its limits, a cell's policy stays on this service: a notebook from elsewhere reaches
    # nothing until its owner names destinations here.
    client = api(UserFactory())
    notebook = create(client, cells=[code_cell("c1", "1", egress=["api.example.org:443"])])
    exported = client.get(f"/api/notebooks/{notebook['id']}/ipynb")
    assert exported.status_code == 200
    document = json.loads(exported.content)
    assert document["cells"][0]["metadata"]["cordon"] == {"runtime": "python"}
    document["cells"][0]["metadata"]["cordon"]["egress"] = ["api.example.org:443"]
    upload = SimpleUploadedFile("back.ipynb", json.dumps(document).encode())
    imported = client.post("/api/notebooks/import", {"file": upload})
    assert imported.status_code == 201, imported.content
    assert imported.json()["cells"][0]["egress"] == []
