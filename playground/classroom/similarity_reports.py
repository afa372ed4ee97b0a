"""Similarity reports, the Django side: a member of staff asks for one, a Celery task on the grading
queue makes it (classroom/similarity.py's jobs, each in a bounded child: tokenised, never run, with
CPU, memory and wall bounds) and records its progress as it goes; each pair opened is a staff access
to both students' work, recorded in the audit console."""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from playground.classroom import similarity
from playground.errors import ServiceError
from playground.models import Assignment, Membership, Role, SimilarityReport, Submission
from playground.services.dispatch import choose_queue, grading_queue
from runner import bounded

log = logging.getLogger(__name__)
TASK = "playground.tasks.make_similarity_report"


def report_request(*, assignment: Assignment, by: User, threshold: float | None = None) -> SimilarityReport:
    """A new report of the assignment's students' latest submissions (one at a time per assignment:
    a report still being made is answered instead)."""
    value = similarity.THRESHOLD if threshold is None else float(threshold)
    if not 0.05 <= value <= 1.0:
        raise ServiceError("invalid_threshold", "threshold must be from 0.05 to 1", field="threshold", status=422)
    with transaction.atomic():
        Assignment.objects.select_for_update().filter(id=assignment.id).first()
        busy = assignment.similarity_reports.filter(
            state__in=(SimilarityReport.State.QUEUED, SimilarityReport.State.RUNNING)
        ).first()
        if busy is not None:
            return busy
        report = SimilarityReport.objects.create(assignment=assignment, requested_by=by, threshold=value)
        report_id = str(report.id)
        transaction.on_commit(lambda: _send(report_id))
    return report


def _send(report_id: str) -> None:
    # The grading worker's queue (of the engine a grading run would take): grading's pool, not people's.
    # By name: playground.tasks imports the classroom, not the other way round.
    current_app.send_task(TASK, args=(report_id,), queue=grading_queue(choose_queue("auto")))


def latest_submissions(assignment: Assignment) -> list[tuple[Submission, str]]:
    """Each student's latest submission (graded or not) with their username; staff's own are not."""
    students = Membership.objects.filter(course=assignment.course_id, role=Role.STUDENT).values("user_id")
    latest: dict[int, tuple[Submission, str]] = {}
    found = assignment.submissions.filter(student__in=students).select_related("student").order_by("created_at")
    for submission in found:
        latest[submission.student_id] = (submission, submission.student.get_username())
    return list(latest.values())


def report_make(report_id: str) -> None:
    """Make a queued report (the task's body): its progress saved after each job; a failure is
    the report's, with the reason, never the worker's."""
    claimed = SimilarityReport.objects.filter(id=report_id, state=SimilarityReport.State.QUEUED).update(
        state=SimilarityReport.State.RUNNING
    )
    if not claimed:
        return
    report = SimilarityReport.objects.select_related("assignment").get(id=report_id)
    assignment = report.assignment
    chosen = latest_submissions(assignment)
    students = {str(s.id): name for s, name in chosen}

    def progress(done: int, total: int) -> None:
        SimilarityReport.objects.filter(id=report_id).update(done=done, total=total)

    try:
        made = similarity.build_report(
            {str(s.id): s.code for s, _ in chosen}, runtime=assignment.runtime, starter=assignment.starter_code,
            threshold=report.threshold, progress=progress,
            call=lambda job, payload: bounded.call(job, payload, similarity.BOUNDS),
        )  # fmt: skip
    except (similarity.SimilarityError, bounded.HostWorkError) as exc:
        _fail(report_id, str(exc))
        return
    except Exception as exc:
        log.exception("similarity report %s failed", report_id)
        _fail(report_id, f"the report failed on the server ({type(exc).__name__})")
        return
    answer = made.as_json()
    for pair in answer["pairs"]:
        for side in (pair["a"], pair["b"]):
            side["student"] = students.get(side["key"], "?")
    SimilarityReport.objects.filter(id=report_id).update(
        state=SimilarityReport.State.DONE, pairs=answer["pairs"], finished_at=timezone.now(),
        submissions=[{"key": key, "student": name} for key, name in students.items()],
        error="; ".join(f"{students.get(s['key'], '?')}: {s['reason']}" for s in answer["skipped"])[:500],
    )  # fmt: skip


def _fail(report_id: str, reason: str) -> None:
    SimilarityReport.objects.filter(id=report_id).update(
        state=SimilarityReport.State.FAILED, error=reason[:500], finished_at=timezone.now()
    )


def report_out(report: SimilarityReport) -> dict[str, Any]:
    """The report without any code: who, how similar, and how much of each side matches."""
    return {
        "id": report.id, "assignment_id": report.assignment_id, "state": report.state, "threshold": report.threshold,
        "done": report.done, "total": report.total, "submissions": len(report.submissions),
        "note": report.error if report.state == SimilarityReport.State.DONE else "",
        "error": report.error if report.state == SimilarityReport.State.FAILED else "",
        "created_at": report.created_at, "finished_at": report.finished_at,
        "requested_by": report.requested_by.get_username() if report.requested_by else None,
        "pairs": [
            {"similarity": max(p["a"]["similarity"], p["b"]["similarity"]),
             "a": {"student": p["a"]["student"], "submission_id": p["a"]["key"], "share": p["a"]["similarity"]},
             "b": {"student": p["b"]["student"], "submission_id": p["b"]["key"], "share": p["b"]["similarity"]}}
            for p in report.pairs
        ],
    }  # fmt: skip


def pair_side_by_side(report: SimilarityReport, index: int) -> dict[str, Any]:
    """One pair with both submissions' code and the matching regions of each."""
    if not 0 <= index < len(report.pairs):
        raise ServiceError("not_found", "no such pair in this report", status=404)
    pair = report.pairs[index]
    codes = dict(Submission.objects.filter(id__in=[pair["a"]["key"], pair["b"]["key"]]).values_list("id", "code"))
    sides = []
    for side in (pair["a"], pair["b"]):
        code = next((c for k, c in codes.items() if str(k) == side["key"]), None)
        sides.append({
            "student": side["student"], "submission_id": side["key"], "share": side["similarity"],
            "code": code if code is not None else "", "gone": code is None,
            "regions": [[r["start"], r["end"], r["first_line"], r["last_line"]] for r in side["regions"]],
        })  # fmt: skip
    return {"report_id": report.id, "index": index, "similarity": max(s["share"] for s in sides), "a": sides[0],
            "b": sides[1]}  # fmt: skip
