"""The classroom tests' shared fixture: the access world (course_world.py)."""

import pytest

from tests.playground.classroom.course_world import World, build_world


@pytest.fixture
def world() -> World:
    return build_world()
