"""How a test's output is compared with its expectation (playground.classroom.grading_compare):
strip and exact, patterns, diffs, and where the comparison runs."""

from __future__ import annotations

import random
from typing import Any

import pytest

from playground.classroom.grading_compare import Verdict, compare
from playground.matching import normalise

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("got", "expected"),
    [("4\n", "4"), ("4   \n\n\n", "4"), ("a \nb\t\n", "a\nb"), ("a\r\nb\r\n", "a\nb\n\n"), ("", "\n\n")],
)
def test_strip_ignores_trailing_spaces_of_each_line_and_trailing_blank_lines(got: str, expected: str) -> None:
    assert normalise(got) == normalise(expected)
    assert compare(got, expected, "strip") == Verdict("passed")


@pytest.mark.parametrize(("got", "expected"), [(" 4", "4"), ("4\n5", "4"), ("a\n\nb", "a\nb"), ("4", "")])
def test_strip_still_compares_leading_spaces_and_the_lines_themselves(got: str, expected: str) -> None:
    verdict = compare(got, expected, "strip")
    assert verdict.status == "failed" and verdict.diff.startswith("--- expected\n+++ your output\n")


def test_exact_compares_every_byte() -> None:
    assert compare("4\n", "4\n", "exact") == Verdict("passed")
    assert compare("4\n", "4", "exact").status == "failed"
    assert compare("4\r\n", "4\n", "exact").status == "failed"
    verdict = compare("4 ", "4", "exact")  # a diff of the lines would look the same
    assert verdict.status == "failed" and "differ only in whitespace at line ends" in verdict.diff
    verdict = compare("4\n5", "4\n6", "exact")
    assert verdict.status == "failed" and "-6\n+5\n" in verdict.diff  # expected 6, got 5


def test_an_exact_mismatch_only_in_the_final_newline_says_so() -> None:
    verdict = compare("4\n", "4", "exact")
    assert (
        verdict.status == "failed" and "differ only in whitespace at line ends or in the final newline" in verdict.diff
    )


@pytest.mark.parametrize(
    ("got", "pattern", "passed"),
    [
        ("answer: 42\n", r"answer: \d+", True),  # trailing whitespace of the output is ignored
        ("answer: 42 and more", r"answer: \d+", False),  # the whole output, not a part of it
        ("the answer: 42", r"answer: \d+", False),
        ("one\ntwo", r"one.two", True),  # a dot matches a newline
        ("ONE", r"(?i)one", True),
        ("(a)", r"\(a\)", True),
    ],
)
def test_regex_must_match_the_whole_output(got: str, pattern: str, passed: bool) -> None:
    verdict = compare(got, pattern, "regex")
    assert verdict.passed is passed
    assert (verdict.diff == "") is passed and (passed or pattern in verdict.diff)


def test_a_catastrophically_backtracking_pattern_is_linear_under_re2() -> None:
    # (a+)+$ against a's and a b took Python's re exponential time; RE2 answers at once.
    assert compare("a" * 100_000 + "b", "(a+)+$", "regex").status == "failed"
    assert compare("a" * 100_000, "(a+)+", "regex").passed


def test_a_pattern_whose_match_outruns_its_cpu_bound_is_not_graded_and_says_whose_it_is(settings: Any) -> None:
    # RE2 is linear in the output for a pattern, but the pattern's size multiplies it: this one on
    # a megabyte takes seconds. The child's CPU limit stops it; the student is not charged.
    settings.CORDON_COMPARE_CPU_S = 1
    rng = random.Random(7)  # noqa: S311 - an output, not a secret
    output = "".join(rng.choice("ab") for _ in range(1 << 20))
    verdict = compare(output, "(?:.*a.{60}b.*){16}", "regex")
    assert verdict.status == "not_graded"
    assert "1 s of CPU time" in verdict.detail and "the instructor's to fix" in verdict.detail


def test_a_stored_pattern_re2_refuses_is_not_graded_not_a_crash() -> None:
    for pattern, words in (("(?=a)a", "invalid perl operator"), ("a" * 20_000, "at most 16 KiB")):
        verdict = compare("a", pattern, "regex")
        assert verdict.status == "not_graded" and words in verdict.detail, verdict


def test_a_line_diff_that_would_cost_too_much_shows_where_the_outputs_first_part() -> None:
    # difflib is quadratic on some shapes (20,000 lines each way took 13 s): past DIFF_MAX_LINES
    # the diff is the first differing line instead.
    expected = "".join(f"l{i}\n" for i in range(30_000))
    got = "".join(f"l{i // 2}\n" for i in range(30_000))
    verdict = compare(got, expected, "strip")
    assert verdict.status == "failed"
    assert verdict.diff.startswith("the outputs first differ at line 2 (expected 30000 lines, got 30000)")


def test_a_small_comparison_is_made_here_and_a_large_one_in_a_bounded_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a match or a diff may run in the grader is decided before it starts, from sizes that
    bound its cost (RE2's program size times the output's length, the diff's lines)."""
    from runner import bounded

    jobs: list[str] = []
    real_call = bounded.call

    def recorded(job: str, payload: Any, bounds: Any) -> Any:
        jobs.append(job)
        return real_call(job, payload, bounds)

    monkeypatch.setattr(bounded, "call", recorded)
    assert compare("a" * 5000 + "!", "(a+)+$", "regex").status == "failed"  # 5 kB x a tiny program
    assert compare("x\n" * 50, "y\n" * 50, "strip").status == "failed"  # a 50-line diff
    assert jobs == []
    assert compare("ab" * 200_000, "(?:.*a.{60}b.*){2}", "regex").passed  # 400 kB x ~1,000 instructions
    assert compare("x\n" * 500, "y\n" * 500, "strip").status == "failed"  # a 500-line diff
    assert jobs == ["playground.matching:compare_job"] * 2
