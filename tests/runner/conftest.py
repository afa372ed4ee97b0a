"""Fixtures shared by the runner's tests. `supervisor` and `engine` serve the tests of what a
program finds in the images (a module with needs of its own, the hostile battery's, has its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.config import paths_from_env
from runner.host.admission import Admission, Capacity
from runner.supervisor import Supervisor
from tests.runner.cell_runs import Cells
from tests.runner.egress_net import EgressTestHost, can_make_test_host, running_test_host
from tests.runner.test_hostile import engines_here


@pytest.fixture(scope="module")
def supervisor() -> Supervisor:
    paths = paths_from_env()
    capacity = Capacity(slots=4, memory_mib=4096, cpus=16.0, wait_s=120.0)
    return Supervisor(paths=paths, admission=Admission(paths.host_state_dir / "admission", capacity))


@pytest.fixture(params=engines_here())
def engine(request: pytest.FixtureRequest, canary: dict[str, Any]) -> str:
    name: str = request.param
    if name == "smolvm" and not canary.get("ok"):
        pytest.skip(f"needs a host whose KVM boots microVMs; this host's canary boot failed: {canary.get('reason')}")
    return name


@pytest.fixture
def cells(supervisor: Supervisor, engine: str, tmp_path: Path) -> Cells:
    """Notebook cells on the engine the test is parametrised with."""
    return Cells(supervisor, engine, tmp_path)


@pytest.fixture(scope="session")
def test_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressTestHost]:
    """The egress tests' test host (tests.runner.egress_net), one for the session."""
    ok, why = can_make_test_host()
    if not ok:
        pytest.skip(why)
    with running_test_host(tmp_path_factory.mktemp("egress-host")) as host:
        yield host
