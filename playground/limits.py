"""A run's limits on the web side, in runner.spec.Limits's shape and names (units in the names).

The API's schema for them is built from Limits itself: each field's type, unit, default and this
service's maximum (read once at start-up, settings.CORDON_MAXIMA) appear in the OpenAPI
document. A run's stored limits (Limits.to_json) become Limits again only as `Run.decoded_limits`,
a notebook cell's saved ones through `limits_from_record`, and every run — new, rerun or retried
— is checked by `check_limits`.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import fields
from typing import Annotated, Any

from django.conf import settings
from ninja import Schema
from pydantic import BeforeValidator, ConfigDict, Field, create_model

from playground.bodies import JSON_INT_MAX, BodyIn
from runner.spec import MIB, Limits
from runner.units import seconds_words, size_words

LIMIT_FIELDS = tuple(fields(Limits))
_DEFAULTS = Limits()


def _is_int(name: str) -> bool:
    return isinstance(getattr(_DEFAULTS, name), int)


def _number(name: str, whole: bool) -> Any:
    """Before pydantic's own check: a limit is a JSON number — not a string, not a boolean — and
    a whole-number limit takes 5.0 as 5 but refuses 5.5."""

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("must be a number")
        if whole and isinstance(value, float):
            if not value.is_integer():
                raise ValueError("must be a whole number")
            return int(value)
        if not whole and isinstance(value, int) and abs(value) > sys.float_info.max:  # no float holds it
            raise ValueError("is too large")
        return value

    return BeforeValidator(check)


class _LimitsBase(BodyIn):
    model_config = ConfigDict(extra="forbid")  # a misspelt limit would silently take its default


RUN_LIMITS_DOC = "A run's limits; each one left out takes its default. Units are in the names."


def limits_schema(maxima: Limits | None, name: str = "LimitsIn", doc: str = RUN_LIMITS_DOC) -> type[BodyIn]:
    """The API's `limits` object: every Limits field, optional, with its unit, default and (for a
    run) this service's maximum. Without maxima (a notebook cell's saved limits) only the range
    and type are checked: a cell saved under higher maxima must stay editable; it is checked
    against today's maxima when it runs. (A whole number is still at most 64 bits.)"""
    definitions: dict[str, Any] = {}
    for f in LIMIT_FIELDS:
        whole = _is_int(f.name)
        maximum, default = getattr(maxima, f.name) if maxima else None, getattr(_DEFAULTS, f.name)
        bounded = maximum if maximum is not None or not whole else JSON_INT_MAX
        unit = f.metadata["unit"]
        bound = f", at most {maximum:g} on this service" if maximum is not None else ""
        kind: Any = Annotated[
            int if whole else float,
            Field(
                strict=True, gt=0, le=bounded, allow_inf_nan=False, title=f"{f.name} ({unit})",
                description=f"{f.metadata['doc']}, in {unit}; default {default:g}{bound}",
                json_schema_extra={"x-unit": unit},
            ),
            _number(f.name, whole),
        ]  # fmt: skip
        definitions[f.name] = (kind, default)
    model: type[BodyIn] = create_model(name, __base__=_LimitsBase, **definitions)
    model.__doc__ = doc
    return model


def limits_out_schema() -> type[Schema]:
    """A run's limits as the API shows them: every field, as the run was given them (no bounds:
    a maximum lowered since does not make an old run's record invalid)."""
    definitions: dict[str, Any] = {
        f.name: (Annotated[int if _is_int(f.name) else float, Field(title=f"{f.name} ({f.metadata['unit']})")], ...)
        for f in LIMIT_FIELDS
    }
    return create_model("LimitsOut", __base__=Schema, **definitions)


LimitsIn = limits_schema(settings.CORDON_MAXIMA)
CellLimitsIn = limits_schema(None, "CellLimitsIn")
LimitsCeilingIn = limits_schema(
    settings.CORDON_MAXIMA, "LimitsCeilingIn",
    "A course's ceiling on its runs' limits: each one set caps that limit for the course's runs (one left out: "
    "this service's maximum). Units are in the names.",
)  # fmt: skip
LimitsOut = limits_out_schema()
# The fields that hold a limits object: a run's, a cell's and an assignment's; a course's ceiling.
LIMITS_OBJECTS = ("limits", "limits_ceiling")
# What a notebook cell stores and shows: only the limits set for it, by the names above.
LimitsSet = dict[str, int | float]


class LimitOut(Schema):
    name: str
    unit: str
    description: str
    type: str
    default: float
    maximum: float


def limits_described(maxima: Limits | None = None) -> list[dict[str, Any]]:
    """Each limit with its unit, default and this service's maximum (GET /api/limits)."""
    maxima = maxima or settings.CORDON_MAXIMA
    return [
        {"name": f.name, "unit": f.metadata["unit"], "description": f.metadata["doc"],
         "type": "integer" if _is_int(f.name) else "number",
         "default": getattr(_DEFAULTS, f.name), "maximum": getattr(maxima, f.name)}
        for f in LIMIT_FIELDS
    ]  # fmt: skip


def limits_from_input(limits: BodyIn) -> Limits:
    """The API's validated limits object -> Limits (what was left out takes its default)."""
    return Limits(**limits.model_dump())


def limits_set(limits: BodyIn | None) -> dict[str, Any]:
    """Only the limits a client set, by name (what a notebook cell stores)."""
    return {} if limits is None else limits.model_dump(exclude_unset=True)


def limits_from_record(data: dict[str, Any]) -> Limits:
    """A notebook cell's saved limits -> Limits (a run's are Run.decoded_limits)."""
    return Limits.from_json(data)


def over_maximum(
    limits: Limits, maxima: Limits | None = None, *, field: str = "limits", names: Collection[str] | None = None
) -> list[tuple[str, str, str]]:
    """(field, code, message) for each limit out of range or over `maxima` (default: the operator's),
    as the API words it (`<field>.<name>`); with `names`, only those limits are checked. The one
    check of limits against a ceiling: a run's against the maxima, a course's against its own."""
    maxima = maxima or settings.CORDON_MAXIMA
    problems = []
    for name, _ in limits.over(maxima):
        if names is not None and name not in names:
            continue
        value, maximum, where = getattr(limits, name), getattr(maxima, name), f"{field}.{name}"
        if value <= 0:
            problems.append((where, "invalid_limit", f"{where} must be greater than 0; got {value}"))
        else:
            problems.append((where, "limit_over_maximum",
                             f"{where} is over the maximum here: {value} (maximum {maximum:g})"))  # fmt: skip
    return problems


def describe_validation_error(error: dict[str, Any], field: str) -> tuple[str, str] | None:
    """A readable (code, message) for pydantic's error about a limit, or None if not about one."""
    parts = field.split(".")
    if not set(parts) & set(LIMITS_OBJECTS):
        return None
    kind, ctx = error.get("type", ""), error.get("ctx") or {}
    name = parts[-1]
    if kind == "extra_forbidden":
        known = ", ".join(f.name for f in LIMIT_FIELDS)
        return "unknown_limit", f"unknown limit {name!r}; known: {known}"
    if kind == "less_than_equal":
        return "limit_over_maximum", f"{field} is over the maximum on this service (maximum {ctx.get('le')})"
    if kind == "greater_than":
        return "invalid_limit", f"{field} must be greater than 0"
    if kind == "finite_number":
        return "invalid_limit", f"{field} must be a finite number"
    if kind == "value_error":
        return "invalid_limit", f"{field} {str(error.get('msg', '')).removeprefix('Value error, ')}"
    if kind in ("json_object", "model_attributes_type", "model_type", "dict_type") and name in LIMITS_OBJECTS:
        return "invalid_limit", f"{field} must be an object of limits"
    return None


def limit_words(name: str, value: float) -> str:
    """One limit's value as a person reads it, in its unit: "10 s", "256 MiB", "1 MiB", "64 processes"."""
    unit = next(f.metadata["unit"] for f in LIMIT_FIELDS if f.name == name)
    if unit == "s":
        return seconds_words(value)
    if unit in ("bytes", "MiB"):
        return size_words(int(value * (MIB if unit == "MiB" else 1)))
    return f"{value:g} {unit[:-1] if value <= 1 and unit.endswith('s') else unit}"


def limit_pairs(limits: Limits) -> list[tuple[str, str]]:
    """("wall timeout", "10 s"), ... for every limit: a run's limits as rows a person reads."""
    return [(LIMIT_LABELS.get(f.name, f.name), limit_words(f.name, getattr(limits, f.name))) for f in LIMIT_FIELDS]


LIMIT_LABELS = {
    "wall_timeout_s": "wall-clock deadline", "cpu_time_s": "CPU time", "memory_mib": "memory", "cpus": "CPUs",
    "max_processes": "processes at once", "stdout_max_bytes": "stdout kept", "stderr_max_bytes": "stderr kept",
    "output_max_files": "output files", "output_max_bytes": "output files' size", "disk_mib": "disk",
    "input_max_files": "input files", "input_max_bytes": "input files' size", "egress_max_bytes_out": "network out",
    "egress_max_bytes_in": "network in", "egress_max_connections": "network connections",
}  # fmt: skip
