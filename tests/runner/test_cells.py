"""Notebook cells through the supervisor on every engine: the python image's cell program restores
what the cell before left, runs the cell through IPython (its last expression and display()s shown
as Jupyter's mime bundles), and leaves what a kernel would keep as a state file, which only ever
runs inside a sandbox (runner.cells). The kernel's own behaviour (magics, history, figures, random
states, tracebacks) is in test_cells_kernel.py."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from runner.spec import SESSION_DIR, STATE_FILE, Outcome
from tests.runner.cell_runs import ANSI, Cells

pytestmark = pytest.mark.images

# A 1x1 PNG, as a display's _repr_png_ returns it.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
TABLE = "application/vnd.cordon.table+json"


def crafted_state(path: Path, pickles: dict[str, bytes], modules: dict[str, str] | None = None) -> Path:
    """A state file in the cell program's format (cordon_state's docstring), from pickles made here
    (each memoizes nothing another refers to, so their memo slots need not line up)."""
    entries = [{"name": name, "pickle": len(data), "buffers": []} for name, data in pickles.items()]
    header = json.dumps({"entries": entries, "modules": modules or {}, "kernel": {}}).encode()
    path.write_bytes(b"CORDON-STATE 2\n" + len(header).to_bytes(8, "little") + header + b"".join(pickles.values()))
    return path


def test_a_chain_of_cells_reads_a_csv_counts_it_and_prints_from_the_count(cells: Cells) -> None:
    first = cells("import pandas as pd\ndf = pd.read_csv('/input/x.csv')\n", inputs={"x.csv": "a,b\n1,2\n3,4\n5,6\n"})
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    assert first.manifest["modules"] == {"pd": "pandas"}
    [df] = first.manifest["variables"]
    assert (df["name"], df["type"], df["shape"]) == ("df", "DataFrame", [3, 2])
    assert df["table"]["rows"] == [[1, 2], [3, 4], [5, 6]]
    second = cells("n = len(df)\n", after=first)
    assert second.result.outcome is Outcome.SUCCEEDED, second.said()
    assert second.manifest["restored"] == {"bytes": first.state.stat().st_size, "names": 2, "failed": []}  # type: ignore[union-attr]
    third = cells("print(n + 1)\n", after=second)
    assert (third.result.outcome, third.result.stdout) == (Outcome.SUCCEEDED, b"4\n"), third.said()


def test_a_bare_last_expression_is_displayed_as_its_repr_unless_a_semicolon_ends_it(cells: Cells) -> None:
    shown = cells("x = 6\nx * 7\n")
    assert shown.result.outcome is Outcome.SUCCEEDED, shown.said()
    assert shown.displays == [{"text/plain": "42"}]
    silenced = cells("6 * 7;  # as in Jupyter\nprint('printed, not displayed')\nNone\n6 * 7;\n")
    assert silenced.result.stdout == b"printed, not displayed\n", silenced.said()
    assert silenced.displays == []


def test_a_data_frame_last_is_displayed_as_a_table_of_values_not_as_html(cells: Cells) -> None:
    script = (
        "import pandas as pd\n"
        "df = pd.DataFrame({'a': [1, 2, 3], 'b': [0.5, float('nan'), float('inf')], 'c': ['x', None, 'z']})\n"
        "display(df)\n"
        "df.describe()\n"
    )
    cell = cells(script)
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    frame, described = cell.displays
    assert set(frame) == set(described) == {"text/plain", "text/html", TABLE}  # IPython's, and Cordon's table
    assert frame[TABLE] == {
        "columns": ["a", "b", "c"],
        "index": ["0", "1", "2"],
        "dtypes": ["int64", "float64", "object"],
        "rows": [[1, 0.5, "x"], [2, None, None], [3, "inf", "z"]],
        "total_rows": 3,
        "total_columns": 3,
    }
    assert described[TABLE]["columns"] == ["a", "b"]
    assert described[TABLE]["index"][:2] == ["count", "mean"] and described[TABLE]["rows"][0] == [3.0, 2.0]


def test_display_shows_an_html_repr_and_a_png_repr_kept_as_a_session_file(cells: Cells) -> None:
    script = (
        "import base64\n"
        "class Bold:\n"
        "    def _repr_html_(self):\n"
        "        return '<b>bold</b>'\n"
        "class Dot:\n"
        "    def _repr_png_(self):\n"
        f"        return base64.b64decode({base64.b64encode(PNG).decode()!r})\n"
        "display(Bold(), Dot())\n"
    )
    cell = cells(script)
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    bold, dot = cell.displays
    assert bold["text/html"] == "<b>bold</b>" and bold["text/plain"].startswith("<__main__.Bold at 0x")  # IPython's
    assert dot["image/png"] == {"file": "display-2.png"}
    assert cell.session_file("display-2.png") == PNG
    assert "display-2.png" in {f.name for f in cell.result.session}


def test_functions_and_classes_a_cell_defines_work_in_the_next_and_see_its_names(cells: Cells) -> None:
    first = cells(
        "rate = 2\n"
        "def scale(x):\n"
        "    return x * rate\n"
        "class Counter:\n"
        "    def __init__(self):\n"
        "        self.n = 0\n"
        "    def bump(self):\n"
        "        self.n += scale(1)\n"
        "        return self.n\n"
        "counter = Counter()\n"
        "counter.bump()\n"
    )
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    second = cells("rate = 10\nprint(scale(3), counter.bump(), isinstance(counter, Counter))\n", after=first)
    assert second.result.stdout == b"30 12 True\n", second.said()


def test_a_module_imported_in_one_cell_is_imported_again_in_the_next(cells: Cells) -> None:
    first = cells("import pandas as pd\nimport os.path as osp\n")
    assert first.manifest["modules"] == {"pd": "pandas", "osp": "posixpath"}, first.said()
    second = cells("print(pd.__name__, osp.join('a', 'b'))\n", after=first)
    assert second.result.stdout == b"pandas a/b\n", second.said()


def test_an_input_module_is_importable_in_a_cell_and_again_in_the_next(cells: Cells) -> None:
    inputs = {"helper.py": "def double(x):\n    return 2 * x\n"}
    first = cells("import helper\n", inputs=inputs)
    assert first.manifest["modules"] == {"helper": "helper"}, first.said()
    second = cells("print(helper.double(21))\n", after=first, inputs=inputs)
    assert second.result.stdout == b"42\n", second.said()


def test_an_open_file_is_not_carried_and_the_other_names_still_are(cells: Cells) -> None:
    script = (
        "import threading\n"
        "fh = open('/etc/hostname')\n"
        "lock = threading.Lock()\n"
        "squares = (i * i for i in range(3))\n"
        "kept = [1, 2]\n"
        "same = kept\n"
    )
    first = cells(script)
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    assert first.manifest["not_carried"] == [
        {"name": "fh", "type": "TextIOWrapper", "why": "open file"},
        {"name": "lock", "type": "lock", "why": "lock"},
        {"name": "squares", "type": "generator", "why": "generator"},
    ]
    assert [v["name"] for v in first.manifest["variables"]] == ["kept", "same"]
    second = cells("same.append(3)\nprint(kept, 'fh' in globals())\n", after=first)
    assert second.result.stdout == b"[1, 2, 3] False\n", second.said()


def test_a_value_that_cannot_be_pickled_is_not_carried_and_says_why(cells: Cells) -> None:
    script = (
        "class Stubborn:\n    def __reduce__(self):\n        raise TypeError('not me')\nthing = Stubborn()\nok = 1\n"
    )
    cell = cells(script)
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    assert cell.manifest["not_carried"] == [
        {"name": "thing", "type": "Stubborn", "why": "cannot be pickled: TypeError: not me"}
    ]
    assert [v["name"] for v in cell.manifest["variables"]] == ["Stubborn", "ok"]


def test_a_failing_cell_keeps_what_it_bound_and_records_its_error_in_cell_terms(cells: Cells) -> None:
    cell = cells("x = 1\ndef boom():\n    raise ValueError('no good')\nboom()\ny = 2\n")
    assert (cell.result.outcome, cell.result.exit_code) == (Outcome.FAILED, 1), cell.said()
    error = cell.manifest["error"]
    assert (error["ename"], error["evalue"], error["line"]) == ("ValueError", "no good", 4)
    plain = [ANSI.sub("", line) for line in error["traceback"]]
    assert "Cell In [1], line 4" in plain[2] and "Cell In [1], line 3, in boom()" in "".join(plain)
    assert plain[-1] == "ValueError: no good"
    stderr = ANSI.sub("", cell.result.stderr.decode())
    assert stderr == "\n".join(plain) + "\n" and "cordon" not in stderr and "main.py" not in stderr
    assert [v["name"] for v in cell.manifest["variables"]] == ["x", "boom"]  # bound before the error; y never
    after = cells("print(x, boom.__name__, 'y' in dir())\n", after=cell)
    assert after.result.stdout == b"1 boom False\n", after.said()


def test_a_syntax_error_is_reported_as_ipython_reports_it(cells: Cells) -> None:
    cell = cells("x = (\n")
    assert (cell.result.outcome, cell.result.exit_code) == (Outcome.FAILED, 1), cell.said()
    stderr = ANSI.sub("", cell.result.stderr.decode())
    assert stderr == "  Cell In [1], line 1\n    x = (\n         ^\nSyntaxError: incomplete input\n\n", stderr
    assert (cell.manifest["error"]["ename"], cell.manifest["error"]["line"]) == ("SyntaxError", 1)


def test_a_state_over_state_max_bytes_ends_output_limit_and_names_the_state(cells: Cells) -> None:
    cell = cells("blob = b'x' * 100_000\n", state_max_bytes=4096)
    assert cell.result.outcome is Outcome.OUTPUT_LIMIT, cell.said()
    assert "state" in cell.result.reason and "state_max_bytes" in cell.result.reason
    assert cell.state is None
    assert [r.name for r in cell.result.rejected_outputs] == [f"{SESSION_DIR}/{STATE_FILE}"]
    state = cell.manifest["state"]
    assert state["over_cap"] is True and state["bytes"] > 100_000


def test_restoring_a_state_bigger_than_the_memory_limit_ends_memory_limit_and_says_so(cells: Cells) -> None:
    first = cells("import numpy as np\nbig = np.ones(12 * 2**20)  # 96 MiB\n", memory_mib=512)
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    second = cells("print('never')\n", after=first, memory_mib=64)
    assert second.result.outcome is Outcome.MEMORY_LIMIT, second.said()
    assert "while restoring the state" in second.result.reason
    assert second.result.stdout == b""


def test_a_name_that_cannot_be_restored_is_listed_and_the_others_are_restored(cells: Cells, tmp_path: Path) -> None:
    lost = b"cno_such_module\nthing\n."  # protocol 0: the global no_such_module.thing
    state = crafted_state(
        tmp_path / "state", {"lost": lost, "kept": pickle.dumps([1, 2])}, {"np": "numpy", "gone": "no_such_module"}
    )
    cell = cells("print(kept, np.__name__, 'lost' in globals(), 'gone' in globals())\n", state=state)
    assert cell.result.stdout == b"[1, 2] numpy False False\n", cell.said()
    restored = cell.manifest["restored"]
    assert restored["names"] == 2 and [f["name"] for f in restored["failed"]] == ["gone", "lost"]
    assert b"cordon: could not restore `lost`: ModuleNotFoundError: No module named 'no_such_module'\n" in (
        cell.result.stderr
    )


class _Payload:
    """A crafted snapshot's value: loading it runs `code` (pickle calls exec)."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (self.code,)


def test_a_malicious_snapshot_runs_only_inside_the_sandbox(cells: Cells, tmp_path: Path) -> None:
    marker = tmp_path / "escaped" / "marker"
    code = (
        "import os\n"
        "open('/output/ran-inside', 'w').write(str(os.getuid()))\n"
        f"os.makedirs({str(marker.parent)!r}, exist_ok=True)\n"
        f"open({str(marker)!r}, 'w').write('out')\n"
    )
    state = crafted_state(tmp_path / "state", {"payload": pickle.dumps(_Payload(code)), "plain": pickle.dumps(41)})
    cell = cells("print(plain + 1, payload)\n", state=state)
    assert (cell.result.outcome, cell.result.stdout) == (Outcome.SUCCEEDED, b"42 None\n"), cell.said()
    assert "ran-inside" in {o.name for o in cell.result.outputs}  # it ran: in the sandbox's /output
    assert not marker.exists() and not marker.parent.exists()


def test_a_cell_without_state_runs_its_script_as_a_fresh_kernel_would(cells: Cells) -> None:
    script = (
        "import os, sys\n"
        "print('hello')\n"
        "print(sys.argv[1:], __name__, sys.path[0] == os.getcwd() == '/tmp', '__file__' in dir())\n"
    )
    cell = cells(script, args=("a", "b"))
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    assert (cell.result.stdout, cell.result.stderr) == (b"hello\n['a', 'b'] __main__ True False\n", b"")
    assert cell.manifest["restored"] is None and cell.displays == []


def test_no_more_than_a_hundred_displays_are_kept_and_the_rest_are_counted(cells: Cells) -> None:
    cell = cells("for i in range(105):\n    display(i)\n")
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    assert len(cell.displays) == 100 and cell.displays[-1] == {"text/plain": "99"}
    assert cell.manifest["displays_dropped"] == 5


def test_a_cell_that_replaces_its_session_folder_leaves_no_session_files(cells: Cells) -> None:
    script = "import os, shutil\nshutil.rmtree('/output/.cordon')\nos.symlink('/tmp', '/output/.cordon')\nx = 1\n"
    cell = cells(script)
    assert cell.result.exit_code == 0, cell.said()
    assert (
        cell.result.stderr
        == b"cordon: /output/.cordon was replaced while the cell ran: its state and displays are not kept\n"
    )
    assert cell.result.session == [] and not (cell.folder / SESSION_DIR).exists()
    assert [r.name for r in cell.result.rejected_outputs] == [SESSION_DIR]
