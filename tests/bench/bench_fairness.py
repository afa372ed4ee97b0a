"""No user can stall the others, measured: a bystander's hello-world runs (submit -> finished over the
API, one at a time) alone, then while another course's 100 catastrophic-pattern tests are graded, a
notebook of 200 pathological markdown cells is saved again and again and notebook cells that write
their own display list of nested HTML run two at once, in the same run of the same stack (web, a
Celery worker at its default concurrency, the namespace engine).

The load: two submissions to an assignment of 50 tests whose expectation is `(a+)+$` (Python's re
backtracked exponentially on the output, 5,000 a's and a "!"); 200 markdown cells of 5,000 "[" or
2,500 "![" (1 MB a save, the notebook's cap; each save with new sources, so all of them are
rendered), and the assignment's instructions of 64 KiB of "![" read by its students.

The saves and reads are sent by a client process of their own: in the bystander's process their
threads (1 MB of JSON built and sent a save) held the GIL the bystander's own client needed, and
the bench measured itself; another user's browser is not in the bystander's process."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tests.bench import Row, p50, percentile, targeted
from tests.bench.bench_classroom import Classroom, api_call
from tests.bench.bench_web import Stack

ALONE = 30  # the bystander's runs before each round's load
ROUNDS = 2
TESTS = 50  # an assignment's most
SUBMISSIONS = 2
CELLS = 200
OUTPUT = "print('a' * 5000 + '!')"
# A cell that writes its own display list (the cell program's is never written: the cell exits
# first): 100 displays of HTML nested 6,000 deep, 6.6 MB (the manifest's cap is 8 MiB), about 6 s of
# the host's sanitising without a budget.
DISPLAYS = """import json, os
html = "<div>" * 6000 + "x" + "</div>" * 6000
displays = [{"data": {"text/html": html, "text/plain": "p"}}] * 100
with open("/output/.cordon/cell.json", "w") as manifest:
    json.dump({"displays": displays}, manifest)
os._exit(0)
"""
DRAIN_TIMEOUT_S = 300.0
CONTEXT = multiprocessing.get_context("spawn")  # a fresh interpreter: no thread or socket of this one


def _cells(save: int) -> list[dict[str, Any]]:
    # New sources each save: every cell is rendered again, none reused from the stored ones; the
    # notebook's markdown at its cap (NOTEBOOK_MARKDOWN_MAX_BYTES, 1 MiB: the tester's 3.8 MB of
    # 19,000 "[" a cell is refused before anything is rendered).
    return [
        {"id": f"m{i}", "kind": "markdown", "runtime": "python", "inputs": [], "limits": {},
         "source": ("[" * 5_000 if i % 2 else "![" * 2_500) + f" {save}"}
        for i in range(CELLS)
    ]  # fmt: skip


@dataclass(frozen=True)
class Hello:
    """One bystander run: submit -> finished as the client saw it, and its parts as the database has
    them: the wait until a worker claimed it, and the worker's time from the claim to its end."""

    total_s: float
    wait_s: float
    worker_s: float
    supervised_s: float  # the supervisor's own total: admission, sandbox, teardown (no database)


def hello(stack: Stack) -> Hello:
    started = time.monotonic()
    run = stack.call("POST", "/api/runs", {"runtime": "python", "code": "print('hello')"})
    final = stack.wait_finished(run["id"])
    total = time.monotonic() - started
    if final["outcome"] != "succeeded":
        raise RuntimeError(f"bench run ended {final['outcome']}: {final['reason']}")
    created, claimed, ended = (datetime.fromisoformat(final[k]) for k in ("created_at", "started_at", "finished_at"))
    supervised = float(final["timings"]["total_s"] or 0.0)
    return Hello(total, (claimed - created).total_seconds(), (ended - claimed).total_seconds(), supervised)


def _client(port: int, teacher: str, student: str, notebook: dict[str, Any], assignment: str, cells: dict[str, Any],
            stop: Any, results: Any) -> None:  # fmt: skip
    """The other course's client (a process of its own): the saves and the reads, each in a
    thread, until `stop`; their timings and errors put on `results`. At nice 19: this client is
    the bench's, standing in for a browser on another machine; what it costs this host (1 MB of
    JSON built and parsed a save) is not Cordon's work and should not be measured as if it were."""
    os.nice(19)
    saves_s: list[float] = []
    reads_s: list[float] = []
    errors: list[str] = []

    def saves() -> None:
        version, save = notebook["version"], 0
        while not stop.is_set() and save < 12:
            save += 1
            started = time.monotonic()
            try:
                saved = api_call(port, teacher, "PUT", f"/api/notebooks/{notebook['id']}",
                              {"name": "hostile", "version": version, "cells": _cells(save)})  # fmt: skip
            except (OSError, RuntimeError) as exc:
                errors.append(f"save: {exc}"[:300])
                return
            saves_s.append(time.monotonic() - started)
            version = saved["version"]

    def reads() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                api_call(port, student, "GET", f"/api/assignments/{assignment}")
            except (OSError, RuntimeError) as exc:
                errors.append(f"read: {exc}"[:300])
                return
            reads_s.append(time.monotonic() - started)
            time.sleep(0.2)

    cells_s: list[float] = []

    def hostile_cells() -> None:
        """Two at once: a notebook cell that writes its own display list of nested HTML."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                run = api_call(port, teacher, "POST", f"/api/notebooks/{cells['id']}/cells/displays/run")
                while api_call(port, teacher, "GET", f"/api/runs/{run['id']}")["state"] != "finished":
                    time.sleep(0.2)
            except (OSError, RuntimeError) as exc:
                errors.append(f"cell: {exc}"[:300])
                return
            cells_s.append(time.monotonic() - started)

    threads = [threading.Thread(target=saves), threading.Thread(target=reads)]
    threads += [threading.Thread(target=hostile_cells) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put((saves_s, reads_s, cells_s, errors))


class Load:
    """The other course's grading (its submissions) and the markdown saves and reads (a client
    process of their own)."""

    def __init__(self, stack: Stack, room: Classroom) -> None:
        self.stack, self.room = stack, room
        self.saves_s: list[float] = []
        self.reads_s: list[float] = []
        self.errors: list[str] = []
        self.stop = CONTEXT.Event()
        self.results = CONTEXT.Queue()
        self.teacher, self.student = room.tokens["student000"], room.tokens["student001"]
        course = room.api(self.teacher, "POST", "/api/courses", {"title": "Patterns"})
        room.api(self.student, "POST", "/api/courses/join", {"join_code": course["join_code"]})
        tests = [{"name": f"t{i}", "expected_stdout": "(a+)+$", "match": "regex"} for i in range(TESTS)]
        self.assignment = room.api(self.teacher, "POST", f"/api/courses/{course['id']}/assignments", {
            "title": "catastrophic", "runtime": "python", "tests": tests, "instructions": "![" * 32_000,
            "publish": True,
        })["id"]  # fmt: skip
        self.notebook = room.api(self.teacher, "POST", "/api/notebooks", {"name": "hostile"})
        cell = {"id": "displays", "kind": "code", "runtime": "python", "inputs": [], "limits": {}, "source": DISPLAYS}
        self.cells = room.api(self.teacher, "POST", "/api/notebooks", {"name": "displays", "cells": [cell]})
        self.cells_s: list[float] = []

    def start(self) -> None:
        path = f"/api/assignments/{self.assignment}/submissions"
        self.submissions = [
            self.room.api(self.student, "POST", path, {"code": OUTPUT})["id"] for _ in range(SUBMISSIONS)
        ]
        self.started = time.monotonic()
        args = (self.stack.port, self.teacher, self.student, self.notebook, self.assignment, self.cells, self.stop,
                self.results)  # fmt: skip
        self.process = CONTEXT.Process(target=_client, args=args)
        self.process.start()

    def graded(self) -> list[dict[str, Any]]:
        return [self.room.api(self.student, "GET", f"/api/submissions/{s}") for s in self.submissions]

    def drained(self) -> bool:
        return all(s["state"] in ("graded", "not_graded") for s in self.graded())

    def finish(self) -> None:
        self.stop.set()
        self.saves_s, self.reads_s, self.cells_s, errors = self.results.get(timeout=120)
        self.errors.extend(errors)
        self.process.join(timeout=30)


def run() -> list[Row]:
    stack = Stack()  # as `make run`: a worker for people's runs, one for grading
    alone_runs: list[Hello] = []
    loaded_runs: list[Hello] = []
    rounds: list[tuple[float, Load, list[dict[str, Any]]]] = []
    try:
        stack.one_run()  # warm-up: image verification, imports
        room = Classroom(stack, 2)
        # Rounds of (alone, then under the load), so that a p95 has enough runs behind it and the
        # host's own drift falls on both sides alike.
        for _ in range(ROUNDS):
            load = Load(stack, room)
            alone_runs += [hello(stack) for _ in range(ALONE)]
            load.start()
            while not load.drained() and time.monotonic() - load.started < DRAIN_TIMEOUT_S:
                loaded_runs.append(hello(stack))
            drain_s = time.monotonic() - load.started
            load.finish()
            rounds.append((drain_s, load, [t for s in load.graded() for t in s["tests"]]))
    finally:
        stack.close()
    alone, loaded = [h.total_s for h in alone_runs], [h.total_s for h in loaded_runs]
    alone_p95, loaded_p95 = percentile(alone, 0.95), percentile(loaded, 0.95) if loaded else None
    ratio = loaded_p95 / alone_p95 if loaded_p95 is not None else float("inf")
    saves = [s for _, load, _ in rounds for s in load.saves_s]
    reads = [r for _, load, _ in rounds for r in load.reads_s]
    cells = [c for _, load, _ in rounds for c in load.cells_s]
    return [
        Row("fairness", f"bystander hello run, submit -> finished, p50 alone ({len(alone)} runs)", p50(alone) * 1000,
            "ms"),
        Row("fairness", f"bystander hello run p95 alone ({len(alone)} runs)", alone_p95 * 1000, "ms"),
        Row("fairness", f"bystander hello run p95 under the load ({len(loaded)} runs)",
            None if loaded_p95 is None else loaded_p95 * 1000, "ms"),
        targeted("fairness", "bystander p95 under the load / alone", ratio, "x", at_most=2),
        *_parts("alone", alone_runs),
        *_parts("under the load", loaded_runs),
        Row("fairness", f"load ({ROUNDS} rounds): {SUBMISSIONS * TESTS} catastrophic-pattern tests, submit -> all "
            "graded, slowest round", max(drain for drain, _, _ in rounds), "s"),
        targeted("fairness", "load: tests graded failed (the output does not match), not stuck",
                 sum(t["status"] == "failed" for _, _, tests in rounds for t in tests), "tests",
                 at_least=ROUNDS * SUBMISSIONS * TESTS),
        Row("fairness", f"load: notebook saves of {CELLS} hostile markdown cells (1 MB), done", len(saves), "saves"),
        Row("fairness", "load: such a save, p50", p50(saves) * 1000 if saves else None, "ms"),
        Row("fairness", "load: such a save, slowest", max(saves) * 1000 if saves else None, "ms"),
        Row("fairness", "load: a student's read of the 64 KiB hostile instructions, p95",
            percentile(reads, 0.95) * 1000 if reads else None, "ms"),
        Row("fairness", "load: cells writing their own display list of nested HTML (6.6 MB), two at once, done",
            len(cells), "cells"),
        Row("fairness", "load: such a cell, submit -> finished, p50", p50(cells) * 1000 if cells else None, "ms"),
        targeted("fairness", "load: requests that failed", sum(len(load.errors) for _, load, _ in rounds), "requests",
                 at_most=0),
    ]  # fmt: skip


def _parts(when: str, runs: list[Hello]) -> list[Row]:
    if not runs:
        return []
    return [
        Row("fairness", f"bystander {when}: wait for a worker (created -> claimed) p95",
            percentile([h.wait_s for h in runs], 0.95) * 1000, "ms"),
        Row("fairness", f"bystander {when}: in the worker (claimed -> finished) p95",
            percentile([h.worker_s for h in runs], 0.95) * 1000, "ms"),
        Row("fairness", f"bystander {when}: of which supervised (admission -> teardown) p95",
            percentile([h.supervised_s for h in runs], 0.95) * 1000, "ms"),
    ]  # fmt: skip


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row.as_dict()))
