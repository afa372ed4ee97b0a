"""Record the guest images this host built ($CORDON_IMAGES_DIR/built.json) as RuntimeImage rows."""

from typing import Any

from django.core.management.base import BaseCommand

from playground.models import RuntimeImage
from runner.images import read_lock


class Command(BaseCommand):
    help = "Record the images this host built (its record, not images/lock.json); older digests become inactive."

    def handle(self, *args: Any, **options: Any) -> None:
        for name, entry in read_lock().items():
            RuntimeImage.objects.update_or_create(
                digest=entry.digest,
                defaults={"name": name, "manifest": list(entry.packages), "built_at": entry.built_at, "active": True},
            )
            RuntimeImage.objects.filter(name=name).exclude(digest=entry.digest).update(active=False)
            self.stdout.write(f"{name} {entry.digest}")
