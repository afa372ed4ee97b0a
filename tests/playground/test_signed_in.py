"""The typed signed-in user: the user of an authenticated request, and a refusal otherwise."""

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory

from playground.signed_in import signed_in
from tests.playground.factories import UserFactory


@pytest.mark.django_db
def test_signed_in_is_the_requests_user_and_an_anonymous_request_is_refused() -> None:
    request = RequestFactory().get("/")
    user: User = UserFactory.create()
    request.user = user
    assert signed_in(request) is user
    request.user = AnonymousUser()
    with pytest.raises(PermissionDenied):
        signed_in(request)
