"""The OpenAPI document says what the server takes: uploads whose file is required, egress as this
service's ceiling allows it, limits by name with their maxima, titles that are not blank."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

import playground.urls  # noqa: F401  (it adds the classroom's router to the API)
from playground.api import api as ninja_api
from runner.egress import Policy
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
    assert declared["pattern"] == r"\S" and declared["minLength"] == 1


def test_a_course_names_at_least_one_runtime() -> None:
    runtimes = _schema(_document(), "CoursePatchIn")["properties"]["allowed_runtimes"]["anyOf"][0]
    assert runtimes["minItems"] == 1


def test_an_assignments_try_answers_with_a_run() -> None:
    answer = _operations(_document())["POST /api/assignments/{assignment_id}/try"]["responses"]["201"]
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/RunOut"}
