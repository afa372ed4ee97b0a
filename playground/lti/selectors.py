"""The LTI tool's reads for its pages: a course's LMS contexts, the assignments its picker offers,
one score sent back. Writes stay in launch, roster and passback."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet, Sum
from django.http import Http404

from playground.lti.models import ContextLink, Passback
from playground.models import Assignment, Course


def contexts_of(course: Course) -> QuerySet[ContextLink]:
    """The LMS contexts (course sections on a platform) that launched this course."""
    return ContextLink.objects.filter(course=course).select_related("platform")


def roster_contexts_of(course: Course) -> list[ContextLink]:
    """Those of its contexts whose launch carried a roster service (NRPS) to sync from."""
    return [context for context in contexts_of(course) if context.nrps_url]


def assignments_for_picker(course: Course) -> list[Assignment]:
    """The course's assignments by title, each with its `points` (its tests' sum) for the LMS."""
    return list(Assignment.objects.filter(course=course).annotate(points=Sum("tests__points")).order_by("title"))


def passback_get(passback_id: Any) -> Passback:
    """One score sent back, with the course it belongs to (the caller checks its staff); 404 if none."""
    row = Passback.objects.filter(id=passback_id).select_related("line_item__resource_link__context").first()
    if row is None:
        raise Http404("no such score")
    return row
