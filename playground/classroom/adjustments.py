"""Manual grading: staff add points to a submission or take them away, each time with a comment
(their own, or a rubric item of the assignment's, reusable), recorded with who and when. The final
score is the tests' score plus the standing adjustments (Submission.final_score); a withdrawn
adjustment is kept, marked with who withdrew it. Every change tells the listeners (the LMS)."""

from __future__ import annotations

import math
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from playground.classroom.signals import score_changed
from playground.errors import ServiceError
from playground.models import Assignment, RubricItem, ScoreAdjustment, Submission, SubmissionState

MAX_RUBRIC_ITEMS = 50
MAX_POINTS = 1000.0
MAX_COMMENT = 2000


def rubric_save(*, assignment: Assignment, items: list[dict[str, Any]]) -> list[RubricItem]:
    """Replace the assignment's rubric items (adjustments made from earlier ones keep their points
    and comment)."""
    if len(items) > MAX_RUBRIC_ITEMS:
        raise ServiceError("too_many_items", f"at most {MAX_RUBRIC_ITEMS} rubric items", field="items", status=422)
    clean = []
    for index, item in enumerate(items):
        label = str(item.get("label") or "").strip()
        if not label or len(label) > 200:
            raise ServiceError(
                "invalid_rubric", f"items.{index}.label: 1 to 200 characters", field=f"items.{index}.label", status=422
            )
        clean.append(RubricItem(assignment=assignment, position=index, label=label,
                                points=_points(item.get("points"), f"items.{index}.points")))  # fmt: skip
    with transaction.atomic():
        assignment.rubric_items.all().delete()
        return RubricItem.objects.bulk_create(clean)


def adjustment_add(
    *, submission: Submission, by: User, points: Any = None, comment: str = "", rubric_item_id: int | None = None
) -> ScoreAdjustment:
    """Points added (or, negative, taken) by a member of staff, with a comment; from a rubric item,
    its points and label unless given."""
    item = None
    if rubric_item_id is not None:
        item = RubricItem.objects.filter(assignment_id=submission.assignment_id, id=rubric_item_id).first()
        if item is None:
            raise ServiceError("not_found", "no such rubric item for this assignment", field="rubric_item_id",
                               status=404)  # fmt: skip
    value = _points(item.points if points is None and item is not None else points, "points")
    text = str(comment or (item.label if item else "")).strip()
    if not text or len(text) > MAX_COMMENT:
        raise ServiceError(
            "invalid_comment", f"a comment of 1 to {MAX_COMMENT} characters says why", field="comment", status=422
        )
    with transaction.atomic():
        locked = Submission.objects.select_for_update().get(id=submission.id)
        if locked.state != SubmissionState.GRADED:
            raise ServiceError(
                "not_graded", "only a graded submission can be adjusted (this one is "
                f"{locked.state.replace('_', ' ')})", status=409,
            )  # fmt: skip
        adjustment = ScoreAdjustment.objects.create(
            submission=locked, points=value, comment=text, rubric_item=item, by=by, by_username=by.get_username()
        )
        _total(locked)
    submission.refresh_from_db(fields=["adjustment"])
    return adjustment


def adjustment_withdraw(*, adjustment: ScoreAdjustment, by: User) -> ScoreAdjustment:
    with transaction.atomic():
        locked = Submission.objects.select_for_update().get(id=adjustment.submission_id)
        if adjustment.withdrawn_at is None:
            ScoreAdjustment.objects.filter(id=adjustment.id, withdrawn_at=None).update(
                withdrawn_at=timezone.now(), withdrawn_by_username=by.get_username()
            )
            _total(locked)
    adjustment.refresh_from_db()
    return adjustment


def _total(submission: Submission) -> None:
    """The submission's adjustment, summed again from its standing rows (in the caller's lock)."""
    standing = submission.adjustments.filter(withdrawn_at=None).aggregate(total=Sum("points"))["total"] or 0.0
    submission.adjustment = round(float(standing), 4)
    submission.save(update_fields=["adjustment"])
    transaction.on_commit(lambda: score_changed.send(sender=Submission, submission=submission))


def _points(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ServiceError("invalid_points", f"{field} must be a number", field=field, status=422)
    if not -MAX_POINTS <= value <= MAX_POINTS or value == 0:
        raise ServiceError(
            "invalid_points", f"{field} must be from -{MAX_POINTS:g} to {MAX_POINTS:g}, and not 0", field=field,
            status=422,
        )  # fmt: skip
    return float(value)
