"""The similarity report finds copies, renamed or reordered, among honest solutions of one task that
share idioms and a starter, shows where they are, and runs the same in a bounded child."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from typing import Any

import pytest

from playground.classroom import similarity
from playground.classroom.similarity import Report, SimilarityError, build_report
from runner import bounded

STARTER = '''"""Assignment 3: word statistics.

Read a text from standard input and print, in this order: the number of words, the number of
distinct words, the ten most frequent words with their counts (ties alphabetically), the longest
word (ties alphabetically), the average length of a word (two decimals) and the number of
sentences. Words are case-insensitive; punctuation is not part of a word.
"""
import sys

PUNCTUATION = ".,;:!?\\"'()[]{}-"


def read_text():
    """Everything on standard input. Do not change this function."""
    return sys.stdin.read()


def print_report(total, distinct, top, longest, average, sentences):
    """Prints the report in the format the tests expect. Do not change this function."""
    print(f"words: {total}")
    print(f"distinct: {distinct}")
    for word, count in top:
        print(f"{word} {count}")
    print(f"longest: {longest}")
    print(f"average length: {average:.2f}")
    print(f"sentences: {sentences}")
'''

# --- 30 honest solutions ------------------------------------------------------------------------
# Each solution is seven parts (splitting into words, counting, ranking, the longest word, the
# average length, the sentences, the main program), each written seven ways. Solution (a, b) takes
# the ways b, a, a+b, ..., a+5b (mod 7): a Reed-Solomon code, so two solutions share the way of at
# most one part, as two students who both count with `dict.get` do, and nothing more. Names,
# comments and the order of the functions vary too, though the report sees through names and comments.

WORDS = [
    """def {words}(text):
    result = []
    for raw in text.split():
        word = raw.strip(PUNCTUATION).lower()
        if word:
            result.append(word)
    return result
""",
    """import re


def {words}(text):
    # letters and digits only
    return re.findall(r"[a-z0-9]+", text.lower())
""",
    """def {words}(text):
    table = str.maketrans(PUNCTUATION, " " * len(PUNCTUATION))
    cleaned = text.translate(table).lower()
    return cleaned.split()
""",
    """def {words}(text):
    found = []
    current = ""
    for ch in text:
        if ch.isalnum():
            current += ch.lower()
        elif current:
            found.append(current)
            current = ""
    if current:
        found.append(current)
    return found
""",
    """def {words}(text):
    stripped = [piece.strip(PUNCTUATION) for piece in text.lower().split()]
    return [piece for piece in stripped if piece]
""",
    """def {words}(text):
    def clean(chunk):
        return "".join(c for c in chunk if c not in PUNCTUATION).lower()

    return list(filter(None, map(clean, text.split())))
""",
    """def {words}(text):
    out = []
    i = 0
    n = len(text)
    while i < n:
        while i < n and not text[i].isalpha():
            i += 1
        start = i
        while i < n and text[i].isalpha():
            i += 1
        if i > start:
            out.append(text[start:i].lower())
    return out
""",
]

COUNT = [
    """def {count}(words):
    tally = {{}}
    for word in words:
        tally[word] = tally.get(word, 0) + 1
    return tally
""",
    """from collections import Counter


def {count}(words):
    return dict(Counter(words))
""",
    """from collections import defaultdict


def {count}(words):
    seen = defaultdict(int)
    for w in words:
        seen[w] += 1
    return seen
""",
    """def {count}(words):
    freq = {{}}
    for w in words:
        if w in freq:
            freq[w] = freq[w] + 1
        else:
            freq[w] = 1
    return freq
""",
    """from itertools import groupby


def {count}(words):
    return {{key: len(list(group)) for key, group in groupby(sorted(words))}}
""",
    """def {count}(words):
    return {{w: words.count(w) for w in set(words)}}
""",
    """def {count}(words):
    numbers = {{}}
    for item in words:
        try:
            numbers[item] += 1
        except KeyError:
            numbers[item] = 1
    return numbers
""",
]

TOP = [
    """def {top}(counts, n):
    ranked = sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))
    return ranked[:n]
""",
    """def {top}(counts, n):
    items = sorted(counts.items())
    items.sort(key=lambda item: item[1], reverse=True)
    return items[:n]
""",
    """import heapq


def {top}(counts, n):
    best = heapq.nsmallest(n, ((-c, w) for w, c in counts.items()))
    return [(w, -c) for c, w in best]
""",
    """def {top}(counts, n):
    remaining = dict(counts)
    chosen = []
    while remaining and len(chosen) < n:
        pick = None
        for word, count in remaining.items():
            if pick is None or count > remaining[pick] or (count == remaining[pick] and word < pick):
                pick = word
        chosen.append((pick, remaining.pop(pick)))
    return chosen
""",
    """def {top}(counts, n):
    buckets = {{}}
    for word, count in counts.items():
        buckets.setdefault(count, []).append(word)
    result = []
    for count in sorted(buckets, reverse=True):
        for word in sorted(buckets[count]):
            if len(result) == n:
                return result
            result.append((word, count))
    return result
""",
    """from functools import cmp_to_key


def {top}(counts, n):
    def compare(x, y):
        if x[1] != y[1]:
            return y[1] - x[1]
        return -1 if x[0] < y[0] else 1

    return sorted(counts.items(), key=cmp_to_key(compare))[:n]
""",
    """import bisect


def {top}(counts, n):
    board = []
    for word, count in counts.items():
        bisect.insort(board, (-count, word))
        if len(board) > n:
            board.pop()
    return [(word, -neg) for neg, word in board]
""",
]

LONGEST = [
    """def {longest}(words):
    return max(sorted(set(words)), key=len) if words else ""
""",
    """def {longest}(words):
    winner = ""
    for word in words:
        if len(word) > len(winner) or (len(word) == len(winner) and word < winner):
            winner = word
    return winner
""",
    """def {longest}(words):
    if not words:
        return ""
    ordered = sorted(words, key=lambda w: (-len(w), w))
    return ordered[0]
""",
    """from functools import reduce


def {longest}(words):
    def pick(a, b):
        if len(b) > len(a) or (len(b) == len(a) and b < a):
            return b
        return a

    return reduce(pick, words, "")
""",
    """def {longest}(words):
    if not words:
        return ""
    rest = {longest}(words[1:])
    first = words[0]
    if len(first) > len(rest) or (len(first) == len(rest) and first < rest):
        return first
    return rest
""",
    """def {longest}(words):
    by_length = {{}}
    for w in set(words):
        by_length.setdefault(len(w), []).append(w)
    if not by_length:
        return ""
    return min(by_length[max(by_length)])
""",
    """def {longest}(words):
    size = max((len(w) for w in words), default=0)
    candidates = [w for w in words if len(w) == size]
    return min(candidates) if candidates else ""
""",
]

AVERAGE = [
    """def {average}(words):
    return round(sum(len(w) for w in words) / len(words), 2) if words else 0.0
""",
    """def {average}(words):
    letters = 0
    for word in words:
        letters += len(word)
    if len(words) == 0:
        return 0.0
    return round(letters / len(words), 2)
""",
    """import statistics


def {average}(words):
    if not words:
        return 0.0
    return round(statistics.mean(map(len, words)), 2)
""",
    """def {average}(words):
    lengths = [len(w) for w in words]
    try:
        value = sum(lengths) / len(lengths)
    except ZeroDivisionError:
        value = 0
    return float(f"{{value:.2f}}")
""",
    """def {average}(words):
    i, chars = 0, 0
    while i < len(words):
        chars = chars + len(words[i])
        i = i + 1
    return round(chars / i, 2) if i else 0.0
""",
    """def {average}(words):
    joined = "".join(words)
    how_many = len(words) or 1
    return round(len(joined) / how_many, 2)
""",
    """def {average}(words):
    def total_length(rest):
        if not rest:
            return 0
        return len(rest[0]) + total_length(rest[1:])

    return round(total_length(words) / max(len(words), 1), 2)
""",
]

SENTENCES = [
    """import re


def {sentences}(text):
    parts = re.split(r"[.!?]+", text)
    return len([part for part in parts if part.strip()])
""",
    """def {sentences}(text):
    number = 0
    previous = ""
    for ch in text:
        if ch in ".!?" and previous not in ".!?":
            number += 1
        previous = ch
    return number
""",
    """def {sentences}(text):
    ends = ".!?"
    return sum(1 for i, c in enumerate(text) if c in ends and (i + 1 == len(text) or text[i + 1] not in ends))
""",
    """def {sentences}(text):
    for mark in "!?":
        text = text.replace(mark, ".")
    pieces = text.split(".")
    return sum(1 for piece in pieces if piece.strip() != "")
""",
    """import re


def {sentences}(text):
    return len(re.findall(r"[^.!?]+[.!?]", text))
""",
    """from itertools import groupby


def {sentences}(text):
    runs = [key for key, _ in groupby(text, key=lambda c: c in ".!?")]
    return runs.count(True)
""",
    """def {sentences}(text):
    total = 0
    position = 0
    while True:
        stops = [text.find(m, position) for m in ".!?"]
        stops = [s for s in stops if s != -1]
        if not stops:
            return total
        position = min(stops) + 1
        total += 1
""",
]

MAIN = [
    """def main():
    text = read_text()
    found = {words}(text)
    table = {count}(found)
    print_report(len(found), len(table), {top}(table, 10), {longest}(found), {average}(found), {sentences}(text))


if __name__ == "__main__":
    main()
""",
    """class WordReport:
    def __init__(self, text):
        self.text = text
        self.words = {words}(text)
        self.counts = {count}(self.words)

    def show(self, n=10):
        best = {top}(self.counts, n)
        print_report(len(self.words), len(self.counts), best, {longest}(self.words),
                     {average}(self.words), {sentences}(self.text))


WordReport(read_text()).show()
""",
    """def run(limit=10):
    content = read_text()
    tokens = {words}(content)
    if not tokens:
        print_report(0, 0, [], "", 0.0, 0)
        return
    stats = {count}(tokens)
    podium = {top}(stats, limit)
    mean = {average}(tokens)
    print_report(sum(stats.values()), len(stats), podium, {longest}(tokens), mean, {sentences}(content))


run()
""",
    """summary = {{"text": read_text()}}
summary["words"] = {words}(summary["text"])
summary["counts"] = {count}(summary["words"])
summary["top"] = {top}(summary["counts"], 10)
print_report(len(summary["words"]), len(summary["counts"]), summary["top"], {longest}(summary["words"]),
             {average}(summary["words"]), {sentences}(summary["text"]))
""",
    """def analyse(text):
    items = {words}(text)
    counted = {count}(items)
    return len(items), len(set(items)), {top}(counted, 10), {longest}(items), {average}(items), {sentences}(text)


def main():
    print_report(*analyse(read_text()))


main()
""",
    """if __name__ == "__main__":
    source = read_text()
    pieces = {words}(source)
    histogram = {count}(pieces)
    distinct = len(histogram.keys())
    total = 0
    for value in histogram.values():
        total += value
    print_report(total, distinct, {top}(histogram, 10), {longest}(pieces), {average}(pieces), {sentences}(source))
""",
    """def main():
    try:
        data = read_text()
    except KeyboardInterrupt:
        return
    word_list = {words}(data)
    freq_map = {count}(word_list)
    results = [len(word_list), len(freq_map), {top}(freq_map, n=10)]
    results.append({longest}(word_list))
    results.append({average}(word_list))
    results.append({sentences}(data))
    print_report(*results)


main()
""",
]

NAMES = {
    "words": ["get_words", "split_words", "tokenize", "words_of", "extract_words", "clean_words", "word_list_from"],
    "count": ["count_words", "frequencies", "tally", "word_counts", "histogram_of", "count", "make_counts"],
    "top": ["top_words", "most_common", "ranking", "best_n", "top_n", "leaders", "highest"],
    "longest": ["longest_word", "find_longest", "longest", "biggest_word", "max_word", "longest_of", "pick_longest"],
    "average": ["average_length", "mean_length", "avg_len", "average", "word_length_mean", "mean_size", "avg"],
    "sentences": [
        "count_sentences",
        "sentences",
        "sentence_count",
        "n_sentences",
        "num_sentences",
        "sentences_in",
        "ends",
    ],
}
HEADERS = ["# Solution to assignment 3\n", "# word statistics -- my attempt\n", "", "# TODO: tidy up\n", ""]


def honest(number: int) -> str:
    """The solution of student `number` (0 to 48): the starter, then its seven parts."""
    a, b = divmod(number, 7)
    ways = [b, *((a + x * b) % 7 for x in range(6))]
    names = {part: options[(number * (i + 2)) % 7] for i, (part, options) in enumerate(NAMES.items())}
    helpers = [WORDS[ways[0]], COUNT[ways[1]], TOP[ways[2]], LONGEST[ways[3]], AVERAGE[ways[4]], SENTENCES[ways[5]]]
    shift = number % len(helpers)
    order = helpers[shift:] + helpers[:shift]
    if number % 2:
        order.reverse()
    parts = [part.format(**names) for part in [*order, MAIN[ways[6]]]]
    imports = sorted({line for part in parts for line in part.splitlines() if line.startswith(("import ", "from "))})
    bodies = ["\n".join(line for line in part.splitlines() if line not in imports) for part in parts]
    code = "\n\n".join(body.strip("\n") for body in bodies)
    return STARTER + "\n" + "\n".join(imports) + "\n\n" + HEADERS[number % len(HEADERS)] + code + "\n"


def renamed(code: str) -> str:
    """Every name the student's part binds renamed: functions, classes, parameters (`self` too),
    variables, attributes; not the starter's, nor dunders, nor other functions' keyword arguments."""
    own = code[len(STARTER) :]
    tree = ast.parse(own)
    parameters = {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    attributes = {
        node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    }
    attributes |= {node.name for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for node in cls.body
                   if isinstance(node, ast.FunctionDef)}  # fmt: skip
    bound = {name for name in _bound_names(tree) if not name.startswith("__")} - {"read_text", "print_report"}
    fresh = {name: f"v{i}_{name[::-1]}" for i, name in enumerate(sorted(bound))}
    tokens = list(tokenize.generate_tokens(io.StringIO(own).readline))
    out = []
    depth, in_def = 0, False
    for i, tok in enumerate(tokens):
        depth += (tok.string in "([{") - (tok.string in ")]}") if tok.type == tokenize.OP else 0
        in_def = (in_def or tok.string == "def") and not (tok.string == ":" and depth == 0)
        rename = tok.type == tokenize.NAME and tok.string in fresh
        if rename and i and tokens[i - 1].string == ".":
            rename = tok.string in attributes
        if rename and depth and not in_def and tokens[i + 1].string == "=":  # a keyword argument
            rename = tok.string in parameters
        if tok.type == tokenize.STRING and tok.string.startswith("f"):  # the names in an f-string's fields
            tok = tok._replace(string=re.sub(r"\{(\w+)", lambda m: "{" + fresh.get(str(m[1]), str(m[1])), tok.string))
        out.append(tok._replace(string=fresh[tok.string]) if rename else tok)
    return STARTER + tokenize.untokenize(out)


def _bound_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def reordered(code: str) -> str:
    """The student's functions in the opposite order, their comments rewritten."""
    own = code[len(STARTER) :]
    lines = own.splitlines()
    tree = ast.parse(own)
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    spans = [(node.lineno - 1, node.end_lineno or node.lineno) for node in defs]
    kept = [line for i, line in enumerate(lines) if not any(start <= i < end for start, end in spans)]
    moved = ["\n".join(lines[start:end]) for start, end in reversed(spans)]
    first_def = next(
        i for i, line in enumerate(kept) if line.startswith(("def ", "class ", "if ", "summary", "main", "run"))
    )
    body = "\n".join(kept[:first_def]) + "\n" + "\n\n\n".join(moved) + "\n\n\n" + "\n".join(kept[first_def:])
    body = re.sub(r"#.*", "# (reworded comment)", body)
    return STARTER + "# my own work, written from scratch\n" + body + "\n"


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
