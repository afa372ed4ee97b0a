"""The classroom's signals, heard: a changed score is recorded for the LMS and sent by a worker."""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import receiver

from playground.classroom.signals import score_changed
from playground.lti import passback, tasks
from playground.models import Submission

log = logging.getLogger(__name__)


@receiver(score_changed, dispatch_uid="lti-pass-score-back")
def pass_score_back(sender: Any, submission: Submission, **kwargs: Any) -> None:
    """Never raises into grading: a row that could not be enqueued stays pending for the sweep."""
    try:
        for row in passback.passbacks_record(submission=submission):
            tasks.enqueue_passback(row.id)
    except Exception:
        log.exception("lti: the score of submission %s could not be recorded for the LMS", submission.id)
