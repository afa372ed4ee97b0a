"""Invite links: made by staff, single use, expiring, stored only as their sha256 and shown once.

Using one is a conditional UPDATE (unused and unexpired at that instant) in the same transaction
as the new account, so of two people racing with one link exactly one gets an account.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from playground.models import Invite

INVITE_DEFAULT_DAYS = 7
INVITE_MAX_DAYS = 30


class InviteInvalid(Exception):
    """An invite key that cannot open sign-up; `code` is "unknown", "used" or "expired"."""

    MESSAGES = {
        "unknown": "This invite link is not valid. Check that you copied all of it, or ask for a new one.",
        "used": "This invite link has already been used. Each link signs up one person; ask for a new one.",
        "expired": "This invite link has expired. Ask whoever sent it for a new one.",
    }

    def __init__(self, code: str):
        self.code = code
        self.message = self.MESSAGES[code]
        super().__init__(self.message)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def invite_create(*, by: User, note: str = "", lifetime_days: int = INVITE_DEFAULT_DAYS) -> str:
    """A new invite's key (shown once; only its hash is kept)."""
    if not 1 <= lifetime_days <= INVITE_MAX_DAYS:
        raise ValueError(f"an invite lasts 1 to {INVITE_MAX_DAYS} days")
    key = "inv_" + secrets.token_urlsafe(32)
    Invite.objects.create(
        prefix=key[:12],
        key_hash=_digest(key),
        note=note,
        created_by=by,
        expires_at=timezone.now() + timedelta(days=lifetime_days),
    )
    return key


def invite_check(*, key: str) -> Invite:
    """The usable invite with this key, or InviteInvalid saying why not."""
    invite = Invite.objects.filter(key_hash=_digest(key)).first()
    if invite is None:
        raise InviteInvalid("unknown")
    if invite.used_at is not None:
        raise InviteInvalid("used")
    if invite.expires_at <= timezone.now():
        raise InviteInvalid("expired")
    return invite


def invite_redeem(*, key: str, user: User) -> None:
    """Save the (unsaved) new user and mark the invite used by them, atomically; InviteInvalid
    (and no account) when the invite was used, expired or unknown at that instant."""
    now = timezone.now()
    with transaction.atomic():
        claimed = Invite.objects.filter(key_hash=_digest(key), used_at__isnull=True, expires_at__gt=now).update(
            used_at=now
        )
        if claimed != 1:
            invite_check(key=key)  # raises, saying why
            raise InviteInvalid("used")  # it was usable a moment ago: someone else just took it
        user.save()
        Invite.objects.filter(key_hash=_digest(key)).update(used_by=user)


def invite_revoke(*, invite_id: int) -> bool:
    """Delete an unused invite (a used one stays as the record of who signed up with it)."""
    deleted, _ = Invite.objects.filter(id=invite_id, used_at__isnull=True).delete()
    return deleted > 0
