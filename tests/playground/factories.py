"""factory_boy factories for the web tests."""

from typing import Any

import factory
from django.contrib.auth.models import User


class UserFactory(factory.django.DjangoModelFactory):  # type: ignore[type-arg]
    class Meta:
        model = User
        skip_postgeneration_save = True

    username: Any = factory.Sequence(lambda n: f"user{n}")  # type: ignore[attr-defined]
    password: Any = factory.django.Password("correct horse battery staple")
