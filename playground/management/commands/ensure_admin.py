"""Create the first admin account if there is none, and print its password once."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create an admin account (username 'admin') if no superuser exists; print its password once."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        users = get_user_model()
        existing = users.objects.filter(is_superuser=True).order_by("id").first()
        if existing is not None:
            self.stdout.write(
                f"Admin account: {existing.get_username()} (password set earlier; "
                f"reset it with `.venv/bin/python manage.py changepassword {existing.get_username()}`)"
            )
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write("Admin account created. This password is shown only once:")
        self.stdout.write(f"  username: {username}")
        self.stdout.write(f"  password: {password}")
