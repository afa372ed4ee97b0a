"""The similarity report finds copies, renamed or reordered, among honest solutions of one task that
share idioms and a starter, shows where they are, and runs the same in a bounded child."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from playground.classroom import similarity
from playground.classroom.similarity import Report, SimilarityError, build_report
from runner import bounded
from tests.playground.classroom.similarity_corpus import STARTER, honest, renamed, reordered

A, B = "student-03", "student-17"
CORPUS = {f"student-{n:02d}": honest(n) for n in range(30)}
CORPUS["copy-of-A"] = renamed(CORPUS[A])
CORPUS["copy-of-B"] = reordered(CORPUS[B])
PLANTED = {("copy-of-A", A), ("copy-of-B", B)}  # as keys_of gives them
MARGIN = 0.15


def keys_of(pair: similarity.Pair) -> tuple[str, str]:
    first, second = sorted((pair.a.key, pair.b.key))
    return first, second


def pair_keys(report: Report) -> set[tuple[str, str]]:
    return {keys_of(pair) for pair in report.pairs}


@pytest.fixture(scope="module")
def report() -> Report:
    return build_report(CORPUS, runtime="python", starter=STARTER)


def test_the_corpus_is_thirty_distinct_programs_and_two_copies_all_valid_python() -> None:
    assert len(set(CORPUS.values())) == 32
    for key, code in CORPUS.items():
        compile(code, key, "exec")


def test_the_report_finds_exactly_the_two_copies_with_a_margin(report: Report) -> None:
    assert report.compared == 32 and report.pairs_compared == 32 * 31 // 2 and report.skipped == ()
    assert pair_keys(report) == PLANTED
    planted = [pair.similarity for pair in report.pairs]
    everything = build_report(CORPUS, runtime="python", starter=STARTER, threshold=0.0)
    honest_top = max(pair.similarity for pair in everything.pairs if keys_of(pair) not in PLANTED)
    print(f"\nplanted pairs: {planted}; the most similar honest pair: {honest_top}")
    assert min(planted) >= similarity.THRESHOLD + MARGIN
    assert honest_top <= similarity.THRESHOLD - MARGIN


def _covered(code: str, regions: tuple[similarity.Region, ...], start: int, end: int) -> float:
    """The share of code[start:end]'s non-space characters inside the regions."""
    wanted = [i for i in range(start, end) if not code[i].isspace()]
    inside = [i for i in wanted if any(r.start <= i < r.end for r in regions)]
    return len(inside) / len(wanted)


def _functions(code: str) -> list[tuple[str, int, int]]:
    """The student's own top-level functions: (name, start, end) as character offsets."""
    offsets = [0]
    for line in code.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    tree = ast.parse(code)
    given = {"read_text", "print_report"}
    found = [(node.name, offsets[node.lineno - 1], offsets[node.end_lineno or node.lineno])
             for node in tree.body if isinstance(node, ast.FunctionDef) and node.name not in given]  # fmt: skip
    return sorted(found, key=lambda function: function[1])


@pytest.mark.parametrize("copy", sorted(PLANTED))
def test_the_regions_of_a_copy_cover_the_copied_functions_on_both_sides(report: Report, copy: tuple[str, str]) -> None:
    pair = next(pair for pair in report.pairs if keys_of(pair) == copy)
    for side in (pair.a, pair.b):
        code = CORPUS[side.key]
        functions = _functions(code)
        assert len(functions) >= 4
        # Winnowing may leave out a few characters where a run starts and ends, and reordering
        # breaks a run at each function it moved: each function mostly, all of them nearly whole.
        for name, start, end in functions:
            assert _covered(code, side.regions, start, end) >= 0.6, (side.key, name)
        assert _covered(code, side.regions, functions[0][1], len(code)) >= 0.85
        assert _covered(code, side.regions, 0, len(STARTER)) < 0.05  # the starter is not the copy
        for region in side.regions:
            assert code.count("\n", 0, region.start) + 1 == region.first_line
            assert code.count("\n", 0, region.end - 1) + 1 == region.last_line


def test_the_starter_alone_shared_by_two_submissions_makes_no_pair() -> None:
    one = STARTER + "\nprint_report(0, 0, [], '')\n"
    other = (
        STARTER + "\nimport collections\nwords = read_text().split()\nprint(len(words), collections.Counter(words))\n"
    )
    assert build_report({"one": one, "other": other}, runtime="python", starter=STARTER).pairs == ()
    without = build_report({"one": one, "other": other}, runtime="python", starter="")
    assert [pair.similarity for pair in without.pairs] and without.pairs[
        0
    ].similarity > 0.9  # the starter is most of both


def test_a_bounded_child_gives_the_answer_made_in_process(report: Report) -> None:
    payload: dict[str, Any] = {
        "runtime": "python",
        "starter": STARTER,
        "submissions": [{"key": key, "code": code} for key, code in CORPUS.items()],
        "threshold": similarity.THRESHOLD,
    }
    answer = bounded.call("playground.classroom.similarity:job", payload, similarity.BOUNDS)
    assert answer == similarity.run_here("playground.classroom.similarity:job", payload)
    assert len(answer["pairs"]) == answer["found"] == 2
    seen: list[tuple[int, int]] = []
    children = build_report(
        CORPUS,
        runtime="python",
        starter=STARTER,
        progress=lambda done, total: seen.append((done, total)),
        call=lambda job, payload: bounded.call(job, payload, similarity.BOUNDS),
    )
    assert children == report
    assert seen == [(1, 2), (2, 2)]


def test_small_batches_compare_every_pair_once_and_report_progress(
    monkeypatch: pytest.MonkeyPatch, report: Report
) -> None:
    monkeypatch.setattr(similarity, "FINGERPRINT_BATCH_BYTES", 1)  # one submission a job
    monkeypatch.setattr(similarity, "BLOCK_SUBMISSIONS", 5)
    seen: list[tuple[int, int]] = []
    compared: list[list[int]] = []

    def call(job: str, payload: dict[str, Any]) -> Any:
        if job == similarity.COMPARE_JOB:
            keys = [entry["key"] for entry in payload["fingerprints"]]
            compared.extend(sorted((keys[i], keys[j])) for i, j in payload["pairs"])
        return similarity.run_here(job, payload)

    batched = build_report(
        CORPUS, runtime="python", starter=STARTER, progress=lambda *seen_: seen.append(seen_), call=call
    )
    assert batched == report
    assert len(compared) == len({tuple(pair) for pair in compared}) == 32 * 31 // 2
    fingerprint_jobs, tiles = 32, 7 * 8 // 2  # blocks of 5: 7 blocks, 28 tiles
    assert seen == [(done, fingerprint_jobs + tiles) for done in range(1, fingerprint_jobs + tiles + 1)]


def test_an_oversized_submission_is_skipped_and_said_so() -> None:
    big = "x = 1\n" * (similarity.SUBMISSION_MAX_BYTES // 6 + 1)
    report = build_report({"big": big, **CORPUS}, runtime="python", starter=STARTER)
    assert report.skipped == (
        similarity.Skipped("big", "its code is 256 KiB (262,146 bytes); at most 256 KiB is compared"),
    )
    assert report.compared == 32 and pair_keys(report) == PLANTED


def test_too_many_submissions_or_a_starter_too_large_are_refused() -> None:
    many = {f"s{i}": "print(1)\n" for i in range(similarity.SUBMISSIONS_MAX + 1)}
    with pytest.raises(SimilarityError) as refused:
        build_report(many, runtime="python")
    assert refused.value.code == "too_many_submissions" and "at most 400" in refused.value.message
    with pytest.raises(SimilarityError) as refused:
        build_report(CORPUS, runtime="python", starter="#" * (similarity.SUBMISSION_MAX_BYTES + 1))
    assert refused.value.code == "too_large" and "the starter code" in refused.value.message
    with pytest.raises(SimilarityError) as refused:
        build_report(CORPUS, runtime="ruby")
    assert refused.value.code == "unknown_runtime"


def test_an_oversized_submission_given_to_the_job_in_a_child_is_refused_naming_it() -> None:
    payload = {"runtime": "python", "starter": "", "threshold": 0.5,
               "submissions": [{"key": "huge", "code": "#" * (similarity.SUBMISSION_MAX_BYTES + 1)}]}  # fmt: skip
    with pytest.raises(bounded.HostWorkError) as refused:
        bounded.call("playground.classroom.similarity:job", payload, similarity.BOUNDS)
    assert refused.value.code == "failed"
    assert "too_large: submission 'huge' is 256 KiB (262,145 bytes); at most 256 KiB" in refused.value.message


JS_STARTER = """// Assignment 2: the median of the numbers on standard input, one a line.
const lines = require("fs").readFileSync(0, "utf8").trim().split("\\n");
"""

JS = {
    "sorter": JS_STARTER
    + """
function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  if (sorted.length % 2 === 0) {
    return (sorted[middle - 1] + sorted[middle]) / 2;
  }
  return sorted[middle];
}

function parse(rows) {
  return rows.filter((row) => row.length > 0).map(Number);
}

console.log(median(parse(lines)));
""",
    "selector": JS_STARTER
    + """
let numbers = [];
for (const line of lines) {
  if (line !== "") numbers.push(parseFloat(line));
}
function kth(list, k) {
  let pivot = list[0];
  let lower = list.filter(x => x < pivot), upper = list.filter(x => x > pivot);
  let same = list.length - lower.length - upper.length;
  if (k < lower.length) return kth(lower, k);
  if (k < lower.length + same) return pivot;
  return kth(upper, k - lower.length - same);
}
const n = numbers.length;
console.log(n % 2 ? kth(numbers, (n - 1) / 2) : (kth(numbers, n / 2 - 1) + kth(numbers, n / 2)) / 2);
""",
    "counter": JS_STARTER
    + """
class Stats {
  constructor(rows) {
    this.values = [];
    rows.forEach((row) => { if (row.trim()) this.values.push(Number(row)); });
    this.values.sort(function (x, y) { return x - y; });
  }
  median() {
    const half = this.values.length >> 1;
    return this.values.length & 1 ? this.values[half] : (this.values[half - 1] + this.values[half]) / 2;
  }
}
console.log(new Stats(lines).median());
""",
}
JS["sorter-renamed"] = (
    JS_STARTER
    + """
function middleValue(arr) {
  const ordered = [...arr].sort((p, q) => p - q);
  const centre = Math.floor(ordered.length / 2);
  if (ordered.length % 2 === 0) {
    return (ordered[centre - 1] + ordered[centre]) / 2;
  }
  return ordered[centre];
}

function readNumbers(input) {
  return input.filter((item) => item.length > 0).map(Number);
}

console.log(middleValue(readNumbers(lines)));
"""
)


def test_javascript_copies_are_found_through_renaming() -> None:
    report = build_report(JS, runtime="node", starter=JS_STARTER)
    assert pair_keys(report) == {("sorter", "sorter-renamed")}
    assert report.pairs[0].similarity >= similarity.THRESHOLD + MARGIN
    everything = build_report(JS, runtime="node", starter=JS_STARTER, threshold=0.0)
    honest_top = max(
        (p.similarity for p in everything.pairs if keys_of(p) != ("sorter", "sorter-renamed")), default=0.0
    )
    assert honest_top <= similarity.THRESHOLD - MARGIN


def test_a_submission_whose_child_fails_is_skipped_not_the_report(report: Report) -> None:
    def call(job: str, payload: dict[str, Any]) -> Any:
        if job == similarity.FINGERPRINT_JOB and any(entry["key"] == "student-07" for entry in payload["submissions"]):
            raise bounded.HostWorkError("cpu_time", "it used up its 30 s of CPU time")
        return similarity.run_here(job, payload)

    partial = build_report(CORPUS, runtime="python", starter=STARTER, call=call)
    assert partial.skipped == (
        similarity.Skipped("student-07", "its code could not be fingerprinted (it used up its 30 s of CPU time)"),
    )
    assert partial.compared == 31 and partial.pairs_compared == 31 * 30 // 2 and partial.pairs == report.pairs


def test_a_report_keeps_the_most_similar_pairs_and_counts_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(similarity, "PAIRS_MAX", 1)
    kept = build_report(CORPUS, runtime="python", starter=STARTER)
    assert kept.pairs_found == 2 and pair_keys(kept) == {("copy-of-A", A)}  # 1.0 against 0.95
