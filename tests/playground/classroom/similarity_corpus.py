"""The similarity tests' corpus: thirty honest solutions of one task (word statistics), built from
variants of each function over a shared starter, so they share idioms as a real class's do; and
the two disguises a copy gets (renamed: every name changed; reordered: its functions moved and
its comments reworded)."""

from __future__ import annotations

import ast
import io
import re
import tokenize

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
