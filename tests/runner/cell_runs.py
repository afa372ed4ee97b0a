"""Notebook cells run through the supervisor for the tests: each from the state a cell before it
left, a crafted one, or nothing; its result and the session files it left (the `cells` fixture,
tests/runner/conftest.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from runner.spec import MANIFEST_FILE, SESSION_DIR, STATE_FILE, Limits, RunResult, RunSpec
from runner.supervisor import Supervisor
from tests.runner.test_hostile import assert_nothing_left, retrying

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython's colours


def budget_s(engine: str) -> float:
    """Wall and CPU seconds for a cell whose test is not about time: make test-vm runs the smolvm
    cases under software emulation, where an import of pandas alone costs tens of CPU seconds."""
    return 300.0 if engine == "smolvm" else 60.0


@dataclass
class Cell:
    """One cell's run and the session files it left (exported under <folder>/.cordon)."""

    result: RunResult
    folder: Path

    @property
    def manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = json.loads((self.folder / SESSION_DIR / MANIFEST_FILE).read_text())
        return manifest

    @property
    def state(self) -> Path | None:
        path = self.folder / SESSION_DIR / STATE_FILE
        return path if path.is_file() else None

    @property
    def displays(self) -> list[dict[str, Any]]:
        return [display["data"] for display in self.manifest["displays"]]

    def session_file(self, name: str) -> bytes:
        return (self.folder / SESSION_DIR / name).read_bytes()

    def said(self) -> str:
        result = self.result
        return (
            f"{result.outcome.value}: {result.reason}\n"
            f"stdout: {result.stdout[-1500:]!r}\nstderr: {result.stderr[-1500:]!r}"
        )


class Cells:
    """Runs notebook cells, each from the state a cell before it left, a crafted one, or nothing."""

    def __init__(self, supervisor: Supervisor, engine: str, tmp: Path):
        self.supervisor, self.engine, self.tmp = supervisor, engine, tmp
        self.count = 0

    def __call__(
        self,
        script: str,
        *,
        after: Cell | None = None,
        state: Path | None = None,
        inputs: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        **limits: Any,
    ) -> Cell:
        self.count += 1
        folder = self.tmp / f"cell-{self.count}"
        (folder / "inputs").mkdir(parents=True)
        staged = []
        for name, text in (inputs or {}).items():
            (folder / "inputs" / name).write_text(text)
            staged.append(folder / "inputs" / name)
        if after is not None:
            assert after.state is not None, f"the cell before left no state: {after.said()}"
            state = after.state
        budget = budget_s(self.engine)
        spec = RunSpec(
            runtime="python", script=script.encode(), inputs=tuple(staged), engine=self.engine, args=args,
            cell=True, state=state, limits=replace(Limits(wall_timeout_s=budget, cpu_time_s=budget), **limits),
        )  # fmt: skip

        def attempt(n: int) -> RunResult:
            (folder / f"out-{n}").mkdir()
            return self.supervisor.run(spec, output_dir=folder / f"out-{n}")

        result, retried = retrying(self.supervisor, attempt, budget=True)
        assert_nothing_left(self.supervisor, result)
        return Cell(result, folder / f"out-{len(retried)}")
