"""The OpenAPI document says what the server takes and how operations chain: links from each
answer that creates a thing to the operations on it, uploads whose file is required, egress as
this service's ceiling allows it, limits by name with their maxima, titles that are not blank."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

import playground.urls  # noqa: F401  (it adds the classroom's router to the API)
from playground.urls import api as ninja_api
from runner.egress.policy import Policy
from runner.spec import Limits

pytestmark = pytest.mark.django_db


def _document() -> dict[str, Any]:
    response = Client().get("/api/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def _operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{method.upper()} {path}": operation for path, item in document["paths"].items()
            for method, operation in item.items()}  # fmt: skip


def test_the_document_served_is_the_apis_own() -> None:
    assert _document()["paths"].keys() == ninja_api.get_openapi_schema()["paths"].keys()


def test_every_link_names_an_operation_and_gives_each_of_its_path_parameters() -> None:
    operations = _operations(_document())
    by_id = {operation["operationId"]: name for name, operation in operations.items()}
    links = 0
    for producer, operation in operations.items():
        for status, answer in operation["responses"].items():
            for name, link in answer.get("links", {}).items():
                links += 1
                target = by_id[link["operationId"]]
                wanted = set(re.findall(r"{(\w+)}", target.split(" ", 1)[1]))
                assert set(link.get("parameters", {})) == wanted, (producer, status, name)
                for expression in [*link.get("parameters", {}).values(), *link.get("requestBody", {}).values()]:
                    assert expression.startswith(("$response.body#/", "$request.path.")), expression
                    if expression.startswith("$request.path."):
                        assert "{" + expression.removeprefix("$request.path.") + "}" in producer
    assert links >= 80, links


@pytest.mark.parametrize(
    ("producer", "targets"),
    [
        ("POST /api/runs", ["GET /api/runs/{run_id}", "POST /api/runs/{run_id}/cancel"]),
        ("POST /api/datasets", ["GET /api/datasets/{dataset_id}", "DELETE /api/datasets/{dataset_id}"]),
        ("POST /api/notebooks", ["GET /api/notebooks/{notebook_id}", "PUT /api/notebooks/{notebook_id}",
                                 "DELETE /api/notebooks/{notebook_id}"]),
        ("POST /api/courses", ["GET /api/courses/{course_id}", "PATCH /api/courses/{course_id}",
                               "POST /api/courses/{course_id}/assignments"]),
        ("POST /api/courses/{course_id}/assignments", ["GET /api/assignments/{assignment_id}",
                                                       "PUT /api/assignments/{assignment_id}",
                                                       "DELETE /api/assignments/{assignment_id}",
                                                       "POST /api/assignments/{assignment_id}/submissions"]),
        ("POST /api/assignments/{assignment_id}/submissions", ["GET /api/submissions/{submission_id}"]),
    ],
)  # fmt: skip
def test_what_creates_a_thing_links_to_reading_changing_and_deleting_it(producer: str, targets: list[str]) -> None:
    operations = _operations(_document())
    links = operations[producer]["responses"]["201"]["links"].values()
    linked = {link["operationId"] for link in links}
    for target in targets:
        assert operations[target]["operationId"] in linked, target


def test_a_notebook_save_it_links_to_carries_the_version_just_read() -> None:
    operations = _operations(_document())
    put = operations["PUT /api/notebooks/{notebook_id}"]["operationId"]
    link = operations["POST /api/notebooks"]["responses"]["201"]["links"][put]
    assert link["requestBody"] == {"version": "$response.body#/version"}


@pytest.mark.parametrize(
    "upload",
    ["POST /api/datasets", "POST /api/notebooks/import", "POST /api/courses/{course_id}/roster",
     "POST /api/courses/{course_id}/datasets"],
)  # fmt: skip
def test_an_upload_says_its_file_is_required(upload: str) -> None:
    body = _operations(_document())[upload]["requestBody"]
    schema = body["content"]["multipart/form-data"]["schema"]
    assert body["required"] is True and schema["required"] == ["file"]
    assert schema["properties"]["file"] == {"type": "string", "format": "binary", "title": "File"}


def _schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(document["components"]["schemas"][name])


def test_egress_the_site_ceiling_bounds_is_an_empty_list_while_the_ceiling_allows_nothing(settings: Any) -> None:
    settings.CORDON_EGRESS_CEILING = Policy()
    document = _document()
    for schema, field in [("RunIn", "egress"), ("AssignmentIn", "egress")]:
        assert _schema(document, schema)["properties"][field]["maxItems"] == 0
    assert _schema(document, "CoursePatchIn")["properties"]["egress_ceiling"]["anyOf"][0]["maxItems"] == 0
    # A cell's policy is saved unchecked (the ceiling may rise before it runs), so it is not bound.
    assert _schema(document, "CellIn")["properties"]["egress"]["maxItems"] == 32
    assert "x-within-site-ceiling" not in str(document)


def test_egress_under_a_ceiling_that_allows_something_is_a_list_of_destinations(settings: Any) -> None:
    settings.CORDON_EGRESS_CEILING = Policy.parse(["api.example.org:443"])
    document = _document()
    egress = _schema(document, "RunIn")["properties"]["egress"]
    assert egress["maxItems"] == 32 and egress["items"]["maxLength"] == 260
    assert "x-within-site-ceiling" not in str(document)


@pytest.mark.parametrize(("schema", "field"), [("CourseIn", "limits_ceiling"), ("AssignmentIn", "limits")])
def test_a_courses_ceiling_and_an_assignments_limits_are_limits_by_name_with_their_maxima(
    settings: Any, schema: str, field: str
) -> None:
    document = _document()
    declared = _schema(document, schema)["properties"][field]
    reference = next(option["$ref"] for option in [declared, *declared.get("anyOf", []), *declared.get("allOf", [])]
                     if "$ref" in option)  # fmt: skip
    limits = _schema(document, reference.rsplit("/", 1)[1])
    assert limits["additionalProperties"] is False
    assert set(limits["properties"]) == {name for name in Limits.__dataclass_fields__}
    assert limits["properties"]["memory_mib"]["maximum"] == settings.CORDON_MAXIMA.memory_mib
    assert limits["properties"]["memory_mib"]["exclusiveMinimum"] == 0


def test_a_notebook_cells_limits_have_no_maximum_but_a_whole_number_is_still_64_bits() -> None:
    limits = _schema(_document(), "CellLimitsIn")["properties"]
    assert limits["memory_mib"]["maximum"] == (1 << 63) - 1 and "maximum" not in limits["cpus"]


@pytest.mark.parametrize(
    ("schema", "field"),
    [("CourseIn", "title"), ("AssignmentIn", "title"), ("TestIn", "name"), ("NotebookCreateIn", "name")],
)
def test_a_title_or_a_name_is_documented_as_not_blank(schema: str, field: str) -> None:
    declared = _schema(_document(), schema)["properties"][field]
    assert declared["minLength"] == 1
    pattern = re.compile(declared["pattern"])
    assert [bool(pattern.search(text)) for text in ("a", " a ", "\ta\n", " ", "\t\n", "", "a\0b")] == [
        True, True, True, False, False, False, False,
    ]  # fmt: skip


def test_a_course_names_at_least_one_runtime() -> None:
    runtimes = _schema(_document(), "CoursePatchIn")["properties"]["allowed_runtimes"]["anyOf"][0]
    assert runtimes["minItems"] == 1


def test_an_assignments_try_answers_with_a_run() -> None:
    answer = _operations(_document())["POST /api/assignments/{assignment_id}/try"]["responses"]["201"]
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/RunOut"}
