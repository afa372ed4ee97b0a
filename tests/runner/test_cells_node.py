"""Notebook cells in JavaScript, run through the supervisor on every engine: the node image's cell
program (usr/lib/cordon/cell.js) carries a cell's names to the next cell as a file, shows its last
expression and its display() calls, and records what it could not carry and why."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from runner.spec import MANIFEST_FILE, SESSION_DIR, STATE_FILE, Limits, Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor
from tests.runner.cell_runs import budget_s
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
    first = run("const path = require('path');\npath\n")
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    assert (first.manifest["modules"], first.manifest["not_carried"]) == ({"path": "path"}, [])  # and `_`
    second = run("console.log(path.join('a', 'b'), _ === path)\n", after=first)
    assert second.result.outcome is Outcome.SUCCEEDED, second.said()
    assert second.result.stdout == b"a/b true\n"


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


def test_a_failing_cell_records_its_error_and_still_writes_its_state(run: Cells) -> None:
    cell = run("let n = 1;\nthrow new TypeError('not a number');\n")
    assert (cell.result.outcome, cell.result.exit_code) == (Outcome.FAILED, 1), cell.said()
    error = cell.manifest["error"]
    assert (error["ename"], error["evalue"]) == ("TypeError", "not a number")
    assert error["traceback"] == ["TypeError: not a number", "    at /tmp/main.js:2:7"]
    # node's own report of it, without the cell program's frames below the script's
    assert b"TypeError: not a number\n    at /tmp/main.js:2:7\n" in cell.result.stderr
    assert b"cell.js" not in cell.result.stderr
    assert cell.state is not None and cell.manifest["state"]["over_cap"] is False
    assert _names(cell.manifest["variables"]) == ["n"]  # `_error` is carried, not listed


def test_a_failed_cells_names_bound_before_the_throw_carry_and_error_is_the_error(run: Cells) -> None:
    first = run("let n = 1;\nvar v = 'kept';\nthrow new TypeError('not a number');\nlet after = 2;\n")
    assert first.result.outcome is Outcome.FAILED, first.said()
    second = run(
        "console.log(n, v, typeof after, _, _error instanceof TypeError, _error.message);\n"
        "console.log(JSON.stringify(_error.stack))\n",
        after=first,
    )
    assert second.result.outcome is Outcome.SUCCEEDED, second.said()
    stack = json.dumps("TypeError: not a number\n    at /tmp/main.js:3:7")  # without vm's source line and caret
    assert second.result.stdout == f"1 kept undefined undefined true not a number\n{stack}\n".encode()
    assert second.result.stderr == b""
    # a cell that succeeds leaves `_error` as it was, as the REPL does
    third = run("_error.message\n", after=second)
    assert third.manifest["displays"] == [{"data": {"text/plain": "'not a number'"}}], third.said()


def test_an_uncaught_error_in_a_timer_callback_fails_the_cell(run: Cells) -> None:
    cell = run("let n = 1;\nsetTimeout(() => { throw new RangeError('later') }, 10);\n'done'\n")
    assert (cell.result.outcome, cell.result.exit_code) == (Outcome.FAILED, 1), cell.said()
    assert (cell.manifest["error"]["ename"], cell.manifest["error"]["evalue"]) == ("RangeError", "later")
    # the script's completion value was already `_` when the callback threw, as in the REPL
    after = run("console.log(n, _, _error.name)\n", after=cell)
    assert after.result.stdout == b"1 done RangeError\n", after.said()


def test_underscore_is_the_completion_value_of_the_cell_before(run: Cells) -> None:
    first = run("console.log(typeof _, typeof _error);\n6 * 7\n")
    assert first.result.stdout == b"undefined undefined\n", first.said()  # a fresh REPL's
    assert first.manifest["variables"] == [] and first.manifest["not_carried"] == []
    second = run("console.log(_);\nconst o = {n: _};\no\n", after=first)
    assert second.result.stdout == b"42\n", second.said()
    assert second.manifest["displays"] == [{"data": {"text/plain": "{ n: 42 }", "application/json": {"n": 42}}}]
    assert _names(second.manifest["variables"]) == ["o"]
    third = run("console.log(_, _ === o);\nlet b = 1\n", after=second)
    assert third.result.stdout == b"{ n: 42 } true\n", third.said()
    fourth = run("console.log(_)\n", after=third)  # a declaration's completion value
    assert (fourth.result.stdout, fourth.result.stderr) == (b"undefined\n", b""), fourth.said()


def test_assigning_underscore_disables_it_with_nodes_message_and_it_carries_as_the_users(run: Cells) -> None:
    first = run("console.log(_);\n_ = 5;\n_ = 6;\n1 + 1\n")
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    assert (first.result.stdout, first.result.stderr) == (b"undefined\n", b"Expression assignment to _ now disabled.\n")
    assert first.manifest["displays"] == [{"data": {"text/plain": "2"}}]  # shown, and `_` stays the user's
    assert _names(first.manifest["variables"]) == ["_"]
    second = run("console.log(_);\n_ += 1;\n'shown'\n", after=first)
    assert (second.result.stdout, second.result.stderr) == (b"6\n", b""), second.said()
    third = run("_\n", after=second)
    assert third.manifest["displays"] == [{"data": {"text/plain": "7"}}], third.said()


def test_an_assigned_error_name_is_not_replaced_by_the_next_error(run: Cells) -> None:
    first = run("_error = 'mine';\nthrow new Error('not kept');\n")
    assert first.result.outcome is Outcome.FAILED, first.said()
    assert first.result.stderr.startswith(b"Expression assignment to _error now disabled.\n")
    second = run("throw new Error('nor this one');\n", after=first)
    assert second.result.outcome is Outcome.FAILED, second.said()
    third = run("_error\n", after=second)
    assert third.manifest["displays"] == [{"data": {"text/plain": "'mine'"}}], third.said()


def test_a_completion_value_that_cannot_be_serialized_is_listed_as_not_carried(run: Cells) -> None:
    first = run("const f = () => 1;\nSymbol('s')\n")
    assert first.result.outcome is Outcome.SUCCEEDED, first.said()
    assert first.manifest["displays"] == [{"data": {"text/plain": "Symbol(s)"}}]
    assert first.manifest["not_carried"] == [
        {"name": "f", "type": "function", "why": "function"},
        {"name": "_", "type": "symbol", "why": "cannot be serialized: Symbol(s) could not be cloned."},
    ]
    second = run("console.log(typeof f, typeof _)\n", after=first)
    assert second.result.stdout == b"undefined undefined\n", second.said()


def test_a_name_starting_with_an_underscore_carries_as_in_nodes_repl(run: Cells) -> None:
    first = run("let _x = 1;\nvar __y = 2;\n")
    assert _names(first.manifest["variables"]) == ["__y", "_x"], first.said()
    second = run("console.log(_x + __y)\n", after=first)
    assert second.result.stdout == b"3\n", second.said()


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
