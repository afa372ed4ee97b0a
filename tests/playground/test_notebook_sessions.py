"""Notebook sessions over the API, through a real Celery worker and the namespace engine: the
notebook's own inputs in every cell, state that flows from each cell to the one below it as data
(each cell still its own run), displays like Jupyter's, what did not carry, stale cells after an
earlier cell changed, Restart, the export's outputs, and no user ever reaching another's state."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from django.db import transaction
from django.test import Client

from playground.models import Run, RunCell
from runner.spec import SESSION_DIR, Outcome, OutputFile, RunResult
from tests.playground.conftest import api, json_error
from tests.playground.factories import UserFactory
from tests.playground.test_notebooks import code_cell, create, save, upload
from tests.playground.test_runs_end_to_end import wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]

TABLE = "application/vnd.cordon.table+json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython's colours
SALES = b"region,units\nnorth,3\nsouth,5\neast,7\n"
CELLS = [
    code_cell("load", "import pandas as pd\ndf = pd.read_csv('/input/sales.csv')"),
    code_cell("count", "n = len(df)"),
    code_cell("show", "print(n + 1)"),
    code_cell("describe", "df.describe()"),
    code_cell("answer", "6 * 7"),
    code_cell("handle", "fh = open('/etc/hostname')\nkept = 'yes'"),
]


def run_cell(client: Client, notebook: dict[str, Any], cell_id: str) -> dict[str, Any]:
    response = client.post(f"/api/notebooks/{notebook['id']}/cells/{cell_id}/run")
    assert response.status_code == 201, response.content
    return wait_finished(client, response.json()["id"], timeout=120)


def run_all(client: Client, notebook: dict[str, Any]) -> dict[str, dict[str, Any]]:
    runs = {}
    for cell in CELLS:
        run = run_cell(client, notebook, cell["id"])
        assert run["outcome"] == "succeeded", (cell["id"], run["reason"], stderr(client, run))
        runs[cell["id"]] = run
    return runs


def stderr(client: Client, run: dict[str, Any]) -> str:
    return str(client.get(f"/api/runs/{run['id']}/log?stream=stderr").json()["data"])


def stdout(client: Client, run: dict[str, Any]) -> str:
    return str(client.get(f"/api/runs/{run['id']}/log?stream=stdout").json()["data"])


def notebook_with_sales(client: Client, data: bytes = SALES) -> dict[str, Any]:
    dataset = upload(client, "sales.csv", data)
    notebook = create(client, cells=CELLS)
    saved = save(client, notebook, CELLS, dataset_ids=[dataset["id"]])
    assert saved.status_code == 200, saved.content
    assert [i["name"] for i in saved.json()["inputs"]] == ["sales.csv"]
    return saved.json()


@pytest.mark.usefixtures("worker")
def test_state_flows_down_the_cells_with_displays_and_what_did_not_carry_said() -> None:
    client = api(UserFactory())
    notebook = notebook_with_sales(client)
    runs = run_all(client, notebook)

    assert stdout(client, runs["show"]) == "4\n"  # n carried from the cell above it, df from the first
    table = runs["describe"]["displays"]
    assert [d["mime"] for d in table] == [TABLE]
    columns = [c["name"] for c in table[0]["table"]["columns"]]
    assert columns == ["", "units"] and table[0]["table"]["rows"][0][0] == "count"
    assert runs["answer"]["displays"] == [{"mime": "text/plain", "text": "42", "plain": "42", "html": None,
                                           "table": None, "url": None, "result": 5}]  # fmt: skip
    assert runs["load"]["displays"] == [] and stdout(client, runs["load"]) == ""

    handle = runs["handle"]["cell"]
    assert [(c["name"], c["why"]) for c in handle["not_carried"]] == [("fh", "open file")]
    names = {v["name"] for v in handle["variables"]}
    assert {"df", "n", "kept"} <= names and "fh" not in names
    assert handle["state_bytes"] and handle["state_from"] == str(runs["answer"]["id"])
    assert runs["load"]["cell"]["state_from"] is None  # the first cell starts from nothing

    view = client.get(f"/api/notebooks/{notebook['id']}").json()
    assert not any(cell["stale"] for cell in view["cells"])
    assert view["cells"][2]["starts_from"]["cell_id"] == "count"
    assert view["cells"][0]["starts_from"] is None
    frame = next(v for v in view["state"]["variables"] if v["name"] == "df")
    assert frame["type"] == "DataFrame" and frame["shape"] == [3, 2] and frame["table"]["total_rows"] == 3
    # Each cell stayed its own run, with its own record and cleanup, and what making its displays safe took.
    assert all(Run.objects.get(id=r["id"]).cleanup_ok for r in runs.values())
    assert all(0 <= r["timings"]["clean_s"] < 2 for r in runs.values()), [r["timings"] for r in runs.values()]


@pytest.mark.usefixtures("worker")
def test_rerunning_the_first_cell_on_changed_data_makes_the_cells_below_stale_until_they_run_again() -> None:
    client = api(UserFactory())
    notebook = notebook_with_sales(client)
    run_all(client, notebook)
    upload_changed = client.post(
        "/api/datasets?replace=true", {"file": _file("sales.csv", b"region,units\nnorth,3\nsouth,5\n")}
    )
    assert upload_changed.status_code in (200, 201), upload_changed.content

    run_cell(client, notebook, "load")
    view = client.get(f"/api/notebooks/{notebook['id']}").json()
    stale = {cell["id"]: cell["stale"] for cell in view["cells"]}
    assert stale == {"load": False, "count": True, "show": True, "describe": True, "answer": True, "handle": True}
    assert "cell 1 ran since" in view["cells"][1]["stale_why"]
    assert "is stale" in view["cells"][2]["stale_why"]

    run_cell(client, notebook, "count")
    assert stdout(client, run_cell(client, notebook, "show")) == "3\n"  # the new answer
    view = client.get(f"/api/notebooks/{notebook['id']}").json()
    assert [c["stale"] for c in view["cells"][:3]] == [False, False, False]
    assert view["cells"][3]["stale"]  # not rerun yet


@pytest.mark.usefixtures("worker")
def test_a_failed_cell_passes_down_what_it_bound_before_its_error_as_a_kernel_keeps_it() -> None:
    client = api(UserFactory())
    cells = [code_cell("a", "x = 1"), code_cell("b", "x = 2\nraise ValueError('no')\ny = 3"),
             code_cell("c", "print(x, 'y' in dir())")]  # fmt: skip
    notebook = create(client, cells=cells)
    run_cell(client, notebook, "a")
    failed = run_cell(client, notebook, "b")
    assert failed["outcome"] == "failed" and failed["cell"]["state_bytes"] is not None
    error = failed["cell"]["error"]
    assert (error["ename"], error["evalue"], error["line"]) == ("ValueError", "no", 2)
    assert "ValueError: no" in ANSI.sub("", stderr(client, failed)) and "cordon" not in stderr(client, failed)
    third = run_cell(client, notebook, "c")
    assert stdout(client, third) == "2 False\n" and third["cell"]["state_from"] == str(failed["id"])
    # Killed by a limit, a cell passes nothing: the next starts from the state before it.
    cells[1] = code_cell("b", "x = 5\nwhile True: pass", limits={"wall_timeout_s": 2})
    saved = save(client, client.get(f"/api/notebooks/{notebook['id']}").json(), cells)
    assert saved.status_code == 200, saved.content
    stopped = run_cell(client, notebook, "b")
    assert stopped["outcome"] == "timed_out" and stopped["cell"]["state_bytes"] is None
    assert stdout(client, run_cell(client, notebook, "c")) == "1 False\n"


@pytest.mark.usefixtures("worker")
def test_restart_starts_every_cell_from_nothing_until_the_cells_above_run_again() -> None:
    client = api(UserFactory())
    notebook = create(client, cells=[code_cell("a", "x = 41"), code_cell("b", "print(x + 1)")])
    run_cell(client, notebook, "a")
    assert stdout(client, run_cell(client, notebook, "b")) == "42\n"
    restarted = client.post(f"/api/notebooks/{notebook['id']}/restart").json()
    assert [c["stale"] for c in restarted["cells"]] == [True, True]
    assert restarted["cells"][1]["starts_from"] is None and restarted["state"]["variables"] == []
    after = run_cell(client, notebook, "b")
    assert after["outcome"] == "failed" and "NameError" in stderr(client, after)


@pytest.mark.usefixtures("worker")
def test_a_runtime_change_between_cells_starts_from_nothing_and_says_so() -> None:
    client = api(UserFactory())
    cells = [code_cell("py", "x = 1"), code_cell("js", "console.log(typeof x)", runtime="node")]
    notebook = create(client, cells=cells)
    run_cell(client, notebook, "py")
    view = client.get(f"/api/notebooks/{notebook['id']}").json()
    assert view["cells"][1]["starts_from"] is None and "python" in view["cells"][1]["fresh_start"]


@pytest.mark.usefixtures("worker")
def test_two_users_never_see_each_others_state() -> None:
    alice, bob = api(UserFactory()), api(UserFactory())
    theirs = create(alice, cells=[code_cell("a", "secret = 'alice-only'"), code_cell("b", "print(secret)")])
    ran = run_cell(alice, theirs, "a")
    mine = create(bob, cells=[code_cell("a", "print(globals().get('secret'))")])
    assert stdout(bob, run_cell(bob, mine, "a")) == "None\n"
    assert json_error(bob.get(f"/api/runs/{ran['id']}"), 404)["code"] == "not_found"
    assert json_error(bob.post(f"/api/notebooks/{theirs['id']}/cells/b/run"), 404)["code"] == "not_found"
    # The state exists only as Alice's run's file; nothing serves it, to her or anyone.
    record = RunCell.objects.get(run_id=ran["id"])
    assert record.state_file and record.run.owner.username == Run.objects.get(id=ran["id"]).owner.username
    for client in (alice, bob):
        assert client.get(f"/api/runs/{ran['id']}/outputs/.cordon/state").status_code == 404


@pytest.mark.usefixtures("worker")
def test_the_export_carries_displays_figures_streams_and_the_error_of_each_cell() -> None:
    client = api(UserFactory())
    cells = [
        code_cell("plot", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nprint('drawn')"),
        code_cell("value", "{'a': 1}"),
        code_cell("boom", "1 / 0"),
    ]
    notebook = create(client, cells=cells)
    for cell in cells:
        run_cell(client, notebook, cell["id"])
    exported = client.get(f"/api/notebooks/{notebook['id']}/ipynb")
    document = nbformat.reads(exported.content.decode(), as_version=4)
    nbformat.validate(document)
    plot, value, boom = (cell.outputs for cell in document.cells)
    assert {"output_type": "stream", "name": "stdout", "text": "drawn\n"} in plot
    assert any("image/png" in output.get("data", {}) for output in plot)
    assert value[0]["data"]["text/plain"] == "{'a': 1}"
    error = next(output for output in boom if output["output_type"] == "error")
    assert error["ename"] == "ZeroDivisionError" and error["traceback"]

    # And back: the import keeps what a page can show, the figure served like a run's image.
    response = client.post("/api/notebooks/import", {"file": _file("back.ipynb", exported.content)})
    assert response.status_code == 201, response.content
    plot_in, value_in, boom_in = (cell["imported"] for cell in response.json()["cells"])
    assert {"mime": "text/plain", "text": "drawn\n", "plain": "", "stream": "stdout", "html": None, "url": None,
            "error": None} in plot_in  # fmt: skip
    image = next(output for output in plot_in if output["mime"] == "image/png")
    served = client.get(image["url"])
    assert served.status_code == 200 and served["Content-Type"] == "image/png"
    assert b"".join(served.streaming_content).startswith(b"\x89PNG")  # type: ignore[attr-defined]
    assert value_in[0]["text"] == "{'a': 1}"
    assert boom_in[-1]["error"]["ename"] == "ZeroDivisionError" and "ZeroDivisionError" in boom_in[-1]["text"]
    assert len(boom_in) == 1  # the traceback once, as the error; not again as stderr


def test_an_import_keeps_the_outputs_a_page_can_show_made_safe_and_nothing_else(redis_server: Any) -> None:
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="out\n"),
        nbformat.v4.new_output(
            "display_data", data={"text/html": "<b>bold</b><script>alert(1)</script>", "text/plain": "bold"}
        ),
        nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "alert(1)"}),
        nbformat.v4.new_output("error", ename="KeyError", evalue="'x'", traceback=["\x1b[0;31mKeyError\x1b[0m: 'x'"]),
    ]
    document = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=outputs)])
    client = api(UserFactory())
    response = client.post("/api/notebooks/import", {"file": _file("in.ipynb", nbformat.writes(document).encode())})
    assert response.status_code == 201, response.content
    kept = response.json()["cells"][0]["imported"]
    assert [o["mime"] for o in kept] == ["text/plain", "text/html", "image/png", "text/plain"]  # no javascript
    assert (
        kept[1]["text"] == "<b>bold</b>"
        and kept[3]["text"] == "KeyError: 'x'"
        and kept[3]["error"]["ename"] == "KeyError"
    )
    assert client.get(kept[2]["url"]).status_code == 200
    # A save keeps them (they are the server's, like last_run_id); another user cannot read them.
    notebook = response.json()
    resaved = save(client, notebook, [{k: v for k, v in c.items() if k in ("id", "kind", "runtime", "source")}
                                       for c in notebook["cells"]]).json()  # fmt: skip
    assert resaved["cells"][0]["imported"] == kept
    assert api(UserFactory()).get(kept[2]["url"]).status_code == 404
    assert client.delete(f"/api/notebooks/{notebook['id']}").status_code == 204


def _file(name: str, data: bytes) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data)


def test_displays_from_a_hostile_manifest_are_sanitised_capped_and_never_trusted() -> None:
    from playground.displays import clean_manifest

    manifest = {
        "displays": [
            {"data": {"text/html": "<p onclick='x()'>hi</p><script>alert(1)</script><img src='http://evil/x.png'>",
                      "text/plain": "hi"}},
            {"data": {"text/plain": "x" * (1 << 17)}},
            {"data": {"image/png": {"file": "../../etc/passwd"}, "text/plain": "<img>"}},
            {"data": {TABLE: {"columns": ["a"], "dtypes": ["int64"], "index": ["0"], "rows": [[1e400]]}}},
            "not a display",
        ] * 30,
        "variables": [{"name": "df", "type": "DataFrame", "shape": [1, -5], "bytes": "many"}],
        "error": {"ename": "E", "evalue": "v", "traceback": ["\0line"]},
    }  # fmt: skip
    cleaned = clean_manifest(text=json.dumps(manifest))
    displays = cleaned["displays"]
    assert len(displays) == 100 - 20  # at most 100 read, the 20 "not a display" among them dropped
    html = displays[0]["text"]
    assert "script" not in html and "onclick" not in html and "evil" not in html and "<p>hi</p>" in html
    assert len(displays[1]["text"]) < (1 << 17)  # text/plain shown is capped
    assert displays[2]["mime"] == "text/plain"  # a path that is not a session file's name is no image
    assert displays[3]["table"]["rows"] == [["0", "inf"]] and displays[3]["table"]["columns"][1]["type"] == "integer"
    variable = cleaned["manifest"]["variables"][0]
    assert variable["shape"] == [1, 0] and variable["bytes"] is None
    assert cleaned["manifest"]["error"]["traceback"] == ["\ufffdline"]
    assert clean_manifest(text="[1, 2")["manifest"]["problem"].startswith("the cell's manifest is not JSON")


def test_a_display_shows_only_the_image_file_the_cell_program_wrote_for_it() -> None:
    from playground.displays import clean_manifest

    def shown(mime: str, name: str) -> dict[str, Any]:
        manifest = {"displays": [{"data": {mime: {"file": name}, "text/plain": "<Figure>"}}]}
        [display] = clean_manifest(text=json.dumps(manifest))["displays"]
        return display

    assert shown("image/png", "display-1.png") == {"mime": "image/png", "file": "display-1.png", "plain": "<Figure>",
                                                   "at": None}  # fmt: skip
    assert shown("image/svg+xml", "display-12.svg")["file"] == "display-12.svg"
    # The cell's state, its manifest, a file it carries, an image of another type: its text instead.
    names = ["state", "cell.json", "notes.png", "display-1.svg", "display-1.png/"]
    refused = [("image/png", name) for name in names] + [("image/jpeg", "display-0.jpeg")]
    for mime, name in refused:
        assert shown(mime, name) == {"mime": "text/plain", "text": "<Figure>", "plain": "<Figure>", "at": None}, name
    twice = {"data": {"image/png": {"file": "display-3.png"}, "text/plain": "again"}}
    displays = clean_manifest(text=json.dumps({"displays": [twice, twice]}))["displays"]
    assert [d["mime"] for d in displays] == ["image/png", "text/plain"]  # one file, shown once


def test_a_manifest_naming_the_cells_state_as_its_image_never_gets_it_served(tmp_path: Path) -> None:
    """What a cell left, as its run's end stores it: its state file, a figure, and a manifest (the
    sandbox's writing) whose displays name the state, the manifest and the figure as PNGs."""
    from playground.services.cells import cell_finish_read, cell_finish_store
    from playground.services.execution import run_claim

    owner: Any = UserFactory()
    client = api(owner)
    notebook = create(client, cells=[code_cell("c", "1")])
    run = Run.objects.create(owner=owner, runtime="python", code="1", limits={})
    RunCell.objects.create(run=run, notebook_id=notebook["id"], cell_id="c")
    claimed = run_claim(run_id=str(run.id), worker="here")
    assert claimed is not None
    session = tmp_path / SESSION_DIR
    session.mkdir()
    png = b"\x89PNG\r\n\x1a\n" + b"figure"
    names = ("state", "cell.json", "display-3.png")
    manifest = {"displays": [{"data": {"image/png": {"file": name}, "text/plain": f"<{name}>"}} for name in names]}
    files = {"state": b"pickled secrets", "cell.json": json.dumps(manifest).encode(), "display-3.png": png}
    for name, data in files.items():
        (session / name).write_bytes(data)
    result = RunResult(outcome=Outcome.SUCCEEDED, run_id="r", exit_code=0, session=[
        OutputFile(name, len(data), hashlib.sha256(data).hexdigest()) for name, data in files.items()])  # fmt: skip
    with transaction.atomic():
        cell_finish_store(run=claimed, finish=cell_finish_read(result=result, exported=tmp_path), result=result,
                          exported=tmp_path)  # fmt: skip
    shown = RunCell.objects.get(run=run).displays
    assert [d["mime"] for d in shown] == ["text/plain", "text/plain", "image/png"]
    assert [d.get("text") for d in shown[:2]] == ["<state>", "<cell.json>"]
    assert client.get(f"/api/runs/{run.id}/displays/0").status_code == 404
    figure = client.get(f"/api/runs/{run.id}/displays/2")
    assert (figure.status_code, figure["Content-Type"], figure.getvalue()) == (200, "image/png", png)


def test_a_cells_displays_are_made_safe_within_its_own_budget_and_what_is_dropped_is_said() -> None:
    """The tester's cell.json of nested HTML: its cleaning stops at the cell's budget of CPU, keeps
    the displays made safe so far, and says how many were not shown and why; an HTML display of
    more tags than a page needs is shown as its text."""
    from playground.displays import HTML_MAX_TAGS, clean_bounded, clean_budget_s, clean_manifest

    nested = "<div>" * 8000 + "x" + "</div>" * 8000  # about 0.1 s of sanitising each, here
    manifest = {"displays": [{"data": {"text/html": nested, "text/plain": f"plain {n}"}} for n in range(100)]}
    text = json.dumps(manifest)
    cleaned = clean_manifest(text=text, budget_s=0.3)
    shown, note = len(cleaned["displays"]), cleaned["manifest"]["displays_note"]
    assert 1 <= shown < 100 and cleaned["manifest"]["displays_dropped"] == 100 - shown
    assert note == f"{100 - shown} displays not shown: making them safe to show took more than this cell's budget " \
                   "(0.3 s of CPU)"  # fmt: skip
    assert 0.3 <= cleaned["clean_s"] < 0.3 + 1.0  # charged to the run: the budget and one display's cleaning at most
    # In the bounded child (a manifest over 64 KiB), the same: what was made safe, and why the rest was not.
    child = clean_bounded(text.encode(), budget_s=0.3)
    assert 1 <= len(child["displays"]) < 100 and "0.3 s of CPU" in child["manifest"]["displays_note"]
    # Everything within a budget that suffices; the budget is what the cell's limits left it, within bounds.
    assert len(clean_manifest(text=json.dumps({"displays": manifest["displays"][:3]}), budget_s=60)["displays"]) == 3
    assert (clean_budget_s(30, 0.06), clean_budget_s(1, 0.9), clean_budget_s(1, 5)) == (2.0, 0.25, 0.25)
    deep = "<b>" * (HTML_MAX_TAGS + 1)
    [plain] = clean_manifest(text=json.dumps({"displays": [{"data": {"text/html": deep, "text/plain": "p"}}]}))[
        "displays"
    ]
    assert (plain["mime"], plain["text"]) == ("text/plain", "p")
