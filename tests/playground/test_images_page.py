"""The images page: each image this host built, with its runtime and package versions."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from playground.selectors.images import upstream_version
from runner.images import read_lock
from tests.playground.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_images_page_needs_a_login() -> None:
    response = Client().get("/images/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_images_page_lists_each_image_built_here_with_its_runtime_and_packages() -> None:
    client = Client()
    user: Any = UserFactory()
    client.force_login(user)
    page = client.get("/images/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<a href="/images/">Images</a>' in html
    built = read_lock()
    assert {"python", "node"} <= set(built)
    for name, entry in built.items():
        assert f'id="image-{name}"' in html and entry.digest in html and entry.built_at in html
        assert f"All {len(entry.packages)} packages" in html
    versions = {name: dict(p.split("=", 1) for p in entry.packages) for name, entry in built.items()}
    assert f"Python {upstream_version(versions['python']['python3'])}" in html
    assert f"Node.js {upstream_version(versions['node']['nodejs'])}" in html
    for package in ("python3-matplotlib", "python3-scipy", "python3-sklearn"):
        assert f'<td>{package}</td><td class="hash">{versions["python"][package]}</td>' in html


@pytest.mark.parametrize(
    ("debian", "upstream"),
    [("3.11.2-1+b1", "3.11.2"), ("18.19.0+dfsg-6~deb12u2", "18.19.0"), ("1:1.24.2-1+deb12u1", "1.24.2"), ("7", "7")],
)
def test_a_runtime_is_shown_by_its_upstream_version(debian: str, upstream: str) -> None:
    assert upstream_version(debian) == upstream
