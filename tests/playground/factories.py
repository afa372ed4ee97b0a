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


def stored_logs(run_id: Any, **streams: bytes) -> None:
    """A finished run's log as its worker leaves it: each stream appended, then stored for good."""
    from playground.logs import log_append, log_release, log_store

    for stream, data in streams.items():
        log_append(run_id=run_id, stream=stream, offset=0, data=data)
    log_store(run_id=run_id)
    log_release(run_id=run_id)
