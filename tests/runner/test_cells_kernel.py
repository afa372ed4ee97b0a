"""A chain of notebook cells behaves as one IPython kernel would, each cell still its own supervised
run, on every engine: IPython's magics and `!` (and the ones refused in words), the display hook and
the history (`_`, Out, In, the execution count), figures shown once under the cell that drew them,
the global random states, views of an array, the settings a kernel keeps in its modules, and
tracebacks in cell terms. What Jupyter itself prints for such cells is checked in
tests/playground/test_notebook_fidelity.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runner.spec import Outcome
from tests.runner.cell_runs import ANSI, Cell, Cells
from tests.runner.test_hostile import assert_nothing_left

pytestmark = pytest.mark.images

INLINE = "module://matplotlib_inline.backend_inline"


def plain(cell: Cell) -> list[str]:
    """The text/plain of each display, in order."""
    return [display["text/plain"] for display in cell.displays]


def stderr(cell: Cell) -> str:
    return ANSI.sub("", cell.result.stderr.decode())


def ok(cell: Cell) -> Cell:
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    return cell


def test_line_and_cell_magics_run_as_in_jupyter(cells: Cells) -> None:
    first = ok(cells("%matplotlib inline\nimport matplotlib\nx = 21\n%time y = x * 2\n%who\nmatplotlib.get_backend()"))
    out = first.result.stdout.decode()
    assert re.search(r"CPU times: user .+\nWall time: .+\nmatplotlib\t x\t y\t \n", out), out
    assert plain(first) == [repr(INLINE)]
    timed = ok(cells("%%time\nz = y + 1\n", after=first))
    assert "Wall time:" in timed.result.stdout.decode()
    timeit = ok(cells("%timeit -n 2 -r 2 sum(range(10))", after=timed))
    assert re.fullmatch(r".+ per loop \(mean ± std\. dev\. of 2 runs, 2 loops each\)\n", timeit.result.stdout.decode())
    written = ok(cells("%%writefile /output/made.py\nprint('ran by %run', x)\n", after=timeit))
    assert written.result.stdout == b"Writing /output/made.py\n"
    ran = ok(cells("%run /input/helper.py\nhelped\n", after=written, inputs={"helper.py": "helped = 'yes'\n"}))
    assert plain(ran) == ["'yes'"]
    whos = ok(cells("%whos", after=ran))
    assert re.search(r"^z +int +43$", whos.result.stdout.decode(), re.M), whos.result.stdout


def test_shell_commands_run_in_the_cells_sandbox_under_its_limits(cells: Cells) -> None:
    cell = ok(cells("name = 'cordon'\n!echo hello $name\nfiles = !ls /input\n", inputs={"data.csv": "a\n"}))
    assert cell.result.stdout == b"hello cordon\r\n"  # under a pseudo-terminal, as Jupyter runs it
    listed = ok(cells("print(list(files))\n!echo $$HOME", after=cell))
    assert listed.result.stdout == b"['data.csv']\n/tmp\r\n"  # the sandbox's environment
    bash = ok(cells("%%bash\necho from bash\necho to stderr >&2\nexit 0\n"))
    assert bash.result.stdout == b"from bash\n" and bash.result.stderr == b"to stderr\n"


def test_a_command_left_running_is_killed_with_the_cell_and_the_audit_says_so(cells: Cells) -> None:
    cell = ok(cells("!(sleep 300 &) ; echo started"))
    assert cell.result.stdout == b"started\r\n"
    checks = {check.name: check.ok for check in cell.result.cleanup}
    assert checks["processes"] and checks["cgroups"]  # assert_nothing_left (in Cells) checked the host too


def test_a_command_that_floods_or_hangs_ends_the_cell_with_its_own_outcome(cells: Cells) -> None:
    flood = cells("!yes", stdout_max_bytes=64 * 1024)
    assert flood.result.outcome is Outcome.OUTPUT_LIMIT, flood.said()
    hang = cells("!sleep 300", wall_timeout_s=3.0)
    assert hang.result.outcome is Outcome.TIMED_OUT, hang.said()
    for ended in (flood, hang):
        assert_nothing_left(cells.supervisor, ended.result)


def test_pip_and_conda_answer_that_packages_come_from_the_image(cells: Cells) -> None:
    cell = ok(cells("%pip install -q pandas nosuchpackage\n%conda install numpy\nprint('went on')"))
    said = stderr(cell)
    assert "cordon: %pip: packages come from this sandbox's image" in said
    assert re.search(r"pandas [0-9.]+ is in the image: import it", said)
    assert "nosuchpackage is in no environment here: ask your operator to add it" in said
    assert "cordon: %conda:" in said and cell.result.stdout == b"went on\n"
    listed = ok(cells("%pip list"))
    assert re.search(r"^pandas [0-9.]+$", listed.result.stdout.decode(), re.M)


def test_magics_that_would_reach_outside_the_cell_are_refused_in_words(cells: Cells) -> None:
    for line, words in (
        ("%connect_info", "%connect_info: refused: there is no kernel to connect to"),
        ("%qtconsole", "%qtconsole: refused: there is no kernel to connect to"),
        ("%load_ext no_such_extension", "%load_ext no_such_extension: refused: there is no module"),
        ("%gui qt", "%gui: refused: a sandbox has no display"),
    ):
        cell = cells(f"{line}\nprint('not reached')")
        assert cell.result.outcome is Outcome.FAILED and cell.result.stdout == b"", cell.said()
        assert stderr(cell).startswith(f"UsageError: {words}"), stderr(cell)
        assert cell.manifest["error"]["ename"] == "UsageError"
    loaded = ok(cells("%load_ext autoreload\n%autoreload 2\nprint('in the image: loaded')"))
    assert loaded.result.stdout == b"in the image: loaded\n"
    widget = ok(cells("%matplotlib widget\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]);"))
    assert "cordon: %matplotlib widget: figures are shown inline here" in stderr(widget)
    assert [sorted(d) for d in widget.displays] == [["image/png", "text/plain"]]


def test_help_is_a_display_under_the_cell(cells: Cells) -> None:
    cell = ok(cells("def area(r):\n    'The area of a circle of radius r.'\n    return 3.14 * r * r\narea?"))
    [shown] = plain(cell)
    assert "Signature: area(r)" in ANSI.sub("", shown) and "The area of a circle of radius r." in shown


def test_the_display_hook_and_the_history_carry_from_cell_to_cell(cells: Cells) -> None:
    first = ok(cells("6 * 7"))
    assert [d.get("text/plain") for d in first.displays] == ["42"]
    assert first.manifest["displays"][0]["result"] == 1 and first.manifest["execution_count"] == 1
    second = ok(cells("'words'", after=first))
    silent = ok(cells("x = 3\nx;", after=second))
    assert silent.displays == []
    third = ok(cells("print(_, __, _1, _2, Out, In[1], _i2, len(In))\n_ * 2", after=silent))
    assert third.result.stdout == b"words 42 42 words {1: 42, 2: 'words'} 6 * 7 'words' 5\n", third.said()
    assert plain(third) == ["'wordswords'"] and third.manifest["execution_count"] == 4
    rebound = ok(cells("_ = 'mine'\n1 + 1", after=third))
    kept = ok(cells("print(_, Out[5])", after=rebound))
    assert kept.result.stdout == b"mine 2\n"  # IPython leaves a `_` the user bound alone


def test_an_out_entry_that_cannot_carry_is_listed_like_a_name(cells: Cells) -> None:
    first = ok(cells("open('/etc/hostname')"))
    assert {"name": "Out[1]", "type": "TextIOWrapper", "why": "open file"} in first.manifest["not_carried"]
    second = ok(cells("print(1 in Out, 'x')", after=first))
    assert second.result.stdout == b"False x\n"


def test_the_history_counts_against_the_state_cap_and_goes_before_the_names(cells: Cells) -> None:
    cell = ok(cells("kept = 1\nb'x' * 100_000", state_max_bytes=64 * 1024))
    dropped = {item["name"]: item["why"] for item in cell.manifest["not_carried"]}
    assert dropped.keys() >= {"Out[1]", "_"} and set(dropped.values()) == {"kept out: the state would pass its cap"}
    assert not cell.manifest["state"]["over_cap"] and [v["name"] for v in cell.manifest["variables"]] == ["kept"]
    named = cells("big = b'x' * 100_000\nbig", state_max_bytes=64 * 1024)  # a name holds it: over the cap
    assert named.result.outcome is Outcome.OUTPUT_LIMIT and named.manifest["state"]["over_cap"], named.said()


def test_a_name_the_notebook_defines_wins_over_the_display_builtin(cells: Cells) -> None:
    first = ok(cells("class display:\n    def __init__(self, *args):\n        print('mine', *args)\ndisplay(1);"))
    assert first.result.stdout == b"mine 1\n" and first.displays == []
    second = ok(cells("display(2)\ndel display\ndisplay(3)", after=first))
    assert second.result.stdout == b"mine 2\n" and plain(second) == ["3"]
    third = ok(
        cells("from IPython.display import HTML, Markdown, Image, display\ndisplay(HTML('<b>b</b>'), Markdown('*m*'))")
    )
    assert [sorted(d) for d in third.displays] == [["text/html", "text/plain"], ["text/markdown", "text/plain"]]


def test_figures_show_once_under_the_cell_that_drew_them_and_again_when_asked(cells: Cells) -> None:
    drawn = ok(cells("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 3, 2])\nx = 1"))
    assert [sorted(d) for d in drawn.displays] == [["image/png", "text/plain"]]
    assert plain(drawn) == ["<Figure size 640x480 with 1 Axes>"]
    later = ok(cells("print(plt.get_fignums(), fig.axes == [ax])", after=drawn))
    assert later.result.stdout == b"[] True\n" and later.displays == []  # closed after its cell, still held
    shown = ok(cells("fig", after=later))
    assert [sorted(d) for d in shown.displays] == [["image/png", "text/plain"]]
    assert not [o for o in shown.result.outputs if o.name.startswith("figure-")]  # no figure files at exit
    after_all = ok(cells("plt.plot([1, 2]);\nplt.figure()\nplt.plot([2, 1]);", after=shown))
    assert len(after_all.displays) == 2


def test_the_global_random_states_carry_as_in_one_kernel(cells: Cells) -> None:
    seeded = ok(cells("import random\nimport numpy as np\nrandom.seed(7)\nnp.random.seed(0)"))
    drawn = ok(
        cells("a = np.random.rand(3)\nb = random.random()\nprint(a.round(6).tolist(), round(b, 6))", after=seeded)
    )
    assert drawn.result.stdout == b"[0.548814, 0.715189, 0.602763] 0.323833\n", drawn.said()
    more = ok(cells("print(np.random.rand(1).round(6).tolist(), round(random.random(), 6))", after=drawn))
    assert more.result.stdout == b"[0.544883] 0.150849\n", more.said()  # the next numbers, not the first again
    fresh = [ok(cells("import numpy as np\nprint(np.random.rand())")).result.stdout for _ in range(2)]
    assert fresh[0] != fresh[1]  # no state: drawn afresh, as a new kernel's


def test_a_view_of_an_array_stays_a_view_in_the_next_cell(cells: Cells) -> None:
    first = ok(cells("import numpy as np\nx = np.zeros((2, 3))\nv = x[:1]\nt = x.T\nsame = x"))
    second = ok(cells("v[0, 0] = 9\nt[2, 1] = 5\nprint(x.tolist(), same is x, np.shares_memory(v, x))", after=first))
    assert second.result.stdout == b"[[9.0, 0.0, 0.0], [0.0, 0.0, 5.0]] True True\n", second.said()
    third = ok(cells("v[0, 1] = 7\nprint(x[0].tolist())", after=second))
    assert third.result.stdout == b"[9.0, 7.0, 0.0]\n", third.said()


def test_the_settings_a_kernel_keeps_in_its_modules_carry(cells: Cells) -> None:
    script = (
        "import numpy as np, pandas as pd, warnings, os, matplotlib\n"
        "np.set_printoptions(precision=2)\n"
        "pd.set_option('display.max_rows', 4)\n"
        "matplotlib.rcParams['lines.linewidth'] = 7\n"
        "warnings.filterwarnings('ignore', message='hush')\n"
        "%cd /output\n"
        "%env GREETING=hi\n"
    )
    first = ok(cells(script))
    check = (
        "import warnings, os\n"
        "warnings.warn('hush')\n"
        "print(np.array([1/3]), pd.get_option('display.max_rows'), matplotlib.rcParams['lines.linewidth'])\n"
        "print(os.getcwd(), os.environ['GREETING'])"
    )
    second = ok(cells(check, after=first))
    assert second.result.stdout == b"[0.33] 4 7.0\n/output hi\n", second.said()
    assert b"hush" not in second.result.stderr


def test_tracebacks_name_the_cell_that_defined_the_code(cells: Cells) -> None:
    first = ok(cells("def ratio(a, b):\n    return a / b\n"))
    second = cells("x = 1\nratio(1, 0)", after=first)
    assert second.result.outcome is Outcome.FAILED
    text = stderr(second)
    assert "Cell In [2], line 2\n      1 x = 1\n----> 2 ratio(1, 0)" in text, text
    assert "Cell In [1], line 2, in ratio(a, b)\n      1 def ratio(a, b):\n----> 2     return a / b" in text, text
    assert second.manifest["error"]["line"] == 2 and "\x1b[" in second.result.stderr.decode()  # coloured
    third = ok(cells("print(x)", after=second))
    assert third.result.stdout == b"1\n"


def test_a_cell_cannot_reach_another_cells_files(cells: Cells, tmp_path: Path) -> None:
    first = ok(cells("secret = 1\nopen('/output/mine.txt', 'w').write('mine')"))
    second = ok(cells("!ls -a /output /input | tr '\\n' ' '", after=first))
    listed = second.result.stdout.decode()
    assert "mine.txt" not in listed and "state" not in listed.replace(".cordon-state", ""), listed
    assert ".cordon-state" in listed  # its own state, read-only, is all of the cell above it


def test_files_a_cell_writes_where_it_starts_are_there_in_the_next_within_their_share(cells: Cells) -> None:
    script = (
        "import os\n"
        "open('notes.txt', 'w').write('kept')\n"
        "os.makedirs('out', exist_ok=True)\n"
        "open('out/a.csv', 'w').write('a\\n1\\n')\n"
        "open('/tmp/big.bin', 'wb').write(b'x' * 70_000)"
    )
    first = ok(cells(script, state_max_bytes=256 * 1024))  # a quarter of it for files: 64 KiB
    assert first.manifest["files"] == [{"name": "/tmp/notes.txt", "bytes": 4}, {"name": "/tmp/out/a.csv", "bytes": 4}]
    [big] = first.manifest["not_carried"]
    assert (big["name"], big["type"]) == ("/tmp/big.bin", "file") and "over the 64.0 KiB of files carried" in big["why"]
    second = ok(cells("print(open('notes.txt').read(), open('out/a.csv').read().split(), os.path.exists('big.bin'))",
                      after=first))  # fmt: skip
    assert second.result.stdout == b"kept ['a', '1'] False\n", second.said()
