"""What a run is asked to do (RunSpec, Limits) and what became of it (Outcome, RunResult).

Policy is data: limits carry their units in their names and are checked against operator
maxima before anything runs. Unknown figures are None, never 0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from runner.env import env_float, env_int
from runner.units import size_words

MIB = 1024 * 1024

# --- names of the sandbox's file contract, which the host's file code and the web both read ----

# \A and \Z, not ^ and $: `$` also matches before a final newline, so "x.csv\n" would pass.
# Anchored at both ends, `match` and `fullmatch` agree, whichever a caller uses.
SAFE_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._+-]{0,127}\Z")
# Folders export enters below /output; a deeper one is refused (output_limit), not walked. Ample
# for real trees, and it keeps the walk's open fds (one per level) and an exported name (at most
# 17 parts of 128 characters, some 2.2 KiB) well within PATH_MAX where the host copies it.
OUTPUT_MAX_DEPTH = 16
# A notebook cell's session files: a folder of the output area, which export keeps apart from the
# user's files (runner.cells), and which the web stores as the cell's record.
SESSION_DIR = ".cordon"
STATE_FILE = "state"  # the snapshot, within SESSION_DIR
MANIFEST_FILE = "cell.json"  # displays, the names kept and not kept, the error, within SESSION_DIR
RESTORING_FILE = "restoring"  # present while the state is restored: a memory_limit then says why


class Outcome(StrEnum):
    """The closed set of ways a run ends (DESIGN.md). Order of precedence: see runner.classify."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CPU_LIMIT = "cpu_limit"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    EGRESS_LIMIT = "egress_limit"
    DISK_LIMIT = "disk_limit"
    PROCESS_LIMIT = "process_limit"
    REJECTED_INPUT = "rejected_input"
    REJECTED_CAPACITY = "rejected_capacity"
    SANDBOX_ERROR = "sandbox_error"
    CANCELLED = "cancelled"

    @property
    def charged(self) -> bool:
        """Whether the run counts against the user: their code ran and this is its result."""
        return self not in _NOT_CHARGED

    @property
    def exit_status(self) -> int:
        """The CLI's exit status: 0 succeeded, 1 another user-charged outcome, 2 otherwise."""
        if self is Outcome.SUCCEEDED:
            return 0
        return 1 if self.charged else 2

    @property
    def words(self) -> str:
        """The outcome as a person reads it (a badge's text); the value stays the API's."""
        return OUTCOME_WORDS[self]


OUTCOME_WORDS = {
    Outcome.SUCCEEDED: "succeeded",
    Outcome.FAILED: "failed",
    Outcome.TIMED_OUT: "timed out",
    Outcome.CPU_LIMIT: "out of CPU time",
    Outcome.MEMORY_LIMIT: "out of memory",
    Outcome.OUTPUT_LIMIT: "too much output",
    Outcome.EGRESS_LIMIT: "network cap reached",
    Outcome.DISK_LIMIT: "disk full",
    Outcome.PROCESS_LIMIT: "too many processes",
    Outcome.REJECTED_INPUT: "input refused",
    Outcome.REJECTED_CAPACITY: "no room to run it",
    Outcome.SANDBOX_ERROR: "sandbox error (not your code)",
    Outcome.CANCELLED: "cancelled",
}
_NOT_CHARGED = frozenset({Outcome.REJECTED_INPUT, Outcome.REJECTED_CAPACITY, Outcome.SANDBOX_ERROR, Outcome.CANCELLED})


class Phase(StrEnum):
    """The supervisor's phases of a run, in order, each announced once as it begins."""

    ADMITTED = "admitted"  # admission reserved the run's share of the host
    STARTING = "starting"  # inputs staged; the sandbox is being prepared and started
    RUNNING = "running"  # the program runs (for a VM: announced again with boot_s once booted)
    EXPORTING = "exporting"  # the sandbox is stopped; outputs are being checked and copied out


class RunnerError(Exception):
    """A failure with a stable code. `outcome` says how the run is recorded."""

    def __init__(self, code: str, message: str, *, outcome: Outcome = Outcome.SANDBOX_ERROR, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.outcome = outcome
        self.retryable = retryable

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}


def _limit(default: float, unit: str, doc: str) -> Any:
    """A limit's default, the unit its name ends in, and what it bounds (shown in the API's schema)."""
    return field(default=default, metadata={"unit": unit, "doc": doc})


@dataclass(frozen=True)
class Limits:
    """A run's limits: the one shape of them from the API, the notebook and the database to the
    supervisor and the smolvm child. Every field is > 0 and at most the operator's maximum."""

    wall_timeout_s: float = _limit(10.0, "s", "wall-clock deadline on the host's clock, from the program's start")
    cpu_time_s: float = _limit(10.0, "s", "CPU time of all the run's processes together")
    memory_mib: int = _limit(
        256, "MiB", "memory of the program and its children; where /tmp and /output are held in memory, their files too"
    )
    cpus: float = _limit(1.0, "CPUs", "CPU bandwidth (0.5 = half of one CPU)")
    max_processes: int = _limit(64, "processes", "processes and threads alive at once")
    stdout_max_bytes: int = _limit(1 * MIB, "bytes", "stdout kept; the run is stopped when it passes this")
    stderr_max_bytes: int = _limit(1 * MIB, "bytes", "stderr kept; the run is stopped when it passes this")
    output_max_files: int = _limit(16, "files", "files exported from /output")
    output_max_bytes: int = _limit(16 * MIB, "bytes", "bytes of all files exported from /output together")
    disk_mib: int = _limit(
        64, "MiB", "writable space in /tmp; where /tmp is held in memory, its files also count within memory_mib"
    )
    input_max_files: int = _limit(16, "files", "input files staged into /input")
    input_max_bytes: int = _limit(64 * MIB, "bytes", "bytes of all input files together")
    # Counted only for a run with an egress policy (RunSpec.egress); without one there is no network.
    egress_max_bytes_out: int = _limit(
        8 * MIB, "bytes", "bytes the run may send through its egress proxy; the run is stopped when it passes this"
    )
    egress_max_bytes_in: int = _limit(
        64 * MIB, "bytes", "bytes the run may receive through its egress proxy; the run is stopped when it passes this"
    )
    egress_max_connections: int = _limit(
        32, "connections", "connections the egress proxy opens for the run; the run is stopped at the next one"
    )
    # Counted only for a notebook cell's run (RunSpec.cell): the snapshot of its names it leaves.
    state_max_bytes: int = _limit(
        256 * MIB, "bytes", "a notebook cell's state (the snapshot of its names) kept for the next cell; "
        "the run ends output_limit when it passes this",
    )  # fmt: skip

    def over(self, maxima: Limits) -> list[tuple[str, str]]:
        """(field, message) for every limit that is out of range or over the operator's maximum."""
        problems = []
        for f in fields(self):
            value, maximum = getattr(self, f.name), getattr(maxima, f.name)
            if not value > 0:
                problems.append((f.name, f"{f.name} must be greater than 0; got {value}"))
            elif value > maximum:
                problems.append((f.name, f"{f.name} is {value}; the maximum on this service is {maximum}"))
        return problems

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Limits:
        """Limits from their stored form (to_json's). A field missing from an older record takes
        today's default; a name that is no limit is refused, never dropped silently."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown limits {unknown}; known: {sorted(names)}")
        return cls(**{name: data[name] for name in names if name in data})


# The operator's ceiling for every limit; each can be lowered or raised by CORDON_MAX_<FIELD>.
DEFAULT_MAXIMA = Limits(
    wall_timeout_s=300.0,
    cpu_time_s=300.0,
    memory_mib=4096,
    cpus=4.0,
    max_processes=512,
    stdout_max_bytes=16 * MIB,
    stderr_max_bytes=16 * MIB,
    output_max_files=256,
    output_max_bytes=256 * MIB,
    disk_mib=1024,
    input_max_files=64,
    input_max_bytes=512 * MIB,
    egress_max_bytes_out=256 * MIB,
    egress_max_bytes_in=1024 * MIB,
    egress_max_connections=1024,
    state_max_bytes=1024 * MIB,
)


def maxima_from_env(environ: Mapping[str, str] | None = None) -> Limits:
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in fields(Limits):
        default = getattr(DEFAULT_MAXIMA, f.name)
        name = f"CORDON_MAX_{f.name.upper()}"
        if isinstance(default, float):
            values[f.name] = env_float(name, default, minimum=0.001, environ=env)
        else:
            values[f.name] = env_int(name, default, minimum=1, environ=env)
    return replace(DEFAULT_MAXIMA, **values)


RUNTIMES = ("python", "node")
# What a run may hand its program besides the script: its stdin (carried as UTF-8 text into a
# microVM, so it must be that) and its command-line arguments.
STDIN_MAX_BYTES = 1 * MIB
ARGS_MAX_ITEMS = 64
ARG_MAX_BYTES = 4096


DEFAULT_CPU_WEIGHT = 100  # cgroup v2's default
PACKAGES_ELSEWHERE_MAX_CHARS = 8192
BACKGROUND_CPU_WEIGHT = 10


@dataclass(frozen=True)
class RunSpec:
    runtime: str
    script: bytes
    limits: Limits = field(default_factory=Limits)
    inputs: tuple[Path, ...] = ()
    # The names inputs appear under in /input (default: each file's own name).
    input_names: tuple[str, ...] = ()
    image: str | None = None  # default: the image named like the runtime
    engine: str = "auto"
    stdin: bytes = b""  # the program's whole stdin; empty: /dev/null
    args: tuple[str, ...] = ()  # after the script: sys.argv[1:], process.argv.slice(2)
    # Destinations the run may reach through its egress proxy ("host:port", "*.suffix:port"),
    # within the operator's ceiling; empty (the default): no network at all.
    egress: tuple[str, ...] = ()
    # The run's share of a busy CPU against other runs' (cgroup v2 cpu.weight, 1 to 10000; v1
    # cpu.shares in proportion). Work nobody waits for at a screen (grading) gets less
    # (BACKGROUND_CPU_WEIGHT), so a person's run beside it keeps nearly all it needs.
    cpu_weight: int = DEFAULT_CPU_WEIGHT
    # A notebook cell (runner.cells): the image's cell program runs the script, displays its last
    # expression and leaves a snapshot of its names in /output/.cordon; `state`, a snapshot an
    # earlier cell left, is restored inside this sandbox before the script runs. Never on the host.
    cell: bool = False
    state: Path | None = None
    # For a cell's `%pip install x`: which other environments have which packages
    # ("polars=python-data;duckdb=python-data,python-sql"), said to the cell program, never run.
    packages_elsewhere: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.cpu_weight <= 10_000:
            raise ValueError(f"cpu_weight is 1 to 10000, not {self.cpu_weight}")
        if len(self.packages_elsewhere) > PACKAGES_ELSEWHERE_MAX_CHARS:
            raise ValueError(f"packages_elsewhere is at most {PACKAGES_ELSEWHERE_MAX_CHARS} characters")
        if self.state is not None and not self.cell:
            raise ValueError("only a notebook cell's run starts from a state")

    @property
    def image_name(self) -> str:
        return self.image or self.runtime

    def check_stdin_and_args(self) -> None:
        """Refuse (rejected_input) a stdin or argument list the engines cannot carry as given."""
        problem = stdin_and_args_problem(self.stdin, self.args)
        if problem is not None:
            code, message = problem
            raise RunnerError(code, message, outcome=Outcome.REJECTED_INPUT)


def stdin_and_args_problem(stdin: bytes, args: tuple[str, ...]) -> tuple[str, str] | None:
    """(code, message) for a stdin or argument list the engines cannot carry as given, else None:
    the supervisor's check, and the web's before it stores a run or a test."""
    return _stdin_problem(stdin) or _args_problem(args)


def _stdin_problem(stdin: bytes) -> tuple[str, str] | None:
    if not isinstance(stdin, bytes):
        return "stdin_invalid", f"stdin must be bytes; got {type(stdin).__name__}"
    if len(stdin) > STDIN_MAX_BYTES:
        return (
            "stdin_too_large",
            f"stdin is {size_words(len(stdin), exact=True)}; the maximum is {size_words(STDIN_MAX_BYTES)}",
        )
    try:
        stdin.decode("utf-8")
    except UnicodeDecodeError as exc:
        return "stdin_not_utf8", f"stdin must be valid UTF-8 text; byte {exc.start} is not"
    return None


def _args_problem(args: tuple[str, ...]) -> tuple[str, str] | None:
    if len(args) > ARGS_MAX_ITEMS:
        return "args_invalid", f"{len(args)} arguments; the maximum is {ARGS_MAX_ITEMS}"
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            return "args_invalid", f"argument {index} must be text; got {type(arg).__name__}"
        if "\x00" in arg:
            return "args_invalid", f"argument {index} contains a NUL character"
        try:
            size = len(arg.encode("utf-8"))
        except UnicodeEncodeError:
            return "args_invalid", f"argument {index} is not valid UTF-8 text"
        if size > ARG_MAX_BYTES:
            return (
                "args_invalid",
                f"argument {index} is {size_words(size, exact=True)}; the maximum is {size_words(ARG_MAX_BYTES)}",
            )
    return None


@dataclass(frozen=True)
class OutputFile:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class RejectedOutput:
    name: str
    reason: str


@dataclass(frozen=True)
class CleanupCheck:
    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class ImageInfo:
    name: str
    digest: str


# Attempts a run's record keeps; the totals count every one. A program looping on refused requests
# would otherwise grow the supervisor's memory and the record as it liked.
ATTEMPTS_KEPT = 1000


@dataclass
class RunResult:
    outcome: Outcome
    run_id: str
    exit_code: int | None = None
    signal: int | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    # The program's own memory at its peak, comparable to limits.memory_mib (None where the host
    # cannot tell it from the sandbox's, as in a VM); the bytes its files in /tmp and /output held
    # at their peak (in a namespace sandbox these are memory too, within the same limit).
    peak_memory_bytes: int | None = None
    peak_file_bytes: int | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    outputs: list[OutputFile] = field(default_factory=list)
    # A notebook cell's session files, named within runner.cells.SESSION_DIR: its state, its
    # manifest (cell.json), the images it displayed. Exported beside the outputs, under .cordon/.
    session: list[OutputFile] = field(default_factory=list)
    rejected_outputs: list[RejectedOutput] = field(default_factory=list)
    engine: str | None = None
    engine_version: str | None = None
    isolation: str | None = None
    image: ImageInfo | None = None
    cleanup: list[CleanupCheck] = field(default_factory=list)
    error: RunnerError | None = None
    # Why the outcome was chosen, in plain words, e.g. "wall-clock deadline of 2 s fired".
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    sandbox_id: str | None = None
    limits: Limits | None = None
    engine_note: str = ""  # why this engine ran the job (auto's choice and its reason)
    # How a microVM came to be: "cold" (booted from the image for this run) or "branch" (a fresh
    # copy-on-write branch of a frozen base); None for engines without a VM.
    vm_start: str | None = None
    # How the run's sandbox came to be: "ready" (made before the run was known, handed to it:
    # runner.ready) or "cold" (made for it); None if no sandbox was made.
    sandbox_start: str | None = None
    # A run with an egress policy: the policy, every attempt through its proxy, the totals and
    # the cap it passed (runner.egress.proxy.EgressProxy.summary); None for a run without network.
    egress: dict[str, Any] | None = None

    @property
    def cleanup_ok(self) -> bool:
        return bool(self.cleanup) and all(check.ok for check in self.cleanup)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "run_id": self.run_id,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_file_bytes": self.peak_file_bytes,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "stdout": self.stdout.decode("utf-8", errors="replace"),
            "stderr": self.stderr.decode("utf-8", errors="replace"),
            "outputs": [asdict(o) for o in self.outputs],
            "session": [asdict(o) for o in self.session],
            "rejected_outputs": [asdict(r) for r in self.rejected_outputs],
            "engine": self.engine,
            "engine_version": self.engine_version,
            "engine_note": self.engine_note,
            "vm_start": self.vm_start,
            "sandbox_start": self.sandbox_start,
            "egress": self.egress,
            "isolation": self.isolation,
            "image": asdict(self.image) if self.image else None,
            "cleanup": {"ok": self.cleanup_ok, "checks": [asdict(c) for c in self.cleanup]},
            "error": self.error.as_dict() if self.error else None,
            "reason": self.reason,
            "evidence": self.evidence,
            "sandbox_id": self.sandbox_id,
            "limits": self.limits.to_json() if self.limits else None,
            # start_s, boot_s (until the program ran), staging_s and handover_s (a ready sandbox's), total_s
            "timings": dict(self.timings),
        }
