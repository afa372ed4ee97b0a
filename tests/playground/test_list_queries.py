"""Lists read what they show: the lists of runs (API, Runs page, audit console and its CSV export)
leave a run's big columns unread and fetch related rows in as many queries for 3 runs as for 9;
the list of notebooks reads no cells."""

from __future__ import annotations

import csv
import io
import json
from typing import Any, cast

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from playground.models import Run, RunOutputFile
from tests.playground.conftest import api
from tests.playground.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

BIG_COLUMNS = ("code", "stdin", "args", "samples", "egress_record", "staged_files")


def _runs(owner: Any, count: int) -> list[Run]:
    """`count` finished runs with big columns, two outputs each, and a retry each."""
    runs = []
    for index in range(count):
        run = Run.objects.create(
            owner=owner, runtime="python", code="x = 1\n" * 10_000, stdin="input\n" * 1000, args=["a"] * 100,
            samples=[[i / 10, i / 20, 1 << 20, 0] for i in range(600)], staged_files=[{"name": "f"}],
            egress=["example.org:443"], state="finished", outcome="sandbox_error", reason=f"run {index}",
            egress_record={"attempts": [{"host": "example.org"}] * 1000, "connections": index, "refused": 0,
                           "bytes_out": 1, "bytes_in": 2, "limit": ""},
        )  # fmt: skip
        for name in ("a.csv", "b.png"):
            RunOutputFile.objects.create(run=run, name=name, size=1, sha256="0" * 64)
        Run.objects.create(owner=owner, runtime="python", code="retry", retry_of=run, retry_count=1)
        runs.append(run)
    return runs


def _queries(client: Client, url: str) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
        body = b"".join(response.streaming_content) if response.streaming else response.content  # type: ignore[attr-defined]
    assert response.status_code == 200, body[:300]
    return body, [query["sql"] for query in captured.captured_queries]


def _big_columns_read(
    queries: list[str], table: str = "playground_run", columns: tuple[str, ...] = BIG_COLUMNS
) -> set[str]:
    return {column for sql in queries for column in columns if f'"{table}"."{column}"' in sql}


def _staff() -> Client:
    client, staff = Client(), UserFactory(is_staff=True, is_superuser=True)
    client.force_login(cast(Any, staff))
    return client


@pytest.mark.usefixtures("redis_server")
def test_the_api_run_list_reads_no_big_column_and_no_query_per_run() -> None:
    owner: Any = UserFactory()
    client = api(owner)
    client.get("/api/runs")  # the token's first use is recorded once
    counts = []
    for more in (3, 6):  # 3 runs (and their retries), then 9
        runs = _runs(owner, more)
        body, queries = _queries(client, "/api/runs?limit=500")
        counts.append(len(queries))
        assert _big_columns_read(queries) == set()
    assert counts[0] == counts[1], counts
    listed = {run["id"]: run for run in json.loads(body)}
    assert len(listed) == 18
    last = listed[str(runs[-1].id)]  # what a list shows is unchanged
    assert [output["name"] for output in last["outputs"]] == ["a.csv", "b.png"]
    assert last["retries"] == [str(runs[-1].retries.get().id)] and last["egress"] == ["example.org:443"]


def test_the_runs_page_reads_only_what_it_shows() -> None:
    owner: Any = UserFactory()
    client = Client()
    client.force_login(owner)
    counts = []
    for more in (3, 6):
        _runs(owner, more)
        body, queries = _queries(client, "/runs/")
        counts.append(len(queries))
        assert _big_columns_read(queries) == set()
    assert counts[0] == counts[1], counts
    assert body.decode().count("/runs/") >= 18 and "run 5" in body.decode()


def test_the_audit_consoles_run_list_and_its_export_read_no_big_column() -> None:
    owner: Any = UserFactory()
    staff = _staff()
    counts = []
    for more in (3, 6):
        _runs(owner, more)
        page, queries = _queries(staff, "/admin/playground/run/")
        counts.append(len(queries))
        assert _big_columns_read(queries) == set()
    assert counts[0] == counts[1], counts
    assert page.decode().count("sandbox_error") >= 9
    export, queries = _queries(staff, "/admin/playground/run/export.csv")
    # The export reads the egress record (its totals are columns), and nothing else that is big.
    assert _big_columns_read(queries) == {"egress_record"}
    rows = list(csv.DictReader(io.StringIO(export.decode())))
    assert len(rows) == 18 and sorted(row["egress_connections"] for row in rows if row["egress"]) == [
        str(n) for n in (0, 0, 1, 1, 2, 2, 3, 4, 5)
    ]


@pytest.mark.usefixtures("redis_server")
def test_the_notebook_list_counts_cells_without_reading_them() -> None:
    client = api(UserFactory())

    def cell(cell_id: str) -> dict[str, Any]:
        return {"id": cell_id, "kind": "code", "runtime": "python", "source": "print(1)"}

    made = client.post("/api/notebooks", json.dumps({"name": "three", "cells": [cell("a"), cell("b"), cell("c")]}),
                       content_type="application/json").json()  # fmt: skip
    client.post("/api/notebooks", json.dumps({"name": "starter"}), content_type="application/json")
    saved = client.put(f"/api/notebooks/{made['id']}", json.dumps({"name": "five", "version": made["version"],
                       "cells": [cell(c) for c in "abcde"]}), content_type="application/json")  # fmt: skip
    assert saved.status_code == 200, saved.content
    client.post(f"/api/notebooks/{made['id']}/duplicate")
    body, queries = _queries(client, "/api/notebooks")
    assert _big_columns_read(queries, "playground_notebook", ("cells",)) == set()
    assert sorted((n["name"], n["cell_count"]) for n in json.loads(body)) == [
        ("five", 5), ("five (copy)", 5), ("starter", 1),
    ]  # fmt: skip


def test_the_audit_consoles_rerun_action_still_takes_each_runs_code_stdin_and_args() -> None:
    owner: Any = UserFactory()
    original = Run.objects.create(owner=owner, runtime="python", code="print(input())", stdin="hi\n", args=["-v"],
                                  state="finished", outcome="succeeded")  # fmt: skip
    response = _staff().post("/admin/playground/run/", {"action": "rerun_runs", "_selected_action": [original.id]})
    assert response.status_code == 302
    rerun = Run.objects.get(rerun_of=original)
    assert (rerun.code, rerun.stdin, rerun.args) == ("print(input())", "hi\n", ["-v"])


@pytest.mark.django_db(transaction=True)
def test_the_migration_counts_the_cells_of_the_notebooks_that_exist() -> None:
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("playground", "0012_markdown_stored")], [("playground", "0013_notebook_cell_count")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    user = old.get_model("auth", "User").objects.create(username="old-timer")
    cells = [{"id": f"c{n}", "kind": "code", "runtime": "python", "source": "1"} for n in range(7)]
    old.get_model("playground", "Notebook").objects.create(owner=user, name="old", cells=cells)
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    try:  # read through the migrated state's model: the current one has later columns
        counted = (
            executor.loader.project_state(after)
            .apps.get_model("playground", "Notebook")
            .objects.get(owner_id=user.id)
            .cell_count
        )
    finally:  # the later migrations back, for the tests that follow on this database
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert counted == 7
