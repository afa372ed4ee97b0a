"""Notebook cells in JavaScript, run through the supervisor on every engine: the node image's cell
program (usr/lib/cordon/cell.js) carries a cell's names to the next cell as a file, shows its last
expression and its display() calls, and records what it could not carry and why."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from runner.cells import MANIFEST_FILE, SESSION_DIR, STATE_FILE
from runner.spec import Limits, Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor
from tests.runner.test_cells import budget_s
from tests.runner.test_hostile import assert_nothing_left, retrying

pytestmark = pytest.mark.images

HELPER = "module.exports = { twice: (x) => 2 * x };\n"


@dataclass
class Cell:
    """One cell's run and what it exported."""

    result: RunResult
    exported: Path

    @property
    def manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = json.loads((self.exported / SESSION_DIR / MANIFEST_FILE).read_bytes())
        return manifest

    @property
    def state(self) -> Path | None:
        kept = STATE_FILE in {f.name for f in self.result.session}
        return self.exported / SESSION_DIR / STATE_FILE if kept else None

    def said(self) -> str:
        r = self.result
        return f"{r.outcome.value}: {r.reason}\nstdout: {r.stdout[-1500:]!r}\nstderr: {r.stderr[-1500:]!r}"


class Cells:
    """Runs node cells, each (when told) from the state an earlier one left."""

    def __init__(self, supervisor: Supervisor, engine: str, tmp: Path):
        self.supervisor, self.engine, self.tmp = supervisor, engine, tmp
        self.runs = 0

    def __call__(
        self, script: str, *, after: Cell | None = None, cell: bool = True, inputs: dict[str, str] | None = None,
        **limits: Any,
    ) -> Cell:  # fmt: skip
        state = None
        if after is not None:
            assert after.state is not None, f"the cell before left no state\n{after.said()}"
            state = after.state
        self.runs += 1
        run_dir = self.tmp / f"run-{self.runs}"
        staged = run_dir / "inputs"
        staged.mkdir(parents=True)
        for name, text in (inputs or {}).items():
            (staged / name).write_text(text)
        budget = budget_s(self.engine)
        spec = RunSpec(
            runtime="node", script=script.encode(), engine=self.engine, cell=cell, state=state,
            inputs=tuple(staged / name for name in inputs or {}),
            limits=replace(Limits(wall_timeout_s=budget, cpu_time_s=budget), **limits),
        )  # fmt: skip

        def attempt(n: int) -> RunResult:
            exported = run_dir / f"exported-{n}"
            exported.mkdir()
            return self.supervisor.run(spec, output_dir=exported)

        result, retried = retrying(self.supervisor, attempt, budget=True)
        assert_nothing_left(self.supervisor, result)
        return Cell(result, run_dir / f"exported-{len(retried)}")


@pytest.fixture
def run(supervisor: Supervisor, engine: str, tmp_path: Path) -> Cells:
    return Cells(supervisor, engine, tmp_path)


def _names(variables: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in variables]


def test_a_let_binding_reaches_the_next_cell(run: Cells) -> None:
    first = run("let n = 41\n")
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    second = run("console.log(n + 1)\n", after=first)
    assert second.result.outcome is Outcome.SUCCEEDED, second.said()
    assert second.result.stdout == b"42\n" and second.result.stderr == b""
    assert second.manifest["restored"] == {"bytes": first.manifest["state"]["bytes"], "names": 1, "failed": []}


def test_var_and_destructured_const_names_carry_and_may_be_declared_again(run: Cells) -> None:
    first = run("var v = 'kept';\nconst {a, b} = {a: 1, b: 2};\nconst [x, y] = [3, 4];\n")
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    assert _names(first.manifest["variables"]) == ["v", "a", "b", "x", "y"]
    second = run("const a = 10;\nconsole.log(v, a + b, x * y)\n", after=first)
    assert second.result.outcome is Outcome.SUCCEEDED, second.said()
    assert second.result.stdout == b"kept 12 12\n"


def test_the_last_expression_is_displayed_and_not_printed(run: Cells) -> None:
    cell = run("const six = 6;\nsix * 7\n")
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    assert cell.result.stdout == b""
    assert cell.manifest["displays"] == [{"data": {"text/plain": "42"}}]


def test_display_shows_a_plain_object_as_text_and_as_json(run: Cells) -> None:
    cell = run("display({x: 1});\ndisplay(new Map([[1, 2]]));\n")
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    assert cell.manifest["displays"] == [
        {"data": {"text/plain": "{ x: 1 }", "application/json": {"x": 1}}},
        {"data": {"text/plain": "Map(1) { 1 => 2 }"}},
    ]
    assert cell.manifest["displays_dropped"] == 0


def test_a_function_is_listed_as_not_carried_while_the_other_names_carry(run: Cells) -> None:
    first = run("function twice(x) { return 2 * x }\nconst n = twice(21);\n")
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    manifest = first.manifest
    assert manifest["not_carried"] == [{"name": "twice", "type": "function", "why": "function"}]
    assert _names(manifest["variables"]) == ["n"] and manifest["state"]["over_cap"] is False
    second = run("console.log(typeof twice, n)\n", after=first)
    assert second.result.outcome is Outcome.SUCCEEDED, second.said()
    assert second.result.stdout == b"undefined 42\n"


def test_names_bound_to_one_object_are_still_one_object_in_the_next_cell(run: Cells) -> None:
    first = run("const rows = [{n: 1}];\nvar same = rows;\n")
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    second = run("same.push({n: 2});\nconsole.log(rows.length, same === rows)\n", after=first)
    assert second.result.stdout == b"2 true\n", second.said()


def test_a_required_module_is_required_again_in_the_next_cell(run: Cells) -> None:
    first = run("const path = require('path');\n")
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    assert (first.manifest["modules"], first.manifest["not_carried"]) == ({"path": "path"}, [])
    second = run("console.log(path.join('a', 'b'))\n", after=first)
    assert second.result.outcome is Outcome.SUCCEEDED, second.said()
    assert second.result.stdout == b"a/b\n"


def test_a_name_that_cannot_be_restored_is_said_once_and_the_cell_runs_without_it(run: Cells) -> None:
    first = run("const helper = require('helper');\nconst n = helper.twice(21);\n", inputs={"helper.js": HELPER})
    assert first.manifest["modules"] == {"helper": "/input/helper.js"}, first.said()
    second = run("console.log(typeof helper, n)\n", after=first)  # the input is not staged again
    assert second.result.outcome is Outcome.SUCCEEDED, second.said()
    assert second.result.stdout == b"undefined 42\n"
    said = "cordon: could not restore `helper`: Cannot find module '/input/helper.js'…\n"
    assert second.result.stderr == said.encode()
    restored = second.manifest["restored"]
    assert (restored["names"], [f["name"] for f in restored["failed"]]) == (1, ["helper"])


def test_a_failing_cell_writes_no_state_and_records_its_error(run: Cells) -> None:
    cell = run("let n = 1;\nthrow new TypeError('not a number');\n")
    assert (cell.result.outcome, cell.result.exit_code) == (Outcome.FAILED, 1), cell.said()
    assert cell.state is None
    error = cell.manifest["error"]
    assert (error["ename"], error["evalue"]) == ("TypeError", "not a number")
    assert error["traceback"] == ["TypeError: not a number", "    at /tmp/main.js:2:7"]
    # node's own report of it, without the cell program's frames below the script's
    assert b"TypeError: not a number\n    at /tmp/main.js:2:7\n" in cell.result.stderr
    assert b"cell.js" not in cell.result.stderr and cell.manifest["state"] is None


def test_an_uncaught_error_in_a_timer_callback_fails_the_cell(run: Cells) -> None:
    cell = run("let n = 1;\nsetTimeout(() => { throw new RangeError('later') }, 10);\nundefined\n")
    assert (cell.result.outcome, cell.result.exit_code) == (Outcome.FAILED, 1), cell.said()
    assert cell.state is None
    assert (cell.manifest["error"]["ename"], cell.manifest["error"]["evalue"]) == ("RangeError", "later")


def test_a_state_over_state_max_bytes_ends_output_limit_and_is_not_kept(run: Cells) -> None:
    cell = run("const big = 'x'.repeat(100000);\n", state_max_bytes=10_000)
    assert cell.result.outcome is Outcome.OUTPUT_LIMIT, cell.said()
    assert "state_max_bytes" in cell.result.reason
    assert cell.state is None
    state = cell.manifest["state"]
    assert state["over_cap"] is True and state["bytes"] > 100_000
    assert [r.name for r in cell.result.rejected_outputs] == [f"{SESSION_DIR}/{STATE_FILE}"]


def test_a_plain_program_prints_what_it_prints_when_run_alone(run: Cells) -> None:
    script = (
        "const os = require('os');\n"
        "console.log('out', [1, 2], typeof os.cpus, process.argv.length, require.main === module);\n"
        "console.error('err');\n"
        "setTimeout(() => process.stdout.write('later'), 5);\n"
    )
    alone = run(script, cell=False)
    assert alone.result.outcome is Outcome.SUCCEEDED, alone.said()
    cell = run(script)
    assert cell.result.outcome is Outcome.SUCCEEDED, cell.said()
    assert (cell.result.stdout, cell.result.stderr) == (alone.result.stdout, alone.result.stderr)
    assert alone.result.stdout == b"out [ 1, 2 ] function 2 true\nlater"
    assert sorted(f.name for f in cell.result.session) == [MANIFEST_FILE, STATE_FILE]
