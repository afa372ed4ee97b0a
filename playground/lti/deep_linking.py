"""Deep Linking: an instructor picks one of the course's assignments in Cordon, and the LMS gets a
signed LtiDeepLinkingResponse naming it (a resource link back to Cordon carrying the assignment's
id, and a gradebook column of the assignment's points).

The picker runs in the LMS's iframe, where Cordon's session and CSRF cookies are third-party cookies
a browser drops. So the launch hands the picker a token instead, signed by Cordon, short-lived and
good for one pick, carrying what the pick needs; the pick is authorised by it alone."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core import signing
from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils import timezone
from pylti1p3.deep_link import DeepLink
from pylti1p3.deep_link_resource import DeepLinkResource
from pylti1p3.lineitem import LineItem as LineItemSpec

from playground.classroom.selectors import course_for_staff
from playground.lti.config import registration_for
from playground.lti.launch import ASSIGNMENT_PARAM, Refused
from playground.lti.models import ContextLink, PickTokenUse, Platform
from playground.models import Assignment, Course

PICK_SALT = "cordon.lti.deep-link-pick"  # a token signed for this use verifies for no other
PICK_LIFETIME_S = 15 * 60  # from the launch to the pick


@dataclass(frozen=True)
class PickTicket:
    """What a picker's token carries: the launch's platform, deployment, deep-linking settings
    (as the LMS signed them), context and instructor, and the token's single-use id."""

    platform_id: int
    deployment_id: str
    settings: dict[str, Any]
    context_id: int
    user_id: int
    use_id: str

    @property
    def return_url(self) -> str:
        return str(self.settings.get("deep_link_return_url") or "")


def pick_token_make(
    *, platform: Platform, deployment_id: str, settings: dict[str, Any], context: ContextLink, user: User
) -> str:
    payload = {
        "platform": platform.pk, "deployment": deployment_id, "settings": settings, "context": context.pk,
        "user": user.pk, "use": secrets.token_urlsafe(16),
    }  # fmt: skip
    return signing.dumps(payload, salt=PICK_SALT, compress=True)


def pick_token_read(*, token: str) -> PickTicket:
    """The ticket of a picker's token: signed by Cordon for this use, younger than PICK_LIFETIME_S
    and not used yet (Refused otherwise)."""
    if not token:
        raise Refused("the pick carries no picker token: add the assignment from the LMS again", 400)
    try:
        payload = signing.loads(token, salt=PICK_SALT, max_age=PICK_LIFETIME_S)
    except signing.SignatureExpired as exc:
        raise Refused("the picker has expired: add the assignment from the LMS again", 403) from exc
    except signing.BadSignature as exc:
        raise Refused("the picker's token is not valid (its signature does not verify)", 403) from exc
    ticket = PickTicket(
        platform_id=int(payload["platform"]), deployment_id=str(payload["deployment"]),
        settings=dict(payload["settings"]), context_id=int(payload["context"]), user_id=int(payload["user"]),
        use_id=str(payload["use"]),
    )  # fmt: skip
    if PickTokenUse.objects.filter(use_id=ticket.use_id).exists():
        raise Refused("this picker was used already: add the assignment from the LMS again", 403)
    return ticket


def pick_scope(*, ticket: PickTicket) -> tuple[ContextLink, Course, User]:
    """The context and course of a ticket, while its platform and deployment are still registered
    and its user still instructs that course in Cordon (Refused otherwise)."""
    context = ContextLink.objects.select_related("platform", "course").filter(pk=ticket.context_id).first()
    if context is None or context.platform_id != ticket.platform_id:
        raise Refused("the picker's LMS course is no longer linked to a Cordon course", 403)
    if not context.platform.active:
        raise Refused("unknown LMS: no registered issuer and client id match", 403)
    if ticket.deployment_id not in context.platform.deployments():
        raise Refused("unknown deployment id for this LMS", 403)
    user = User.objects.filter(pk=ticket.user_id, is_active=True).first()
    if user is None:
        raise Refused("your Cordon account is no longer active", 403)
    try:
        course, _ = course_for_staff(user=user, course_id=context.course_id, instructor=True)
    except Http404 as exc:
        raise Refused("you no longer instruct this course in Cordon", 403) from exc
    return context, course, user


def pick_token_use(*, ticket: PickTicket) -> None:
    """The token's single use: whoever writes its row owns the pick (Refused for anybody else)."""
    now = timezone.now()
    PickTokenUse.objects.filter(expires_at__lte=now).delete()  # the sweep: indexed, and usually nothing
    try:
        with transaction.atomic():
            PickTokenUse.objects.create(use_id=ticket.use_id, expires_at=now + timedelta(seconds=PICK_LIFETIME_S))
    except IntegrityError as exc:
        raise Refused("this picker was used already: add the assignment from the LMS again", 403) from exc


@dataclass(frozen=True)
class DeepLinkAnswer:
    return_url: str
    jwt: str


def deep_link_answer(
    *, platform: Platform, deployment_id: str, settings: dict[str, Any], assignment: Assignment, launch_url: str,
    max_score: float,
) -> DeepLinkAnswer:  # fmt: skip
    resource = (
        DeepLinkResource()
        .set_title(assignment.title)
        .set_url(launch_url)
        .set_custom_params({ASSIGNMENT_PARAM: str(assignment.id)})
        .set_target("window")  # an assignment's page needs Cordon's session: it opens in a window
    )
    if max_score > 0:  # an AGS line item needs a positive maximum
        resource.set_lineitem(
            LineItemSpec()
            .set_label(assignment.title)
            .set_score_maximum(max_score)
            .set_resource_id(str(assignment.id))
            .set_tag("cordon")
        )
    deep_link = DeepLink(registration_for(platform), deployment_id, settings)  # type: ignore[arg-type]
    return DeepLinkAnswer(return_url=str(settings["deep_link_return_url"]), jwt=deep_link.get_response_jwt([resource]))
