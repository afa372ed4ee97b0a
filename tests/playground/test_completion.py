"""Completion without a run: POST /api/notebooks/{id}/complete answers from the state a cell would
start from (what the cell program recorded: a frame's columns, a dict's keys, a function's
signature), the image's module index (built with the image) and the cell's code above the cursor;
bounded on bad input, never another user's names, never a run."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client

from playground.completion import MAX_MATCHES, SCAN_BUDGET_S, Index, State, complete
from playground.displays import clean_manifest
from playground.models import Run
from playground.selectors.completion import image_index
from tests.playground.conftest import api
from tests.playground.factories import UserFactory
from tests.playground.test_notebook_kernel import run_all
from tests.playground.test_notebooks import code_cell, create

INDEX = Index.from_json({
    "modules": {
        "numpy": [["array", "function", "(object, dtype=None)", "Create an array."],
                  ["random", "module", "", "", "numpy.random"]],
        "numpy.random": [["rand", "function", "(d0, d1, ..., dn)", "Random values in a given shape."]],
        "pandas": [["DataFrame", "class", "(data=None)", "Two-dimensional data.", "pandas.core.frame.DataFrame"]],
    },
    "classes": {"pandas.core.frame.DataFrame": [["head", "method", "(n=5)", "Return the first n rows."]]},
    "importable": ["numpy", "pandas", "scipy"],
})  # fmt: skip
STATE = State(
    variables=[{"name": "df", "type": "DataFrame", "module": "pandas.core.frame"},
               {"name": "conf", "type": "dict", "module": "builtins"},
               {"name": "add", "type": "function", "module": "__main__"}],
    modules={"np": "numpy"},
    completion={"names": {"df": {"attributes": [["price", "column"], ["city name", "column"]]},
                          "conf": {"attributes": [["alpha", "key"]]},
                          "add": {"attributes": [], "signature": "(x, y=2)", "doc": "Adds."}},
                "types": {"pandas.core.frame.DataFrame": [["head", "method"], ["shape", "property"]]}},
)  # fmt: skip


def texts(code: str, state: State = STATE, runtime: str = "python") -> list[str]:
    answer = complete(code=code, cursor=len(code), runtime=runtime, state=state, index=INDEX)
    return [match["text"] for match in answer["matches"]]


def test_a_carried_frame_completes_its_columns_first_then_its_methods_with_their_signatures() -> None:
    assert texts("df.") == ["price", "head", "shape"]  # "city name" is no attribute
    answer = complete(code="x = df.he", cursor=9, runtime="python", state=STATE, index=INDEX)
    assert answer["matches"] == [{"text": "head", "kind": "method", "signature": "(n=5)",
                                  "doc": "Return the first n rows."}]  # fmt: skip
    assert answer["replace"] == 2
    assert texts("df['ci") == ["city name"] and texts('conf["') == ["alpha"]


def test_modules_complete_from_the_index_through_aliases_imports_and_submodules() -> None:
    assert texts("np.") == ["array", "random"] and texts("np.random.r") == ["rand"]
    assert texts("import pandas as pd\npd.") == ["DataFrame"]
    assert texts("from pandas import DataFrame as Frame\nFrame.") == ["head"]
    assert texts("import nu") == ["numpy"] and texts("import numpy.r") == ["numpy.random"]
    assert texts("from numpy import ar") == ["array"]
    assert texts("import sc") == ["scipy"]  # importable, though not indexed


def test_names_come_from_the_state_the_code_above_and_the_builtins() -> None:
    code = "rows, total = [], 0\nfor item, value in pairs:\n    pass\ndef scale(factor, *extra, base=1):\n    "
    assert {"rows", "total", "item", "value", "scale", "factor", "extra", "base"} <= set(texts(code))
    assert texts("f(x=1)\nx") == []  # a keyword argument binds nothing
    assert "obj" not in texts("obj.attr = 1\nob") and texts("obj.attr = 1\nob") == ["object"]
    assert texts("pri") == ["print"] and texts("ad") == ["add"]
    assert texts("whi") == ["while"]
    answer = complete(code="add(", cursor=4, runtime="python", state=STATE, index=INDEX)
    assert answer["call"] == {"name": "add", "signature": "(x, y=2)", "doc": "Adds."}
    answer = complete(code="df.head(3, ", cursor=11, runtime="python", state=STATE, index=INDEX)
    assert answer["call"] == {"name": "df.head", "signature": "(n=5)", "doc": "Return the first n rows."}


def test_private_names_come_last_unless_asked_for_and_javascript_gets_its_own_names() -> None:
    state = State(variables=[{"name": "_hidden", "type": "int"}, {"name": "shown", "type": "int"}])
    assert texts("", state)[0] == "shown"  # before the builtins, and _hidden after them
    assert texts("_h", state) == ["_hidden"]
    assert texts("const total = 1;\nlet tally;\nta", State(), "node") == ["tally"]
    assert texts("tot", State(variables=[{"name": "total"}]), "node") == ["total"]
    assert texts("obj.x", State(), "node") == []


@pytest.mark.parametrize(
    "code",
    [
        *("a." * 200_000 + "b", "(" * 500_000, "'''" + "x" * 1_000_000, "x_1 = 1\n" * 100_000),
        *("[" * 199 + "\n" * 5000, "a = 1;" * 150_000 + "\nb", "from " + "a." * 100_000 + " import b"),
    ],
    ids=["attribute chain", "open parens", "open string", "many lines", "deep brackets", "many tokens", "long import"],
)
def test_bad_input_is_answered_within_its_bound(code: str) -> None:
    # The work's own CPU time (this thread's), not the wall clock: a loaded CI machine may leave the
    # thread waiting for a core, and the bound is on what the answer costs, not on the neighbours.
    started = time.thread_time()
    answer = complete(code=code, cursor=len(code), runtime="python", state=STATE, index=INDEX)
    assert time.thread_time() - started < SCAN_BUDGET_S + 0.5
    assert len(answer["matches"]) <= MAX_MATCHES


def test_a_manifest_of_100000_names_is_cleaned_to_its_caps_and_completes_within_its_bound() -> None:
    many = [[f"a{j}", "attribute"] for j in range(600)]
    names = {f"n{i}": {"attributes": many if i < 600 else [], "signature": "s" * 10_000} for i in range(100_000)}
    raw = {"variables": [{"name": f"n{i}", "type": "int"} for i in range(100_000)],
           "completion": {"names": names, "types": {f"t{i}": [["x" * 500, "method"], ["ok", "odd kind"]]
                                                    for i in range(1000)}}}  # fmt: skip
    manifest = clean_manifest(text=json.dumps(raw))["manifest"]
    kept = manifest["completion"]
    assert len(kept["names"]) == 500 and all(len(e["attributes"]) == 500 for e in kept["names"].values())
    assert len(kept["names"]["n0"]["signature"]) < 400
    assert len(kept["types"]) == 100 and all(attributes == [] for attributes in kept["types"].values())
    started = time.thread_time()
    answer = complete(code="n", cursor=1, runtime="python", state=State.from_manifest(manifest), index=INDEX)
    assert time.thread_time() - started < 0.5 and len(answer["matches"]) == MAX_MATCHES


@pytest.mark.django_db
def test_the_endpoint_checks_its_body_and_answers_only_for_the_owners_notebook() -> None:
    owner, other = api(UserFactory()), api(UserFactory())
    notebook = create(owner, cells=[code_cell("a", "x = 1")])
    url = f"/api/notebooks/{notebook['id']}/complete"
    answered = owner.post(url, {"cell_id": "a", "code": "import nu", "cursor": 9}, content_type="application/json")
    assert answered.status_code == 200, answered.content
    assert answered.json()["replace"] == 2
    assert (
        other.post(url, {"cell_id": "a", "code": "x", "cursor": 1}, content_type="application/json").status_code == 404
    )
    bad = [{"cell_id": "a", "code": "x"}, {"cell_id": "a", "code": "x", "cursor": -1},
           {"cell_id": "a b", "code": "x", "cursor": 0}, {"cell_id": "a", "code": "x" * (2 << 20), "cursor": 0},
           {"cell_id": "a", "code": "x", "cursor": 10 << 20}, {"cell_id": "a", "code": 5, "cursor": 0},
           {"cell_id": "a", "code": "x", "cursor": False}, {"cell_id": "a", "code": "x", "cursor": "1"},
           {"cell_id": "a", "code": "x", "cursor": 1, "above_cell_id": 3}]  # fmt: skip
    for body in bad:
        assert owner.post(url, body, content_type="application/json").status_code == 422, body
    assert not Run.objects.exists()  # nothing ran


@pytest.mark.images
def test_the_python_image_carries_its_module_index() -> None:
    index = image_index("python")
    assert index is not None, "the python image was built without usr/lib/cordon/completion.json"
    members = {row[0]: row for row in index.modules["numpy"]}
    assert members["array"][1:4] == ["function", members["array"][2], "Create an array."]
    assert members["array"][2].startswith("(object, dtype=None")
    frame = {row[0]: row for row in index.classes["pandas.core.frame.DataFrame"]}
    assert frame["head"][2].startswith("(n") and frame["shape"][1] == "property"
    assert {"numpy", "pandas", "matplotlib", "sklearn"} <= set(index.importable)


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.images
@pytest.mark.usefixtures("worker")
def test_a_run_cell_records_what_the_next_cell_completes_and_another_user_never_sees_it() -> None:
    owner = api(UserFactory())
    source = (
        "import pandas as pd, numpy as np\nsales = pd.DataFrame({'price': [1, 2], 'units': [3, 4]})\n"
        "conf = {'alpha': 1, 'beta': 2}\ndef scale(x, factor=2):\n    'Scale x.'\n    return x * factor"
    )
    notebook = create(owner, cells=[code_cell("a", source), code_cell("b", ""), code_cell("c", "extra = 1")])
    first, last = run_all(owner, {**notebook, "cells": [notebook["cells"][0], notebook["cells"][2]]})
    assert first["outcome"] == last["outcome"] == "succeeded"
    url = f"/api/notebooks/{notebook['id']}/complete"

    def ask(client: Client, code: str, cell_id: str = "b", **more: str) -> dict[str, Any]:
        body = {"cell_id": cell_id, "code": code, "cursor": len(code), **more}
        answered = client.post(url, body, content_type="application/json")
        assert answered.status_code == 200, answered.content
        return dict(answered.json())

    def names(answer: dict[str, Any]) -> list[str]:
        return [m["text"] for m in answer["matches"]]

    # A cell starts from the state the cells above it leave: b from a's, not c's; a cell added and
    # not saved yet from the state of the cell above it on the page, or the notebook's last.
    assert "extra" not in names(ask(owner, "ext")) and "sales" in names(ask(owner, "sal"))
    assert "extra" not in names(ask(owner, "ext", "new", above_cell_id="a"))
    assert names(ask(owner, "sales.", "new", above_cell_id="b"))[:2] == ["price", "units"]
    assert "extra" in names(ask(owner, "ext", "new", above_cell_id="c")) and "extra" in names(ask(owner, "ext", "new"))

    matches = ask(owner, "sales.")["matches"]
    assert [m["text"] for m in matches[:2]] == ["price", "units"]
    head = next(m for m in matches if m["text"] == "head")
    assert head["kind"] == "method" and head["signature"].startswith("(n") and head["doc"]
    assert [m["text"] for m in ask(owner, "conf['")["matches"]] == ["alpha", "beta"]
    assert ask(owner, "scale(")["call"] == {"name": "scale", "signature": "(x, factor=2)", "doc": "Scale x."}
    array = next(m for m in ask(owner, "np.arr")["matches"] if m["text"] == "array")
    assert array["signature"].startswith("(object")
    assert Run.objects.count() == 2  # completion ran nothing

    stranger = api(UserFactory())
    mine = create(stranger, cells=[code_cell("b", "")])
    answered = stranger.post(f"/api/notebooks/{mine['id']}/complete", {"cell_id": "b", "code": "sa", "cursor": 2},
                             content_type="application/json")  # fmt: skip
    assert "sales" not in [m["text"] for m in answered.json()["matches"]]
