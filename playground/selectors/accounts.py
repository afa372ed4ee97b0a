"""What the account pages list: a user's API tokens, and (for staff) the invite links with their status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from playground.models import ApiToken, Invite


def token_list_for_user(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).order_by("-created_at")


@dataclass(frozen=True)
class InviteRow:
    invite: Invite
    status: str  # "unused", "used" or "expired"


def invite_status(invite: Invite, *, now: datetime | None = None) -> str:
    if invite.used_at is not None:
        return "used"
    if invite.expires_at <= (now or timezone.now()):
        return "expired"
    return "unused"


def invite_list(*, limit: int = 200) -> list[InviteRow]:
    now = timezone.now()
    invites = Invite.objects.select_related("created_by", "used_by").order_by("-created_at")[:limit]
    return [InviteRow(invite=i, status=invite_status(i, now=now)) for i in invites]
