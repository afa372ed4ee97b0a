"""Names and Role Provisioning: an LMS course's roster (through the URL its last launch carried)
made into the Cordon course's memberships, with the LMS's roles mapped."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import requests
from pylti1p3.exception import LtiException, LtiServiceException
from pylti1p3.names_roles import NamesRolesProvisioningService
from pylti1p3.service_connector import ServiceConnector

from playground.classroom import courses as course_services
from playground.classroom.selectors import membership_of
from playground.lti.config import registration_for
from playground.lti.http import BoundedSession
from playground.lti.launch import user_for
from playground.lti.models import ContextLink
from playground.lti.roles import role_for

log = logging.getLogger(__name__)

MAX_PAGES = 50
MAX_MEMBERS = 5000


class RosterError(Exception):
    pass


@dataclass
class RosterResult:
    added: int = 0
    changed: int = 0
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)  # why each member left out was left out

    def words(self) -> str:
        text = f"roster synced: {self.added} added, {self.changed} roles changed, {self.unchanged} unchanged"
        return text + (f", {len(self.skipped)} left out (inactive, or a role with no place in a course)"
                       if self.skipped else "")  # fmt: skip


def roster_sync(*, context: ContextLink) -> RosterResult:
    """Active members only; nobody is removed (a person the LMS dropped keeps their work here)."""
    if not context.nrps_url:
        raise RosterError("the LMS's last launch of this course carried no roster service (NRPS)")
    connector = ServiceConnector(registration_for(context.platform), BoundedSession())
    service = NamesRolesProvisioningService(connector, {"context_memberships_url": context.nrps_url})
    members: list[dict[str, object]] = []
    url: str | None = context.nrps_url
    try:
        for _ in range(MAX_PAGES):
            page, url = service.get_members_page(url)
            members.extend(page[: MAX_MEMBERS - len(members)])  # type: ignore[arg-type]
            if not url or len(members) >= MAX_MEMBERS:
                break
    except (requests.RequestException, LtiServiceException, LtiException, ValueError) as exc:
        log.warning("lti: roster of %s could not be read: %s", context, exc)
        raise RosterError(f"the LMS's roster could not be read: {str(exc)[:200]}") from exc
    result = RosterResult()
    for member in members:
        sub, status = str(member.get("user_id") or ""), member.get("status") or "Active"
        role = role_for(member.get("roles") or [])  # type: ignore[arg-type]
        if not sub or status != "Active" or role is None:
            result.skipped.append(sub)
            continue
        user = user_for(platform=context.platform, sub=sub, claims=member)
        membership = membership_of(user, context.course)
        before = membership.role if membership is not None else None
        course_services.member_sync(course=context.course, user=user, role=role)
        if before is None:
            result.added += 1
        elif before != role:
            result.changed += 1
        else:
            result.unchanged += 1
    log.info("lti: %s for course %s", result.words(), context.course_id)
    return result
