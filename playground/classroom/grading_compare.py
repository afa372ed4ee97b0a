"""Comparing a test's output with its expectation: here when sizes known first bound the work small
(matching.py), otherwise in a bounded child (runner.bounded)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from playground import matching
from playground.classroom.grading_results import WRONG_OUTPUT
from playground.models import (
    Match,
    TestStatus,
)
from runner import bounded

COMPARE_MAX = 1 << 20  # the stdout compared with an expectation (the run's own cap is usually this)


COMPARE_JOB = "playground.matching:compare_job"


@dataclass(frozen=True)
class Verdict:
    """A test's output against its expectation: passed, failed (with a diff), or not graded (the
    comparison itself could not be made: the instructor's pattern, not the student's code)."""

    status: str
    diff: str = ""
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == TestStatus.PASSED


def compare(got: str, expected: str, match: str) -> Verdict:
    """Equal outputs pass here (linear, no child), as does a match or a diff whose cost is bounded
    small before it starts (matching.compare_small); any other is made in a bounded child
    (runner.bounded: CORDON_COMPARE_CPU_S of CPU, a wall deadline, 512 MiB)."""
    if matching.equal(got, expected, match):
        return Verdict(TestStatus.PASSED)
    try:
        answer = matching.compare_small(got, expected, match) or bounded.call(
            COMPARE_JOB, {"got": got, "expected": expected, "match": match}, compare_bounds()
        )
    except bounded.HostWorkError as exc:
        if match != Match.REGEX:  # failed for sure; only its line diff could not be made in time
            lines = (expected.splitlines(keepends=True), got.splitlines(keepends=True))
            return Verdict(TestStatus.FAILED, matching.first_difference(*lines), WRONG_OUTPUT)
        return Verdict(TestStatus.NOT_GRADED, detail=f"the output could not be checked against this test's pattern "
                       f"({exc.message}): the instructor's to fix, not your code")  # fmt: skip
    if "error" in answer:
        return Verdict(TestStatus.NOT_GRADED, detail=f"this test's pattern cannot be used ({answer['error']}): "
                       "the instructor's to fix, not your code")  # fmt: skip
    if answer["passed"]:
        return Verdict(TestStatus.PASSED)
    return Verdict(TestStatus.FAILED, answer["diff"], WRONG_OUTPUT)


def compare_bounds() -> bounded.Bounds:
    cpu_s = settings.CORDON_COMPARE_CPU_S
    room = 2 * COMPARE_MAX + 4 * matching.PATTERN_MAX_BYTES + 256 * 1024  # got, expected (JSON-escaped at worst)
    return bounded.Bounds(cpu_s=cpu_s, wall_s=cpu_s * 2 + 3.0, memory_mib=512, input_max_bytes=4 * room,
                          output_max_bytes=4 * matching.DIFF_MAX + 1024)  # fmt: skip
