"""Assignment and Grade Services: a submission's score recorded for each LMS column its assignment
is linked to (a Passback row), then sent by a worker with bounded attempts; a score that could not be
sent stays `failed`, with its error, on the instructor's LMS page until they send it again."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import requests
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone
from pylti1p3.assignments_grades import AssignmentsGradesService
from pylti1p3.exception import LtiException, LtiServiceException
from pylti1p3.grade import Grade
from pylti1p3.lineitem import LineItem as LineItemSpec
from pylti1p3.service_connector import ServiceConnector

from playground.lti.config import registration_for
from playground.lti.http import BoundedSession
from playground.lti.models import LineItem, LtiUser, Passback, PassbackState, ResourceLink
from playground.models import Course, Submission

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 4
SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
LINEITEM_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"


def retry_delay_s(attempt: int) -> int:
    """After attempt n (1, 2, ...): 30 s, 2 min, 8 min: an LMS that is down for a while is given time."""
    return int(30 * 4 ** max(0, attempt - 1))


def passbacks_record(*, submission: Submission) -> list[Passback]:
    """A pending row per LMS column of the submission's assignment that knows its student; an older
    row of the same student and column still pending is superseded (the newer score is the one)."""
    score = getattr(submission, "final_score", submission.score)
    if score is None:
        return []
    links = ResourceLink.objects.filter(assignment_id=submission.assignment_id, line_item__isnull=False)
    recorded = []
    for link in links.select_related("line_item", "platform"):
        lti_user = LtiUser.objects.filter(platform=link.platform, user_id=submission.student_id).first()
        if lti_user is None:  # the student never came from this LMS: it has no column for them
            continue
        with transaction.atomic():
            Passback.objects.filter(line_item=link.line_item, lti_user=lti_user, state=PassbackState.PENDING).update(
                state=PassbackState.SUPERSEDED
            )
            recorded.append(
                Passback.objects.create(
                    submission=submission,
                    line_item=link.line_item,
                    lti_user=lti_user,
                    score_given=max(0.0, float(score)),
                    score_maximum=float(submission.max_score),
                )
            )
    return recorded


def passback_send(*, passback_id: Any) -> str:
    """One attempt: 'sent', 'retry' (failed, attempts left: still pending), 'failed' (none left), or
    'skipped' (not pending, or another worker has this attempt). The attempt is claimed with a
    conditional UPDATE before the LMS is called; no row lock is held while it answers."""
    passback = Passback.objects.filter(id=passback_id).select_related(
        "line_item__resource_link__platform", "line_item__resource_link__assignment", "lti_user"
    ).first()  # fmt: skip
    if passback is None or passback.state != PassbackState.PENDING:
        return "skipped"
    claimed = Passback.objects.filter(id=passback.id, state=PassbackState.PENDING, attempts=passback.attempts).update(
        attempts=F("attempts") + 1, last_tried_at=timezone.now()
    )
    if not claimed:
        return "skipped"
    attempt = passback.attempts + 1
    try:
        _send(passback)
    except (requests.RequestException, LtiServiceException, LtiException, ValueError, KeyError) as exc:
        error = _error_words(exc)
        final = attempt >= MAX_ATTEMPTS
        Passback.objects.filter(id=passback.id, state=PassbackState.PENDING).update(
            state=PassbackState.FAILED if final else PassbackState.PENDING, last_error=error[:500]
        )
        log.warning("lti: passback %s attempt %s failed%s: %s", passback.id, attempt,
                    " (no attempts left)" if final else "", error)  # fmt: skip
        return "failed" if final else "retry"
    Passback.objects.filter(id=passback.id).update(state=PassbackState.SENT, sent_at=timezone.now(), last_error="")
    log.info("lti: passback %s sent (%s/%s)", passback.id, passback.score_given, passback.score_maximum)
    return "sent"


def _send(passback: Passback) -> None:
    line_item = passback.line_item
    link = line_item.resource_link
    scopes = line_item.scopes or [SCORE_SCOPE]
    connector = ServiceConnector(registration_for(link.platform), BoundedSession())
    service = AssignmentsGradesService(
        connector,
        {"scope": scopes, "lineitem": line_item.url, "lineitems": line_item.lineitems_url},
    )
    spec = None
    if not line_item.url:  # the launch named only the container: find the column by resource id, or make it
        found = service.find_or_create_lineitem(
            LineItemSpec()
            .set_label(link.assignment.title)
            .set_score_maximum(passback.score_maximum or 1)
            .set_resource_id(str(link.assignment_id))
            .set_resource_link_id(link.resource_link_id)
            .set_tag("cordon"),
            find_by="resource_id",
        )
        LineItem.objects.filter(id=line_item.id).update(url=found.get_id() or "")
        spec = found
    grade = (
        Grade()
        .set_score_given(passback.score_given)
        .set_score_maximum(passback.score_maximum)
        .set_timestamp(passback.created_at.isoformat())
        .set_activity_progress("Completed")
        .set_grading_progress("FullyGraded")
        .set_user_id(passback.lti_user.sub)
    )
    service.put_grade(grade, spec)


def _error_words(exc: Exception) -> str:
    if isinstance(exc, LtiServiceException):
        return (
            f"the LMS answered {exc.response.status_code}" if getattr(exc, "response", None) is not None else str(exc)
        )
    if isinstance(exc, requests.Timeout):
        return "the LMS did not answer in time"
    if isinstance(exc, requests.ConnectionError):
        return "the LMS could not be reached"
    return str(exc) or exc.__class__.__name__


def passback_resend(*, passback: Passback) -> bool:
    """A failed score, pending again with its attempts anew; the caller enqueues it."""
    return bool(
        Passback.objects.filter(id=passback.id, state=PassbackState.FAILED).update(
            state=PassbackState.PENDING, attempts=0
        )
    )


def passbacks_of(course: Course) -> QuerySet[Passback]:
    return Passback.objects.filter(line_item__resource_link__context__course=course).select_related(
        "submission__assignment", "submission__student", "lti_user__platform"
    )


def passbacks_stale(*, older_than_s: int = 3600) -> QuerySet[Passback]:
    """Pending rows whose task was lost (a broker restart) or never enqueued: the sweep sends them."""
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    return Passback.objects.filter(state=PassbackState.PENDING, created_at__lt=cutoff).exclude(last_tried_at__gt=cutoff)
