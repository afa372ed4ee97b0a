"""A run's egress on the web side: the ceilings its policy is checked against (the operator's, then
its course's), the API's shapes for a policy and for the record of what the run reached, and that
record as stored on the run.

The rules and the check are the supervisor's own (runner.egress.policy_problem). The web checks
first, so that a policy outside a ceiling is a 422 when it is asked for rather than a run's
rejected_input later, and again when a worker takes the run (a ceiling may be lower by then).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

from django.conf import settings
from ninja import Schema
from pydantic import Field, TypeAdapter, ValidationError

from playground.bodies import NO_NUL
from runner.egress.policy import Policy, policy_problem
from runner.spec import ATTEMPTS_KEPT

if TYPE_CHECKING:
    from playground.models import Course

MAX_RULES = 32
RULE_MAX_CHARS = 260  # a host name's 253 characters, a port and a colon

EgressRule = Annotated[
    str,
    Field(
        max_length=RULE_MAX_CHARS,
        pattern=NO_NUL,
        description='a destination the run may reach: "host:port" (an exact name) or "*.suffix:port" (every '
        "name below suffix); names only, never addresses",
        examples=["api.example.org:443"],
    ),
]
EgressPolicy = Annotated[
    list[EgressRule],
    Field(
        max_length=MAX_RULES,
        description="destinations the run may reach through its egress proxy (HTTP_PROXY / HTTPS_PROXY in the "
        "sandbox), within this service's ceiling and its course's; empty, the default: no network at all",
    ),
]
# A policy checked against this service's ceiling when it is sent (a run's, a course's ceiling, an
# assignment's), marked so: where that ceiling allows nothing, as by default, the document says so
# (playground/openapi.py: an empty list only), as it is when the document is asked for.
WITHIN_SITE_CEILING = "x-within-site-ceiling"
SiteEgressPolicy = Annotated[EgressPolicy, Field(json_schema_extra={WITHIN_SITE_CEILING: True})]
_POLICY_SHAPE: TypeAdapter[list[str]] = TypeAdapter(EgressPolicy)
SHAPE_SAID = f"egress is a list of at most {MAX_RULES} destinations, each at most {RULE_MAX_CHARS} characters"


def shape_problem(rules: Any) -> str | None:
    """What is wrong with the shape of a policy that did not come through the API's schema (a
    stored notebook's cell), checked by that same schema; None when it has the API's shape."""
    try:
        _POLICY_SHAPE.validate_python(rules, strict=True)
    except ValidationError:
        return SHAPE_SAID
    return None


class EgressAttemptOut(Schema):
    """One request through a run's egress proxy."""

    at: float = Field(description="when it came in, in seconds since the epoch")
    method: str = Field(description='"CONNECT" (TLS and anything tunnelled) or a plain-HTTP method such as "GET"')
    host: str
    port: int
    allowed: bool = Field(description="whether the proxy connected it")
    reason: str = Field(description="why it was refused, or why it ended early (a cap); empty otherwise")
    address: str = Field(description='the checked public address it connected to ("" when refused)')
    bytes_out: int = Field(description="bytes from the sandbox to the destination")
    bytes_in: int = Field(description="bytes from the destination to the sandbox")
    seconds: float


class EgressRecordOut(Schema):
    """What a run with an egress policy reached, as its proxy recorded it."""

    policy: list[str] = Field(description="the policy the proxy enforced")
    attempts: list[EgressAttemptOut] = Field(description=f"every attempt, in order (the first {ATTEMPTS_KEPT})")
    attempts_not_kept: int = Field(0, description=f"attempts past the first {ATTEMPTS_KEPT}, counted but not listed")
    connections: int = Field(description="attempts the proxy connected")
    refused: int = Field(description="attempts it refused")
    bytes_out: int
    bytes_in: int
    limit: str = Field(description='the egress cap the run passed ("" if none): its outcome is then egress_limit')


def site_ceiling() -> Policy:
    return settings.CORDON_EGRESS_CEILING


def course_ceiling(course: Course) -> Policy:
    """A course's own ceiling (stored checked; empty: the course's runs get no network)."""
    return Policy.parse(course.egress_ceiling or [])


def ceilings(course: Course | None = None) -> list[tuple[str, Policy]]:
    """The ceilings a run's policy must be within, each named as a refusal names it."""
    found = [("this service's", site_ceiling())]
    if course is not None:
        found.append(("this course's", course_ceiling(course)))
    return found


def egress_problem(rules: Sequence[str], *, course: Course | None = None) -> tuple[str, str] | None:
    """(code, message) when `rules` are not a policy or pass a ceiling (the site's, `course`'s)."""
    return policy_problem(rules, ceilings(course))


def normalised(rules: Sequence[str]) -> list[str]:
    """A checked policy as it is stored: each rule as the supervisor reads it, duplicates once."""
    return Policy.parse(rules).to_json()


def record_for_storage(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A RunResult's egress record as a run keeps it: the first ATTEMPTS_KEPT attempts, the rest
    counted (the proxy keeps no more itself; the totals are its own, over every attempt)."""
    if record is None:
        return None
    attempts = list(record.get("attempts") or [])
    beyond = int(record.get("attempts_not_kept") or 0) + max(0, len(attempts) - ATTEMPTS_KEPT)
    return {**record, "attempts": attempts[:ATTEMPTS_KEPT], "attempts_not_kept": beyond}


def describe_validation_error(error: dict[str, Any], field: str) -> tuple[str, str] | None:
    """A readable (code, message) for pydantic's error about a policy, or None if not about one."""
    parts = field.split(".")
    if "egress" not in parts and parts[0] != "egress_ceiling":  # a run's, a cell's (cells.N.egress), a course's
        return None
    kind = error.get("type", "")
    if kind == "too_long":
        return "egress_invalid", f"{field}: at most {MAX_RULES} destinations, each at most {RULE_MAX_CHARS} characters"
    return "egress_invalid", f'{field}: a policy is a list of destinations such as "api.example.org:443"'
