"""Our faults are never the user's. A sandbox that was never set up (here: a host state directory
whose parent the sandboxes' uid cannot enter, an easy operator mistake) never ran the program:
the run is a sandbox error named by the step that failed, retryable, and not the program's
`failed`; the CLI and the doctor refuse such a host up front, naming the directory. A program
that merely looks like such a failure, or that ignores its stop, is still judged as a program."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import upkeep
from runner.config import PROJECT_ROOT, Paths, paths_from_env
from runner.env import ConfigError
from runner.host.admission import Admission, Capacity
from runner.ready import ReadySettings
from runner.spec import Limits, Outcome, RunSpec
from runner.supervisor import Supervisor
from tests.conftest import child_env

pytestmark = [pytest.mark.images, pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root")]


@pytest.fixture
def parent() -> Iterator[Path]:
    """A directory the sandboxes' uid can enter (0711), under which a test makes a state dir."""
    made = Path(tempfile.mkdtemp(prefix="cordon-faults-"))
    made.chmod(0o711)
    try:
        yield made
    finally:
        made.chmod(0o700)
        shutil.rmtree(made, ignore_errors=True)


def _supervisor(state_dir: Path, *, ready: bool = False) -> Supervisor:
    paths = Paths(data_dir=state_dir.parent / "data", images_dir=paths_from_env().images_dir, host_state_dir=state_dir)
    capacity = Capacity(slots=2, memory_mib=2048, cpus=4.0, wait_s=30.0)
    return Supervisor(
        paths=paths, admission=Admission(state_dir / "admission", capacity), ready=ReadySettings(enabled=ready)
    )


def test_a_sandbox_never_set_up_is_a_sandbox_error_named_by_its_step_never_the_programs_failure(parent: Path) -> None:
    supervisor = _supervisor(parent / "locked" / "state")
    upkeep.check_sandbox_paths(supervisor)  # reachable at start-up ...
    (parent / "locked").chmod(0o700)  # ... and then an operator's chmod while it serves
    result = supervisor.run(RunSpec(runtime="python", script=b"print('never')", engine="namespace"))
    assert result.outcome is Outcome.SANDBOX_ERROR, result.to_json()
    assert result.error is not None and result.error.retryable
    assert result.error.code == "sandbox_mounts_failed"
    assert result.reason.startswith("sandbox_mounts_failed: the sandbox was not set up, so the program never ran: ")
    assert result.reason.endswith(": Permission denied"), result.reason  # bwrap's own words, its fd's path before
    assert result.stdout == b"" and result.cleanup_ok, result.to_json()
    with pytest.raises(ConfigError, match=f"cannot enter {parent / 'locked'} \\(mode 0700, owner uid 0\\)"):
        upkeep.check_sandbox_paths(supervisor)


def test_a_program_that_prints_bwraps_words_and_exits_1_is_still_the_programs_failure() -> None:
    said = "bwrap: Can't find source path /x: Permission denied"
    script = f"import sys\nprint({said!r}, file=sys.stderr)\nsys.exit(1)\n".encode()
    result = _supervisor_here().run(RunSpec(runtime="python", script=script, engine="namespace"))
    assert (result.outcome, result.reason, result.error) == (Outcome.FAILED, "exited with status 1", None)


def test_a_program_that_ignores_its_stop_is_still_timed_out_not_a_sandbox_error() -> None:
    """bwrap is killed with it (no exit code reported): its setup had finished, so the program ran."""
    script = (
        b"import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\n"
        b"while True:\n    pass\n"
    )
    result = _supervisor_here().run(
        RunSpec(runtime="python", script=script, engine="namespace", limits=Limits(wall_timeout_s=1))
    )
    assert result.outcome is Outcome.TIMED_OUT and result.error is None, result.to_json()
    assert result.evidence["kill_method"] != "SIGTERM" and result.stdout == b"up\n"


def _supervisor_here() -> Supervisor:
    paths = paths_from_env()
    capacity = Capacity(slots=2, memory_mib=2048, cpus=4.0, wait_s=30.0)
    return Supervisor(paths=paths, admission=Admission(paths.host_state_dir / "admission", capacity))


def _cli(state_dir: Path, *args: str, script: Path) -> subprocess.CompletedProcess[str]:
    env = child_env(CORDON_HOST_STATE_DIR=str(state_dir), CORDON_DATA_DIR=str(state_dir.parent / "data"),
                    CORDON_IMAGES_DIR=str(paths_from_env().images_dir))  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "runner", *args, *([str(script)] if args[0] == "run" else [])],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_cli_and_the_doctor_refuse_a_state_dir_the_sandboxes_cannot_reach_naming_it(parent: Path) -> None:
    script = parent / "job.py"
    script.write_text("print('hello')\n")
    script.chmod(0o644)
    (parent / "locked").mkdir(mode=0o700)
    state = parent / "locked" / "state"
    run = _cli(state, "run", "--runtime", "python", "--engine", "namespace", script=script)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stdout == ""  # nothing ran
    assert f"cannot enter {parent / 'locked'} (mode 0700, owner uid 0), on the way to {state / 'views'}" in run.stderr
    assert f"chmod o+x {parent / 'locked'}" in run.stderr
    doctor = _cli(state, "doctor", "--json", script=script)
    assert doctor.stdout, doctor.stderr  # a report, whatever it finds
    [check] = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "sandbox paths"]
    assert check["ok"] is False and f"cannot enter {parent / 'locked'}" in check["detail"]
    (parent / "locked").chmod(0o711)  # put right: the same command runs the program
    again = _cli(state, "run", "--runtime", "python", "--engine", "namespace", script=script)
    assert again.returncode == 0 and again.stdout == "hello\n", again.stderr
