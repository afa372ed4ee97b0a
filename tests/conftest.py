"""Shared test helpers: the project's own interpreter, free ports, a clean environment."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from runner.config import PROJECT_ROOT, paths_from_env

PYTHON = sys.executable

# Ready sandboxes (runner.ready) hold a slot and memory in each process that has run something, and
# many tests count both: they are off here unless a test turns them on (tests/runner/ready/test_ready.py,
# the hostile battery's ready pass, the API's ready test), as every process these tests start inherits.
os.environ.setdefault("CORDON_READY", "false")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(**overrides: str) -> dict[str, str]:
    """The environment for a child process of the project, without make's own variables."""
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS"}}
    env.update(overrides)
    return env


def web_server_argv(port: int) -> list[str]:
    """The web server as `make run` starts it: playground.server, daphne with request bodies capped."""
    return [PYTHON, "-m", "playground.server", "-b", "127.0.0.1", "-p", str(port), "playground.asgi:application"]


@pytest.fixture
def project_root() -> Path:
    return PROJECT_ROOT


@pytest.fixture
def images_dir() -> Path:
    return paths_from_env().images_dir


@pytest.fixture(scope="session")
def canary() -> dict[str, object]:
    """This host's smolvm canary verdict: the cached one, or a fresh canary boot if none is cached."""
    from runner.engines.smolvm.checks import run_canary
    from runner.engines.smolvm.engine import SmolvmEngine
    from runner.supervisor import Supervisor

    supervisor = Supervisor()
    engine = supervisor.engines["smolvm"]
    assert isinstance(engine, SmolvmEngine)
    return engine.read_canary() or run_canary(engine, supervisor.run)


ENGINES = ("namespace", "smolvm")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engine",
        choices=ENGINES,
        default=None,
        help="keep only the engine-parametrised tests of this engine (the VM harness passes smolvm)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = config.getoption("--engine")
    if wanted is None:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("engine") if callspec is not None else None
        (keep if engine == wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
