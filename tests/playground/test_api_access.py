"""Who may see what, and what a malformed request gets back: JSON errors naming the problem."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings

from playground.models import Dataset, Run, RunOutputFile
from tests.playground.conftest import api, multipart_upload
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@pytest.fixture
def owned(redis_server: Any) -> dict[str, Any]:
    """A dataset, a run and an output that belong to one user."""
    owner = UserFactory()
    client = api(owner)
    dataset = client.post("/api/datasets", {"file": SimpleUploadedFile("mine.csv", b"a,b\n1,2\n")}).json()
    run = client.post("/api/runs", json.dumps({"runtime": "python", "code": "print(1)"}),
                      content_type="application/json").json()  # fmt: skip
    output = RunOutputFile.objects.create(run_id=run["id"], name="r.txt", size=1, sha256="0" * 64)
    output.file.save("r", SimpleUploadedFile("r", b"1"))
    return {"owner": owner, "dataset": dataset["id"], "run": run["id"], "output": "r.txt"}


def _endpoints(o: dict[str, Any]) -> list[tuple[str, str]]:
    run = o["run"]
    return [
        ("get", f"/api/datasets/{o['dataset']}"),
        ("delete", f"/api/datasets/{o['dataset']}"),
        ("get", f"/api/runs/{run}"),
        ("post", f"/api/runs/{run}/cancel"),
        ("post", f"/api/runs/{run}/rerun"),
        ("get", f"/api/runs/{run}/log?stream=stdout&offset=0"),
        ("get", f"/api/runs/{run}/outputs/{o['output']}"),
    ]


def test_another_user_gets_404_on_everything_of_the_first_users(owned: dict[str, Any]) -> None:
    stranger = api(UserFactory())
    for method, url in _endpoints(owned):
        response = getattr(stranger, method)(url)
        assert response.status_code == 404, (method, url, response.status_code)
        assert response.json()["code"] == "not_found"
    assert stranger.get("/api/datasets").json() == [] and stranger.get("/api/runs").json() == []
    assert Dataset.objects.filter(id=owned["dataset"]).exists()
    assert Run.objects.get(id=owned["run"]).cancel_requested is False


def test_anonymous_requests_are_refused(owned: dict[str, Any]) -> None:
    anonymous = Client()
    for method, url in [*_endpoints(owned), ("get", "/api/runs"), ("post", "/api/runs"), ("get", "/api/datasets")]:
        response = getattr(anonymous, method)(url)
        assert response.status_code in (401, 403), (method, url, response.status_code)
    assert Client(HTTP_AUTHORIZATION="Bearer not-a-token").get("/api/runs").status_code == 401


def test_a_non_staff_user_cannot_open_the_admin(owned: dict[str, Any]) -> None:
    browser = Client()
    browser.force_login(owned["owner"])
    response = browser.get("/admin/")  # a logged-in user who is not staff
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    staff: Any = UserFactory(is_staff=True, is_superuser=True)
    browser.force_login(staff)
    assert browser.get("/admin/playground/run/").status_code == 200
    assert browser.get(f"/admin/playground/run/{owned['run']}/change/").status_code == 200


def test_the_browser_session_needs_csrf_for_writes(owned: dict[str, Any]) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owned["owner"])
    assert browser.get(f"/api/runs/{owned['run']}").status_code == 200
    refused = browser.post("/api/runs", json.dumps({"runtime": "python", "code": "1"}), content_type="application/json")
    assert refused.status_code == 403


@pytest.mark.parametrize(
    ("body", "status", "field", "words"),
    [
        ("{not json", 400, None, "could not be parsed"),
        (json.dumps({"runtime": "ruby", "code": "puts 1"}), 422, "runtime", "python, node"),
        (json.dumps({"runtime": "python", "code": "1", "limits": {"memory_mib": 999999}}), 422, "limits.memory_mib",
         "maximum 4096"),
        (json.dumps({"runtime": "python", "code": "1", "limits": {"wall_timeout_s": 0}}), 422, "limits.wall_timeout_s",
         "greater than 0"),
        (json.dumps({"runtime": "python", "code": "1", "limits": {"bogus": 1}}), 422, "limits.bogus", "unknown limit"),
        (json.dumps({"runtime": "python", "code": "1", "limits": {"memory_mib": "lots"}}), 422, "limits.memory_mib",
         "number"),
        (json.dumps({"runtime": "python"}), 422, "code", ""),
    ],
)  # fmt: skip
def test_malformed_runs_get_a_json_error_naming_the_problem_and_nothing_is_stored(
    redis_server: Any, body: str, status: int, field: str | None, words: str
) -> None:
    client = api(UserFactory())
    response = client.post("/api/runs", body, content_type="application/json")
    assert response.status_code == status, response.content
    error = response.json()
    assert set(error) == {"code", "message", "field"}
    if field:
        assert error["field"] == field
    assert words in error["message"]
    assert Run.objects.count() == 0


@override_settings(CORDON_DATASET_MAX_BYTES=100)
@pytest.mark.parametrize(
    ("name", "size", "status", "code"),
    [("big.csv", 101, 413, "too_large"), ("../etc/passwd", 3, 400, "unsafe_name"),
     ("sub/x.csv", 3, 400, "unsafe_name"), ("..\\evil.csv", 3, 400, "unsafe_name"), ("a b.csv", 3, 400, "unsafe_name"),
     (".hidden", 3, 400, "unsafe_name")],
)  # fmt: skip
def test_bad_uploads_are_refused_and_nothing_is_stored(
    redis_server: Any, name: str, size: int, status: int, code: str
) -> None:
    client = api(UserFactory())
    body, content_type = multipart_upload(name, b"x" * size)
    response = client.post("/api/datasets", body, content_type=content_type)
    assert response.status_code == status, response.content
    assert response.json()["code"] == code and response.json()["field"] == "file"
    assert Dataset.objects.count() == 0


def test_a_plain_upload_through_a_hand_built_body_is_accepted(redis_server: Any) -> None:
    client = api(UserFactory())
    body, content_type = multipart_upload("ok.csv", b"a,b\n")
    response = client.post("/api/datasets", body, content_type=content_type)
    assert response.status_code == 201 and response.json()["sniffed_type"] == "csv"
