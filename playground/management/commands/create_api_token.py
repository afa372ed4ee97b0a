"""`python manage.py create_api_token USERNAME` prints a new bearer token (shown only once)."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from playground.services.accounts import token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (it is stored only as a hash)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        self.stdout.write(token_create(user=user, name=name))
