"""Staff reads of other users' data, recorded: who viewed whose code, logs or outputs, and when.
Every place that serves such data to staff calls record_staff_access; an owner reading their own
data is not recorded."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from playground import observe
from playground.models import Run, StaffAccess


def record_staff_access(
    *, viewer: Any, owner: User, what: str, run: Run | None = None, detail: str = "",
    path: str = "",
) -> StaffAccess | None:  # fmt: skip
    """Record `viewer` (request.user: a User, or anonymous) reading `owner`'s data (`what`: "run
    page", "audit page", "log stdout", "output", ...), unless it is the owner's own."""
    if not getattr(viewer, "is_authenticated", False) or viewer.pk == owner.pk:
        return None
    access = StaffAccess.objects.create(
        staff=viewer, staff_username=viewer.get_username(), owner=owner, owner_username=owner.get_username(),
        run=run, what=what[:64], detail=detail[:300], path=path[:500],
    )  # fmt: skip
    observe.staff_access(access)
    return access
