"""Every page a logged-in analyst, student, instructor and admin can open, at a 390 px phone's width:
no page scrolls sideways (a wide table scrolls inside its own box), and every link, button and field
can be reached. Screenshots of each persona's pages at 1400 px and 390 px go under var/ (the data
folder's screenshots/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction

from playground.models import Course, Receipt, RunKind
from playground.services import datasets as dataset_services
from playground.services.accounts import token_create
from playground.services.invites import invite_create
from playground.services.receipts import receipt_issue
from tests.playground.classroom.course_world import build_world, finished_run
from tests.playground.conftest import serve_web
from tests.playground.factories import stored_logs
from tests.playground.test_browser import CHROMIUM, PASSWORD, Browser, chromium, shots  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    pytest.mark.redis,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"),
]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}

# What sticks out of the window: each link, button or field whose box passes the window's edge and
# that no box of its own scrolls into view; and how wide the document is.
_OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const scrollsInItsBox = (node) => {
    for (let box = node.parentElement; box && box !== document.body; box = box.parentElement) {
      const style = getComputedStyle(box);
      if (/(auto|scroll)/.test(style.overflowX) && box.scrollWidth > box.clientWidth) return true;
    }
    return false;
  };
  const out = [];
  for (const node of document.querySelectorAll("a[href], button, input, select, textarea, summary")) {
    const box = node.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;  // not shown (a closed <details>, hidden)
    if ((box.right > width + 1 || box.left < -1) && !scrollsInItsBox(node)) out.push(node.outerHTML.slice(0, 140));
  }
  // What makes the page wide: the elements past the edge none of whose children is (the causes).
  const past = (node) => node.getBoundingClientRect().right > width + 1 && !scrollsInItsBox(node);
  const wider = [...document.body.querySelectorAll("*")].filter((node) => past(node) && ![...node.children].some(past));
  if (!wider.length && document.documentElement.scrollWidth > width) {
    for (const node of document.body.querySelectorAll("*")) {
      if (node.getBoundingClientRect().right > width + 1) wider.push(node);
    }
  }
  const said = (node) => `${node.tagName.toLowerCase()}.${node.className}: ${node.textContent.slice(0, 40)}`;
  const why = wider.slice(0, 5).map(said);
  return { wide: document.documentElement.scrollWidth, width, out, why };
}"""


# A run's egress record as the proxy writes it (runner/egress/proxy.py): one refused attempt.
REFUSED = {"method": "CONNECT", "host": "files.pythonhosted.org", "port": 443, "allowed": False, "address": "",
           "reason": "not in the run's egress policy", "bytes_out": 0, "bytes_in": 0, "seconds": 0.0}  # fmt: skip
EGRESS_RECORD = {"policy": ["pypi.org:443"], "connections": 1, "refused": 1, "bytes_out": 512, "bytes_in": 2048,
                 "limit": "", "attempts_not_kept": 0, "attempts": [{"at": 1796256000.0, **REFUSED}]}  # fmt: skip


@pytest.fixture
def site(worker_env: dict[str, str]) -> Iterator[str]:
    """The web server alone: every run below is finished already."""
    with serve_web(worker_env) as base:
        yield base


@pytest.fixture
def personas(site: str) -> dict[str, list[str]]:
    """Each persona's pages (made before the browser starts: Playwright's sync API runs an event
    loop in this thread). The classroom is test_courses_access's world, graded by hand."""
    world = build_world()
    for user in world.users.values():
        user.set_password(PASSWORD)
        user.save()
    analyst = User.objects.create_user("ada", password=PASSWORD)
    upload = SimpleUploadedFile("sales_2026_by_region.csv", b"region,month,total\nnorth,2026-01-01,12.5\n")
    dataset_services.dataset_create(user=analyst, upload=upload)
    run = finished_run(owner=analyst, course=None, kind=RunKind.RUN, code="import pandas as pd\n" * 3,  # type: ignore[arg-type]
                       outcome="failed", reason="exit status 1", exit_code=1, engine="namespace",
                       isolation="namespace", stdout_bytes=3, stderr_bytes=200, wall_s=0.4, cpu_s=0.2,
                       timings={"start_s": 0.05, "total_s": 0.4}, image_name="python",
                       image_digest="sha256:" + "96d982f9be592ba1" * 4, sandbox_id="cordon-" + "3f2a9c" * 6,
                       engine_version="bubblewrap 0.8.0", worker_host="worker-host-with-a-long-name.example.internal",
                       egress=["pypi.org:443"], egress_record=EGRESS_RECORD, cleanup_ok=True)  # fmt: skip
    # What a real run's audit page holds: cleanup checks, an output with its hash, events with details.
    run.cleanup_checks.create(name="mounts", ok=True, detail="no mount of the run's is left: /proc/self/mountinfo "
                              "read after teardown, 0 of 31 entries under the run's directories")  # fmt: skip
    run.outputs.create(name="report_by_region_and_month.csv", size=2048, sha256="c0ffee" * 10 + "abcd")
    events = (("queued", {"queue": "namespace"}), ("claimed", {"worker": run.worker_host}), ("admitted", {"slot": 3}),
              ("finished", {"outcome": "failed", "reason": "exit status 1"}))  # fmt: skip
    for state, detail in events:
        run.events.create(state=state, detail=detail)
    stored_logs(run.id, stdout=b"ok\n", stderr=b"Traceback (most recent call last):\n" * 5 + b"ValueError: x\n")
    with transaction.atomic():  # as a run's end issues it
        receipt_issue(run_id=run.id)
    receipt = Receipt.objects.get(run_id=run.id).pk
    token_create(user=analyst, name="laptop")
    admin = User.objects.create_superuser("root", password=PASSWORD)
    invite_create(by=admin, note="for a new analyst in the finance team")
    ids = world.ids
    course, assignment, submission = ids["course"], ids["assignment"], ids["submission"]
    join_code = Course.objects.get(id=course).join_code
    return {
        "ada": ["/", "/playground/", "/datasets/", "/runs/", f"/runs/{run.id}/", "/images/", "/account/",
                "/courses/", f"/courses/join/{join_code}/", "/api/docs"],
        "student": ["/courses/", f"/courses/{course}/", f"/assignments/{assignment}/", f"/submissions/{submission}/",
                    "/runs/", f"/runs/{ids['try_run']}/", "/account/", "/datasets/"],
        "instructor": ["/courses/", f"/courses/{course}/", f"/courses/{course}/assignments/new/",
                       f"/assignments/{assignment}/", f"/assignments/{assignment}/edit/",
                       f"/submissions/{submission}/", f"/runs/{ids['test_run']}/", "/datasets/"],
        "root": ["/account/invites/", "/admin/", "/admin/overview/", "/admin/playground/run/",
                 f"/admin/playground/run/{run.id}/change/", f"/admin/playground/course/{course}/change/",
                 f"/admin/playground/receipt/{receipt}/change/", *_console_pages(admin), "/account/"],
    }  # fmt: skip


def _console_pages(admin_user: User) -> list[str]:
    """Every page of the audit console: each registered model's list, its add page where an admin
    may add one, and the page of its first record."""
    from django.contrib import admin
    from django.test import RequestFactory
    from django.urls import reverse

    request = RequestFactory().get("/admin/")
    request.user = admin_user
    pages = []
    for model, model_admin in admin.site._registry.items():
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        pages.append(reverse(f"{name}_changelist"))
        if model_admin.has_add_permission(request):
            pages.append(reverse(f"{name}_add"))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            pages.append(reverse(f"{name}_change", args=[first.pk]))
    return sorted(set(pages))


def _log_in(chromium: Browser, username: str) -> Any:  # noqa: F811
    from playwright.sync_api import expect

    page = chromium.page(chromium.browser.new_context(viewport=PHONE), username)
    page.goto(f"{chromium.site}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#id_password")).to_have_count(0)
    return page


def _settled(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("load")
    if page.locator("#notebook").count():
        from playwright.sync_api import expect

        expect(page.locator("#notebook")).to_have_attribute("data-ready", "true")
    page.wait_for_timeout(250)  # the page's own scripts draw what they fetched


def test_every_page_of_every_persona_fits_a_phone_and_keeps_its_actions_in_reach(
    personas: dict[str, list[str]],
    chromium: Browser,  # noqa: F811 - the fixture imported above
    site: str,
    shots: Path,  # noqa: F811
) -> None:
    problems = []
    for username, paths in personas.items():
        page = _log_in(chromium, username)
        for number, path in enumerate(paths):
            _settled(page, f"{site}{path}")
            found = page.evaluate(_OVERFLOW)
            if found["wide"] > found["width"] or found["out"]:
                problems.append((username, path, found))
            if number < 3 or "/run/" in path:  # each persona's main pages, and the run's audit page
                name = f"{username}-{number}-{path.strip('/').replace('/', '_') or 'home'}"
                page.screenshot(path=shots / f"{name}-390.png", full_page=True)
                page.set_viewport_size(DESKTOP)
                _settled(page, f"{site}{path}")
                page.screenshot(path=shots / f"{name}-1400.png", full_page=True)
                page.set_viewport_size(PHONE)
        page.context.close()
    assert not problems, "\n".join(f"{who} {path}: {found}" for who, path, found in problems)
    assert not chromium.errors, chromium.errors
