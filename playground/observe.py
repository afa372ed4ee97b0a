"""Events an operator is told about: one log line each (JSON by default: playground/logformat.py),
on logger `cordon.events`, with the run, user, host and engine they concern.

The events: a run created, claimed, admitted (and its other phases), finished; a sandbox error; a
cleanup check failed; an egress attempt refused; a staff access to a user's data; a log-in (and a
failed one); a bearer token used. Their fields are metadata, never user data (DESIGN: "Logs and
audit records hold metadata"): ids, names, outcomes, codes, counts.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, transaction

from playground import metrics
from playground.models import Run
from playground.throttle import client_address

log = logging.getLogger("cordon.events")


def event(name: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log the event `name` now. The plain format shows its fields as `key=value` after the name."""
    fields = {key: value for key, value in fields.items() if value is not None and value != ""}
    words = " ".join(f"{key}={value}" for key, value in fields.items())
    log.log(level, f"{name} {words}".rstrip(), extra={"cordon": {"event": name, **fields}})


def run_fields(run: Any) -> dict[str, Any]:
    """What every event about a run says of it."""
    return {
        "run": str(run.id),
        "user": run.owner.get_username(),
        "kind": run.kind,
        "host": run.worker_host or settings.CORDON_HOST_NAME,
        "engine": run.engine or run.engine_requested,
    }


def run_event(run: Any, state: str, detail: dict[str, Any]) -> None:
    """A run's state change, as its RunEvent row records it: logged (and, finished, counted) once
    the row is committed; a rolled-back change is neither."""
    transaction.on_commit(lambda: _run_event_now(run, state, detail), robust=True)  # a log line never fails a run


def _run_event_now(run: Any, state: str, detail: dict[str, Any]) -> None:
    try:
        _tell(run, state, detail)
    except DatabaseError as exc:  # the database went away just after the commit: the row has it all
        log.warning("the %s event of run %s is not logged: the database is away (%s)", state, run.id, exc)


def _tell(run: Any, state: str, detail: dict[str, Any]) -> None:
    said = {key: value for key, value in detail.items() if key in EVENT_DETAIL}
    if state != "finished":  # a run's first event, "queued", is its creation
        event("run_created" if state == "queued" else f"run_{state}", **run_fields(run), **said)
        return
    # Some paths finish a run with an UPDATE: its final record is read back.
    run = Run.objects.select_related("owner").filter(id=run.id).first()
    if run is None:
        return
    event("run_finished", **run_fields(run), **said)
    failed = list(run.cleanup_checks.filter(ok=False))
    metrics.count_run_finished(run, [check.name for check in failed])
    if run.outcome == "sandbox_error":
        event("sandbox_error", level=logging.WARNING, **run_fields(run), code=run.error_code)
    for check in failed:
        event("cleanup_failed", level=logging.ERROR, **run_fields(run), check=check.name, detail=check.detail[:200])
    for attempt in (run.egress_record or {}).get("attempts") or []:
        if not attempt.get("allowed"):
            where = f"{attempt.get('host', '')}:{attempt.get('port', '')}"
            event("egress_refused", **run_fields(run), destination=where, reason=attempt.get("reason", "")[:200])


# What of a RunEvent's detail its log line repeats (the rest stays in the row).
EVENT_DETAIL = frozenset({"outcome", "reason", "error", "worker", "by", "engine", "queue", "name"})


# --- accounts ------------------------------------------------------------------------------------


def logged_in(sender: Any, request: Any, user: Any, **_: Any) -> None:
    event("login", user=user.get_username(), address=_address(request), how=getattr(user, "backend", "") or None)


def login_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **_: Any) -> None:
    tried = str(credentials.get(get_user_model().USERNAME_FIELD, ""))[:150]
    event("login_failed", level=logging.WARNING, tried=tried, address=_address(request))


def token_used(token: Any) -> None:
    """A bearer token's use, at most once a minute per token (when its last use is written)."""
    event("token_used", user=token.user.get_username(), token=token.prefix, token_name=token.name or None)


def staff_access(access: Any) -> None:
    event(
        "staff_access", user=access.staff_username, owner=access.owner_username, what=access.what,
        run=str(access.run_id) if access.run_id else None, path=access.path or None,
    )  # fmt: skip


def _address(request: Any) -> str | None:
    if request is None or not hasattr(request, "META"):
        return None
    return client_address(request)
