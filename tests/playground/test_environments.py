"""Environments through the web: a run, a notebook and an assignment name one (an unknown one is a
422 naming those there are); the run record says which it asked for and the image and digest it
ran in; the API and the images page list each with its packages and users; `%pip install` says
which environment has a package. End to end on the namespace engine with a real Celery worker."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from playground.models import Run, RunKind
from runner.images import read_lock
from tests.playground.classroom.test_grading import joined, post, wait_graded
from tests.playground.conftest import api, json_error
from tests.playground.factories import UserFactory
from tests.playground.test_notebook_kernel import log, run_all
from tests.playground.test_notebooks import code_cell, create, upload
from tests.playground.test_runs_end_to_end import wait_finished

pytestmark = pytest.mark.django_db
DATA = "import polars as pl, duckdb, pyarrow\n"
KNOWN = "there are: node, python, python-data"


# --- naming one: checked before anything is stored -------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/api/runs", {"runtime": "python", "code": "1", "environment": "anything"},
         f"no environment is called 'anything'; {KNOWN}"),
        ("/api/runs", {"runtime": "python", "code": "1", "environment": "node"},
         "node is a node environment; for python: python, python-data"),
        ("/api/runs", {"runtime": "node", "code": "1", "environment": "python-data"},
         "python-data is a python environment; for node: node"),
        ("/api/notebooks", {"name": "n", "environment": "pandas-2"}, f"no environment is called 'pandas-2'; {KNOWN}"),
    ],
)  # fmt: skip
def test_an_environment_that_is_not_there_or_not_of_the_runtime_is_a_422_naming_those_there_are(
    redis_server: Any, path: str, body: dict[str, Any], message: str
) -> None:
    client = api(UserFactory())
    error = json_error(client.post(path, body, "application/json"), 422)
    assert (error["field"], error["message"]) == ("environment", message), error
    assert not Run.objects.exists()


def test_a_notebook_and_an_assignment_keep_the_environment_they_name(redis_server: Any) -> None:
    client = api(UserFactory())
    notebook = create(client)
    assert notebook["environment"] == ""
    cells = [{key: cell[key] for key in ("id", "kind", "runtime", "source")} for cell in notebook["cells"]]
    saved = client.put(f"/api/notebooks/{notebook['id']}", {"name": "n", "version": notebook["version"],
                       "cells": cells, "environment": "python-data"}, "application/json")  # fmt: skip
    assert saved.status_code == 200 and saved.json()["environment"] == "python-data", saved.content
    refused = client.put(f"/api/notebooks/{notebook['id']}", {"name": "n", "version": saved.json()["version"],
                         "cells": cells, "environment": "ruby"}, "application/json")  # fmt: skip
    assert json_error(refused, 422)["field"] == "environment"
    assert client.get(f"/api/notebooks/{notebook['id']}").json()["environment"] == "python-data"
    copy = client.post(f"/api/notebooks/{notebook['id']}/duplicate").json()
    assert copy["environment"] == "python-data"
    course = post(client, "/api/courses", {"title": "Data"})
    body = {"title": "Frames", "runtime": "python", "environment": "python-data", "publish": True}
    assignment = post(client, f"/api/courses/{course['id']}/assignments", body)
    assert client.get(f"/api/assignments/{assignment['id']}").json()["environment"] == "python-data"
    wrong = client.post(f"/api/courses/{course['id']}/assignments", {**body, "runtime": "node"}, "application/json")
    assert json_error(wrong, 422)["message"] == "python-data is a python environment; for node: node"


# --- listed: the API and the images page ------------------------------------------------------


def test_the_environments_are_listed_with_their_wheels_image_and_users(redis_server: Any) -> None:
    client = api(UserFactory())
    create(client)
    client.post("/api/notebooks", {"name": "frames", "environment": "python-data"}, "application/json")
    listed = {e["name"]: e for e in client.get("/api/environments").json()}
    assert set(listed) == {"node", "python", "python-data"}
    data, built = listed["python-data"], read_lock()
    assert (data["runtime"], data["base"], data["notebooks"], data["assignments"]) == ("python", "python", 1, 0)
    assert {"polars==2.1.0", "polars-runtime-compat==2.1.0", "duckdb==1.5.6", "pyarrow==25.0.1"} <= set(data["wheels"])
    assert data["digest"] == built["python-data"].digest and "pip:polars=2.1.0" in data["packages"]
    assert listed["python"]["wheels"] == [] and listed["python"]["notebooks"] == 0
    assert {"python3-seaborn", "python3-statsmodels"} <= {p.split("=")[0] for p in listed["python"]["packages"]}
    assert listed["node"]["runtime"] == "node"


def test_the_images_page_shows_what_an_environment_extends_and_adds(redis_server: Any) -> None:
    viewer, other = UserFactory.create(), UserFactory.create()
    mine = api(viewer).post("/api/notebooks", {"name": "frames", "environment": "python-data"}, "application/json")
    api(other).post("/api/notebooks", {"name": "secret plans", "environment": "python-data"}, "application/json")
    client = Client()
    client.force_login(viewer)
    html = client.get("/images/").content.decode()
    section = html[html.index('id="image-python-data"') :]
    section = section[: section.index("</section>")]
    assert 'extends <a href="#image-python">python</a>' in section
    assert "python plus polars, DuckDB and pyarrow" in section and "Python 3.11" in section
    assert '<td>pip:polars</td><td class="hash">2.1.0</td>' in section
    assert '<td>pip:duckdb</td><td class="hash">1.5.6</td>' in section
    assert re.search(r"used by 2 notebooks and 0\s+assignments, among them yours:", section)
    assert f'<a href="/notebooks/{mine.json()["id"]}/">notebook frames</a>' in section
    assert "secret plans" not in html  # another user's notebook is counted, never named


# --- running in one ---------------------------------------------------------------------------


def end_to_end(test: Any) -> Any:
    """Through a real Celery worker (the session's) on the namespace engine, with the built images."""
    for mark in (pytest.mark.redis, pytest.mark.images, pytest.mark.django_db(transaction=True),
                 pytest.mark.usefixtures("worker")):  # fmt: skip
        test = mark(test)
    return test


@end_to_end
def test_a_run_in_python_data_imports_polars_and_records_the_image_it_ran_in() -> None:
    client = api(UserFactory())
    code = DATA + "print(pl.DataFrame({'n': [1, 2]})['n'].sum(), duckdb.sql('select 40 + 2').fetchall()[0][0])"
    made = post(client, "/api/runs", {"runtime": "python", "code": code, "environment": "python-data",
                                      "limits": {"memory_mib": 512}})  # fmt: skip
    finished = wait_finished(client, made["id"])
    assert finished["outcome"] == "succeeded", client.get(f"/api/runs/{made['id']}/log?stream=stderr").json()
    assert client.get(f"/api/runs/{made['id']}/log?stream=stdout").json()["data"] == "3 42\n"
    assert finished["environment"] == "python-data"
    assert finished["image"] == {"name": "python-data", "digest": read_lock()["python-data"].digest}
    again = wait_finished(client, post(client, f"/api/runs/{made['id']}/rerun", {})["id"])
    assert again["environment"] == "python-data" and again["outcome"] == "succeeded"
    plain = wait_finished(client, post(client, "/api/runs", {"runtime": "python", "code": DATA})["id"])
    assert plain["outcome"] == "failed" and plain["image"]["name"] == "python" and plain["environment"] == ""


@end_to_end
def test_a_notebook_on_python_data_queries_a_dataset_with_polars_and_duckdb() -> None:
    client = api(UserFactory())
    dataset = upload(client, "sales.csv", b"city,amount\noslo,3\nbergen,5\noslo,4\n")
    limits = {"memory_mib": 768}
    cells = [
        code_cell("c1", DATA + "sales = pl.read_csv('/input/sales.csv')\nsales.height", limits=limits),
        code_cell("c2", "totals = duckdb.sql('select city, sum(amount)::bigint as total from sales group by city "
                  "order by city').pl()\nprint(totals.rows())\npyarrow.__version__", limits=limits),
        code_cell("c3", "console.log(typeof require)", runtime="node"),
        code_cell("c4", "%pip install seaborn\nimport seaborn\nprint(seaborn.__version__ > '0.1')", limits=limits),
    ]  # fmt: skip
    made = client.post("/api/notebooks", {"name": "sales", "cells": cells, "environment": "python-data",
                                          "dataset_ids": [dataset["id"]]}, "application/json")  # fmt: skip
    assert made.status_code == 201, made.content
    first, second, third, fourth = run_all(client, made.json())
    assert first["outcome"] == "succeeded", log(client, first, "stderr")
    assert first["displays"][0]["text"] == "3"
    assert second["outcome"] == "succeeded", log(client, second, "stderr")
    assert log(client, second) == "[('bergen', 5), ('oslo', 7)]\n"  # the frame the cell above defined
    assert second["displays"][0]["text"] == "'25.0.1'"
    assert (first["image"]["name"], second["image"]["name"]) == ("python-data", "python-data")
    assert third["outcome"] == "succeeded" and third["image"]["name"] == "node"  # a node cell: node's own
    assert fourth["outcome"] == "succeeded" and log(client, fourth) == "True\n"
    assert re.search(r"seaborn [0-9.]+ is in the image: import it", log(client, fourth, "stderr"))


@end_to_end
def test_pip_install_in_a_cell_names_the_environments_that_have_the_package() -> None:
    client = api(UserFactory())
    notebook = create(client, cells=[code_cell("c1", "%pip install polars nosuchpackage\nprint('went on')")])
    (ran,) = run_all(client, notebook)
    said = log(client, ran, "stderr")
    assert ran["outcome"] == "succeeded" and log(client, ran) == "went on\n", said
    assert "polars is not in this environment; it is in: python-data" in said
    assert "nosuchpackage is in no environment here: ask your operator to add it (images/<environment>/" in said


@end_to_end
def test_an_assignment_on_python_data_is_graded_in_it() -> None:
    instructor = api(UserFactory())
    course = post(instructor, "/api/courses", {"title": "Frames"})
    tests = [{"name": "sum", "stdin": "1 2 3\n", "expected_stdout": "6"}]
    body = {"title": "Sum", "runtime": "python", "environment": "python-data", "tests": tests, "publish": True,
            "limits": {"memory_mib": 512, "wall_timeout_s": 20}}  # fmt: skip
    assignment = post(instructor, f"/api/courses/{course['id']}/assignments", body)["id"]
    _, student = joined(course["join_code"])
    solution = "import polars as pl\nprint(pl.Series([int(x) for x in input().split()]).sum())\n"
    submitted = post(student, f"/api/assignments/{assignment}/submissions", {"code": solution})
    graded = wait_graded(student, submitted["id"], timeout=120)
    assert graded["score"] == graded["max_score"] == 1, json.dumps(graded)[:2000]
    test_run = Run.objects.get(kind=RunKind.TEST, test_results__submission_id=submitted["id"])
    assert (test_run.environment, test_run.image_name) == ("python-data", "python-data")
    assert test_run.image_digest == read_lock()["python-data"].digest
    tried = post(student, f"/api/assignments/{assignment}/try", {"code": solution, "stdin": "4 5"})
    finished = wait_finished(student, tried["id"])
    assert finished["image"]["name"] == "python-data" and finished["outcome"] == "succeeded", finished
