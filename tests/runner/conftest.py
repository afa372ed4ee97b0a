"""Fixtures shared by the runner's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runner.egress_net import EgressTestHost, can_make_test_host, running_test_host


@pytest.fixture(scope="session")
def test_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressTestHost]:
    """The egress tests' test host (tests.runner.egress_net), one for the session."""
    ok, why = can_make_test_host()
    if not ok:
        pytest.skip(why)
    with running_test_host(tmp_path_factory.mktemp("egress-host")) as host:
        yield host
