"""A signed-in person's claims to their account: found by (issuer, sub), made at the first sign-in
under a free user name, and given the roles their groups map to, again at every sign-in."""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import Group, Permission, User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from playground.models import SsoIdentity
from playground.services.identities import linked_user
from playground.sso.config import SsoConfig, SsoRefused

log = logging.getLogger(__name__)

# The Django groups the provider's groups map to. Made at the first sign-in that needs them, with the
# permissions below; staff may change a group's permissions in the console afterwards.
STAFF_GROUP = "staff (single sign-on)"
INSTRUCTORS_GROUP = "instructors"
INSTRUCTOR_PERMISSIONS = [("playground", "add_course")]

USERNAME_MAX = 150  # User.username's length
_NOT_IN_USERNAME = re.compile(r"[^\w.@+-]+")  # Django's username validator allows \w . @ + -


def sso_sign_in(*, config: SsoConfig, claims: dict[str, Any]) -> User:
    """The account of the person these (verified) claims describe, made if it is their first time."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise SsoRefused("missing_claim", "the provider sent no subject (sub) for this person")
    with transaction.atomic():
        identity = _identity(config=config, subject=subject, claims=claims)
        user = identity.user
        if not user.is_active:
            raise SsoRefused("inactive_account", "this account has been deactivated on this site; ask its staff")
        _update_profile(user, claims)
        _apply_roles(config=config, user=user, groups=_groups(claims.get(config.groups_claim)))
        user.save()
        SsoIdentity.objects.filter(id=identity.id).update(last_login_at=timezone.now())
    return user


def _identity(*, config: SsoConfig, subject: str, claims: dict[str, Any]) -> SsoIdentity:
    """The person's link to their account; on their first sign-in, a new account (services/identities.py)."""
    wanted = _username(claims.get(config.username_claim) or claims.get("email") or subject)
    names = (wanted if attempt == 1 else f"{wanted[: USERNAME_MAX - 4]}-{attempt}" for attempt in range(1, 100))
    made = linked_user(link_model=SsoIdentity, identity={"issuer": config.issuer, "subject": subject}, usernames=names)
    if made is None:
        raise SsoRefused("username_taken", f"no free user name like {wanted!r}; ask this site's staff")
    identity, new = made
    username = identity.user.username
    if new and username != wanted:
        log.info("sso: %r is another account's name; %s at %s is %r", wanted, subject, config.issuer, username)
    if new:
        log.info("sso: account %r made for %s at %s", username, subject, config.issuer)
    return identity


def _username(value: Any) -> str:
    """Django's user name rules (letters, digits, . @ + - _; at most 150), from whatever the claim held."""
    text = unicodedata.normalize("NFKC", str(value)).strip()
    text = _NOT_IN_USERNAME.sub("-", text).strip("-")
    return text[:USERNAME_MAX] or "user"


def _update_profile(user: User, claims: dict[str, Any]) -> None:
    email = str(claims.get("email") or "")
    if email and claims.get("email_verified") is not False:
        try:
            validate_email(email)
        except ValidationError:
            email = ""
        user.email = email[:254]
    user.first_name = str(claims.get("given_name") or user.first_name)[:150]
    user.last_name = str(claims.get("family_name") or user.last_name)[:150]


def _groups(value: Any) -> frozenset[str]:
    """The groups claim: a list of names (or ids), or a single one."""
    if isinstance(value, str):
        return frozenset([value])
    if isinstance(value, list):
        return frozenset(str(item) for item in value)
    return frozenset()


def _apply_roles(*, config: SsoConfig, user: User, groups: frozenset[str]) -> None:
    """Each mapping that is configured decides its role from this sign-in's groups alone: someone
    taken out of the group at the provider loses the role at their next sign-in. A mapping left
    empty leaves the role as staff set it in the console."""
    superuser = bool(groups & config.superuser_groups)
    staff = superuser or bool(groups & config.staff_groups)
    if config.superuser_groups:
        user.is_superuser = superuser
    if config.staff_groups or config.superuser_groups:
        user.is_staff = staff
        _member(user, _staff_group(), staff)
    if config.instructor_groups:
        _member(user, _group(INSTRUCTORS_GROUP, INSTRUCTOR_PERMISSIONS), bool(groups & config.instructor_groups))
    log.info("sso: %s signed in: staff=%s superuser=%s groups=%s", user.username, user.is_staff,
             user.is_superuser, sorted(groups))  # fmt: skip


def _member(user: User, group: Group, member: bool) -> None:
    if member:
        user.groups.add(group)
    else:
        user.groups.remove(group)


def _staff_group() -> Group:
    """The audit console's reading rights, as staff have them today: view every record of Cordon and
    of LTI (runs, the code and logs they hold included, each read audited) and the accounts. Drains,
    revocations, purges and invites stay with superusers or what staff grant this group."""
    found = Group.objects.filter(name=STAFF_GROUP).first()
    if found is not None:
        return found
    views = Permission.objects.filter(
        Q(content_type__app_label__in=["playground", "lti"], codename__startswith="view_")
        | Q(content_type__app_label="auth", codename="view_user")
    )
    return _group(STAFF_GROUP, [], extra=views)


def _group(name: str, permissions: list[tuple[str, str]], extra: Iterable[Permission] = ()) -> Group:
    group, made = Group.objects.get_or_create(name=name)
    if made:
        wanted = Q(pk__in=[p.pk for p in extra])
        for app_label, codename in permissions:
            wanted |= Q(content_type__app_label=app_label, codename=codename)
        group.permissions.set(Permission.objects.filter(wanted))
    return group
