"""Staff reads of other users' data, recorded: who viewed whose code, logs or outputs, and when.
Every place that serves such data to staff calls record_staff_access, the one policy: an owner
reading their own data is not recorded, and a read a page repeats while it waits (`polled`: a
run's record or log, a submission being graded, a live view's reconnections) is recorded once per
staff member per POLL_RECORD_WINDOW, where a page's own load is recorded every time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User

from playground import observe
from playground.models import Run, StaffAccess
from playground.selectors.runs import staff_access_recorded_since

POLL_RECORD_WINDOW = timedelta(minutes=10)


def record_staff_access(
    *, viewer: Any, owner: User, what: str, run: Run | None = None, detail: str = "",
    path: str = "", polled: bool = False,
) -> StaffAccess | None:  # fmt: skip
    """Record `viewer` (request.user: a User, or anonymous) reading `owner`'s data (`what`: "run
    page", "audit page", "log stdout", "output", ...), unless it is the owner's own or, `polled`,
    the same read (of this run, or with this detail) was recorded within POLL_RECORD_WINDOW."""
    if not getattr(viewer, "is_authenticated", False) or viewer.pk == owner.pk:
        return None
    if polled and staff_access_recorded_since(
        viewer=viewer, what=what, within=POLL_RECORD_WINDOW, run=run, detail=None if run is not None else detail
    ):
        return None
    access = StaffAccess.objects.create(
        staff=viewer, staff_username=viewer.get_username(), owner=owner, owner_username=owner.get_username(),
        run=run, what=what[:64], detail=detail[:300], path=path[:500],
    )  # fmt: skip
    observe.staff_access(access)
    return access
