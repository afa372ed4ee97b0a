"""A launch from an LMS: its JWT checked (pylti1p3, then what pylti1p3 leaves out), and what it
means in Cordon: the LMS user as a Cordon user, its context as a course (made on an instructor's
first launch), its resource link as one of that course's assignments, its role as a membership."""

from __future__ import annotations

import logging
import re
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

import requests
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from pylti1p3.contrib.django.message_launch import DjangoMessageLaunch
from pylti1p3.contrib.django.oidc_login import DjangoOIDCLogin
from pylti1p3.exception import LtiException, OIDCException

from playground.classroom import courses as course_services
from playground.classroom.selectors import membership_of
from playground.lti.config import STATE_LIFETIME_S, LaunchStore, ToolConf, platform_for
from playground.lti.http import BoundedSession
from playground.lti.models import ContextLink, LineItem, LtiUser, Platform, ResourceLink
from playground.lti.roles import role_for
from playground.models import Assignment, Course, Role
from playground.services.identities import linked_user

log = logging.getLogger(__name__)

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
DEPLOYMENT = CLAIM + "deployment_id"
MESSAGE_TYPE = CLAIM + "message_type"
ROLES = CLAIM + "roles"
CONTEXT = CLAIM + "context"
RESOURCE_LINK = CLAIM + "resource_link"
CUSTOM = CLAIM + "custom"
NRPS = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
DEEP_LINKING_SETTINGS = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
RESOURCE_LINK_REQUEST = "LtiResourceLinkRequest"
DEEP_LINKING_REQUEST = "LtiDeepLinkingRequest"
ASSIGNMENT_PARAM = "cordon_assignment"  # the custom parameter a deep-linked resource link carries
COURSE_PARAM = "cordon_course"  # an instructor's first launch binds the context to this course of theirs

# What pylti1p3 says when it refuses (the start of its message), in a person's words, with a status.
_REASONS = (
    ("Missing state param", 400, "the launch carries no state"),
    ("State not found", 400, "the launch's state does not match this browser's login (state cookie)"),
    ("Missing %s cookie", 400, "this browser did not keep the login cookie (are cookies blocked?)"),
    ("Invalid Nonce", 403, "the launch was used already, or was not started from this browser (nonce)"),
    ('"nonce" is empty', 400, "the launch carries no nonce"),
    ("Registration not found", 403, "unknown LMS: no registered issuer and client id match"),
    ("Client id not registered", 403, "unknown client id for this issuer"),
    ("Could not find registration", 403, "unknown LMS: no registered issuer and client id match"),
    ("Could not find issuer", 400, "the login request names no issuer"),
    ("Could not find login hint", 400, "the login request carries no login hint"),
    ("Unable to find deployment", 403, "unknown deployment id for this LMS"),
    ("Unable to find public key", 403, "the launch is signed by a key the LMS's keyset does not have"),
    ("Can't decode id_token: Signature has expired", 403, "the launch has expired"),
    ("Can't decode id_token: Signature verification failed", 403, "the launch's signature does not verify"),
    ("Can't decode id_token", 403, "the launch's token is not valid"),
    ("Invalid id_token", 400, "the launch's token is not a JWT"),
    ("Invalid JWT format", 400, "the launch's token is not a JWT"),
    ("Missing id_token", 400, "the launch carries no token"),
)


class Refused(Exception):
    """A launch (or login) Cordon does not accept: a short reason for the person and the log."""

    def __init__(self, reason: str, status: int = 403):
        super().__init__(reason)
        self.reason = reason
        self.status = status


def _refusal(exc: Exception) -> Refused:
    text = str(exc)
    for start, status, words in _REASONS:
        if text.startswith(start):
            return Refused(words, status)
    return Refused(f"the launch is not valid: {text[:200]}", 403)


# --- the OIDC login and the launch's checks ----------------------------------------------------


def oidc_redirect(*, request: HttpRequest, launch_url: str) -> Any:
    """The redirect to the LMS's authorization URL, with the state cookie and a nonce kept."""
    try:
        # The store is applied as the redirect is prepared; its rows live STATE_LIFETIME_S at most.
        login = DjangoOIDCLogin(request, ToolConf(), launch_data_storage=LaunchStore())  # type: ignore[no-untyped-call]
        return login.redirect(launch_url)
    except (OIDCException, LtiException) as exc:
        raise _refusal(exc) from exc


@dataclass(frozen=True)
class Launch:
    platform: Platform
    data: dict[str, Any]

    @property
    def message_type(self) -> str:
        return str(self.data.get(MESSAGE_TYPE) or "")

    @property
    def deployment_id(self) -> str:
        return str(self.data.get(DEPLOYMENT) or "")


def launch_validate(*, request: HttpRequest) -> Launch:
    """pylti1p3's checks (state, nonce, registration, signature with expiry, deployment, message),
    then what it leaves out: the audience (it matches the client id on the first audience only)."""
    try:
        message = DjangoMessageLaunch(  # type: ignore[no-untyped-call]
            request, ToolConf(), launch_data_storage=LaunchStore(), requests_session=BoundedSession()
        )
        message.set_launch_data_lifetime(STATE_LIFETIME_S)
        message.set_jwt_verify_options({"verify_aud": False, "require": ["exp", "iat"]})  # type: ignore[dict-item]
        data = dict(message.get_launch_data())
    except LtiException as exc:
        raise _refusal(exc) from exc
    except requests.RequestException as exc:
        log.warning("lti: the LMS's keyset could not be fetched: %s", exc)
        raise Refused("the LMS's keyset could not be fetched", 403) from exc
    platform = platform_for(str(data.get("iss")), message.get_client_id())
    if platform is None:  # deactivated between the checks and here
        raise Refused("unknown LMS: no registered issuer and client id match", 403)
    audiences = data.get("aud")
    audiences = audiences if isinstance(audiences, list) else [audiences]
    if platform.client_id not in audiences or (len(audiences) > 1 and data.get("azp") != platform.client_id):
        raise Refused("the launch is meant for another audience", 403)
    if data.get(MESSAGE_TYPE) not in (RESOURCE_LINK_REQUEST, DEEP_LINKING_REQUEST):
        raise Refused("Cordon accepts resource link and deep linking launches only", 400)
    return Launch(platform=platform, data=data)


# --- what a launch means in Cordon -------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """A launch Cordon accepts: who (logged in by the view), in which course, as what; for a
    resource link, the assignment it opens."""

    user: User
    course: Course
    role: Role
    context: ContextLink
    resource_link: ResourceLink | None = None


class NotSetUp(Exception):
    """A student (or assistant) launched from an LMS course no instructor has launched yet."""


def launch_accept(*, launch: Launch) -> Accepted:
    data, platform = launch.data, launch.platform
    role = role_for(data.get(ROLES) or [])
    if role is None:
        raise Refused("your role in the LMS course has no place in a Cordon course", 403)
    sub = str(data.get("sub") or "")
    if not sub:
        raise Refused("the launch names no user (sub)", 400)
    claim = data.get(CONTEXT) or {}
    if not isinstance(claim, dict) or not claim.get("id"):
        raise Refused("the launch names no LMS course (context)", 400)
    if launch.message_type == DEEP_LINKING_REQUEST and role != Role.INSTRUCTOR:
        raise Refused("only an instructor adds Cordon assignments to an LMS course", 403)
    link = ContextLink.objects.filter(
        platform=platform, deployment_id=launch.deployment_id, context_id=str(claim["id"])
    ).first()
    if link is None and role != Role.INSTRUCTOR:
        raise NotSetUp()
    user = user_for(platform=platform, sub=sub, claims=data)
    context = context_for(launch=launch, claim=claim, user=user, link=link)
    course_services.member_sync(course=context.course, user=user, role=role)
    resource_link = None
    if launch.message_type == RESOURCE_LINK_REQUEST:
        resource_link = resource_link_for(launch=launch, context=context)
        line_item_note(resource_link=resource_link, claim=data.get(AGS))
    return Accepted(user=user, course=context.course, role=role, context=context, resource_link=resource_link)


_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def _username_base(claims: dict[str, Any]) -> str:
    for candidate in (
        claims.get("preferred_username"),
        " ".join(str(claims.get(k) or "") for k in ("given_name", "family_name")).strip() or claims.get("name"),
        str(claims.get("email") or "").split("@")[0],
    ):
        base = _UNSAFE.sub(".", str(candidate or "").lower()).strip("._-")[:30].strip("._-")
        if base:
            return base
    return "user"


def user_for(*, platform: Platform, sub: str, claims: dict[str, Any]) -> User:
    """The Cordon user of an LMS user; the first launch (or roster sync) makes one, named from the
    LMS's names but always ending in `.lti<platform>` (no LMS user takes a local user's name), with
    an unusable password (they log in through the LMS) and no email (the LMS's is not verified
    here, and an email address would accept course invitations sent to it)."""
    now = timezone.now()
    base = f"{_username_base(claims)}.lti{platform.pk}"
    candidates = [base] + [f"{base}-{n}" for n in range(2, 20)] + [f"{base}-{secrets.token_hex(4)}"]
    profile = {"first_name": str(claims.get("given_name") or "")[:150],
               "last_name": str(claims.get("family_name") or "")[:150]}  # fmt: skip
    made = linked_user(
        link_model=LtiUser, identity={"platform": platform, "sub": sub}, usernames=candidates, profile=profile,
        link_fields={"last_launch_at": now},
    )  # fmt: skip
    if made is None:
        raise Refused("no username could be made for this LMS user", 500)
    link, new = made
    if not new:
        LtiUser.objects.filter(id=link.id).update(last_launch_at=now)
    return link.user


def context_for(*, launch: Launch, claim: dict[str, Any], user: User, link: ContextLink | None) -> ContextLink:
    """The course of an LMS context; an instructor's first launch makes one titled from the context
    (or binds the course named by the custom parameter cordon_course, if they instruct it). The
    service URLs are the last launch's."""
    data, platform = launch.data, launch.platform
    title = str(claim.get("title") or claim.get("label") or "LMS course")[:200]
    nrps, ags = _mapping(data.get(NRPS)), _mapping(data.get(AGS))
    services = {
        "title": title[:255], "nrps_url": str(nrps.get("context_memberships_url") or "")[:1000],
        "lineitems_url": str(ags.get("lineitems") or "")[:1000], "ags_scopes": list(ags.get("scope") or []),
        "last_launch_at": timezone.now(),
    }  # fmt: skip
    if link is None:
        with transaction.atomic():
            Platform.objects.select_for_update().get(pk=platform.pk)  # one first launch makes the course
            link = ContextLink.objects.filter(
                platform=platform, deployment_id=launch.deployment_id, context_id=str(claim["id"])
            ).first()
            if link is None:
                course = _course_to_bind(user, data) or course_services.course_create(user=user, title=title)
                link = ContextLink.objects.create(
                    platform=platform, deployment_id=launch.deployment_id, context_id=str(claim["id"]), course=course,
                    **services,
                )  # fmt: skip
                log.info("lti: context %s of %s bound to course %s", claim["id"], platform, course.id)
                return link
    for name, value in services.items():
        setattr(link, name, value)
    link.save(update_fields=list(services))
    return link


def _course_to_bind(user: User, data: dict[str, Any]) -> Course | None:
    custom = _mapping(data.get(CUSTOM))
    course_id = _uuid(custom.get(COURSE_PARAM))
    if course_id is None:
        return None
    membership = membership_of(user, course_id)
    return membership.course if membership is not None and membership.role == Role.INSTRUCTOR else None


def resource_link_for(*, launch: Launch, context: ContextLink) -> ResourceLink:
    """The assignment of a resource link: bound on its first launch from the custom parameter its
    deep link left, and only ever opened from the course it was bound in."""
    claim = launch.data.get(RESOURCE_LINK) or {}
    link_id = str(claim.get("id") or "") if isinstance(claim, dict) else ""
    if not link_id:
        raise Refused("the launch names no resource link", 400)
    link = (
        ResourceLink.objects.filter(platform=launch.platform, resource_link_id=link_id)
        .select_related("assignment", "context")
        .first()
    )
    if link is not None:
        if link.context_id != context.id or link.assignment.course_id != context.course_id:
            log.warning("lti: resource link %s of %s launched from another context %s", link_id, launch.platform,
                        context.context_id)  # fmt: skip
            raise Refused("this link belongs to another course", 403)
        return link
    custom = _mapping(launch.data.get(CUSTOM))
    assignment_id = _uuid(custom.get(ASSIGNMENT_PARAM))
    if assignment_id is None:
        raise Refused("this LMS link is not bound to a Cordon assignment: add it with Cordon's assignment picker", 400)
    assignment = Assignment.objects.filter(id=assignment_id).first()
    if assignment is None or assignment.course_id != context.course_id:
        raise Refused("this link belongs to another course", 403)
    try:
        with transaction.atomic():
            return ResourceLink.objects.create(
                platform=launch.platform, resource_link_id=link_id, context=context, assignment=assignment,
                title=str(claim.get("title") or "")[:255],
            )  # fmt: skip
    except IntegrityError:
        return ResourceLink.objects.select_related("assignment").get(platform=launch.platform, resource_link_id=link_id)


def line_item_note(*, resource_link: ResourceLink, claim: Any) -> None:
    """The gradebook column the launch names (or only its container), for the scores to come."""
    if not isinstance(claim, dict) or not (claim.get("lineitem") or claim.get("lineitems")):
        return
    line_item, _ = LineItem.objects.get_or_create(resource_link=resource_link)
    line_item.url = str(claim.get("lineitem") or line_item.url)[:1000]
    line_item.lineitems_url = str(claim.get("lineitems") or line_item.lineitems_url)[:1000]
    line_item.scopes = [str(s) for s in claim.get("scope") or []]
    line_item.save()


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError):
        return None
