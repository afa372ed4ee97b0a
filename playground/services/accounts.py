"""API tokens: made once and shown once, stored only as their sha256, and looked up by it."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from playground import observe
from playground.models import ApiToken

# A token's "last used" is kept to the minute: written on every request, it made each API call,
# polls included, a write transaction queued behind the workers' writes.
TOKEN_LAST_USED_RESOLUTION_S = 60


def token_create(*, user: User, name: str = "") -> str:
    token = "cdn_" + secrets.token_urlsafe(32)
    ApiToken.objects.create(
        user=user, name=name, prefix=token[:12], key_hash=hashlib.sha256(token.encode()).hexdigest()
    )
    return token


def token_user(*, token: str) -> User | None:
    digest = hashlib.sha256(token.encode()).hexdigest()
    found = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=digest, user__is_active=True, revoked_at__isnull=True)
        .first()
    )
    if found is None:
        return None
    now = timezone.now()
    if found.last_used_at is None or now - found.last_used_at >= timedelta(seconds=TOKEN_LAST_USED_RESOLUTION_S):
        ApiToken.objects.filter(id=found.id).update(last_used_at=now)
        observe.token_used(found)
    return found.user


def token_revoke(*, user: User, token_id: int) -> bool:
    """Revoke one of the user's own tokens; False when they have none with that id in use."""
    return tokens_revoke(tokens=ApiToken.objects.filter(user=user, id=token_id), by=user) > 0


def tokens_revoke(*, tokens: QuerySet[ApiToken], by: User) -> int:
    """Revoke tokens (the next request with one is a 401); each row stays, saying when and by whom."""
    return tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now(), revoked_by=by)
