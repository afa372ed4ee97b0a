"""The API reads a JSON body as JSON has it: an object where the document says object (the body
itself, and every object within it), numbers and booleans as they are, never a string or a
boolean taken for a number; dates and ids stay JSON strings. Refusals are 422 in the one error
shape, naming the field."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, get_args, get_origin

import pytest
from django.test import Client
from pydantic import BaseModel, Strict

import playground.urls  # noqa: F401  (it adds the classroom's router to the API)
from playground.bodies import BodyIn
from playground.models import Course, Notebook, Run
from playground.urls import api as ninja_api
from tests.playground.conftest import api, json_error
from tests.playground.factories import UserFactory

pytestmark = pytest.mark.django_db

NOT_OBJECTS = ['"AAA"', "42", "[null, null]", "true", "null", "[]", '""', "4.5"]


def _json_body_operations() -> list[tuple[str, str]]:
    """(method, path with placeholder ids) of every operation the document says takes a JSON body."""
    document = ninja_api.get_openapi_schema()
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "application/json" not in operation.get("requestBody", {}).get("content", {}):
                continue
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path":
                    value = str(uuid.uuid4()) if parameter["schema"].get("format") == "uuid" else "1"
                    path = path.replace("{" + parameter["name"] + "}", value)
            found.append((method.upper(), path))
    return found


def _models_within(annotation: Any, seen: set[type]) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and annotation not in seen:
        seen.add(annotation)
        yield annotation
        for field in annotation.model_fields.values():
            yield from _models_within(field.annotation, seen)
    for argument in get_args(annotation):
        yield from _models_within(argument, seen)


def _body_models() -> set[type[BaseModel]]:
    """Every model a JSON request body holds, the bodies' own and those within them."""
    seen: set[type] = set()
    for _, router in ninja_api._routers:
        for view in router.path_operations.values():
            for operation in view.operations:
                for model in operation.models:
                    if model.__ninja_param_source__ == "body":
                        for field in model.model_fields.values():
                            list(_models_within(field.annotation, seen))
    return seen


def test_every_object_a_json_body_holds_is_read_as_a_json_object() -> None:
    """ninja's Schema reads any Python object by its attributes; a body's models must not be one."""
    seen = _body_models()
    for found in seen:
        assert issubclass(found, BodyIn), f"{found.__qualname__} is not a bodies.BodyIn"
    assert len(seen) >= 14, seen


def _lax(annotation: Any, metadata: list[Any]) -> bool:
    """Whether a whole number, number or boolean within `annotation` is read in pydantic's lax mode."""
    if get_origin(annotation) is Annotated:
        base, *more = get_args(annotation)
        return _lax(base, [*metadata, *more])
    if annotation in (int, float, bool):
        return not any(isinstance(m, Strict) and m.strict for m in metadata)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return False  # walked as a model of its own
    return any(_lax(argument, []) for argument in get_args(annotation))


def test_every_number_and_boolean_a_json_body_holds_is_read_strictly() -> None:
    """bodies.Int, Number and Bool, never int, float or bool: lax mode reads false as 0 and "3" as 3
    (the fuzzer found a completion's cursor taking false)."""
    models = _body_models()
    lax = [f"{model.__qualname__}.{name}" for model in models for name, field in model.model_fields.items()
           if _lax(field.annotation, list(field.metadata))]  # fmt: skip
    assert not lax, lax
    assert len(models) >= 14, models


def test_the_document_lists_the_json_body_operations_this_test_walks() -> None:
    operations = _json_body_operations()
    assert ("POST", "/api/courses") in operations and ("POST", "/api/runs") in operations
    assert len(operations) >= 12, operations


@pytest.mark.parametrize("body", NOT_OBJECTS)
def test_a_body_that_is_not_a_json_object_is_refused_on_every_operation(body: str) -> None:
    client = api(UserFactory())
    wrong = {}
    for method, path in _json_body_operations():
        response = client.generic(method, path, body, "application/json")
        error = response.json() if response["Content-Type"].startswith("application/json") else {}
        if response.status_code != 422 or error.get("field") is not None or "JSON object" not in error["message"]:
            wrong[f"{method} {path}"] = (response.status_code, response.content[:200])
    assert not wrong, wrong


def test_the_refusal_says_what_the_body_was() -> None:
    error = json_error(api(UserFactory()).post("/api/courses", '"AAA"', "application/json"), 422)
    assert error == {"code": "invalid_request", "message": "the request body must be a JSON object, not a string",
                     "field": None}  # fmt: skip


def _call(client: Client, method: str, path: str, body: Any) -> Any:
    return client.generic(method, path, json.dumps(body), "application/json")


def _course(client: Client) -> dict[str, Any]:
    response = _call(client, "POST", "/api/courses", {"title": "Programming 1"})
    assert response.status_code == 201, response.content
    return dict(response.json())


def test_a_course_patched_with_a_body_that_is_not_an_object_is_unchanged() -> None:
    client = api(UserFactory())
    course = _course(client)
    for body in ("[null, null]", "42", '"x"'):
        response = client.generic("PATCH", f"/api/courses/{course['id']}", body, "application/json")
        json_error(response, 422)
    assert _call(client, "GET", f"/api/courses/{course['id']}", None).json()["title"] == "Programming 1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "n", "cells": ["abc"]}, "cells.0"),
        ({"name": "n", "cells": [{"id": "c", "inputs": [7]}]}, "cells.0.inputs.0"),
        ({"name": "n", "cells": [{"id": "c", "limits": "abc"}]}, "cells.0.limits"),
    ],
)
def test_an_object_within_a_body_must_be_an_object_too(body: dict[str, Any], field: str) -> None:
    error = json_error(_call(api(UserFactory()), "POST", "/api/notebooks", body), 422)
    assert error["field"] == field and "object" in error["message"], error  # (limits: "an object of limits")


def test_a_test_within_an_assignment_must_be_an_object() -> None:
    client = api(UserFactory())
    course = _course(client)
    body = {"title": "a", "runtime": "python", "tests": ["doubles"]}
    error = json_error(_call(client, "POST", f"/api/courses/{course['id']}/assignments", body), 422)
    assert error["field"] == "tests.0" and "JSON object, not a string" in error["message"], error


# --- numbers and booleans, strictly ---------------------------------------------------------


COURSE_FIELDS = [
    ({"quota_concurrent_runs": True}, "quota_concurrent_runs"),
    ({"quota_concurrent_runs": "3"}, "quota_concurrent_runs"),
    ({"quota_runs_per_hour": False}, "quota_runs_per_hour"),
    ({"quota_runs_per_hour": 2.5}, "quota_runs_per_hour"),
    ({"require_vm": "yes"}, "require_vm"),
    ({"require_vm": 0}, "require_vm"),
    ({"limits_ceiling": {"memory_mib": True}}, "limits_ceiling.memory_mib"),
    ({"limits_ceiling": {"cpus": "2"}}, "limits_ceiling.cpus"),
]


@pytest.mark.parametrize(("fields", "field"), COURSE_FIELDS)
def test_a_new_course_takes_numbers_and_booleans_only_as_json_has_them(fields: dict[str, Any], field: str) -> None:
    error = json_error(_call(api(UserFactory()), "POST", "/api/courses", {"title": "t", **fields}), 422)
    assert error["field"] == field, error


@pytest.mark.parametrize(("fields", "field"), COURSE_FIELDS)
def test_a_course_patch_takes_numbers_and_booleans_only_as_json_has_them(fields: dict[str, Any], field: str) -> None:
    client = api(UserFactory())
    course = _course(client)
    error = json_error(_call(client, "PATCH", f"/api/courses/{course['id']}", fields), 422)
    assert error["field"] == field, error
    after = _call(client, "GET", f"/api/courses/{course['id']}", None).json()
    assert (after["quota_concurrent_runs"], after["require_vm"]) == (course["quota_concurrent_runs"], False)


def test_a_boolean_for_a_whole_number_says_so() -> None:
    error = json_error(_call(api(UserFactory()), "POST", "/api/courses", {"title": "t", "quota_concurrent_runs": True}),
                       422)  # fmt: skip
    assert error["message"] == "quota_concurrent_runs: must be a whole number", error


def test_a_whole_number_may_be_written_with_a_point_as_json_allows() -> None:
    response = _call(api(UserFactory()), "POST", "/api/courses", {"title": "t", "quota_concurrent_runs": 3.0})
    assert response.status_code == 201, response.content
    assert response.json()["quota_concurrent_runs"] == 3


ASSIGNMENT_FIELDS = [
    ({"tests": [{"name": "t", "expected_stdout": "4", "points": True}]}, "tests.0.points"),
    ({"tests": [{"name": "t", "expected_stdout": "4", "points": "2"}]}, "tests.0.points"),
    ({"limits": {"cpus": True}}, "limits.cpus"),
    ({"limits": {"wall_timeout_s": "5"}}, "limits.wall_timeout_s"),
    ({"attempts_allowed": True}, "attempts_allowed"),
    ({"attempts_allowed": "3"}, "attempts_allowed"),
    ({"accept_late": "yes"}, "accept_late"),
    ({"accept_late": 1}, "accept_late"),
    ({"opens_at": 0}, "opens_at"),
    ({"due_at": 1.5e9}, "due_at"),
]


@pytest.mark.parametrize(("fields", "field"), ASSIGNMENT_FIELDS)
def test_an_assignment_takes_numbers_booleans_and_dates_only_as_json_has_them(
    fields: dict[str, Any], field: str
) -> None:
    client = api(UserFactory())
    course = _course(client)
    body = {"title": "a", "runtime": "python", **fields}
    error = json_error(_call(client, "POST", f"/api/courses/{course['id']}/assignments", body), 422)
    assert error["field"] == field, error


def test_an_assignment_still_takes_numbers_dates_and_ids_as_json_writes_them() -> None:
    client = api(UserFactory())
    course = _course(client)
    body = {
        "title": "a", "runtime": "python", "limits": {"cpus": 1, "wall_timeout_s": 2.5}, "attempts_allowed": 3,
        "accept_late": True, "opens_at": "2030-01-01T00:00:00Z", "due_at": "2030-01-02T00:00:00+02:00",
        "dataset_ids": [], "tests": [{"name": "t", "expected_stdout": "4", "points": 2}],
    }  # fmt: skip
    response = _call(client, "POST", f"/api/courses/{course['id']}/assignments", body)
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["max_score"] == 2 and created["attempts_allowed"] == 3 and created["accept_late"] is True
    assert created["opens_at"].startswith("2030-01-01T00:00:00")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"runtime": "python", "code": "1", "output_ids": [True]}, "output_ids.0"),
        ({"runtime": "python", "code": "1", "output_ids": ["1"]}, "output_ids.0"),
        ({"runtime": "python", "code": "1", "limits": {"memory_mib": False}}, "limits.memory_mib"),
        ({"runtime": "python", "code": "1", "dataset_ids": [1]}, "dataset_ids.0"),
    ],
)
def test_a_run_takes_numbers_only_as_json_has_them(body: dict[str, Any], field: str) -> None:
    error = json_error(_call(api(UserFactory()), "POST", "/api/runs", body), 422)
    assert error["field"] == field, error


@pytest.mark.parametrize(
    ("cell", "field"),
    [
        ({"id": "c", "inputs": [{"kind": "output", "id": True}]}, "cells.0.inputs.0.output.id"),
        ({"id": "c", "inputs": [{"kind": "output", "id": "3"}]}, "cells.0.inputs.0.output.id"),
        ({"id": "c", "limits": {"cpus": True}}, "cells.0.limits.cpus"),
    ],
)
def test_a_notebook_cell_takes_numbers_only_as_json_has_them(cell: dict[str, Any], field: str) -> None:
    error = json_error(_call(api(UserFactory()), "POST", "/api/notebooks", {"name": "n", "cells": [cell]}), 422)
    assert error["field"] == field, error


@pytest.mark.parametrize("version", [True, "1", 1.5])
def test_a_notebook_save_takes_its_version_as_a_whole_number(version: Any) -> None:
    client = api(UserFactory())
    created = _call(client, "POST", "/api/notebooks", {"name": "n"}).json()
    body = {"name": "n", "version": version, "cells": []}
    error = json_error(_call(client, "PUT", f"/api/notebooks/{created['id']}", body), 422)
    assert error["field"] == "version", error


# --- fields the server does not know, numbers of any size -----------------------------------


def test_a_field_the_server_does_not_know_is_a_422_naming_it_on_every_operation() -> None:
    """A misspelt field would otherwise run with its default (`"environment": "anything"` was taken
    and ignored): refused, named, before anything is done, whatever else the body lacks."""
    client = api(UserFactory())
    wrong = {}
    for method, path in _json_body_operations():
        response = client.generic(method, path, '{"no_such_field": {"n": 1}}', "application/json")
        error = response.json() if response["Content-Type"].startswith("application/json") else {}
        if response.status_code != 422 or error.get("field") != "no_such_field":
            wrong[f"{method} {path}"] = (response.status_code, response.content[:200])
    assert not wrong, wrong
    error = json_error(client.post("/api/courses", {"titel": "t"}, "application/json"), 422)
    assert error == {
        "code": "invalid_request",
        "field": "titel",
        "message": "titel: is not a field of this request (a misspelt field would take its default)",
    }


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/runs", {"runtime": "python", "code": "1", "environmnet": "python-data"}, "environmnet"),
        ("/api/runs", {"runtime": "python", "code": "1", "limits": {"wall_timeout": 3}}, "limits.wall_timeout"),
        ("/api/notebooks", {"name": "n", "cells": [{"id": "c1", "sorce": "1"}]}, "cells.0.sorce"),
        ("/api/courses", {"title": "t", "lateday": 2}, "lateday"),
    ],
)
def test_an_unknown_field_within_a_body_is_named_by_its_place(path: str, body: dict[str, Any], field: str) -> None:
    client = api(UserFactory())
    error = json_error(client.post(path, body, "application/json"), 422)
    assert error["field"] == field, error
    assert Run.objects.count() == 0 and Notebook.objects.count() == 0 and Course.objects.count() == 0


def test_a_whole_number_beyond_64_bits_where_a_field_takes_one_is_a_422_naming_it() -> None:
    body = {"runtime": "python", "code": "1", "output_ids": [2**70]}
    error = json_error(_call(api(UserFactory()), "POST", "/api/runs", body), 422)
    assert error["field"] == "output_ids.0" and "9223372036854775807" in error["message"], error


def test_an_integer_of_more_digits_than_any_field_could_take_is_malformed() -> None:
    body = '{"title": "t", "note": ' + "9" * 5000 + "}"
    error = json_error(api(UserFactory()).post("/api/courses", body, "application/json"), 400)
    assert error["code"] == "malformed_body" and "more than 4300 digits" in error["message"], error


def test_a_course_patch_leaves_a_field_sent_as_null_as_it_is() -> None:
    client = api(UserFactory())
    course = _course(client)
    changes = {"title": None, "allowed_runtimes": None, "quota_runs_per_hour": None, "limits_ceiling": None,
               "egress_ceiling": None, "require_vm": None, "quota_concurrent_runs": None}  # fmt: skip
    response = _call(client, "PATCH", f"/api/courses/{course['id']}", changes)
    assert response.status_code == 200, response.content
    assert {k: v for k, v in response.json().items() if k != "join_code"} == {
        k: v for k, v in course.items() if k != "join_code"
    }


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"title": "   "}, "title", "title: must not be blank"),
        ({"title": ""}, "title", "title: String should have at least 1 character"),
        ({"title": "t", "allowed_runtimes": []}, "allowed_runtimes", "at least 1 item"),
        ({"title": "t", "limits_ceiling": {"speed": 1}}, "limits_ceiling.speed", "unknown limit 'speed'"),
    ],
)
def test_a_course_refused_by_the_documents_own_rules_is_a_422_naming_the_field(
    body: dict[str, Any], field: str, words: str
) -> None:
    error = json_error(_call(api(UserFactory()), "POST", "/api/courses", body), 422)
    assert error["field"] == field and words in error["message"], error


def test_a_programs_input_with_a_nul_character_is_refused_as_the_document_says() -> None:
    client = api(UserFactory())
    course = _course(client)
    body = {"title": "a", "runtime": "python", "tests": [{"name": "t", "stdin": "a\0b", "expected_stdout": "x"}]}
    error = json_error(_call(client, "POST", f"/api/courses/{course['id']}/assignments", body), 422)
    assert error == {"code": "invalid_request", "field": "tests.0.stdin",
                     "message": "tests.0.stdin: must not contain a NUL character"}  # fmt: skip


# --- a NUL character in any text ------------------------------------------------------------


def _free_texts(
    schema: dict[str, Any], components: dict[str, Any], where: str, seen: set[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, schema) of every string a request body may hold that is not an enum, a date or an id."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            yield from _free_texts(components[name], components, name, seen | {name})
        return
    if schema.get("type") == "string" and not ({"enum", "const", "format"} & schema.keys()):
        yield where, schema
    for name, inner in schema.get("properties", {}).items():
        yield from _free_texts(inner, components, f"{where}.{name}", seen)
    for key in ("anyOf", "oneOf", "allOf"):
        for inner in schema.get(key, []):
            yield from _free_texts(inner, components, where, seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict) and schema.get("maxItems") != 0:
            yield from _free_texts(schema[key], components, f"{where}[]", seen)


def test_every_free_text_a_json_body_holds_refuses_a_nul_in_the_document() -> None:
    """PostgreSQL's text cannot hold a NUL: a body's text must be refused with one (422), never
    reach the database (500). The document says so with a pattern on every such field."""
    document = ninja_api.get_openapi_schema()
    components = document["components"]["schemas"]
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                found += [
                    (f"{method} {path} {where}", s) for where, s in _free_texts(body["schema"], components, "", set())
                ]
    assert len(found) >= 15, found
    for where, schema in found:
        assert "pattern" in schema and re.search(schema["pattern"], "a\0b") is None, (where, schema)


_SOME = "00000000-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/api/runs", {"runtime": "python", "code": "print(1)\0"}, "code"),
        ("POST", "/api/courses", {"title": "a\0b"}, "title"),
        ("PATCH", f"/api/courses/{_SOME}", {"title": "a\0b"}, "title"),
        ("POST", "/api/courses/join", {"join_code": "ab\0"}, "join_code"),
        (
            "POST",
            f"/api/courses/{_SOME}/assignments",
            {"title": "t", "runtime": "python", "instructions": "\0"},
            "instructions",
        ),
        ("PUT", f"/api/assignments/{_SOME}", {"title": "t", "runtime": "python", "starter_code": "\0"}, "starter_code"),
        ("POST", f"/api/assignments/{_SOME}/try", {"code": "x\0"}, "code"),
        ("POST", f"/api/assignments/{_SOME}/submissions", {"code": "x\0"}, "code"),
        ("POST", "/api/notebooks", {"name": "n\0"}, "name"),
        (
            "PUT",
            f"/api/notebooks/{_SOME}",
            {"name": "n", "version": 1, "cells": [{"id": "c", "source": "\0"}]},
            "cells.0.source",
        ),
    ],
)
def test_a_nul_in_any_text_of_a_body_is_a_422_naming_the_field(
    method: str, path: str, body: dict[str, Any], field: str
) -> None:
    error = json_error(_call(api(UserFactory()), method, path, body), 422)
    assert error["field"] == field and "NUL" in error["message"], error


def test_a_notebook_sent_back_as_get_answered_it_is_taken_and_its_read_only_fields_are_not_stored() -> None:
    """A cell or an input holds what GET answers besides what a save sets (html, stale, an input's
    name...): a script that reads, edits and saves is not refused for them, and they are not stored."""
    client = api(UserFactory())
    cells = [{"id": "m", "kind": "markdown", "source": "# hi"}, {"id": "c", "source": "1"}]
    read = json.loads(client.post("/api/notebooks", {"name": "n", "cells": cells}, "application/json").content)
    read["cells"][1]["source"] = "2"
    body = {key: read[key] for key in ("name", "version", "cells")}
    saved = client.put(f"/api/notebooks/{read['id']}", body, "application/json")
    assert saved.status_code == 200, saved.content
    stored = Notebook.objects.get(id=read["id"]).cells
    assert [c["source"] for c in stored] == ["# hi", "2"]
    assert not {"html", "stale", "stale_why", "starts_from", "imported", "fresh_start"} & set(stored[1])
    body["version"] = saved.json()["version"]
    body["cells"][1]["sourse"] = "3"
    assert json_error(client.put(f"/api/notebooks/{read['id']}", body, "application/json"), 422)["field"] == (
        "cells.1.sourse"
    )
