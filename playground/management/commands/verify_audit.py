"""Walk every host's chain of run receipts and name each run whose row was changed or deleted since
it was signed, and each receipt that was changed or removed (playground/selectors/receipts.py)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from playground.selectors.receipts import audit_receipts, site_public_key


class Command(BaseCommand):
    help = (
        "Check every run receipt (hash, signature, chain link) and its run's rows against what was signed; "
        "exit status 1 if anything was changed or deleted."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        key = site_public_key()
        chains, problems = audit_receipts()
        self.stdout.write(f"key {key['key_id']} ({key['key']})")
        for chain in chains:
            head = chain.head or "-"
            self.stdout.write(f"host {chain.host}: {chain.receipts} receipt{'s' * (chain.receipts != 1)}, head {head}")
        for problem in problems:
            self.stdout.write(str(problem))
        if problems:
            raise CommandError(f"{len(problems)} problem{'s' * (len(problems) != 1)} found", returncode=1)
        total = sum(chain.receipts for chain in chains)
        self.stdout.write(self.style.SUCCESS(f"ok: {total} receipt{'s' * (total != 1)} hold, and so do their runs"))
