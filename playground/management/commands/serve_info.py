"""Print where `make run` serves Cordon and how to log in."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Print the URL `make run` serves and how to log in."

    def handle(self, *args: Any, **options: Any) -> None:
        base = f"http://{settings.HTTP_HOST}:{settings.HTTP_PORT}/"
        self.stdout.write(f"Cordon: {base}")
        self.stdout.write(f"  audit console: {base}admin/ (log in with the admin account above)")
        self.stdout.write("  starting Redis (unless one answers at REDIS_URL), a Celery worker and daphne;")
        self.stdout.write("  Ctrl-C stops all of them.")
