"""Our faults are never the user's, through the web: a worker host whose sandboxes cannot be set
up (its state directory's parent closed to the sandboxes' uid) refuses to start, naming the
directory; and if that happens under a running worker, each run ends a sandbox error named by
the failed step, is not charged, and is retried once, never shown as the program's failure."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.config import PROJECT_ROOT
from tests.playground.conftest import CELERY, Worker, api
from tests.playground.factories import UserFactory
from tests.playground.test_runs_end_to_end import submit, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis, pytest.mark.images]


@pytest.fixture
def parent() -> Iterator[Path]:
    """A directory the sandboxes' uid can enter (0711), with a `locked` one in it for the state dir."""
    made = Path(tempfile.mkdtemp(prefix="cordon-faults-"))
    made.chmod(0o711)
    (made / "locked").mkdir(mode=0o711)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def test_a_worker_whose_sandboxes_cannot_reach_their_views_refuses_to_start_naming_the_directory(
    no_worker: None, worker_env: dict[str, str], parent: Path
) -> None:
    (parent / "locked").chmod(0o700)
    env = {**worker_env, "CORDON_HOST_STATE_DIR": str(parent / "locked" / "state")}
    argv = [CELERY, "-A", "playground", "worker", "--loglevel=INFO", "--concurrency=1", "--without-mingle",
            "--without-gossip", "-n", "refused@%h"]  # fmt: skip
    started = subprocess.run(argv, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=90, check=False)
    said = started.stdout + started.stderr
    assert started.returncode != 0, said
    assert f"cannot enter {parent / 'locked'} (mode 0700, owner uid 0)" in said, said[-3000:]
    assert "ready." not in said  # it never served


def test_a_run_whose_sandbox_cannot_be_set_up_is_our_fault_not_charged_and_retried_once(
    worker_env: dict[str, str], parent: Path
) -> None:
    # Ready sandboxes off: one made before the chmod below was set up already, and would serve.
    env = {**worker_env, "CORDON_HOST_STATE_DIR": str(parent / "locked" / "state"), "CORDON_READY": "false"}
    worker = Worker(env)
    worker.start()
    try:
        (parent / "locked").chmod(0o700)  # an operator's chmod while the worker serves
        client = api(UserFactory())
        created = submit(client, "print('never')")
        run = wait_finished(client, created["id"])
        assert (run["outcome"], run["charged"]) == ("sandbox_error", False), run
        assert run["error"]["code"] == "sandbox_mounts_failed"
        assert run["reason"].startswith("sandbox_mounts_failed: the sandbox was not set up, so the program never ran")
        assert run["exit_code"] is None and run["cleanup_ok"] is True
        [retry_id] = run["retries"]
        retry = wait_finished(client, str(retry_id))
        assert (retry["outcome"], retry["charged"], retry["retries"]) == ("sandbox_error", False, [])
        assert retry["error"]["code"] == "sandbox_mounts_failed"
        (parent / "locked").chmod(0o711)  # put right: the next run is the program's again
        fixed = wait_finished(client, submit(client, "print('now')")["id"])
        assert (fixed["outcome"], fixed["charged"]) == ("succeeded", True), fixed
    finally:
        (parent / "locked").chmod(0o711)
        worker.stop()
