"""Teardown is idempotent: a second pass over a finished run finds nothing and says so."""

from pathlib import Path

import pytest

from runner import upkeep
from runner.engines.base import RunContext
from runner.engines.namespace import NamespaceEngine
from runner.spec import Limits, RunSpec
from runner.supervisor import Supervisor

pytestmark = pytest.mark.images


def test_a_second_teardown_of_a_finished_run_is_green(tmp_path: Path) -> None:
    supervisor = Supervisor()
    result = supervisor.run(RunSpec(runtime="python", script=b"print(1)", engine="namespace"))
    assert result.cleanup_ok
    engine = supervisor.engines["namespace"]
    assert isinstance(engine, NamespaceEngine)
    run_dir = supervisor.runs_dir / result.run_id
    ctx = RunContext(
        run_id=result.run_id, spec=RunSpec(runtime="python", script=b""), limits=Limits(), run_dir=run_dir,
        view_dir=supervisor.views_dir / result.run_id, input_dir=run_dir / "in",
        scratch_dir=supervisor.views_dir / result.run_id / "scratch",
        output_dir=supervisor.views_dir / result.run_id / "out", slot=0,
        uid=supervisor.settings.uid_base + 63, image=supervisor.images.resolve("python"), argv=[],
    )  # fmt: skip
    checks = engine.teardown(ctx)
    assert [c.name for c in checks] == ["processes", "cgroups", "mounts"]
    assert all(c.ok for c in checks), checks
    assert upkeep.sweep(supervisor) == []
