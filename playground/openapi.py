"""What the OpenAPI document says beyond what ninja derives from the code: the links between
operations (which answer's id a later call takes: clients and Schemathesis's stateful phase follow
them), each upload's `file` as the server takes it (required, a file), and egress as this
service's ceiling allows it when the document is asked for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ninja import NinjaAPI

from playground.egress import WITHIN_SITE_CEILING, site_ceiling

# An operation as the document names it, "METHOD /path"; a link: (producer, its status, target,
# the target's path parameters, fields of the target's body), each value a runtime expression.
Operation = str
Link = tuple[Operation, int, Operation, dict[str, str], dict[str, str] | None]
ID = "$response.body#/id"
FIRST_ID = "$response.body#/0/id"  # from a list answer: its first item


def _each(producers: list[tuple[Operation, int]], targets: list[Operation], parameters: dict[str, str],
          body: dict[str, str] | None = None) -> list[Link]:  # fmt: skip
    return [(producer, status, target, parameters, body) for producer, status in producers for target in targets]


def _links() -> list[Link]:
    """Create -> read, change, delete (and what else takes the new id), for runs, datasets,
    notebooks, courses and their members, assignments and submissions; and list -> item."""
    return [*_own_links(), *_classroom_links()]


def _own_links() -> list[Link]:
    """A user's own: runs and their outputs, datasets, notebooks and their cells."""
    run = ["GET /api/runs/{run_id}", "GET /api/runs/{run_id}/log", "POST /api/runs/{run_id}/cancel",
           "POST /api/runs/{run_id}/rerun"]  # fmt: skip
    output = ["GET /api/runs/{run_id}/outputs/{name}", "GET /api/runs/{run_id}/outputs/{name}/preview"]
    dataset = ["GET /api/datasets/{dataset_id}", "GET /api/datasets/{dataset_id}/preview",
               "DELETE /api/datasets/{dataset_id}"]  # fmt: skip
    notebook = ["GET /api/notebooks/{notebook_id}", "POST /api/notebooks/{notebook_id}/duplicate",
                "GET /api/notebooks/{notebook_id}/ipynb", "DELETE /api/notebooks/{notebook_id}"]  # fmt: skip
    cell = ["POST /api/notebooks/{notebook_id}/cells/{cell_id}/run",
            "POST /api/notebooks/{notebook_id}/cells/{cell_id}/clear"]  # fmt: skip
    new_run = [("POST /api/runs", 201), ("POST /api/runs/{run_id}/rerun", 201),
               ("POST /api/notebooks/{notebook_id}/cells/{cell_id}/run", 201),
               ("POST /api/assignments/{assignment_id}/try", 201)]  # fmt: skip
    new_notebook = [("POST /api/notebooks", 201), ("POST /api/notebooks/import", 201),
                    ("POST /api/notebooks/{notebook_id}/duplicate", 201)]  # fmt: skip
    return [
        *_each(new_run, run, {"run_id": ID}),
        *_each(
            [("GET /api/runs/{run_id}", 200)],
            output,
            {"run_id": "$request.path.run_id", "name": "$response.body#/outputs/0/name"},
        ),
        *_each([("POST /api/datasets", 201)], dataset, {"dataset_id": ID}),
        *_each([("GET /api/datasets", 200)], dataset, {"dataset_id": FIRST_ID}),
        *_each(new_notebook, notebook, {"notebook_id": ID}),
        *_each(
            new_notebook,
            ["PUT /api/notebooks/{notebook_id}"],
            {"notebook_id": ID},
            {"version": "$response.body#/version"},
        ),
        *_each(new_notebook, cell, {"notebook_id": ID, "cell_id": "$response.body#/cells/0/id"}),
        *_each([("GET /api/notebooks", 200)], notebook, {"notebook_id": FIRST_ID}),
    ]


def _classroom_links() -> list[Link]:
    """The classroom's: courses, members, course datasets, assignments and submissions."""
    course = [
        "GET /api/courses/{course_id}", "PATCH /api/courses/{course_id}", "POST /api/courses/{course_id}/join-code",
        "GET /api/courses/{course_id}/members", "GET /api/courses/{course_id}/invitations",
        "POST /api/courses/{course_id}/roster", "GET /api/courses/{course_id}/datasets",
        "POST /api/courses/{course_id}/datasets", "GET /api/courses/{course_id}/assignments",
        "POST /api/courses/{course_id}/assignments", "GET /api/courses/{course_id}/gradebook",
        "GET /api/courses/{course_id}/gradebook.csv",
    ]  # fmt: skip
    member = ["PATCH /api/courses/{course_id}/members/{username}", "DELETE /api/courses/{course_id}/members/{username}"]
    assignment = [
        "GET /api/assignments/{assignment_id}", "PUT /api/assignments/{assignment_id}",
        "POST /api/assignments/{assignment_id}/regrade", "POST /api/assignments/{assignment_id}/try",
        "POST /api/assignments/{assignment_id}/submissions", "GET /api/assignments/{assignment_id}/submissions",
        "DELETE /api/assignments/{assignment_id}",
    ]  # fmt: skip
    joined = [("POST /api/courses/join", 201)]
    return [
        *_each([("POST /api/courses", 201)], course, {"course_id": ID}),
        *_each(
            [("POST /api/courses", 201)], ["POST /api/courses/join"], {}, {"join_code": "$response.body#/join_code"}
        ),
        *_each([("GET /api/courses", 200)], course, {"course_id": FIRST_ID}),
        *_each(
            [("GET /api/courses/{course_id}/members", 200)],
            member,
            {"course_id": "$request.path.course_id", "username": "$response.body#/0/username"},
        ),
        *_each(joined, member, {"course_id": "$response.body#/course_id", "username": "$response.body#/username"}),
        *_each(joined, ["GET /api/courses/{course_id}"], {"course_id": "$response.body#/course_id"}),
        *_each(
            [("POST /api/courses/{course_id}/datasets", 201)],
            ["DELETE /api/courses/{course_id}/datasets/{dataset_id}"],
            {"course_id": "$request.path.course_id", "dataset_id": ID},
        ),
        *_each(
            [("POST /api/courses/{course_id}/assignments", 201), ("PUT /api/assignments/{assignment_id}", 200)],
            assignment,
            {"assignment_id": ID},
        ),
        *_each([("GET /api/courses/{course_id}/assignments", 200)], assignment, {"assignment_id": FIRST_ID}),
        *_each(
            [("POST /api/assignments/{assignment_id}/submissions", 201)],
            ["GET /api/submissions/{submission_id}"],
            {"submission_id": ID},
        ),
        *_each(
            [("GET /api/assignments/{assignment_id}/submissions", 200)],
            ["GET /api/submissions/{submission_id}"],
            {"submission_id": FIRST_ID},
        ),
    ]


def add_links(document: dict[str, Any]) -> None:
    """Each link under its producer's answer, naming its target by operationId; an operation named
    here that the document lacks is a mistake, raised."""
    operations = {f"{method.upper()} {path}": operation for path, item in document["paths"].items()
                  for method, operation in item.items()}  # fmt: skip
    for producer, status, target, parameters, body in _links():
        answer = operations[producer]["responses"][status]
        link: dict[str, Any] = {"operationId": operations[target]["operationId"]}
        if parameters:
            link["parameters"] = parameters
        if body:
            link["requestBody"] = body
        answer.setdefault("links", {})[operations[target]["operationId"]] = link


def require_upload_files(document: dict[str, Any]) -> None:
    """ninja documents an upload's `file` as optional (null allowed), since the handler refuses a
    missing one itself, with its own message (422 file_required): the document says it is required."""
    for item in document["paths"].values():
        for operation in item.values():
            form = operation.get("requestBody", {}).get("content", {}).get("multipart/form-data")
            if form is not None and "file" in form["schema"].get("properties", {}):
                form["schema"]["properties"]["file"] = {"type": "string", "format": "binary", "title": "File"}
                form["schema"]["required"] = ["file"]
                operation["requestBody"]["required"] = True


def _nodes(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _nodes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _nodes(item)


def apply_site_egress_ceiling(document: dict[str, Any]) -> None:
    """A policy marked as checked against this service's egress ceiling (egress.SiteEgressPolicy)
    is an empty list only while that ceiling allows nothing, as it does by default."""
    empty = not site_ceiling()
    for node in _nodes(document.get("components", {})):
        if node.pop(WITHIN_SITE_CEILING, False) and empty:
            node["maxItems"] = 0
            node["items"] = {"type": "string"}
            said = node.get("description", "")
            node["description"] = f"{said} (this service's egress ceiling allows none: only an empty list)".lstrip()


class DocumentedApi(NinjaAPI):
    """The API, its document completed by the functions above."""

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None) -> Any:
        document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        add_links(document)
        require_upload_files(document)
        apply_site_egress_ceiling(document)
        return document
