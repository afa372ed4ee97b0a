"""Empty this host's metrics directory before its processes start (prometheus_client's multiprocess
mode keeps a file per process, which a scrape reads every one of: a host that restarts would
otherwise pile them up). Prometheus takes the counters' drop to zero as a restart."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Remove this host's per-process metric files; run it before starting the web and workers."

    def handle(self, *args: Any, **options: Any) -> None:
        removed = 0
        for path in settings.CORDON_METRICS_DIR.glob("*.db"):
            path.unlink(missing_ok=True)
            removed += 1
        self.stdout.write(f"metrics: {removed} file(s) of earlier processes removed from {settings.CORDON_METRICS_DIR}")
