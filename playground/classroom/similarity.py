"""An assignment's similarity report (a plagiarism check): which pairs of submissions share most of
their code, and where, by copydetect's winnowed fingerprints. Django-free: its jobs run in
runner.bounded's children, and students' code is only tokenised (pygments), never run.

The report is made in two stages so each submission is tokenised and fingerprinted once, however
many pairs it is in: `fingerprint_job` in batches of at most FINGERPRINT_BATCH_BYTES of code, then
`compare_job` on tiles of the pair matrix (a block of submissions against a block, each block at
most BLOCK_CODE_BYTES of code and BLOCK_SUBMISSIONS submissions), which receives fingerprints, not
code. Tiling rather than a block of rows against everything keeps a child's input and work bounded
whatever the class's size: 300 submissions at the 256 KiB cap are 75 MiB of code. `job` does both
stages at once, for a few submissions or one call.

What is compared is copydetect's: its filtering (names, strings and comments abstracted, so renaming
and re-commenting do not hide a copy), its k-grams of NOISE_T characters winnowed so any match of
GUARANTEE_T characters is found, the starter's k-grams removed as boilerplate, and its similarity
(the share of one side's fingerprinted tokens found in the other). Four departures, each because
copydetect's own would be wrong here: k-grams are hashed with blake2b (copydetect uses `hash()`,
seeded anew in every process, and fingerprints cross processes); JavaScript's identifiers and
Python's `self` are abstracted like other names (copydetect keeps them, so renaming hid a copy); a
k-gram that begins in code the starter has is the starter's too (see _in_starter); and each kept
character remembers where it came from, so regions are exact spans of the original code
(copydetect's offsets drift after a class name and after the blank lines pygments strips).
"""

from __future__ import annotations

import base64
import bisect
import functools
import hashlib
import importlib
import importlib.util
import itertools
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

# A bounded child's environment sets OPENBLAS_NUM_THREADS=1 (runner/bounded.py): numpy's OpenBLAS
# would reserve address space for a thread per core as it loads, past the child's RLIMIT_AS.
import numpy as np
from pygments import lexers, token  # type: ignore[import-untyped]
from pygments.lexer import Lexer  # type: ignore[import-untyped]

from runner import bounded
from runner.units import size_words

FINGERPRINT_JOB = "playground.classroom.similarity:fingerprint_job"
COMPARE_JOB = "playground.classroom.similarity:compare_job"

# copydetect's parameters, in characters of filtered code (a name is one character, `V`; spaces and
# comments are gone): a line such as `for i in range(len(xs)):` is `forVinrange(len(V)):`, 20.
# Matches shorter than NOISE_T are idioms every solution has; a match of GUARANTEE_T is always seen.
# copydetect's defaults are 25 and 25 (every k-gram kept); winnowing over a window of 11 keeps about
# one in six, a sixth of the fingerprints to ship between children, and finds the same copies.
NOISE_T = 25
GUARANTEE_T = 35
WINDOW = GUARANTEE_T - NOISE_T + 1
# A pair is reported when either side has at least this share of its code in the other (copydetect's
# display threshold is 0.33). Honest solutions of one task share their idioms: in the tests, 30 of
# them, built to share at most one of seven parts pairwise, reach 0.31; copies, renamed or
# reordered, 0.95 and more. Short tasks (ten lines each) share more: the caller may ask for another.
THRESHOLD = 0.5

SUBMISSIONS_MAX = 400
SUBMISSION_MAX_BYTES = 256 * 1024  # services/runs.py's MAX_CODE_BYTES: no run or submission is larger
REGIONS_MAX = 100  # a side's regions kept (its longest); a copy has a few
PAIRS_MAX = 500  # the pairs a report keeps, most similar first; it counts them all
FINGERPRINT_BATCH_BYTES = 1 << 20
BLOCK_CODE_BYTES = 4 << 20
BLOCK_SUBMISSIONS = 150
# One child's bounds, for either job at the batch sizes above. Measured on 2 cores: 1 MiB of ordinary
# code (4 submissions at the cap) fingerprinted in 1.5 s of CPU, of the densest (every character a
# token: pygments' lexing is most of it) in 7.6 s, 100 MiB resident; a tile of 16 x 16 submissions
# at the cap compared in 0.5 s (1.2 s dense: 36 MiB of fingerprints in), 110 MiB resident.
BOUNDS = bounded.Bounds(cpu_s=30, wall_s=60.0, memory_mib=1024, input_max_bytes=96 << 20, output_max_bytes=16 << 20)

LEXERS = {"python": "python", "node": "javascript"}  # a runtime's language, as pygments names it
# A fingerprint on the wire: its hash, where its k-gram starts in the filtered code, and the span of
# the original code the k-gram was made from.
_PRINT = np.dtype([("hash", "<i8"), ("at", "<i4"), ("start", "<i4"), ("end", "<i4")])
# copydetect's names, and two more: JavaScript's identifiers (Name.Other) and Python's `self` and
# `cls` (Name.Builtin.Pseudo), which a copy may rename like any parameter.
_LINE_END = re.compile(r"\r\n|\r|\n")
_NAMES = {token.Name, token.Name.Variable, token.Name.Attribute, token.Name.Other, token.Name.Builtin.Pseudo}


class SimilarityError(Exception):
    """A report that cannot be made as asked. `code`: unknown_runtime, too_many_submissions,
    too_large (the starter, or a submission given to `job`), bad_input."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


# --- the report: what build_report returns --------------------------------------------------


@dataclass(frozen=True)
class Region:
    """A run of matching code: characters [start, end) of the submission's code (Python string
    indices, code points) on lines first_line..last_line (from 1; \\n, \\r\\n and \\r end a line)."""

    start: int
    end: int
    first_line: int
    last_line: int


@dataclass(frozen=True)
class Side:
    """One submission of a pair: the share of its fingerprinted tokens found in the other, those
    tokens, and where they are."""

    key: str
    similarity: float
    matched_tokens: int
    regions: tuple[Region, ...]


@dataclass(frozen=True)
class Pair:
    a: Side
    b: Side

    @property
    def similarity(self) -> float:
        return max(self.a.similarity, self.b.similarity)


@dataclass(frozen=True)
class Skipped:
    key: str
    reason: str


@dataclass(frozen=True)
class Report:
    """`pairs`: at most PAIRS_MAX, most similar first, of the `pairs_found` at or over `threshold`
    among the `pairs_compared` pairs of the `compared` submissions; `skipped`: those not compared."""

    pairs: tuple[Pair, ...]
    pairs_found: int
    pairs_compared: int
    compared: int
    skipped: tuple[Skipped, ...]
    threshold: float

    def as_json(self) -> dict[str, Any]:
        """{"pairs": [{"a": {"key", "similarity", "matched_tokens", "regions": [{"start", "end",
        "first_line", "last_line"}]}, "b": {...}}], "pairs_found", "pairs_compared", "compared",
        "skipped": [{"key", "reason"}], "threshold"}"""
        return asdict(self)


Call = Callable[[str, dict[str, Any]], Any]
Progress = Callable[[int, int], None]


def run_here(job: str, payload: dict[str, Any]) -> Any:
    """A job run in this process, its answer as it would come back from a child (through JSON)."""
    module, _, function = job.partition(":")
    return json.loads(json.dumps(getattr(importlib.import_module(module), function)(**payload)))


def _quiet(done: int, total: int) -> None:
    pass


def build_report(
    submissions: Mapping[str, str],
    *,
    runtime: str,
    starter: str = "",
    threshold: float = THRESHOLD,
    progress: Progress = _quiet,
    call: Call = run_here,
) -> Report:
    """The similarity report of `submissions` (key to code). Each job goes through `call(job,
    payload)`: in this process by default; in a bounded child with
    `call=lambda job, payload: bounded.call(job, payload, similarity.BOUNDS)`. `progress(done,
    total)` is told after each job. SimilarityError for an unknown runtime, more than
    SUBMISSIONS_MAX submissions or a starter over SUBMISSION_MAX_BYTES. A submission over
    SUBMISSION_MAX_BYTES, or whose fingerprinting fails on its own (HostWorkError: a bound), is
    skipped and the report says why; a comparison that fails raises HostWorkError."""
    _lexer(runtime)
    _check_size("the starter code", starter)
    if len(submissions) > SUBMISSIONS_MAX:
        raise SimilarityError(
            "too_many_submissions", f"{len(submissions)} submissions; a report compares at most {SUBMISSIONS_MAX}"
        )
    codes, skipped = _screened(submissions)
    keys = list(codes)
    sizes = [len(codes[key].encode()) for key in keys]
    batches = [[keys[i] for i in run] for run in _runs(sizes, FINGERPRINT_BATCH_BYTES, len(keys))]
    blocks = [[keys[i] for i in run] for run in _runs(sizes, BLOCK_CODE_BYTES, BLOCK_SUBMISSIONS)]
    tiles = [(rows, columns) for p, rows in enumerate(blocks) for columns in blocks[p:]]
    ticks = itertools.count(1)
    prints: dict[str, dict[str, Any]] = {}
    for batch in batches:
        made, failed = _fingerprinted(batch, codes, runtime=runtime, starter=starter, call=call)
        prints.update(made)
        skipped.extend(failed)
        progress(next(ticks), len(batches) + len(tiles))
    found: list[Pair] = []
    compared = counted = 0
    lines: dict[str, list[int]] = {}
    for rows, columns in tiles:
        pairs, payload = _tile(
            [key for key in rows if key in prints], [key for key in columns if key in prints], prints
        )
        if pairs:
            answer = call(COMPARE_JOB, {**payload, "threshold": threshold})
            found.extend(_pair(pair, codes, lines) for pair in answer["pairs"])
            counted += answer["found"]
        compared += pairs
        progress(next(ticks), len(batches) + len(tiles))
    found.sort(key=lambda pair: (-pair.similarity, -min(pair.a.similarity, pair.b.similarity), pair.a.key))
    return Report(tuple(found[:PAIRS_MAX]), counted, compared, len(prints), tuple(skipped), threshold)


def _screened(submissions: Mapping[str, str]) -> tuple[dict[str, str], list[Skipped]]:
    codes: dict[str, str] = {}
    skipped: list[Skipped] = []
    for key, code in submissions.items():
        size = len(code.encode())
        if size > SUBMISSION_MAX_BYTES:
            reason = (
                f"its code is {size_words(size, exact=True)}; at most {size_words(SUBMISSION_MAX_BYTES)} is compared"
            )
            skipped.append(Skipped(key, reason))
        else:
            codes[key] = code
    return codes, skipped


def _fingerprinted(
    batch: list[str], codes: Mapping[str, str], *, runtime: str, starter: str, call: Call
) -> tuple[dict[str, dict[str, Any]], list[Skipped]]:
    """The batch's fingerprints by key. When its child fails (a bound), each submission is tried
    alone and one that fails alone is skipped: a submission that stalls the lexer stops no report."""
    payload = {
        "runtime": runtime,
        "starter": starter,
        "submissions": [{"key": key, "code": codes[key]} for key in batch],
    }
    try:
        answer = call(FINGERPRINT_JOB, payload)
    except bounded.HostWorkError as exc:
        if len(batch) == 1:
            return {}, [Skipped(batch[0], f"its code could not be fingerprinted ({exc.message})")]
        made: dict[str, dict[str, Any]] = {}
        skipped: list[Skipped] = []
        for key in batch:
            one, failed = _fingerprinted([key], codes, runtime=runtime, starter=starter, call=call)
            made.update(one)
            skipped.extend(failed)
        return made, skipped
    return {entry["key"]: entry for entry in answer["fingerprints"]}, []


def _tile(rows: list[str], columns: list[str], prints: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """A compare_job's pairs (each once: the blocks are in order, and a block against itself gives
    each pair one way) and its payload but the threshold."""
    members = list(dict.fromkeys(rows + columns))
    at = {key: n for n, key in enumerate(members)}
    pairs = [[at[a], at[b]] for a in rows for b in columns if at[a] < at[b]]
    return len(pairs), {"fingerprints": [prints[key] for key in members], "pairs": pairs}


def _runs(sizes: Sequence[int], max_bytes: int, max_count: int) -> list[list[int]]:
    """Consecutive indices grouped, each group at most max_bytes (or one item) and max_count."""
    runs: list[list[int]] = []
    held = max_bytes + 1
    for index, size in enumerate(sizes):
        if held + size > max_bytes or len(runs[-1]) >= max_count:
            runs.append([])
            held = 0
        runs[-1].append(index)
        held += size
    return runs


def _pair(answer: dict[str, Any], codes: Mapping[str, str], lines: dict[str, list[int]]) -> Pair:
    return Pair(*(_side(answer[name], codes, lines) for name in ("a", "b")))


def _side(answer: dict[str, Any], codes: Mapping[str, str], lines: dict[str, list[int]]) -> Side:
    key = answer["key"]
    if key not in lines:  # where each line starts, once a submission
        lines[key] = [0, *(end.end() for end in _LINE_END.finditer(codes[key]))]
    starts = lines[key]
    regions = tuple(
        Region(start, end, bisect.bisect_right(starts, start), bisect.bisect_right(starts, max(start, end - 1)))
        for start, end in answer["regions"]
    )
    return Side(key, answer["similarity"], answer["matched_tokens"], regions)


# --- the jobs: JSON in, JSON out, in a bounded child -----------------------------------------


def job(
    *,
    runtime: str,
    starter: str,
    submissions: list[dict[str, str]],
    pairs: list[list[int]] | None = None,
    threshold: float = THRESHOLD,
) -> dict[str, Any]:
    """Both stages in one: compare_job's answer for `pairs` (indices into
    `submissions`; all of them when None). SimilarityError for more than SUBMISSIONS_MAX
    submissions or any over SUBMISSION_MAX_BYTES."""
    if len(submissions) > SUBMISSIONS_MAX:
        raise SimilarityError("too_many_submissions", f"at most {SUBMISSIONS_MAX} submissions")
    prints = fingerprint_job(runtime=runtime, starter=starter, submissions=submissions)["fingerprints"]
    if pairs is None:
        pairs = [[i, j] for i, j in itertools.combinations(range(len(submissions)), 2)]
    return compare_job(fingerprints=prints, pairs=pairs, threshold=threshold)


def fingerprint_job(*, runtime: str, starter: str, submissions: list[dict[str, str]]) -> dict[str, Any]:
    """{"fingerprints": [{"key", "tokens", "coverage", "prints"}]}, one a submission, in order:
    its filtered code's length, the tokens its fingerprints cover (the starter's removed), and the
    fingerprints themselves (base64, compare_job's to read)."""
    lexer = _lexer(runtime)
    _check_size("the starter code", starter)
    boilerplate = np.unique(_kgram_hashes(_filtered(lexer, starter)[0]))
    answer = []
    for submission in submissions:
        _check_size(f"submission {submission['key']!r}", submission["code"])
        answer.append(_fingerprint(lexer, submission["key"], submission["code"], boilerplate))
    return {"fingerprints": answer}


def compare_job(*, fingerprints: list[dict[str, Any]], pairs: list[list[int]], threshold: float) -> dict[str, Any]:
    """{"pairs": [{"a": {"key", "similarity", "matched_tokens", "regions": [[start, end], ...]},
    "b": {...}}], "found"}: of the `pairs` (indices into `fingerprints`), the `found` at or over
    `threshold` on either side, the PAIRS_MAX most similar of them given (a report keeps no more,
    and the answer's size stays bounded). A side's regions are spans of its original code, in
    order, at most REGIONS_MAX."""
    prints = [_Prints.of(entry) for entry in fingerprints]
    found = []
    for i, j in pairs:
        if not (0 <= i < len(prints) and 0 <= j < len(prints) and i != j):
            raise SimilarityError("bad_input", f"no pair [{i}, {j}] among {len(prints)} submissions")
        pair = _compared(prints[i], prints[j], threshold)
        if pair is not None:
            found.append(pair)
    found.sort(key=lambda pair: -max(pair["a"]["similarity"], pair["b"]["similarity"]))
    return {"pairs": found[:PAIRS_MAX], "found": len(found)}


@dataclass(frozen=True)
class _Prints:
    key: str
    coverage: int
    rows: np.ndarray[Any, Any]  # _PRINT, in the order of their k-grams
    hashes: np.ndarray[Any, Any]  # the distinct hashes, sorted

    @classmethod
    def of(cls, entry: dict[str, Any]) -> _Prints:
        rows = np.frombuffer(base64.b64decode(entry["prints"]), dtype=_PRINT)
        return cls(entry["key"], entry["coverage"], rows, np.unique(rows["hash"]))


def _compared(a: _Prints, b: _Prints, threshold: float) -> dict[str, Any] | None:
    shared = np.intersect1d(a.hashes, b.hashes, assume_unique=True)
    if not shared.size:
        return None
    sides = [_matched(side, shared) for side in (a, b)]
    if max(side["similarity"] for side in sides) < threshold:
        return None
    return {"a": sides[0], "b": sides[1]}


def _matched(side: _Prints, shared: np.ndarray[Any, Any]) -> dict[str, Any]:
    """copydetect's compare_files for one side: the shared fingerprints' k-grams merged into runs
    (get_copied_slices), their length over the side's coverage; each run's span in the original."""
    rows = side.rows[np.isin(side.rows["hash"], shared)]
    runs = _copydetect().get_copied_slices(rows["at"], NOISE_T).astype(np.int64)
    tokens = int(np.sum(runs[1] - runs[0]))
    # A run starts at a fingerprint's k-gram and ends with another's: their spans bound it.
    first = np.searchsorted(rows["at"], runs[0])
    last = np.searchsorted(rows["at"], runs[1] - NOISE_T)
    regions = [[int(start), int(end)] for start, end in zip(rows["start"][first], rows["end"][last], strict=True)]
    if len(regions) > REGIONS_MAX:
        regions = sorted(sorted(regions, key=lambda r: r[0] - r[1])[:REGIONS_MAX])
    similarity = round(tokens / side.coverage, 4) if side.coverage else 0.0
    return {"key": side.key, "similarity": similarity, "matched_tokens": tokens, "regions": regions}


def _fingerprint(lexer: Lexer, key: str, code: str, boilerplate: np.ndarray[Any, Any]) -> dict[str, Any]:
    text, starts, ends = _filtered(lexer, code)
    every = _kgram_hashes(text)
    hashes, at = _copydetect().winnow(every, WINDOW, remove_duplicates=False)
    kept = ~_in_starter(every, boilerplate)[at]
    hashes, at = hashes[kept], at[kept]
    rows = np.empty(len(at), dtype=_PRINT)
    rows["hash"], rows["at"] = hashes, at
    rows["start"], rows["end"] = np.asarray(starts)[at], np.asarray(ends)[at + NOISE_T - 1]
    coverage = int(_copydetect().get_token_coverage({0: at}, NOISE_T, len(text)))
    return {"key": key, "tokens": len(text), "coverage": coverage, "prints": base64.b64encode(rows.tobytes()).decode()}


def _in_starter(hashes: np.ndarray[Any, Any], boilerplate: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Which k-grams begin inside code the starter has too. copydetect drops only the k-grams the
    starter has; those that begin in it and end in the student's code would pair every two
    submissions that add the same first token after it (an import, a def)."""
    inside = np.zeros(len(hashes), dtype=bool)
    found = np.flatnonzero(np.isin(hashes, boilerplate))
    for offset in range(NOISE_T):
        inside[found[found + offset < len(hashes)] + offset] = True
    return inside


def _filtered(lexer: Lexer, code: str) -> tuple[str, list[int], list[int]]:
    """copydetect's filter_code, with where each kept character came from: the code's tokens with
    names as V (F a function's, O a class's), strings as S (a lone quote as "), preprocessor lines
    as P, and spaces and comments gone; with, for each character of that, the [start, end) of the
    code it stands for. Tokens from the unprocessed lexer, so positions are the code's own."""
    parts: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for index, kind, value in lexer.get_tokens_unprocessed(code):
        treatment = _treatment(kind)
        if treatment is None or not value:
            continue
        if treatment == "keep":
            parts.append(value)
            starts.extend(range(index, index + len(value)))
            ends.extend(range(index + 1, index + len(value) + 1))
            continue
        if treatment == "string":
            treatment = '"' if value in ("'", '"') else "S"
        parts.append(treatment)
        starts.append(index)
        ends.append(index + len(value))
    return "".join(parts), starts, ends


@functools.cache
def _treatment(kind: Any) -> str | None:
    """What copydetect's filter_code makes of a token of this kind, in its order of tests: the
    letter that stands for it, "string", "keep" (as written), or None (dropped). Cached: the test
    of a kind's ancestry is slow, and a lexer has few kinds."""
    if kind in _NAMES:
        return "V"
    if kind in token.Name.Function:
        return "F"
    if kind in token.Name.Class:
        return "O"
    if kind in (token.Comment.Preproc, token.Comment.Hashbang):
        return "P"
    if kind in token.Text or kind in token.Comment:
        return None
    return "string" if kind in token.Literal.String else "keep"


def _kgram_hashes(text: str) -> np.ndarray[Any, Any]:
    """Each k-gram's hash, the same in every process (copydetect's hashed_kgrams uses hash())."""
    grams = (text[i : i + NOISE_T].encode() for i in range(len(text) - NOISE_T + 1))
    return np.frombuffer(b"".join(hashlib.blake2b(gram, digest_size=8).digest() for gram in grams), dtype="<i8")


def _lexer(runtime: str) -> Lexer:
    if runtime not in LEXERS:
        raise SimilarityError("unknown_runtime", f"runtime must be one of {', '.join(LEXERS)}")
    return lexers.get_lexer_by_name(LEXERS[runtime])


def _check_size(what: str, code: str) -> None:
    size = len(code.encode())
    if size > SUBMISSION_MAX_BYTES:
        raise SimilarityError(
            "too_large", f"{what} is {size_words(size, exact=True)}; at most {size_words(SUBMISSION_MAX_BYTES)}"
        )


@functools.cache
def _copydetect() -> ModuleType:
    """copydetect.utils without the package's __init__, which imports its HTML report's makers
    (matplotlib, jinja2, tqdm: half a second and 50 MiB more in every child, and matplotlib's font
    cache, rebuilt each time where the worker's home is not writable). The package is entered
    for this one import and left as it was found, so an `import copydetect` later is whole."""
    if "copydetect" in sys.modules:
        return importlib.import_module("copydetect.utils")
    spec = importlib.util.find_spec("copydetect")
    if spec is None:
        raise ModuleNotFoundError("copydetect")
    sys.modules["copydetect"] = importlib.util.module_from_spec(spec)  # its __init__ not run
    try:
        return importlib.import_module("copydetect.utils")
    finally:
        for name in ("copydetect", "copydetect.utils", "copydetect.pywinnow", "copydetect.winnow"):
            sys.modules.pop(name, None)
