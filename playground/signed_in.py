"""The signed-in user of a request, typed: every caller is behind the API's authentication or a
login-required view, so an anonymous request reaching one is a wiring mistake, refused as one."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest


def signed_in(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User) or not user.is_authenticated:
        raise PermissionDenied("log in")
    return user
