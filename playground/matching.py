"""A student's output against a test's expectation: `exact`, `strip` (line ends and trailing blank
lines do not count) or `regex`, and the diff shown when they differ. Pure and Django-free: grading
calls `equal` first (linear), then `compare_small`, which answers only when the work's cost is
bounded small before it starts (an RE2 program's size times the output's length, a diff's lines),
and otherwise the same work runs in a bounded child (runner.bounded) through `compare_job`.

Patterns are RE2's (google-re2): matching takes time linear in the output for a given pattern, so
no pattern backtracks catastrophically; Python-only syntax (lookaround, backreferences) is refused
when the test is saved, with RE2's own words."""

from __future__ import annotations

import difflib
from typing import Any

import re2

from runner.units import size_words

PATTERN_MAX_BYTES = 16 * 1024
RE2_MAX_MEM = 8 << 20  # RE2's budget for one compiled pattern and its matching automata
DIFF_MAX = 8 * 1024  # the diff a result keeps
DIFF_MAX_LINES = 2_000  # beyond this many lines a side, no line diff is tried (difflib: 0.1 s at 2,000, 13 s at 20,000)
# What runs in the caller: a match whose RE2 program size times the output's bytes is within this
# (RE2 takes about a nanosecond per instruction and byte at worst: a few milliseconds), a diff of
# at most this many lines a side (difflib's worst shape: under 10 ms).
INLINE_MATCH_COST = 4_000_000
INLINE_DIFF_LINES = 200


def normalise(text: str) -> str:
    """`strip`: trailing whitespace of every line and trailing blank lines do not count."""
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).rstrip("\n")


def pattern_error(pattern: str) -> str | None:
    """Why RE2 will not take this pattern (its size, its syntax, its size once compiled), or None."""
    size = len(pattern.encode())
    if size > PATTERN_MAX_BYTES:
        return f"a pattern is at most {size_words(PATTERN_MAX_BYTES)} (this one is {size_words(size, exact=True)})"
    try:
        _compiled(pattern)
    except re2.error as exc:
        return f"not a pattern RE2 accepts: {_words(exc)}"
    return None


def equal(got: str, expected: str, match: str) -> bool | None:
    """Whether an exact or strip expectation is met (linear); None for a pattern, which needs
    compare_job."""
    if match == "regex":
        return None
    return got == expected if match == "exact" else normalise(got) == normalise(expected)


def compare_job(*, got: str, expected: str, match: str) -> dict[str, Any]:
    """In a bounded child: {"passed", "diff"}, or {"error"} for a pattern RE2 refuses."""
    if match == "regex":
        error = pattern_error(expected)
        return {"error": error} if error is not None else _matched(_compiled(expected), got, expected)
    if equal(got, expected, match):
        return {"passed": True, "diff": ""}
    return {"passed": False, "diff": diff(got, expected, match)}


def compare_small(got: str, expected: str, match: str) -> dict[str, Any] | None:
    """compare_job's answer when the work is small whatever its input (INLINE_*), else None."""
    if match == "regex":
        error = pattern_error(expected)  # compiling is bounded by the pattern's cap
        if error is not None:
            return {"error": error}
        pattern = _compiled(expected)
        if pattern.programsize * max(1, len(got.encode())) > INLINE_MATCH_COST:
            return None
        return _matched(pattern, got, expected)
    if max(got.count("\n"), expected.count("\n")) >= INLINE_DIFF_LINES:
        return None
    return compare_job(got=got, expected=expected, match=match)


def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _options())


def _matched(pattern: Any, got: str, expected: str) -> dict[str, Any]:
    passed = pattern.fullmatch(got.rstrip()) is not None
    shown = "" if passed else _cut(f"expected output matching the pattern:\n{expected}\n\ngot:\n{got}")
    return {"passed": passed, "diff": shown}


def diff(got: str, expected: str, match: str) -> str:
    """A unified diff of expected against got, cut to DIFF_MAX."""
    left, right = (expected, got) if match == "exact" else (normalise(expected), normalise(got))
    if normalise(left) == normalise(right):  # a diff of the lines would show nothing
        return "the outputs differ only in whitespace at line ends or in the final newline\n"
    left_lines, right_lines = left.splitlines(keepends=True), right.splitlines(keepends=True)
    if max(len(left_lines), len(right_lines)) > DIFF_MAX_LINES:
        return first_difference(left_lines, right_lines)
    lines = difflib.unified_diff(left_lines, right_lines, "expected", "your output", n=2)
    return _cut("".join(line if line.endswith("\n") else line + "\n" for line in lines))


def first_difference(left: list[str], right: list[str]) -> str:
    """Where two long outputs first part (linear): shown when a line diff would cost too much."""
    line = next((i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b), min(len(left), len(right)))
    expected = left[line] if line < len(left) else "(nothing: your output has more lines)\n"
    got = right[line] if line < len(right) else "(nothing: your output ends here)\n"
    return _cut(
        f"the outputs first differ at line {line + 1} (expected {len(left)} lines, got {len(right)}):\n"
        f"- expected: {expected.rstrip()}\n+ your output: {got.rstrip()}\n"
    )


def _options() -> Any:
    options = re2.Options()
    options.dot_nl = True  # `.` matches a newline, as with Python's re.DOTALL before
    options.never_capture = True  # only whether it matches: no groups, so the DFA does the work
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False
    return options


def _words(exc: Exception) -> str:
    text = exc.args[0] if exc.args else str(exc)
    return (text.decode(errors="replace") if isinstance(text, bytes) else str(text))[:300]


def _cut(text: str) -> str:
    return text if len(text) <= DIFF_MAX else text[:DIFF_MAX] + "\n[... cut]\n"
