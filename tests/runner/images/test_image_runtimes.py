"""What a program finds in the guest images, run through the supervisor on every engine: figures
left open saved to /output by the python image's startup hook, inputs on the module path, and
the scientific stack."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.spec import Limits, Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor
from tests.runner.test_hostile import assert_nothing_left

pytestmark = pytest.mark.images

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Runs:
    """Runs a script with named inputs and keeps what it exported."""

    def __init__(self, supervisor: Supervisor, engine: str, tmp: Path):
        self.supervisor, self.engine, self.tmp = supervisor, engine, tmp
        self.exported = tmp / "exported"

    def __call__(self, runtime: str, script: str, inputs: dict[str, str] | None = None, **limits: Any) -> RunResult:
        staged = []
        for name, text in (inputs or {}).items():
            (self.tmp / name).write_text(text)
            staged.append(self.tmp / name)
        self.exported.mkdir()
        spec = RunSpec(
            runtime=runtime, script=script.encode(), inputs=tuple(staged), engine=self.engine,
            limits=replace(Limits(wall_timeout_s=60.0, cpu_time_s=60.0), **limits),
        )  # fmt: skip
        result = self.supervisor.run(spec, output_dir=self.exported)
        assert_nothing_left(self.supervisor, result)
        return result

    def output(self, name: str) -> bytes:
        return (self.exported / name).read_bytes()


@pytest.fixture
def run(supervisor: Supervisor, engine: str, tmp_path: Path) -> Runs:
    return Runs(supervisor, engine, tmp_path)


def _said(result: RunResult) -> str:
    return (
        f"{result.outcome.value}: {result.reason}\nstdout: {result.stdout[-1500:]!r}\nstderr: {result.stderr[-1500:]!r}"
    )


def test_a_figure_left_open_is_saved_to_output_as_a_png_without_savefig(run: Runs) -> None:
    script = (
        "import matplotlib, matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [3, 1, 2])\n"
        "plt.title('Text needs a font: DejaVu')\n"
        "plt.show()  # headless: shows nothing, says nothing\n"
        "print(matplotlib.get_backend())\n"
    )
    result = run("python", script)
    assert result.outcome is Outcome.SUCCEEDED, _said(result)
    assert result.stdout == b"agg\n" and result.stderr == b"", _said(result)
    assert [o.name for o in result.outputs] == ["figure-1.png"]
    png = run.output("figure-1.png")
    assert png.startswith(PNG_MAGIC) and len(png) == result.outputs[0].size > 5000


def test_saved_figures_count_against_the_output_caps_like_any_other_file(run: Runs) -> None:
    script = "import matplotlib.pyplot as plt\nfor n in range(3):\n    plt.figure()\n    plt.plot([n, 1])\n"
    result = run("python", script, output_max_files=2)
    assert result.outcome is Outcome.OUTPUT_LIMIT, _said(result)
    assert [o.name for o in result.outputs] == ["figure-1.png", "figure-2.png"]
    assert [(r.name, r.reason) for r in result.rejected_outputs] == [("figure-3.png", "over the cap of 2 files")]


def test_no_more_figures_are_saved_than_any_output_cap_could_take(run: Runs) -> None:
    script = "import matplotlib.pyplot as plt\nfor _ in range(101):\n    plt.figure()\n"
    result = run("python", script, output_max_files=256)
    assert result.outcome is Outcome.SUCCEEDED, _said(result)
    assert b"cordon: saving the first 100 of 101 open figures\n" in result.stderr
    assert len(result.outputs) == 100 and "figure-101.png" not in {o.name for o in result.outputs}


def test_a_file_the_program_wrote_under_a_figure_name_is_kept_and_the_figure_gets_the_next_name(run: Runs) -> None:
    script = "import matplotlib.pyplot as plt\nopen('/output/figure-1.png', 'w').write('mine')\nplt.plot([1, 2])\n"
    result = run("python", script)
    assert result.outcome is Outcome.SUCCEEDED, _said(result)
    assert [o.name for o in result.outputs] == ["figure-1-2.png", "figure-1.png"]
    assert run.output("figure-1.png") == b"mine"
    assert run.output("figure-1-2.png").startswith(PNG_MAGIC)


def test_a_program_that_fails_keeps_its_exit_status_and_its_figure(run: Runs) -> None:
    result = run("python", "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nraise SystemExit(3)\n")
    assert (result.outcome, result.exit_code) == (Outcome.FAILED, 3), _said(result)
    assert [o.name for o in result.outputs] == ["figure-1.png"]


def test_a_figure_that_cannot_be_drawn_is_one_line_on_stderr_and_changes_nothing_else(run: Runs) -> None:
    script = (
        "import matplotlib.pyplot as plt\n"
        "plt.figure().suptitle(r'$\\frac{$')  # mathtext that fails when drawn\n"
        "plt.figure()\n"
        "plt.plot([1, 2])\n"
        "print('done')\n"
    )
    result = run("python", script)
    assert (result.outcome, result.exit_code, result.stdout) == (Outcome.SUCCEEDED, 0, b"done\n"), _said(result)
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cordon: could not save figure 1: ValueError: "), lines
    assert [o.name for o in result.outputs] == ["figure-2.png"]  # no half-written figure-1.png


def test_a_program_without_matplotlib_leaves_no_figures_and_no_trace_of_the_hook(run: Runs) -> None:
    script = (
        "import os, sys\n"
        "print(sorted(m for m in sys.modules if 'matplotlib' in m), 'MPLBACKEND' in os.environ)\n"
        "print(type(sys.meta_path[0]).__name__)\n"
    )
    result = run("python", script)
    assert result.outcome is Outcome.SUCCEEDED, _said(result)
    assert result.stdout == b"[] False\n_WatchForPyplot\n"
    assert result.outputs == [] and result.stderr == b""


def test_a_py_input_is_importable_and_no_input_shadows_the_library_or_runs_unasked(run: Runs) -> None:
    inputs = {
        "helper.py": "def double(x):\n    return 2 * x\n",
        "json.py": "raise SystemExit('the input json.py shadowed the standard library')\n",
        "usercustomize.py": "print('usercustomize from /input ran')\n",
    }
    script = "import json, helper\nprint(helper.double(21), helper.__file__, json.dumps([1]))\n"
    result = run("python", script, inputs)
    assert result.outcome is Outcome.SUCCEEDED, _said(result)
    assert result.stdout == b"42 /input/helper.py [1]\n"


def test_inputs_are_found_only_for_the_programs_own_imports_never_a_librarys(run: Runs) -> None:
    """pandas imports `bottleneck` and `numexpr` if it finds them: a file of that name among the
    inputs must not run because the program imported pandas. The program's own imports, direct,
    through importlib or from one input module to another, find the inputs."""
    inputs = {
        "bottleneck.py": "print('bottleneck from /input ran')\n",
        "numexpr.py": "print('numexpr from /input ran')\n",
        "helper.py": "import helper2\nvalue = helper2.value + 1\n",
        "helper2.py": "value = 41\n",
    }
    script = (
        "import importlib, sys, pandas\n"
        "print(pandas.DataFrame({'a': [1.0, 2.0]})['a'].sum(), 'bottleneck' in sys.modules)\n"
        "print(importlib.import_module('helper').value, '/input' in sys.path)\n"
    )
    result = run("python", script, inputs)
    assert result.outcome is Outcome.SUCCEEDED, _said(result)
    assert result.stdout == b"3.0 False\n42 False\n"


def test_a_js_input_is_requirable_by_name(run: Runs) -> None:
    inputs = {"helper.js": "module.exports = { double: (x) => 2 * x };\n"}
    script = "const helper = require('helper');\nconsole.log(helper.double(21), require.resolve('helper'));\n"
    result = run("node", script, inputs)
    assert result.outcome is Outcome.SUCCEEDED, _said(result)
    assert result.stdout == b"42 /input/helper.js\n"


def test_scipy_and_scikit_learn_import_and_work_within_the_default_limits(run: Runs) -> None:
    script = (
        "import numpy as np, threadpoolctl\n"
        "from scipy import optimize, stats\n"
        "from sklearn.cluster import KMeans\n"
        "from sklearn.linear_model import LinearRegression\n"
        "x = np.arange(10.0).reshape(-1, 1)\n"
        "model = LinearRegression().fit(x, 3 * x.ravel() + 1)\n"
        "print(round(model.coef_[0], 6), round(model.intercept_, 6))\n"
        "print(round(optimize.minimize_scalar(lambda v: (v - 2) ** 2).x, 4))\n"
        "print(round(stats.norm.cdf(0), 3))\n"
        "points = np.random.RandomState(0).rand(2000, 4)\n"
        "print(len(set(KMeans(n_clusters=3, n_init=2, random_state=0).fit_predict(points))))\n"
        "print([p['num_threads'] for p in threadpoolctl.threadpool_info() if p['internal_api'] == 'openmp'])\n"
    )
    result = run("python", script, wall_timeout_s=Limits().wall_timeout_s, cpu_time_s=Limits().cpu_time_s)
    assert result.outcome is Outcome.SUCCEEDED, _said(result)
    # OpenMP (KMeans) runs as many threads as the CPU limit (1) keeps busy, not one per host CPU.
    assert result.stdout == b"3.0 1.0\n2.0\n0.5\n3\n[1]\n"
