"""Pages: owner-only, security headers on every response, no inline script anywhere."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from playground.models import Run, RunState
from runner.config import PROJECT_ROOT
from tests.playground.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser() -> Client:
    client = Client()
    user: Any = UserFactory()
    client.force_login(user)
    client.user = user  # type: ignore[attr-defined]
    return client


@pytest.mark.parametrize("url", ["/", "/playground/", "/datasets/", "/runs/", "/accounts/login/", "/admin/login/"])
def test_every_page_carries_the_security_headers(browser: Client, url: str) -> None:
    response = browser.get(url, follow=True)
    assert response.status_code == 200
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in csp
    assert response["X-Frame-Options"] == "DENY" and response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"


def test_no_template_has_an_inline_script_or_handler() -> None:
    for template in (PROJECT_ROOT / "templates").rglob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), template
        assert not re.search(r"\son[a-z]+=", text), template


def test_another_users_run_page_is_404(browser: Client) -> None:
    stranger: Any = UserFactory()
    run = Run.objects.create(owner=stranger, runtime="python", code="secret()", state=RunState.FINISHED)
    response = browser.get(f"/runs/{run.id}/")
    assert response.status_code == 404
    mine = Run.objects.create(owner=browser.user, runtime="python", code="print(1)")  # type: ignore[attr-defined]
    assert browser.get(f"/runs/{mine.id}/").status_code == 200


def test_pages_need_a_login() -> None:
    for url in ("/playground/", "/datasets/", "/runs/"):
        response = Client().get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_static_assets_are_vendored_not_fetched() -> None:
    for name in ("codemirror.js", "uplot.min.js", "uplot.min.css"):
        assert (PROJECT_ROOT / "static" / "vendor" / name).stat().st_size > 1000
    scripts = sorted((PROJECT_ROOT / "static" / "js").rglob("*.js"))
    assert any(script.parent.name == "classroom" for script in scripts)  # the folders' scripts too
    for script in scripts:
        assert "innerHTML" not in script.read_text(), f"{script.name} must render user output as text"


def test_the_pages_progress_shows_every_run_state_in_order() -> None:
    script = (PROJECT_ROOT / "static" / "js" / "run_view.js").read_text()
    declared = re.search(r"const STATES = \[([^\]]*)\];", script)
    assert declared is not None
    assert re.findall(r'"([a-z_]+)"', declared.group(1)) == [state.value for state in RunState]


def test_the_api_docs_load_their_assets_from_this_site(browser: Client) -> None:
    page = browser.get("/api/docs")
    assert page.status_code == 200
    scripts = re.findall(r'<script[^>]*\bsrc="([^"]+)"', page.content.decode())
    assert scripts and all(src.startswith("/static/") for src in scripts), scripts
    assert b"cdn." not in page.content
    for src in scripts:  # served, so that the page's CSP (script-src 'self') lets them run
        assert browser.get(src).status_code == 200, src


def test_the_openapi_document_has_no_duplicate_keys(browser: Client) -> None:
    """Swagger UI refuses a document with a key twice (e.g. 200 and "200" for one response)."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)

    document = json.loads(browser.get("/api/openapi.json").content, object_pairs_hook=no_duplicates)
    assert "/api/notebooks/{notebook_id}/ipynb" in document["paths"]


@pytest.mark.parametrize(
    ("engine", "isolation", "shown"),
    [("namespace", "namespace", "namespace"), ("smolvm", "vm", "smolvm (microVM)"), ("", "", "-")],
)
def test_a_runs_engine_is_named_once_with_its_isolation_only_where_that_says_more(
    browser: Client, engine: str, isolation: str, shown: str
) -> None:
    run = Run.objects.create(owner=browser.user, runtime="python", code="1", engine=engine, isolation=isolation,  # type: ignore[attr-defined]
                             state=RunState.FINISHED)  # fmt: skip
    detail = browser.get(f"/runs/{run.id}/").content.decode()
    assert re.search(rf"engine\s+{re.escape(shown)} ·", detail), detail
    history = browser.get("/runs/").content.decode()
    assert f"<td>{shown}</td>" in history and "namespace namespace" not in detail + history


def test_an_outcome_badge_says_the_outcome_in_words_keeping_its_value_for_the_api(browser: Client) -> None:
    run = Run.objects.create(owner=browser.user, runtime="python", code="1", outcome="memory_limit",  # type: ignore[attr-defined]
                             state=RunState.FINISHED)  # fmt: skip
    history = browser.get("/runs/").content.decode()
    assert '<span class="badge outcome-memory_limit" title="memory_limit">out of memory</span>' in history
    answer = browser.get(f"/api/runs/{run.id}").json()
    assert (answer["outcome"], answer["outcome_text"]) == ("memory_limit", "out of memory")


def test_every_outcome_has_words_and_none_is_a_value_in_snake_case() -> None:
    from runner.spec import Outcome

    for outcome in Outcome:
        assert outcome.words and "_" not in outcome.words, outcome
