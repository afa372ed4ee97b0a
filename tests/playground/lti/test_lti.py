"""Cordon launched from a real LMS (lti1p3platform on a loopback port, signing with its own key):
an instructor's first launch makes the course, Deep Linking places an assignment, students launch
it, the roster comes over NRPS, scores go back over AGS (again after a regrade, and after an LMS that
was down), and every launch that must be refused is, with the reason logged and nobody logged in."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core import signing
from django.test import Client
from django.utils import timezone

from playground.celery import app as celery_app
from playground.classroom import courses as course_services
from playground.classroom.grading_results import finish_submission
from playground.lti import deep_linking
from playground.lti import passback as passback_services
from playground.lti.models import ContextLink, LtiUser, Passback, PassbackState, Platform, ResourceLink
from playground.models import Assignment, Course, Membership, Role, Submission, SubmissionState, TestResult, TestStatus
from tests.playground.lti.platform import (
    ASSISTANT,
    INSTRUCTOR,
    LEARNER,
    LoopbackPlatform,
    Message,
    Person,
    private_key_pem,
    query_of,
)

pytestmark = pytest.mark.django_db

TEACHER = Person("lms-teacher-1", INSTRUCTOR, name="Ines Teacher", given_name="Ines", family_name="Teacher")
STUDENT = Person("lms-student-7", LEARNER, name="Stu Dent", given_name="Stu", family_name="Dent")
CONTEXT = "ctx-101"


@pytest.fixture
def lms() -> Iterator[LoopbackPlatform]:
    with LoopbackPlatform() as platform:
        yield platform


@pytest.fixture
def registered(lms: LoopbackPlatform) -> Platform:
    """Staff registered the LMS; the LMS has Cordon's keyset (from its JWKS URL)."""
    platform = Platform.objects.create(**lms.platform_fields())
    lms.trust_tool_keys(Client().get("/lti/jwks/").json())
    return platform


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Celery tasks run in the test's process (retries too, at once): no broker in these tests."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def launch(client: Client, lms: LoopbackPlatform, message: Message, **login: str) -> Any:
    """The LMS's third-party login, Cordon's redirect to its authorization URL, and the launch."""
    hint = lms.add(message)
    answer = client.post("/lti/login/", lms.login_form(hint, **login))
    if answer.status_code != 302:
        return answer
    launched = lms.authorize(query_of(answer["Location"]))
    return client.post("/lti/launch/", {"id_token": launched["id_token"], "state": launched["state"]})


def logged_in(client: Client) -> User | None:
    user_id = client.session.get("_auth_user_id")
    return None if user_id is None else User.objects.get(pk=user_id)


def make_assignment(course: Course, title: str = "Double", **fields: Any) -> Assignment:
    tests = [
        {"name": "doubles 2", "stdin": "2", "expected_stdout": "4", "points": 1},
        {"name": "doubles 21", "stdin": "21", "expected_stdout": "42", "points": 2},
    ]
    assignment = course_services.assignment_save(
        course=course, data={"title": title, "runtime": "python", "tests": tests, **fields}
    )
    return course_services.assignment_publish(assignment=assignment, by=course.created_by, confirm=True)  # type: ignore[arg-type]


def token_of(picker: Any) -> str:
    found = re.search(r'name="token" value="([^"]+)"', picker.content.decode())
    assert found is not None, picker.content
    return found.group(1)


def pick(token: str, assignment: Assignment | None) -> Any:
    """The picker's POST as from the LMS's frame: a browser with no cookie of Cordon's at all."""
    fresh = Client(enforce_csrf_checks=True)
    assert not fresh.cookies
    return fresh.post("/lti/deep-link/", {"token": token, **({"assignment": str(assignment.id)} if assignment else {})})


def jwt_of(answer: Any) -> str:
    found = re.search(r'name="JWT" value="([^"]+)"', answer.content.decode())
    assert found is not None, answer.content
    return found.group(1)


def picker_launch(client: Client, lms: LoopbackPlatform) -> Any:
    """The instructor's deep-linking launch: answered with the picker itself, not a redirect."""
    picker = launch(client, lms, Message(TEACHER, CONTEXT, deep_link=True))
    assert picker.status_code == 200 and b'id="lti-pick"' in picker.content, picker
    return picker


def deep_link_place(client: Client, lms: LoopbackPlatform, assignment: Assignment) -> list[dict[str, Any]]:
    """The instructor's deep-linking launch, the pick, and the LMS receiving the signed answer."""
    answer = pick(token_of(picker_launch(client, lms)), assignment)
    assert answer.status_code == 200, answer.content
    html = answer.content.decode()
    assert f'action="{lms.base}/deep-link-return"' in html
    assert f"form-action 'self' {lms.base}" in answer["Content-Security-Policy"]
    return lms.receive_deep_link(jwt_of(answer))


@pytest.fixture
def placed(client: Client, lms: LoopbackPlatform, registered: Platform) -> Assignment:
    """The instructor launched (making the course), made an assignment, and placed it in the LMS."""
    picker_launch(client, lms)
    course = ContextLink.objects.get(context_id=CONTEXT).course
    assignment = make_assignment(course)
    deep_link_place(client, lms, assignment)
    return assignment


def student_launch(lms: LoopbackPlatform, person: Person = STUDENT, **fields: Any) -> tuple[Client, Any]:
    client = Client()
    message = Message(person, CONTEXT, resource_link_id=lms.last_placed, custom=lms.placed_custom(), **fields)
    return client, launch(client, lms, message)


def graded(submission: Submission, scores: list[float], capture: Callable[..., Any]) -> None:
    """Each test finished with its score, then the submission finished by the grader's own step
    (which sends score_changed once committed)."""
    for result, score in zip(submission.results.order_by("position"), scores, strict=True):
        TestResult.objects.filter(id=result.id).update(
            status=TestStatus.PASSED if score else TestStatus.FAILED, score=score, finished_at=timezone.now()
        )
    with capture(execute=True):
        finish_submission(submission.id)


def submit(assignment: Assignment, student: User) -> Submission:
    submission = Submission.objects.create(assignment=assignment, student=student, code="print(2 * int(input()))",
                                           max_score=3)  # fmt: skip
    for index, test in enumerate(assignment.tests.order_by("position")):
        TestResult.objects.create(submission=submission, test=test, position=index, name=test.name,
                                  points=test.points, visibility=test.visibility, spec={})  # fmt: skip
    return submission


# --- launches ------------------------------------------------------------------------------------


def test_an_instructors_first_launch_makes_the_course_and_logs_them_in_without_a_password(
    client: Client, lms: LoopbackPlatform, registered: Platform
) -> None:
    picker_launch(client, lms)
    link = ContextLink.objects.select_related("course").get(platform=registered, context_id=CONTEXT)
    assert link.course.title == "Intro to Programming"
    assert link.nrps_url == f"{lms.base}/nrps/{CONTEXT}"
    user = logged_in(client)
    assert user is not None and not user.has_usable_password()
    assert user.username == f"ines.teacher.lti{registered.pk}" and user.email == ""
    assert LtiUser.objects.get(platform=registered, sub=TEACHER.sub).user == user
    assert Membership.objects.get(course=link.course, user=user).role == Role.INSTRUCTOR
    # The second launch of the same context finds its course.
    launch(Client(), lms, Message(TEACHER, CONTEXT, deep_link=True))
    assert Course.objects.count() == 1


def test_deep_linking_answers_a_jwt_the_lms_verifies_naming_the_picked_assignment(
    client: Client, lms: LoopbackPlatform, registered: Platform
) -> None:
    launch(client, lms, Message(TEACHER, CONTEXT, deep_link=True))
    course = ContextLink.objects.get(context_id=CONTEXT).course
    mine = make_assignment(course, "Double")
    other_course = course_services.course_create(user=logged_in(client), title="Another course")  # type: ignore[arg-type]
    make_assignment(other_course, "Not from this course")
    page = picker_launch(client, lms).content.decode()
    assert "Double" in page and "Not from this course" not in page

    items = deep_link_place(client, lms, mine)

    assert len(items) == 1
    item = items[0]
    assert item["type"] == "ltiResourceLink" and item["title"] == "Double"
    assert item["custom"] == {"cordon_assignment": str(mine.id)}
    assert item["url"] == "http://testserver/lti/launch/"
    assert item["lineItem"]["scoreMaximum"] == 3 and item["lineItem"]["resourceId"] == str(mine.id)


def test_a_student_cannot_open_the_deep_link_picker(client: Client, lms: LoopbackPlatform, placed: Assignment) -> None:
    other, answer = Client(), None
    answer = launch(other, lms, Message(STUDENT, CONTEXT, deep_link=True))
    assert answer.status_code == 403 and logged_in(other) is None


def test_a_students_resource_link_launch_opens_the_assignment_as_a_member(
    lms: LoopbackPlatform, placed: Assignment, registered: Platform
) -> None:
    client, answer = student_launch(lms)
    assert answer.status_code == 302 and answer["Location"] == f"/assignments/{placed.id}/"
    user = logged_in(client)
    assert user is not None and user.username == f"stu.dent.lti{registered.pk}" and not user.has_usable_password()
    assert Membership.objects.get(course=placed.course, user=user).role == Role.STUDENT
    link = ResourceLink.objects.get(resource_link_id=lms.last_placed)
    assert link.assignment == placed and link.line_item.url.startswith(f"{lms.base}/lineitems/")
    assert client.get(answer["Location"]).status_code == 200


def test_an_instructors_resource_link_launch_opens_the_assignment(lms: LoopbackPlatform, placed: Assignment) -> None:
    client = Client()
    message = Message(TEACHER, CONTEXT, resource_link_id=lms.last_placed, custom=lms.placed_custom())
    answer = launch(client, lms, message)
    assert answer.status_code == 302 and answer["Location"] == f"/assignments/{placed.id}/"


@pytest.mark.parametrize("change", [{"opens_at": timezone.now() + timedelta(days=2)}, {"published_at": None}],
                         ids=["not open yet", "a draft"])  # fmt: skip
def test_a_student_gets_404_for_an_assignment_not_open_or_not_published(
    lms: LoopbackPlatform, placed: Assignment, change: dict[str, Any]
) -> None:
    Assignment.objects.filter(id=placed.id).update(**change)
    _, answer = student_launch(lms)
    assert answer.status_code == 404


def test_a_student_launching_a_course_nobody_set_up_is_told_so_and_not_logged_in(
    client: Client, lms: LoopbackPlatform, registered: Platform
) -> None:
    answer = launch(client, lms, Message(STUDENT, "ctx-unknown", resource_link_id="rl-x"))
    assert answer.status_code == 200
    assert b"Your instructor has not set this up yet" in answer.content
    assert logged_in(client) is None and not User.objects.filter(lti_links__sub=STUDENT.sub).exists()


# --- the picker in the LMS's frame ----------------------------------------------------------------


def frame_ancestors(response: Any) -> str:
    policy = response["Content-Security-Policy"]
    return next(p.strip() for p in policy.split(";") if p.strip().startswith("frame-ancestors"))


def test_only_the_pickers_pages_may_be_framed_and_only_by_the_launching_lms(
    client: Client, lms: LoopbackPlatform, placed: Assignment
) -> None:
    picker = picker_launch(client, lms)
    unpicked = pick(token_of(picker), None)  # nothing chosen: the picker again, the token not used up
    answer = pick(token_of(picker), placed)
    assert unpicked.status_code == 422 and b"Choose one of the assignments" in unpicked.content
    assert answer.status_code == 200
    for framable in (picker, unpicked, answer):
        assert frame_ancestors(framable) == f"frame-ancestors {lms.base}"
        assert not framable.has_header("X-Frame-Options")
    refused = pick("not-a-token", placed)
    others = [client.get(f"/lti/courses/{placed.course_id}/"), client.get("/courses/"), refused, client.get("/")]
    for other in others:
        assert frame_ancestors(other) == "frame-ancestors 'none'" and other["X-Frame-Options"] == "DENY", other


def test_a_pick_with_no_cookie_at_all_is_answered_with_a_jwt_the_lms_verifies(
    lms: LoopbackPlatform, placed: Assignment
) -> None:
    picker = picker_launch(Client(), lms)
    answer = pick(token_of(picker), placed)  # a fresh client: no session, no CSRF cookie
    assert answer.status_code == 200 and "sessionid" not in answer.cookies
    (item,) = lms.receive_deep_link(jwt_of(answer))
    assert item["custom"] == {"cordon_assignment": str(placed.id)} and item["lineItem"]["scoreMaximum"] == 3


def _tampered(token: str) -> str:
    body, signature = token.rsplit(":", 1)
    return f"{body}:{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"


def _pick_refused(token: str, assignment: Assignment, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    with caplog.at_level(logging.WARNING, logger="playground.lti"):
        answer = pick(token, assignment)
    assert answer.status_code in (400, 403) and reason in answer.content.decode(), answer.content
    assert b'name="JWT"' not in answer.content and answer["X-Frame-Options"] == "DENY"
    assert any("deep link refused" in r.getMessage() and reason in r.getMessage() for r in caplog.records), caplog.text


def test_a_tampered_or_missing_picker_token_is_refused_and_logged(
    client: Client, lms: LoopbackPlatform, placed: Assignment, caplog: pytest.LogCaptureFixture
) -> None:
    token = token_of(picker_launch(client, lms))
    _pick_refused(_tampered(token), placed, caplog, "signature does not verify")
    _pick_refused("", placed, caplog, "carries no picker token")
    other_use = signing.dumps(signing.loads(token, salt=deep_linking.PICK_SALT), salt="another use")
    _pick_refused(other_use, placed, caplog, "signature does not verify")
    assert pick(token, placed).status_code == 200  # the untampered token still picks


def test_an_expired_picker_token_is_refused_and_logged(
    client: Client, lms: LoopbackPlatform, placed: Assignment, caplog: pytest.LogCaptureFixture
) -> None:
    token = token_of(picker_launch(client, lms))
    later = time.time() + deep_linking.PICK_LIFETIME_S + 5
    with mock.patch("django.core.signing.time.time", return_value=later):  # the clock signing's max_age reads
        _pick_refused(token, placed, caplog, "the picker has expired")
    assert pick(token, placed).status_code == 200  # the same token, in time: the clock alone refused it


def test_a_picker_token_is_good_for_one_pick_only(
    client: Client, lms: LoopbackPlatform, placed: Assignment, caplog: pytest.LogCaptureFixture
) -> None:
    token = token_of(picker_launch(client, lms))
    assert pick(token, placed).status_code == 200
    _pick_refused(token, placed, caplog, "this picker was used already")
    assert len(lms.deep_links) == 1  # the placed fixture's; the first pick above was not posted on


def test_the_token_of_an_instructor_since_made_a_student_is_refused(
    client: Client, lms: LoopbackPlatform, placed: Assignment, caplog: pytest.LogCaptureFixture
) -> None:
    token = token_of(picker_launch(client, lms))
    teacher = LtiUser.objects.get(sub=TEACHER.sub).user
    Membership.objects.filter(course=placed.course, user=teacher).update(role=Role.STUDENT)
    _pick_refused(token, placed, caplog, "you no longer instruct this course")


# --- roster (NRPS) -------------------------------------------------------------------------------


def test_roster_sync_makes_the_lms_members_members_with_their_roles(
    client: Client, lms: LoopbackPlatform, placed: Assignment
) -> None:
    lms.members[CONTEXT] = [
        {"user_id": TEACHER.sub, "roles": INSTRUCTOR, "name": "Ines Teacher"},
        {"user_id": "lms-ta-2", "roles": ASSISTANT, "given_name": "Tara", "family_name": "Assist"},
        {"user_id": "lms-student-8", "roles": LEARNER, "given_name": "Lea", "family_name": "Rner"},
        {"user_id": "lms-student-9", "roles": LEARNER, "status": "Inactive"},
        {"user_id": "lms-mentor-3", "roles": ["http://purl.imsglobal.org/vocab/lis/v2/membership#Mentor"]},
    ]
    course = placed.course
    answer = client.post(f"/lti/courses/{course.id}/roster-sync")
    assert answer.status_code == 302
    roles = {LtiUser.objects.get(user=m.user).sub: m.role for m in Membership.objects.filter(course=course)}
    assert roles == {TEACHER.sub: Role.INSTRUCTOR, "lms-ta-2": Role.ASSISTANT, "lms-student-8": Role.STUDENT}
    page = client.get(answer["Location"]).content.decode()
    assert "2 added, 0 roles changed, 1 unchanged, 2 left out" in page
    assert ("GET", f"/nrps/{CONTEXT}") in lms.requests


def test_only_the_courses_instructor_may_sync_its_roster(lms: LoopbackPlatform, placed: Assignment) -> None:
    student, _ = student_launch(lms)
    assert student.post(f"/lti/courses/{placed.course_id}/roster-sync").status_code == 404
    assert student.get(f"/lti/courses/{placed.course_id}/").status_code == 404
    assert Client().post(f"/lti/courses/{placed.course_id}/roster-sync").status_code == 302  # to the login page
    assert ("GET", f"/nrps/{CONTEXT}") not in lms.requests


# --- scores (AGS) --------------------------------------------------------------------------------


def test_a_graded_submission_sends_its_score_and_a_regrade_sends_it_again(
    lms: LoopbackPlatform, placed: Assignment, eager_tasks: None, django_capture_on_commit_callbacks: Any
) -> None:
    client, _ = student_launch(lms)
    submission = submit(placed, logged_in(client))  # type: ignore[arg-type]
    graded(submission, [1, 0], django_capture_on_commit_callbacks)

    assert Submission.objects.get(id=submission.id).state == SubmissionState.GRADED
    assert len(lms.scores) == 1
    score = lms.scores[0]
    assert score["userId"] == STUDENT.sub and score["scoreGiven"] == 1 and score["scoreMaximum"] == 3
    assert score["activityProgress"] == "Completed" and score["gradingProgress"] == "FullyGraded"
    assert score["lineItem"] == ResourceLink.objects.get(resource_link_id=lms.last_placed).line_item.url
    assert Passback.objects.get().state == PassbackState.SENT

    graded(submission, [1, 2], django_capture_on_commit_callbacks)  # the instructor's regrade
    assert [s["scoreGiven"] for s in lms.scores] == [1, 3]
    assert list(Passback.objects.order_by("created_at").values_list("state", flat=True)) == ["sent", "sent"]


def test_a_score_adjusted_by_hand_is_sent_as_the_final_score(
    lms: LoopbackPlatform, placed: Assignment, eager_tasks: None, django_capture_on_commit_callbacks: Any
) -> None:
    """Tests 1 of 3, then +1.5 by hand (the LMS gets 2.5), then that adjustment withdrawn (1 again)."""
    from playground.classroom import adjustments

    client, _ = student_launch(lms)
    submission = submit(placed, logged_in(client))  # type: ignore[arg-type]
    graded(submission, [1, 0], django_capture_on_commit_callbacks)
    teacher = placed.course.memberships.get(role="instructor").user
    with django_capture_on_commit_callbacks(execute=True):
        made = adjustments.adjustment_add(submission=submission, by=teacher, points=1.5, comment="good tests")
    with django_capture_on_commit_callbacks(execute=True):
        adjustments.adjustment_withdraw(adjustment=made, by=teacher)
    assert [(s["scoreGiven"], s["scoreMaximum"]) for s in lms.scores] == [(1, 3), (2.5, 3), (1, 3)]
    assert list(Passback.objects.values_list("state", flat=True)) == ["sent"] * 3


def test_an_lms_that_answers_500_leaves_the_score_failed_and_shown_until_sent_again(
    client: Client, lms: LoopbackPlatform, placed: Assignment, eager_tasks: None,
    django_capture_on_commit_callbacks: Any, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    student, _ = student_launch(lms)
    submission = submit(placed, logged_in(student))  # type: ignore[arg-type]
    lms.fail_scores = 100
    with caplog.at_level(logging.WARNING, logger="playground.lti"):
        graded(submission, [1, 2], django_capture_on_commit_callbacks)

    row = Passback.objects.get()
    assert row.state == PassbackState.FAILED and row.attempts == passback_services.MAX_ATTEMPTS
    assert row.last_error == "the LMS answered 500" and lms.score_posts == passback_services.MAX_ATTEMPTS
    assert "no attempts left" in caplog.text
    page = client.get(f"/lti/courses/{placed.course_id}/").content.decode()
    assert "1 not sent" in page and "the LMS answered 500" in page and "Send again" in page

    lms.fail_scores = 0
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(f"/lti/passbacks/{row.id}/send-again")
    assert answer.status_code == 302
    row.refresh_from_db()
    assert row.state == PassbackState.SENT and row.attempts == 1
    assert [s["scoreGiven"] for s in lms.scores] == [3]
    assert "Send again" not in client.get(f"/lti/courses/{placed.course_id}/").content.decode()


def test_only_the_instructor_may_send_a_score_again(
    lms: LoopbackPlatform, placed: Assignment, eager_tasks: None, django_capture_on_commit_callbacks: Any
) -> None:
    student, _ = student_launch(lms)
    submission = submit(placed, logged_in(student))  # type: ignore[arg-type]
    lms.fail_scores = 100
    graded(submission, [1, 2], django_capture_on_commit_callbacks)
    row = Passback.objects.get()
    assert student.post(f"/lti/passbacks/{row.id}/send-again").status_code == 404
    row.refresh_from_db()
    assert row.state == PassbackState.FAILED


def test_the_jwks_publishes_public_keys_only(client: Client) -> None:
    keys = client.get("/lti/jwks/").json()["keys"]
    assert len(keys) == 1 and keys[0]["kty"] == "RSA" and keys[0]["alg"] == "RS256" and keys[0]["kid"]
    assert not {"d", "p", "q", "dp", "dq", "qi"} & set(keys[0])


def test_the_lms_posted_endpoints_and_the_pick_are_the_only_csrf_exempt_ones(
    lms: LoopbackPlatform, placed: Assignment
) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(ContextLink.objects.get().course.created_by)  # type: ignore[arg-type]
    assert strict.post(f"/lti/courses/{placed.course_id}/roster-sync").status_code == 403
    assert strict.post("/lti/login/", {}).status_code == 400  # refused for what it lacks, not for CSRF
    assert strict.post("/lti/deep-link/", {}).status_code == 400  # no picker token: refused as such


# --- refusals ------------------------------------------------------------------------------------


def _placed_link(lms: LoopbackPlatform, **fields: Any) -> Message:
    """A student's launch of the placed link, changed by `fields`."""
    return Message(STUDENT, CONTEXT, resource_link_id=lms.last_placed, custom=lms.placed_custom(), **fields)


def _wrong_audience(claims: dict[str, Any]) -> None:
    claims["aud"] = [claims["aud"], "someone-else"]
    claims["azp"] = "someone-else"


Case = tuple[Callable[[LoopbackPlatform], Message], dict[str, str], int, str]
REFUSALS: dict[str, Case] = {
    "bad signature": (lambda lms: _placed_link(lms, sign_with=private_key_pem()), {}, 403, "signature does not verify"),
    "unknown issuer": (lambda lms: _placed_link(lms), {"iss": "https://lms.invalid"}, 403, "unknown LMS"),
    "unknown client id": (lambda lms: _placed_link(lms), {"client_id": "not-ours"}, 403, "unknown LMS"),
    "unknown deployment id": (
        lambda lms: _placed_link(lms, deployment_id="deployment-9"),
        {},
        403,
        "unknown deployment id",
    ),
    "expired token": (lambda lms: _placed_link(lms, expires_in=-120), {}, 403, "the launch has expired"),
    "wrong audience": (
        lambda lms: _placed_link(lms, change=_wrong_audience),
        {},
        403,
        "the launch is meant for another audience",
    ),
    # The link placed in CONTEXT (bound to its course's assignment), launched from another LMS course.
    "a link launched from another course": (
        lambda lms: Message(TEACHER, "ctx-other", resource_link_id=lms.last_placed, custom=lms.placed_custom()),
        {},
        403,
        "belongs to another course",
    ),
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_a_launch_cordon_must_refuse_is_refused_logged_and_logs_nobody_in(
    case: str, lms: LoopbackPlatform, placed: Assignment, caplog: pytest.LogCaptureFixture
) -> None:
    make, login, status, reason = REFUSALS[case]
    message = make(lms)
    client = Client()
    with caplog.at_level(logging.WARNING, logger="playground.lti"):
        answer = launch(client, lms, message, **login)
    assert answer.status_code == status, answer.content
    assert reason in answer.content.decode()
    assert "Traceback" not in answer.content.decode()
    assert "sessionid" not in answer.cookies and logged_in(client) is None
    assert any(reason in r.getMessage() and "refused" in r.getMessage() for r in caplog.records), caplog.text


def test_a_replayed_launch_is_refused(
    lms: LoopbackPlatform, placed: Assignment, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client()
    hint = lms.add(Message(STUDENT, CONTEXT, resource_link_id=lms.last_placed, custom=lms.placed_custom()))
    redirect = client.post("/lti/login/", lms.login_form(hint))
    launched = lms.authorize(query_of(redirect["Location"]))
    form = {"id_token": launched["id_token"], "state": launched["state"]}
    assert client.post("/lti/launch/", form).status_code == 302
    kept = {name: cookie.value for name, cookie in client.cookies.items() if name.startswith("lti1p3")}
    client.logout()  # which forgets every cookie: the LTI ones are given back, as a browser keeps them
    for name, value in kept.items():
        client.cookies[name] = value
    with caplog.at_level(logging.WARNING, logger="playground.lti"):
        again = client.post("/lti/launch/", form)  # the same browser, cookies and all
    assert again.status_code == 403 and b"was used already" in again.content
    assert "sessionid" not in again.cookies and logged_in(client) is None
    assert "was used already" in caplog.text
    stolen = Client().post("/lti/launch/", form)  # another browser: no login cookie of its own
    assert stolen.status_code == 400 and logged_in(client) is None
