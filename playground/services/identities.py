"""People who come from outside: an identity another system vouches for (an OpenID provider's
subject, an LMS user of an LTI platform) linked to one Cordon user. The first time, the user is
made with the first name of the candidates that no account holds (case-insensitively: "Alice"
beside a local "alice" would be the same person to a reader) and no usable password (they sign in
through that system), and the link with it, in one transaction; the same identity arriving twice at
once gets the one user that won. SSO (playground/sso/accounts.py) and LTI (playground/lti/launch.py)
both go through here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db import IntegrityError, models, transaction

Link = TypeVar("Link", bound=models.Model)


def linked_user(
    *, link_model: type[Link], identity: dict[str, Any], usernames: Iterable[str],
    profile: dict[str, str] | None = None, link_fields: dict[str, Any] | None = None,
) -> tuple[Link, bool] | None:  # fmt: skip
    """The link row of `identity` (the link model's fields that name it) and whether it was made
    now; None when every candidate user name is taken. `profile`: the new user's first and last
    names; `link_fields`: the new link's other fields."""
    found = link_model._default_manager.select_related("user").filter(**identity).first()
    if found is not None:
        return found, False
    for username in usernames:
        if User.objects.filter(username__iexact=username).exists():
            continue
        try:
            with transaction.atomic():
                user = User(username=username, **(profile or {}))
                user.set_unusable_password()
                user.save()
                return link_model._default_manager.create(user=user, **identity, **(link_fields or {})), True
        except IntegrityError:  # the name taken in between, or this identity linked by a parallel arrival
            found = link_model._default_manager.select_related("user").filter(**identity).first()
            if found is not None:
                return found, False
    return None
