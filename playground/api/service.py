"""What the service offers: its limits, its egress ceiling, its images and environments, and its health."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema

from playground.api.schemas import ErrorOut, ImageOut, answers
from playground.egress import site_ceiling
from playground.limits import (
    LimitOut,
    limits_described,
)
from playground.selectors.images import environment_list
from runner.images import read_lock

router = Router()


@router.get("/limits", response=answers({200: list[LimitOut]}), tags=["service"])
def limits(request: HttpRequest) -> list[dict[str, Any]]:
    """Every limit a run takes: its unit, default and the maximum on this service."""
    return limits_described()


class EgressCeilingOut(Schema):
    ceiling: list[str] = Field(description="the destinations any run's egress policy may name at most (empty: none)")


@router.get("/egress", response=answers({200: EgressCeilingOut}), tags=["service"])
def egress_ceiling(request: HttpRequest) -> dict[str, Any]:
    """This service's egress ceiling: a run's policy (and a course's ceiling) must be within it."""
    return {"ceiling": site_ceiling().to_json()}


@router.get("/images", response=answers({200: list[ImageOut]}), tags=["service"])
def images(request: HttpRequest) -> list[dict[str, str]]:
    return [{"name": name, "digest": entry.digest} for name, entry in sorted(read_lock().items())]


class EnvironmentOut(Schema):
    name: str
    runtime: str = Field(description="the language its programs are in")
    base: str | None = Field(description="the environment it extends (it has all of that one's packages)")
    description: str
    wheels: list[str] = Field(description="the Python wheels it adds, name==version (pinned by sha256)")
    digest: str | None = Field(description="its image as this host built it (null: not built here: `make images`)")
    packages: list[str] = Field(description="every package in the built image: Debian's name=version, pip:name=version")
    notebooks: int = Field(description="notebooks whose cells run in it")
    assignments: int = Field(description="assignments whose runs run in it")


@router.get("/environments", response=answers({200: list[EnvironmentOut]}), tags=["service"])
def environments(request: HttpRequest) -> list[dict[str, Any]]:
    """The environments a run (`environment`), a notebook or an assignment may name: each a guest
    image's recipe (images/NAME), with what it holds. Building one is an operator's act
    (`python -m runner images build NAME`), never a request."""
    return environment_list()


class HealthOut(Schema):
    ok: bool


@router.get("/health", auth=None, response={200: HealthOut, 429: ErrorOut}, tags=["service"])
def health(request: HttpRequest) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {"ok": True}
