"""The audit console: a run's audit page, staff reads of user data recorded and listed, the
overview's figures and the CSV export of the filtered run list."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any, cast

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from playground.models import ApiToken, CleanupCheck, Dataset, Run, RunEvent, RunOutputFile, StaffAccess
from playground.selectors import overview as overview_selectors
from tests.playground.conftest import api
from tests.playground.factories import UserFactory, stored_logs

pytestmark = [pytest.mark.django_db]

HOSTILE_STDOUT = b"<script>alert('owned')</script>\nsecond line\n"


def _run(owner: Any, **fields: Any) -> Run:
    values: dict[str, Any] = {
        "runtime": "python", "code": "print('audited code')", "state": "finished", "outcome": "succeeded",
        "engine": "namespace", "isolation": "namespace", "worker_host": "host-a", "image_name": "python",
        "image_digest": "sha256:" + "ab" * 32, "wall_s": 1.0, "cpu_s": 0.5, "peak_memory_bytes": 50 * 1024 * 1024,
        "cleanup_ok": True,
    }  # fmt: skip
    values.update(fields)
    return Run.objects.create(owner=owner, **values)


def _events(run: Run, offsets_ms: list[tuple[str, int]]) -> None:
    for state, offset in offsets_ms:
        event = RunEvent.objects.create(run=run, state=state)
        RunEvent.objects.filter(id=event.id).update(at=run.created_at + timedelta(milliseconds=offset))


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def owner() -> Any:
    return UserFactory()


@pytest.fixture
def staff() -> Any:
    return UserFactory(is_staff=True, is_superuser=True)


@pytest.fixture
def audited_run(owner: Any) -> Run:
    run = _run(owner, stdout_bytes=len(HOSTILE_STDOUT), stderr_bytes=6, timings={"start_s": 0.2, "total_s": 1.5})
    stored_logs(run.id, stdout=HOSTILE_STDOUT, stderr=b"oops!\n")
    _events(run, [("queued", 0), ("claimed", 12), ("admitted", 40), ("starting", 41), ("running", 245),
                  ("exporting", 1245), ("finished", 1302)])  # fmt: skip
    CleanupCheck.objects.create(run=run, name="processes", ok=True)
    output = RunOutputFile.objects.create(run=run, name="result.csv", size=4, sha256="c" * 64)
    output.file.save("result", SimpleUploadedFile("result", b"a,b\n"))
    return run


def test_the_audit_page_shows_code_escaped_logs_and_phase_times_to_the_millisecond(
    audited_run: Run, staff: Any
) -> None:
    page = _client(staff).get(f"/admin/playground/run/{audited_run.id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "print(&#x27;audited code&#x27;)" in html
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "oops!" in html
    assert "claimed → admitted" in html and "28 ms" in html and "1.000 s" in html  # running → exporting
    created = timezone.localtime(audited_run.created_at)
    assert f"{created + timedelta(milliseconds=245):%H:%M:%S}.{(created.microsecond // 1000 + 245) % 1000:03d}" in html
    assert "50.0 MiB" in html  # peak memory in human units
    assert "processes: passed" in html  # the cleanup inline's rows have readable titles
    assert f"/api/runs/{audited_run.id}/outputs/result.csv" in html
    assert 'name="_save"' not in html  # nobody edits a run record
    assert StaffAccess.objects.filter(run=audited_run, what="audit page", staff=staff).count() == 1


def test_a_long_log_is_cut_and_says_so(owner: Any, staff: Any) -> None:
    run = _run(owner, stdout_bytes=100_000)
    stored_logs(run.id, stdout=b"x" * 100_000)
    html = _client(staff).get(f"/admin/playground/run/{run.id}/change/").content.decode()
    assert "cut: the first 64.0 KiB of 97.7 KiB shown" in html


def test_the_run_list_shows_peak_memory_and_image_names(audited_run: Run, staff: Any) -> None:
    html = _client(staff).get("/admin/playground/run/").content.decode()
    assert "50.0 MiB" in html and f'title="sha256:{"ab" * 32}">python abababab</span>' in html
    assert "Export CSV" in html


def test_a_staff_view_of_another_users_run_is_recorded_and_listed(audited_run: Run, staff: Any) -> None:
    client = _client(staff)
    base = f"/api/runs/{audited_run.id}"
    assert client.get(f"/runs/{audited_run.id}/").status_code == 200
    assert client.get(base).json()["code"] == "print('audited code')"
    for _ in range(3):  # the page polls the log: recorded once per window
        assert client.get(f"{base}/log?stream=stdout&offset=0").json()["data"].startswith("<script>")
    download = client.get(f"{base}/outputs/result.csv")
    assert download.status_code == 200 and download.getvalue() == b"a,b\n"
    whats = sorted(StaffAccess.objects.filter(staff=staff, run=audited_run).values_list("what", flat=True))
    assert whats == ["log (API)", "output", "run page", "run record and code (API)"]
    assert all(a.owner_username == audited_run.owner.username for a in StaffAccess.objects.all())

    listing = client.get("/admin/playground/staffaccess/").content.decode()
    assert "run page" in listing and "output" in listing and audited_run.owner.username in listing
    assert "Add staff access" not in listing
    audit_page = client.get(f"/admin/playground/run/{audited_run.id}/change/").content.decode()
    assert "Viewed by staff" in audit_page and "run record and code (API)" in audit_page


def test_an_owners_own_views_are_not_recorded(audited_run: Run, owner: Any) -> None:
    client = _client(owner)
    assert client.get(f"/runs/{audited_run.id}/").status_code == 200
    assert client.get(f"/api/runs/{audited_run.id}").status_code == 200
    assert client.get(f"/api/runs/{audited_run.id}/log?stream=stdout&offset=0").status_code == 200
    assert client.get(f"/api/runs/{audited_run.id}/outputs/result.csv").status_code == 200
    assert not StaffAccess.objects.exists()


@pytest.mark.parametrize("who", ["user", "staff without view_run"])
def test_another_user_or_staff_who_may_not_view_runs_gets_404_and_is_not_recorded(audited_run: Run, who: str) -> None:
    client = _client(UserFactory(is_staff=who != "user"))
    base = f"/api/runs/{audited_run.id}"
    assert client.get(f"/runs/{audited_run.id}/").status_code == 404
    for url in (base, f"{base}/log?stream=stdout&offset=0", f"{base}/outputs/result.csv",
                f"{base}/outputs/result.csv/preview"):  # fmt: skip
        assert client.get(url).status_code == 404, url
    assert not StaffAccess.objects.exists()


def test_staff_cannot_cancel_or_rerun_another_users_run(audited_run: Run, staff: Any) -> None:
    client = api(staff)
    assert client.post(f"/api/runs/{audited_run.id}/rerun").status_code == 404
    assert client.post(f"/api/runs/{audited_run.id}/cancel").status_code == 404
    assert client.get(f"/api/runs/{audited_run.id}").status_code == 200  # reading is allowed
    assert Run.objects.count() == 1 and not Run.objects.get().cancel_requested


def test_api_tokens_cannot_be_added_in_the_admin_and_a_revoked_one_stops_at_once_and_stays_listed(
    owner: Any, staff: Any
) -> None:
    from playground.services.accounts import token_create

    key = token_create(user=owner, name="laptop")
    token = ApiToken.objects.get()
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert bearer.get("/api/runs").status_code == 200
    client = _client(staff)
    assert client.get("/admin/playground/apitoken/add/").status_code == 403
    listing = client.get("/admin/playground/apitoken/").content.decode()
    assert token.prefix in listing and "Add api token" not in listing and "in use" in listing
    assert "Delete selected" not in listing and "revoke_tokens" in listing
    assert client.post(f"/admin/playground/apitoken/{token.id}/delete/", {"post": "yes"}).status_code == 403
    answer = client.post("/admin/playground/apitoken/", {"action": "revoke_tokens", "_selected_action": [token.id]})
    assert answer.status_code == 302
    assert bearer.get("/api/runs").status_code == 401
    token.refresh_from_db()
    assert token.revoked_by == staff and token.revoked_at is not None
    listing = client.get("/admin/playground/apitoken/").content.decode()
    assert f"revoked {token.revoked_at:%Y}" in listing and staff.username in listing


def test_the_console_offers_no_add_for_what_only_the_system_writes_and_lists_invites(staff: Any) -> None:
    from datetime import timedelta as days

    from playground.models import Invite

    client = _client(staff)
    for model in ("workerhost", "dataset", "runtimeimage", "apitoken", "invite"):
        assert client.get(f"/admin/playground/{model}/add/").status_code == 403, model
    index = client.get("/admin/").content.decode()
    assert "/admin/playground/invite/" in index and "/admin/playground/workerhost/add/" not in index
    Invite.objects.create(prefix="inv_abc", key_hash="e" * 64, note="for Ana", created_by=staff,
                          expires_at=timezone.now() + days(days=7))  # fmt: skip
    listing = client.get("/admin/playground/invite/").content.decode()
    assert "inv_abc" in listing and "for Ana" in listing and "unused" in listing and "e" * 64 not in listing


def test_the_image_filter_lists_each_image_once(owner: Any, staff: Any) -> None:
    for _ in range(5):
        _run(owner)
    _run(owner, image_name="node", image_digest="sha256:" + "cd" * 32)
    listing = _client(staff).get("/admin/playground/run/").content.decode()
    assert listing.count("?image_digest=sha256%3Aabab") == 1 and listing.count("?image_digest=sha256%3Acdcd") == 1


def test_the_overview_shows_rates_percentiles_top_users_and_images(owner: Any, staff: Any) -> None:
    other = UserFactory(username="heavy")
    for wall, cpu in ((1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0), (10.0, 1.0)):
        _run(owner, wall_s=wall, cpu_s=cpu)
    _run(other, outcome="sandbox_error", worker_host="host-b", wall_s=None, cpu_s=20.0, cleanup_ok=False)
    old = _run(owner)  # moved outside the 7-day window (created_at is set on insert)
    Run.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(days=9))

    page = _client(staff).get("/admin/overview/")
    assert page.status_code == 200
    overview = page.context["overview"]
    assert overview.runs == 6
    assert (overview.wall.p50_s, overview.wall.p95_s) == (3.0, 10.0)
    assert overview.series.totals == {"succeeded": 5, "sandbox_error": 1}
    assert overview.series.bucket_s == 3600 and page.context["range_key"] == "7d"
    host_b = next(r for r in overview.by_host if r.key == "host-b")
    assert host_b.sandbox_error_rate == 1.0 and host_b.cleanup_failure_rate == 1.0
    assert overview.top_users[0] == ("heavy", 20.0, 1)
    html = page.content.decode()
    assert "3.000 s" in html and "10.000 s" in html and "100.0 %" in html and "heavy" in html
    assert 'id="overview-data" type="application/json"' in html and "static/js/overview.js" in html
    assert "python" in html and "sha256:abababababab" in html
    assert "/admin/overview/" in _client(staff).get("/admin/").content.decode()


def test_the_overview_shows_the_range_chosen_and_links_each_outcome_to_its_runs(
    owner: Any, staff: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = timezone.now()
    ages = {"recent": timedelta(minutes=10), "today": timedelta(hours=5), "week": timedelta(days=3),
            "month": timedelta(days=20), "old": timedelta(days=40)}  # fmt: skip
    made = {}
    for name, age in ages.items():
        made[name] = _run(owner, outcome="failed" if name == "today" else "succeeded", reason=name)
        Run.objects.filter(id=made[name].id).update(created_at=now - age)
    staff_client = _client(staff)
    seen = {}
    for key, bucket in (("1h", 300), ("24h", 3600), ("7d", 3600), ("30d", 86400)):
        page = staff_client.get(f"/admin/overview/?range={key}")
        seen[key] = page.context["overview"].runs
        assert page.context["overview"].series.bucket_s == bucket, key
        assert f'href="/admin/overview/?range={key}" aria-current="page"' in page.content.decode()
    assert seen == {"1h": 1, "24h": 2, "7d": 3, "30d": 4}
    # A range of one's own (UTC), and one the page refuses (longer than 90 days): the default, saying why.
    start = (now - timedelta(days=50)).strftime("%Y-%m-%dT%H:%M")
    end = (now - timedelta(days=10)).strftime("%Y-%m-%dT%H:%M")
    custom = staff_client.get(f"/admin/overview/?from={start}&to={end}")
    assert custom.context["overview"].runs == 2 and custom.context["range_key"] == "custom"
    refused = staff_client.get("/admin/overview/?from=2020-01-01&to=2026-01-01")
    assert refused.context["range_key"] == "7d" and "at most 90 days long" in refused.context["range_words"]
    assert staff_client.get("/admin/overview/?from=" + "9" * 40).context["range_key"] == "7d"
    # Each outcome's count links to its runs: the run list, filtered to the range and the outcome.
    page = staff_client.get("/admin/overview/?range=24h")
    [(_, count, url)] = [t for t in page.context["totals"] if t[0] == "failed"]
    assert count == 1
    listed = staff_client.get(url)
    assert listed.status_code == 200 and [r.id for r in listed.context["cl"].result_list] == [made["today"].id]
    everything = staff_client.get(page.context["all_runs_url"])
    assert {r.id for r in everything.context["cl"].result_list} == {made["recent"].id, made["today"].id}
    # More runs than one overview reads: the range starts at the oldest of the newest read, and says so.
    monkeypatch.setattr(overview_selectors, "MAX_ROWS", 3)
    cut = staff_client.get("/admin/overview/?range=30d")
    assert cut.context["overview"].runs == 3 and "the oldest of the newest 3" in cut.content.decode()


def test_the_overview_needs_staff(owner: Any) -> None:
    response = _client(owner).get("/admin/overview/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_csv_export_keeps_the_filter_and_neutralises_formulas(owner: Any, staff: Any) -> None:
    hostile = _run(owner, outcome="failed", reason='=HYPERLINK("http://evil")', image_name="@SUM(1)")
    _run(owner, outcome="succeeded")
    response = _client(staff).get("/admin/playground/run/export.csv?outcome=failed")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    content = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    rows = list(csv.reader(io.StringIO(content.decode())))
    assert (
        rows[0][:3] == ["id", "owner", "runtime"]
        and len(rows[0]) == 29
        and "vm_start" in rows[0]
        and "sandbox_start" in rows[0]
    )
    assert [row[0] for row in rows[1:]] == [str(hostile.id)]
    header = rows[0]
    assert rows[1][header.index("reason")] == '\'=HYPERLINK("http://evil")'
    assert rows[1][header.index("image_name")] == "'@SUM(1)"
    assert rows[1][header.index("peak_memory_bytes")] == str(50 * 1024 * 1024)


def test_the_csv_export_needs_staff(owner: Any) -> None:
    response = _client(owner).get("/admin/playground/run/export.csv")
    assert response.status_code == 302


def test_a_csv_export_with_a_bad_filter_is_a_400_and_datasets_cannot_be_deleted_one_by_one(staff: Any) -> None:
    client = _client(staff)
    assert client.get("/admin/playground/run/export.csv?created_at__nonsense=1").status_code == 400
    dataset = Dataset.objects.create(
        owner=cast(Any, UserFactory()), name="d.csv", size=1, sha256="0" * 64, sniffed_type="csv"
    )
    assert client.get(f"/admin/playground/dataset/{dataset.id}/delete/").status_code == 403
    page = client.get(f"/admin/playground/dataset/{dataset.id}/change/").content.decode()
    assert "d.csv" in page and "/media/" not in page  # no unrecorded download link


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.asyncio
@pytest.mark.usefixtures("redis_server")
async def test_a_staff_members_live_log_view_is_recorded_once_per_window() -> None:
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from playground.asgi import application
    from tests.playground.conftest import session_cookie

    owner = await sync_to_async(UserFactory)()
    staff = await sync_to_async(UserFactory)(is_staff=True, is_superuser=True)
    run = await sync_to_async(_run)(owner)
    for user in (staff, staff, owner):
        cookie = await sync_to_async(session_cookie)(user)
        socket = WebsocketCommunicator(application, f"/ws/runs/{run.id}/",
                                       headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1")])  # fmt: skip
        connected, _ = await socket.connect()
        assert connected
        await socket.disconnect()
    accesses = await sync_to_async(lambda: list(StaffAccess.objects.values_list("staff_username", "what")))()
    assert accesses == [(staff.username, "live log")]


def test_a_microvm_runs_page_says_how_its_vm_started(owner: Any, staff: Any) -> None:
    run = _run(owner, engine="smolvm", isolation="vm", vm_start="cold", timings={"start_s": 0.1, "boot_s": 9.1})
    html = _client(staff).get(f"/admin/playground/run/{run.id}/change/").content.decode()
    assert "The microVM (booted cold for this run) was ready in <strong>9.100 s</strong>" in html
    Run.objects.filter(id=run.id).update(vm_start="branch")
    html = _client(staff).get(f"/admin/playground/run/{run.id}/change/").content.decode()
    assert "(a fresh branch of a frozen base)" in html
    phases = {"branch_s": 0.25, "mount_s": 0.5, "refresh_s": 0.125}
    Run.objects.filter(id=run.id).update(timings={"start_s": 0.1, "boot_s": 1.2, **phases})
    html = _client(staff).get(f"/admin/playground/run/{run.id}/change/").content.decode()
    said = "(a fresh branch of a frozen base: branch 250 ms, mounts 500 ms, entropy and clock 125 ms)"
    assert f"The microVM {said} was ready in <strong>1.200 s</strong>" in html


def test_a_runs_page_links_its_host_whose_doctor_result_says_what_the_engine_note_sums_up(
    owner: Any, staff: Any
) -> None:
    from playground.models import WorkerHost

    note = "auto fell back to namespace: no microVM could boot on this host (its canary boot failed at T; ...)"
    run = _run(owner, engine_note=note)
    html = _client(staff).get(f"/admin/playground/run/{run.id}/change/").content.decode()
    assert "host-a" in html and "its doctor result" not in html  # a host that never reported: its name only
    doctor = {"smolvm": "the smolvm canary boot failed (boot_failed: Agent error)"}
    host = WorkerHost.objects.create(name="host-a", engines=["namespace"], heartbeat_at=timezone.now(), doctor=doctor)
    html = _client(staff).get(f"/admin/playground/run/{run.id}/change/").content.decode()
    link = f'<a href="/admin/playground/workerhost/{host.pk}/change/">host-a</a>'
    assert link in html and "its doctor result" in html and note in html
    assert "Agent error" in _client(staff).get(f"/admin/playground/workerhost/{host.pk}/change/").content.decode()


def test_a_runs_limits_timings_and_event_details_read_as_words_not_json(owner: Any, staff: Any) -> None:
    run = _run(owner, limits={"wall_timeout_s": 2.5, "memory_mib": 128}, timings={"start_s": 0.2, "boot_s": 9.1})
    event = RunEvent.objects.create(run=run, state="claimed", detail={"worker": "vm", "queue": "smolvm"})
    html = _client(staff).get(f"/admin/playground/run/{run.id}/change/").content.decode()
    assert "<th>wall-clock deadline</th><td>2.5 s</td>" in html and "<th>memory</th><td>128 MiB</td>" in html
    assert "<th>stdout kept</th><td>1 MiB</td>" in html  # a limit left out: its default, in its unit
    assert "<th>start</th><td>200 ms</td>" in html and "<th>boot</th><td>9.1 s</td>" in html
    assert "worker: vm; queue: smolvm" in html
    for raw in ("wall_timeout_s", "&quot;start_s&quot;", "{&#x27;worker&#x27;", "{'worker'"):
        assert raw not in html, raw
    assert event.detail == {"worker": "vm", "queue": "smolvm"}  # the record itself keeps its shape


def test_a_hosts_page_says_its_engines_and_doctor_checks_as_words(staff: Any) -> None:
    from playground.models import WorkerHost

    canary = {"ok": False, "reason": "boot_failed: no boot progress", "at": "2026-12-01T10:00:00Z"}
    doctor = {"namespace": "bubblewrap and cgroups v1 usable", "require_vm": False, "smolvm_canary": canary}
    host = WorkerHost.objects.create(name="h1", engines=["namespace", "smolvm"], heartbeat_at=timezone.now(),
                                     doctor=doctor)  # fmt: skip
    client = _client(staff)
    listing = client.get("/admin/playground/workerhost/").content.decode()
    assert "namespace, smolvm" in listing and "[&quot;namespace&quot;" not in listing
    page = client.get(f"/admin/playground/workerhost/{host.pk}/change/").content.decode()
    assert "<th>smolvm canary: reason</th><td>boot_failed: no boot progress</td>" in page
    assert "<th>require vm</th><td>no</td>" in page and "&quot;smolvm_canary&quot;" not in page


def test_the_run_list_shows_short_ids_and_finds_runs_by_their_code_and_error(owner: Any, staff: Any) -> None:
    wanted = _run(owner, code="import pandas  # the needle", outcome="failed", reason="exit status 1")
    errored = _run(owner, outcome="sandbox_error", error_code="boot_failed", error_message="no boot progress here")
    _run(owner)
    client = _client(staff)
    listing = client.get("/admin/playground/run/").content.decode()
    assert f'title="{wanted.id}">{str(wanted.id)[:8]}</span>' in listing
    assert "namespace namespace" not in listing and '<th scope="col" class="column-isolation' not in listing
    found = client.get("/admin/playground/run/?q=the+needle").content.decode()
    assert str(wanted.id)[:8] in found and str(errored.id)[:8] not in found and "1 result" in found
    found = client.get("/admin/playground/run/?q=boot+progress").content.decode()
    assert str(errored.id)[:8] in found and str(wanted.id)[:8] not in found
