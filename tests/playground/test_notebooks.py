"""Notebooks over the API: several per user, saved with a version, cells run as stored with the
run recorded on the server, inputs that say when their target is gone, import and export, and
the previews and inline images of what runs produce (those on a real Celery worker)."""

from __future__ import annotations

import json
from typing import Any, cast

import nbformat
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import Http404
from django.test import Client

from playground.models import Dataset, Notebook, Run, RunOutputFile
from playground.services import notebooks as notebook_services
from tests.playground.conftest import api, json_error
from tests.playground.factories import UserFactory
from tests.playground.test_runs_end_to_end import wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


def create(client: Client, name: str = "analysis", cells: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name} if cells is None else {"name": name, "cells": cells}
    response = client.post("/api/notebooks", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def save(client: Client, notebook: dict[str, Any], cells: list[dict[str, Any]], **changes: Any) -> Any:
    body = {"name": notebook["name"], "version": notebook["version"], "cells": cells, **changes}
    return client.put(f"/api/notebooks/{notebook['id']}", json.dumps(body), content_type="application/json")


def upload(client: Client, name: str, data: bytes) -> dict[str, Any]:
    response = client.post("/api/datasets", {"file": SimpleUploadedFile(name, data)})
    assert response.status_code == 201, response.content
    return response.json()


def code_cell(cell_id: str, source: str, runtime: str = "python", **extra: Any) -> dict[str, Any]:
    return {"id": cell_id, "kind": "code", "runtime": runtime, "source": source, **extra}


def test_a_user_has_several_named_notebooks_to_list_rename_duplicate_and_delete(redis_server: Any) -> None:
    client = api(UserFactory())
    first = create(client, "first")
    assert [c["source"] for c in first["cells"]] == ["print('hello')"]  # a new notebook has a cell to run
    second = create(client, "second", cells=[code_cell("a", "console.log(1)", "node")])
    listed = client.get("/api/notebooks").json()
    assert {n["name"]: n["cell_count"] for n in listed} == {"first": 1, "second": 1}
    assert listed[0]["name"] == "second"  # the most recently changed first

    renamed = save(client, first, first["cells"], name="  renamed   notebook ")
    assert renamed.status_code == 200, renamed.content
    assert renamed.json()["name"] == "renamed notebook" and renamed.json()["version"] == 2

    copy = client.post(f"/api/notebooks/{second['id']}/duplicate")
    assert copy.status_code == 201 and copy.json()["name"] == "second (copy)"
    assert copy.json()["cells"] == second["cells"] and copy.json()["id"] != second["id"]

    assert client.delete(f"/api/notebooks/{second['id']}").status_code == 204
    assert json_error(client.get(f"/api/notebooks/{second['id']}"), 404)["code"] == "not_found"
    assert sorted(n["name"] for n in client.get("/api/notebooks").json()) == ["renamed notebook", "second (copy)"]


def test_another_users_notebook_is_a_404_for_every_operation(redis_server: Any) -> None:
    owner, other = api(UserFactory()), api(UserFactory())
    notebook = create(owner)
    url = f"/api/notebooks/{notebook['id']}"
    for response in (
        other.get(url),
        save(other, notebook, []),
        other.delete(url),
        other.post(f"{url}/duplicate"),
        other.post(f"{url}/cells/c1/run"),
        other.post(f"{url}/cells/c1/clear"),
        other.get(f"{url}/ipynb"),
    ):
        assert json_error(response, 404)["code"] == "not_found"
    assert owner.get(url).json() == notebook
    assert Run.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ("{", 400, "malformed_body"),
        ('{"name": ""}', 422, "invalid_request"),
        ('{"name": "' + "x" * 101 + '"}', 422, "invalid_request"),
        ('{"name": "n", "cells": {}}', 422, "invalid_request"),
        (json.dumps({"name": "n", "cells": [{"id": f"c{i}"} for i in range(201)]}), 422, "invalid_request"),
        ('{"name": "n", "cells": [{"id": "a"}, {"id": "a"}]}', 422, "duplicate_cell_id"),
        ('{"name": "n", "cells": [{"id": "a", "runtime": "ruby"}]}', 422, "unknown_runtime"),
        ('{"name": "n", "cells": [{"id": "a", "limits": {"memory_mib": -1}}]}', 422, "invalid_limit"),
        ('{"name": "n", "cells": [{"id": "a", "inputs": [{"kind": "dataset", "id": "'
         '00000000-0000-0000-0000-000000000000"}]}]}', 404, "input_not_found"),
    ],
)  # fmt: skip
def test_a_malformed_notebook_body_is_a_json_4xx_and_nothing_is_stored(
    redis_server: Any, body: str, status: int, code: str
) -> None:
    client = api(UserFactory(), raise_request_exception=False)
    response = client.post("/api/notebooks", body, content_type="application/json")
    assert json_error(response, status)["code"] == code
    assert Notebook.objects.count() == 0


def test_a_save_from_a_stale_page_is_refused_not_merged(redis_server: Any) -> None:
    client = api(UserFactory())
    notebook = create(client)
    assert save(client, notebook, [code_cell("c1", "print('tab one')")]).status_code == 200
    stale = save(client, notebook, [code_cell("c1", "print('tab two')")])
    error = json_error(stale, 409)
    assert error["code"] == "notebook_conflict" and error["field"] == "version"
    assert client.get(f"/api/notebooks/{notebook['id']}").json()["cells"][0]["source"] == "print('tab one')"


def test_markdown_cells_are_rendered_and_sanitised_on_the_server(redis_server: Any) -> None:
    client = api(UserFactory())
    source = "# Results\n\n*fast* and `safe`\n\n<script>alert(1)</script>\n\n[x](javascript:alert(1))"
    notebook = create(client, cells=[{"id": "m1", "kind": "markdown", "source": source}, code_cell("c1", "1")])
    html = notebook["cells"][0]["html"]
    assert "<h1>Results</h1>" in html and "<em>fast</em>" in html and "<code>safe</code>" in html
    assert "<script" not in html and "&lt;script&gt;" in html  # shown as text, never run
    assert "href" not in html  # a javascript: link is no link
    assert notebook["cells"][1]["html"] is None
    ran = client.post(f"/api/notebooks/{notebook['id']}/cells/m1/run")
    assert json_error(ran, 422)["code"] == "not_code"


def test_running_a_cell_records_its_run_on_the_server_and_a_save_cannot_undo_it(redis_server: Any) -> None:
    client = api(UserFactory())
    notebook = create(
        client, cells=[code_cell("c1", "print(6 * 7)", limits={"wall_timeout_s": 5}), code_cell("c2", "")]
    )
    ran = client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run")
    assert ran.status_code == 201, ran.content
    run = Run.objects.get(id=ran.json()["id"])
    assert run.code == "print(6 * 7)" and run.limits["wall_timeout_s"] == 5
    stored = client.get(f"/api/notebooks/{notebook['id']}").json()
    assert stored["cells"][0]["last_run_id"] == str(run.id)
    assert stored["version"] == notebook["version"]  # a run is not an edit: an open page can still save

    # A page that had not heard of the run saves the cell (reordered, with last_run_id null).
    cells = [dict(stored["cells"][1]), {**stored["cells"][0], "last_run_id": None}]
    saved = save(client, stored, cells).json()
    assert [c["id"] for c in saved["cells"]] == ["c2", "c1"]
    assert saved["cells"][1]["last_run_id"] == str(run.id)

    Run.objects.filter(id=run.id).update(state="finished", outcome="succeeded")
    cleared = client.post(f"/api/notebooks/{notebook['id']}/cells/c1/clear")
    assert cleared.status_code == 200 and cleared.json()["cells"][1]["last_run_id"] is None
    assert json_error(client.post(f"/api/notebooks/{notebook['id']}/cells/nope/run"), 404)["code"] == "cell_not_found"


def test_an_input_whose_dataset_was_deleted_shows_as_broken_with_a_fix_and_is_refused_when_run(
    redis_server: Any,
) -> None:
    client = api(UserFactory())
    old = upload(client, "people.csv", b"name,age\nada,36\n")
    notebook = create(client, cells=[code_cell("c1", "print(open('/input/people.csv').read())",
                                               inputs=[{"kind": "dataset", "id": old["id"]}])])  # fmt: skip
    assert notebook["cells"][0]["inputs"] == [
        {"kind": "dataset", "id": old["id"], "name": "people.csv", "broken": False, "fix": None}
    ]
    assert client.delete(f"/api/datasets/{old['id']}").status_code == 204
    new = upload(client, "people.csv", b"name,age\ngrace,85\n")

    stored = client.get(f"/api/notebooks/{notebook['id']}").json()
    ref = stored["cells"][0]["inputs"][0]
    assert ref["broken"] is True and ref["name"] == "people.csv"
    assert ref["fix"] == {"kind": "dataset", "id": new["id"], "name": "people.csv"}
    refused = client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run")
    error = json_error(refused, 422)
    assert error["code"] == "broken_input" and "people.csv" in error["message"]
    assert error["field"] == "cells.0.inputs.0"

    # The page saves the cell back as it is: the broken reference stays (shown, never dropped silently).
    kept = save(client, stored, [{**stored["cells"][0], "inputs": [{"kind": "dataset", "id": old["id"]}]}])
    assert kept.json()["cells"][0]["inputs"][0]["broken"] is True
    fixed = save(client, kept.json(), [{**stored["cells"][0], "inputs": [{"kind": "dataset", "id": new["id"]}]}])
    assert fixed.json()["cells"][0]["inputs"][0]["broken"] is False
    assert client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run").status_code == 201


def test_a_dataset_replaced_by_an_upload_of_its_name_is_read_by_new_runs_and_old_runs_keep_theirs(
    redis_server: Any,
) -> None:
    client = api(UserFactory())
    old = upload(client, "people.csv", b"name,age\nada,36\n")
    notebook = create(client, cells=[code_cell("c1", "print(open('/input/people.csv').read())",
                                               inputs=[{"kind": "dataset", "id": old["id"]}])])  # fmt: skip
    before = client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run")
    assert before.status_code == 201, before.content

    taken = client.post("/api/datasets", {"file": SimpleUploadedFile("people.csv", b"name,age\ngrace,85\n")})
    error = json_error(taken, 409)
    assert error["code"] == "duplicate_name" and "replace=true" in error["message"], error
    replaced = client.post("/api/datasets?replace=true",
                           {"file": SimpleUploadedFile("people.csv", b"name,age\ngrace,85\n")})  # fmt: skip
    assert replaced.status_code == 201, replaced.content
    new = replaced.json()
    assert [(d["id"], d["name"]) for d in client.get("/api/datasets").json()] == [(new["id"], "people.csv")]
    assert client.get(f"/api/datasets/{old['id']}").status_code == 404  # no longer one of your datasets

    # The cell still names the old id, and is not broken: a new run reads the new file.
    stored = client.get(f"/api/notebooks/{notebook['id']}").json()
    assert stored["cells"][0]["inputs"][0]["broken"] is False
    after = client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run")
    assert after.status_code == 201, after.content
    assert [str(d.id) for d in Run.objects.get(id=after.json()["id"]).datasets.all()] == [new["id"]]
    by_api = client.post("/api/runs", {"runtime": "python", "code": "1", "dataset_ids": [old["id"]]},
                         content_type="application/json")  # fmt: skip
    assert [str(d.id) for d in Run.objects.get(id=by_api.json()["id"]).datasets.all()] == [new["id"]]
    # The run made before keeps the version it read, still stored.
    kept = Run.objects.get(id=before.json()["id"]).datasets.get()
    assert str(kept.id) == old["id"] and kept.file.read() == b"name,age\nada,36\n"

    # Deleting the dataset deletes the versions it replaced.
    assert client.delete(f"/api/datasets/{new['id']}").status_code == 204
    assert not Dataset.objects.exists()


def test_an_output_purged_before_the_save_is_kept_as_broken_not_refused(redis_server: Any) -> None:
    user: Any = UserFactory()
    client = api(user)
    run = Run.objects.create(owner=user, runtime="python", code="1", state="finished")
    purged = RunOutputFile.objects.create(run=run, name="out/result.csv", size=1, sha256="0" * 64, file="")
    cell = code_cell("c1", "1", inputs=[{"kind": "output", "id": purged.id}])
    notebook = create(client, cells=[cell])  # the page chained it, retention purged it, then autosave
    assert notebook["cells"][0]["inputs"] == [
        {"kind": "output", "id": purged.id, "name": "result.csv", "broken": True, "fix": None}
    ]


def test_clear_waits_for_the_run_and_a_deleted_notebook_is_a_404_not_a_500(redis_server: Any) -> None:
    client = api(UserFactory(), raise_request_exception=False)
    notebook = create(client)
    url = f"/api/notebooks/{notebook['id']}"
    assert client.post(f"{url}/cells/c1/run").status_code == 201  # queued: no worker here
    error = json_error(client.post(f"{url}/cells/c1/clear"), 409)
    assert error["code"] == "run_active" and "stop it first" in error["message"]
    documented = client.get("/api/openapi.json").json()["paths"]["/api/notebooks/{notebook_id}/cells/{cell_id}/clear"]
    assert "409" in documented["post"]["responses"]  # the fuzzer's stateful phase found it missing
    Run.objects.update(state="finished", outcome="cancelled")
    assert client.post(f"{url}/cells/c1/clear").json()["cells"][0]["last_run_id"] is None

    stale = Notebook.objects.get(id=notebook["id"])
    Notebook.objects.filter(id=stale.id).delete()  # another tab deleted it meanwhile
    for call in (
        lambda: notebook_services.notebook_save(notebook=stale, name="n", version=1, cells=[]),
        lambda: notebook_services.cell_run(notebook=stale, cell_id="c1"),
        lambda: notebook_services.cell_clear(notebook=stale, cell_id="c1"),
        lambda: notebook_services.notebook_duplicate(notebook=stale),
    ):
        with pytest.raises(Http404):
            call()


def test_an_input_must_be_the_users_own(redis_server: Any) -> None:
    other = api(UserFactory())
    theirs = upload(other, "secret.csv", b"a\n1\n")
    client = api(UserFactory())
    cell = code_cell("c1", "1", inputs=[{"kind": "dataset", "id": theirs["id"]}])
    response = client.post(
        "/api/notebooks", json.dumps({"name": "n", "cells": [cell]}), content_type="application/json"
    )
    error = json_error(response, 404)
    assert error["code"] == "input_not_found" and "secret" not in error["message"]


def test_scripts_and_notebooks_are_imported_and_a_notebook_exported_as_ipynb(redis_server: Any) -> None:
    client = api(UserFactory(), raise_request_exception=False)
    script = client.post("/api/notebooks/import", {"file": SimpleUploadedFile("clean_up.js", b"console.log(1)\n")})
    assert script.status_code == 201, script.content
    assert script.json()["name"] == "clean_up"
    assert [(c["kind"], c["runtime"], c["source"]) for c in script.json()["cells"]] == [
        ("code", "node", "console.log(1)\n")
    ]
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell("print(2)")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    imported = client.post(
        "/api/notebooks/import", {"file": SimpleUploadedFile("report.ipynb", nbformat.writes(notebook).encode())}
    )
    assert imported.status_code == 201, imported.content
    cells = imported.json()["cells"]
    assert [(c["kind"], c["source"]) for c in cells] == [("markdown", "# Title"), ("code", "print(2)")]
    assert "<h1>Title</h1>" in cells[0]["html"]

    exported = client.get(f"/api/notebooks/{imported.json()['id']}/ipynb")
    assert exported.status_code == 200 and 'filename="report.ipynb"' in exported["Content-Disposition"]
    back = nbformat.reads(exported.content.decode(), as_version=4)
    nbformat.validate(back)
    assert [(c.cell_type, c.source) for c in back.cells] == [("markdown", "# Title"), ("code", "print(2)")]

    long_name = "x" * 150 + ".py"
    imported_long = client.post("/api/notebooks/import", {"file": SimpleUploadedFile(long_name, b"print(1)")})
    assert imported_long.status_code == 201 and imported_long.json()["name"] == "x" * 100

    for name, data, status, code in [
        ("bad.ipynb", b"{not json", 422, "invalid_notebook"),
        ("data.csv", b"a,b\n", 422, "unsupported_file"),
        ("latin.py", "print('é')".encode("latin-1"), 422, None),
    ]:
        error = json_error(client.post("/api/notebooks/import", {"file": SimpleUploadedFile(name, data)}), status)
        assert code is None or error["code"] == code
    assert json_error(client.post("/api/notebooks/import"), 422)["code"] == "file_required"


def test_the_first_visit_makes_a_notebook_and_the_page_is_the_owners_only(redis_server: Any) -> None:
    user: Any = UserFactory()
    client = Client()
    client.force_login(user)
    page = client.get("/playground/")
    notebook = Notebook.objects.get(owner=user)
    assert page.status_code == 302 and page["Location"] == f"/notebooks/{notebook.id}/"
    assert client.get("/playground/")["Location"] == f"/notebooks/{notebook.id}/"  # not a second one
    assert b'data-notebook-id="' + str(notebook.id).encode() in client.get(page["Location"]).content
    other = Client()
    other.force_login(cast(Any, UserFactory()))
    assert other.get(page["Location"]).status_code == 404


def test_the_migration_makes_each_users_one_notebook_their_notebook_1(redis_server: Any) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("playground", "0005_run_peak_file_bytes")], [("playground", "0006_notebooks")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    user = old.get_model("auth", "User").objects.create(username="old-timer")
    dataset = old.get_model("playground", "Dataset").objects.create(
        owner=user, name="d.csv", size=1, sha256="0" * 64, sniffed_type="csv"
    )
    old.get_model("playground", "Notebook").objects.create(owner=user, cells=[
        {"id": "c 1", "runtime": "node", "code": "1", "limits": {"wall_timeout_s": 5},
         "dataset_ids": [str(dataset.id), "not-a-uuid"], "output_ids": [999, "x"], "last_run": None},
        {"id": "c1", "runtime": "python", "code": "2"}, {"id": "c1", "runtime": "python", "code": "3"}])  # fmt: skip
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    try:  # read as the model was then: today's has columns added since
        moved = (
            executor.loader.project_state(after).apps.get_model("playground", "Notebook").objects.get(owner_id=user.id)
        )
    finally:  # the later migrations back, for the tests that follow on this database
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert moved.name == "Notebook 1"
    assert [c["id"] for c in moved.cells] == ["c1", "c2", "c3"]  # valid, and each once: the page can save it
    assert moved.cells[:1] == [{
        "id": "c1", "kind": "code", "runtime": "node", "source": "1", "limits": {"wall_timeout_s": 5},
        "inputs": [{"kind": "dataset", "id": str(dataset.id), "name": "d.csv"},
                   {"kind": "output", "id": 999, "name": ""}],
        "last_run_id": None,
    }]  # fmt: skip


# --- on a real worker: what a cell's run produces -------------------------------------------

PRODUCE = """
import csv, json
with open('/output/people.csv', 'w', newline='') as f:
    w = csv.writer(f); w.writerow(['name', 'age', 'ok'])
    for i in range(120): w.writerow([f'p{i}', 20 + i, i % 2 == 0])
json.dump([{'a': 1, 'b': 'x'}, {'a': 2.5, 'b': None}], open('/output/rows.json', 'w'))
open('/output/pic.svg', 'w').write('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>')
open('/output/notes.txt', 'w').write('hello')
import os; os.mkdir('/output/dir'); open('/output/dir/preview', 'w').write('not a preview')
print('made 5 files')
"""


@pytest.mark.images
@pytest.mark.usefixtures("worker")
def test_outputs_are_previewed_as_typed_tables_images_served_inert_and_stdout_exported() -> None:
    client = api(UserFactory(), raise_request_exception=False)
    notebook = create(client, cells=[code_cell("c1", PRODUCE)])
    run = wait_finished(client, client.post(f"/api/notebooks/{notebook['id']}/cells/c1/run").json()["id"])
    assert run["outcome"] == "succeeded", run
    kinds = {o["name"]: (o["kind"], o["inline_url"] is not None) for o in run["outputs"]}
    assert kinds == {"people.csv": ("table", False), "rows.json": ("table", False), "pic.svg": ("image", True),
                     "notes.txt": ("file", False), "dir/preview": ("file", False)}  # fmt: skip

    base = f"/api/runs/{run['id']}/outputs"
    table = client.get(f"{base}/people.csv/preview?rows=5").json()
    assert table["columns"] == [{"name": "name", "type": "string"}, {"name": "age", "type": "integer"},
                                {"name": "ok", "type": "boolean"}]  # fmt: skip
    assert table["total_rows"] == 120 and table["rows"][0] == ["p0", 20, True] and len(table["rows"]) == 5
    rows = client.get(f"{base}/rows.json/preview").json()
    assert [c["type"] for c in rows["columns"]] == ["number", "string"] and rows["total_rows"] == 2
    assert json_error(client.get(f"{base}/notes.txt/preview"), 422)["code"] == "not_tabular"
    assert json_error(client.get(f"{base}/missing.csv/preview"), 404)["code"] == "not_found"
    named_preview = client.get(f"{base}/dir/preview")  # a file named "preview" is downloaded, not previewed
    assert named_preview.status_code == 200 and b"".join(named_preview.streaming_content) == b"not a preview"  # type: ignore[attr-defined]

    svg = client.get(next(o["inline_url"] for o in run["outputs"] if o["name"] == "pic.svg"))
    assert svg.status_code == 200 and svg["Content-Type"] == "image/svg+xml"
    assert "sandbox" in svg["Content-Security-Policy"] and "script-src" not in svg["Content-Security-Policy"]
    assert svg["Content-Security-Policy"].startswith("default-src 'none'")
    assert svg["X-Content-Type-Options"] == "nosniff"
    not_image = client.get(f"/api/runs/{run['id']}/images/notes.txt")
    assert json_error(not_image, 422)["code"] == "not_an_image"
    other = api(UserFactory(), raise_request_exception=False)
    assert other.get(svg.request["PATH_INFO"]).status_code == 404
    assert other.get(f"{base}/people.csv/preview").status_code == 404

    exported = nbformat.reads(client.get(f"/api/notebooks/{notebook['id']}/ipynb").content.decode(), as_version=4)
    assert exported.cells[0].outputs[0]["text"] == "made 5 files\n"


def test_a_dataset_preview_is_a_typed_table_with_its_text(redis_server: Any) -> None:
    client = api(UserFactory())
    table = upload(client, "scores.tsv", b"who\tscore\nada\t9.5\nalan\t\n")
    preview = client.get(f"/api/datasets/{table['id']}/preview").json()
    assert preview["columns"] == [{"name": "who", "type": "string"}, {"name": "score", "type": "number"}]
    assert preview["rows"] == [["ada", 9.5], ["alan", None]] and preview["total_rows"] == 2
    assert preview["text"].startswith("who\tscore")
    text = upload(client, "readme.txt", b"just words")
    assert client.get(f"/api/datasets/{text['id']}/preview").json() == {
        "columns": [],
        "rows": [],
        "total_rows": 0,
        "total_rows_exact": True,
        "total_rows_at_least": False,
        "text": "just words",
    }


def test_an_imported_notebook_or_script_with_a_nul_character_is_refused_naming_the_cell() -> None:
    client = api(UserFactory())
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("print(1)"), nbformat.v4.new_code_cell("a\0b")]
    )
    upload = SimpleUploadedFile("n.ipynb", nbformat.writes(notebook).encode())
    error = json_error(client.post("/api/notebooks/import", {"file": upload}), 422)
    assert error["field"] == "cells.1.source" and "cell 2: source contains a NUL character" in error["message"], error
    script = SimpleUploadedFile("s.py", b"print(1)\0\n")
    assert "NUL" in json_error(client.post("/api/notebooks/import", {"file": script}), 422)["message"]
    assert not Notebook.objects.exists()


# --- the notebook's runtime, and a deleted cell brought back --------------------------------------


def test_a_notebook_has_a_runtime_for_its_new_cells_set_at_creation_saved_imported_and_exported(
    redis_server: Any,
) -> None:
    client = api(UserFactory())
    assert create(client)["runtime"] == "python"
    node = client.post("/api/notebooks", json.dumps({"name": "js", "runtime": "node"}), content_type="application/json")
    assert node.status_code == 201, node.content
    made = node.json()
    assert made["runtime"] == "node" and [c["runtime"] for c in made["cells"]] == ["node"]  # its starter cell too
    assert "console.log" in made["cells"][0]["source"]
    mixed = create(client, "mixed", [{"id": "m", "kind": "markdown", "runtime": "python", "source": "# x"},
                                     code_cell("c1", "1", runtime="node")])  # fmt: skip
    assert mixed["runtime"] == "node"  # its first code cell's

    # A save may change it (omitted: unchanged); each cell keeps its own runtime.
    saved = save(client, mixed, mixed["cells"], runtime="python").json()
    assert saved["runtime"] == "python" and saved["cells"][1]["runtime"] == "node"
    again = save(client, saved, saved["cells"]).json()
    assert again["runtime"] == "python"
    bad = json_error(save(client, again, again["cells"], runtime="ruby"), 422)
    assert "runtime" in json.dumps(bad)
    copy = client.post(f"/api/notebooks/{made['id']}/duplicate").json()
    assert copy["runtime"] == "node"

    # The export's kernel is the notebook's runtime; an import takes the kernel's (a script its own).
    exported = client.get(f"/api/notebooks/{again['id']}/ipynb").content
    assert nbformat.reads(exported.decode(), as_version=4).metadata["kernelspec"]["language"] == "python"
    back = client.post("/api/notebooks/import", {"file": SimpleUploadedFile("mixed.ipynb", exported)}).json()
    assert back["runtime"] == "python" and [c["runtime"] for c in back["cells"]] == ["python", "node"]
    script = client.post("/api/notebooks/import", {"file": SimpleUploadedFile("s.js", b"console.log(1)\n")}).json()
    assert script["runtime"] == "node"


def test_the_migration_gives_an_existing_notebook_its_first_code_cells_runtime(redis_server: Any) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("playground", "0023_operations_metrics_and_purges")], [("playground", "0024_notebook_runtime")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    user = old.get_model("auth", "User").objects.create(username="old-timer")
    notebooks = old.get_model("playground", "Notebook").objects
    js = notebooks.create(owner=user, name="js", cells=[{"id": "m", "kind": "markdown", "runtime": "python"},
                                                        {"id": "c", "kind": "code", "runtime": "node"}])  # fmt: skip
    empty = notebooks.create(owner=user, name="empty", cells=[])
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    try:
        moved = executor.loader.project_state(after).apps.get_model("playground", "Notebook").objects
        runtimes = {n.name: n.runtime for n in moved.filter(id__in=[js.id, empty.id])}
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert runtimes == {"js": "node", "empty": "python"}


def test_a_deleted_cell_brought_back_by_the_page_takes_its_own_last_run_again_and_nothing_else(
    redis_server: Any,
) -> None:
    owner = UserFactory()
    client = api(owner)
    notebook = create(client, cells=[code_cell("c1", "1"), code_cell("c2", "2")])
    other = create(client, "other", cells=[code_cell("c2", "2")])
    runs = {}
    for book, cell in ((notebook, "c1"), (notebook, "c2"), (other, "c2")):
        ran = client.post(f"/api/notebooks/{book['id']}/cells/{cell}/run")
        assert ran.status_code == 201, ran.content
        runs[(book["id"], cell)] = ran.json()["id"]
    stored = client.get(f"/api/notebooks/{notebook['id']}").json()
    c1, c2 = stored["cells"]

    # Deleted (saved without it), then brought back with the last run the page kept: it is its own.
    without = save(client, stored, [c1]).json()
    assert [c["id"] for c in without["cells"]] == ["c1"]
    back = save(client, without, [c1, c2]).json()
    assert back["cells"][1]["last_run_id"] == runs[(notebook["id"], "c2")]

    # Never a run of another notebook's cell, nor of another cell of this one, nor a new cell's claim.
    without = save(client, back, [c1]).json()
    stolen = {**c2, "last_run_id": runs[(other["id"], "c2")]}
    swapped = {**c2, "last_run_id": runs[(notebook["id"], "c1")]}
    for claim in (stolen, swapped, {**c2, "id": "c3"}):
        answer = save(client, without, [c1, claim]).json()
        assert answer["cells"][1]["last_run_id"] is None, claim
        without = save(client, answer, [c1]).json()
    assert Run.objects.filter(id__in=runs.values()).count() == 3
