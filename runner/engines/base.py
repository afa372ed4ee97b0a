"""The one engine interface. Every isolation mechanism implements this ordered sequence:

    prepare -> start -> (the supervisor streams and samples) -> stop -> collect -> teardown

The supervisor owns the clock, the caps and the decisions; an engine only does what it is
told and reports what the host can see. `teardown` must be idempotent and say, check by
check, what it removed and what survived. Before any of it, admission reserves the engine's
`reservation`: what the run's cgroups will allow, from the same figures `prepare` writes.
"""

from __future__ import annotations

import math
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar, Protocol

from runner.cells import cell_env
from runner.images import ImageRef, ImageStore
from runner.spec import MIB, CleanupCheck, Limits, RunnerError, RunResult, RunSpec

# The program's whole environment, the same in every engine: nothing of the host's.
GUEST_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    # The inputs are on the module path: `require('helper')` finds /input/helper.js, after Node's
    # own modules and any node_modules. (The python image appends /input to sys.path itself, after
    # the standard library and the installed packages; PYTHONPATH would put it before them.)
    "NODE_PATH": "/input",
}


def guest_env(limits: Limits) -> dict[str, str]:
    """GUEST_ENV for one run. OpenMP (scikit-learn's parallel loops) starts a thread for every CPU
    it can see, and a namespace sandbox sees all of the host's: on a big host that is more than
    the process cap, and libgomp gives up. A run gets the threads its CPU limit can keep busy."""
    return {**GUEST_ENV, "OMP_NUM_THREADS": str(max(1, math.ceil(limits.cpus)))}


def run_env(ctx: RunContext) -> dict[str, str]:
    """A run's program environment: guest_env, for a run with egress its proxy's names, and for
    a notebook cell what its cell program needs to know."""
    spec = ctx.spec
    cell = (
        cell_env(ctx.limits, has_state=spec.state is not None, packages_elsewhere=spec.packages_elsewhere)
        if spec.cell
        else {}
    )
    return {**guest_env(ctx.limits), **(ctx.egress.env if ctx.egress is not None else {}), **cell}


@dataclass(frozen=True)
class EgressReach:
    """A run's way out, as its engine sees it: the network namespace its sandbox joins (loopback and
    the egress proxy's listener, nothing else) and the environment that points the program's
    clients at the proxy. The supervisor opens the proxy behind it (runner.egress.proxy.RunEgress)."""

    netns_fd: int
    env: dict[str, str]


# Host memory a run costs outside its cgroups (mounts, namespaces, pipes, the supervisor's
# per-run bookkeeping), reserved on top of what the cgroups allow.
HOST_OVERHEAD_MIB = 16


@dataclass(frozen=True)
class CgroupLimits:
    """The caps an engine writes into a run's cgroups."""

    memory_bytes: int
    pids_max: int
    cpus: float


@dataclass(frozen=True)
class Footprint:
    """What admission reserves for one run on this host."""

    memory_mib: int
    cpus: float


class HandOverError(RuntimeError):
    """A ready sandbox could not take its run: it is torn down, and the run starts cold."""


class RunState:
    """What an engine made for one run (cgroups, fds, VM facts), so that teardown finds it.
    Private to the engine: each one keeps its own subclass, and nothing else reads it."""


class Process(Protocol):
    """The engine's process as the supervisor and the engines use it: a subprocess.Popen, or a
    sandbox the spawner started (runner.host.spawner.Spawned)."""

    pid: int
    returncode: int | None
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


@dataclass
class RunContext:
    """Everything about one run that the supervisor and its engine share."""

    run_id: str
    spec: RunSpec
    limits: Limits
    run_dir: Path  # staging, under the data directory
    # The sandbox's view, under the host state directory, whose every parent the sandbox uid
    # can traverse wherever the data directory lives: mount points for the rootfs, the inputs,
    # scratch and outputs.
    view_dir: Path
    input_dir: Path
    scratch_dir: Path
    output_dir: Path
    slot: int
    uid: int
    image: ImageRef
    argv: list[str]
    process: Process | None = None
    state: RunState | None = None  # the engine's own, made by it on first use
    # A run with an egress policy: its way out, opened by the supervisor before the sandbox and
    # closed after it.
    egress: EgressReach | None = None
    # A ready sandbox being made (runner.ready): the sandbox's end of its hand-over socket, which
    # the launch passes to the waiting interpreter; None for a run started cold.
    ready_end: socket.socket | None = None


@dataclass(frozen=True)
class Sample:
    """The run's figures at one moment. `memory_bytes` is the program's own memory: what the run's
    memory cgroup holds less its files' pages (None where the host cannot tell them apart, as in a
    VM); `file_bytes`, what the files in its writable areas (/tmp, /output) hold."""

    cpu_s: float | None
    memory_bytes: int | None
    file_bytes: int | None
    oom_kills: int
    process_cap_hits: int


@dataclass(frozen=True)
class Collected:
    exit_code: int | None
    signal: int | None
    cpu_s: float | None
    peak_memory_bytes: int | None  # the program's own, as in Sample.memory_bytes
    peak_file_bytes: int | None
    cgroup_peak_memory_bytes: int | None  # all the run's memory cgroup held at its peak (a VM: VMM and guest)
    oom_kills: int
    process_cap_hits: int
    scratch_full: bool
    output_area_full: bool
    started: bool  # whether the program itself was started (not just the sandbox tooling)
    engine_message: str = ""
    vm_start: str | None = None  # a VM engine's: "cold" or "branch" (RunResult.vm_start)
    vm_note: str = ""  # why a VM booted cold (warm starts off, no base yet, the branch failed)
    timings: dict[str, float] = field(default_factory=dict)  # the engine's own phases (RunResult.timings)


@dataclass(frozen=True)
class Check:
    """One claim of `python -m runner doctor`, backed by a check that ran. `advisory`: a failure
    that is a fact of this host, not a fault to fix (no microVM boots here); with another engine
    usable the doctor shows it as a note beside its conclusion, not as a FAIL."""

    name: str
    ok: bool
    detail: str
    advisory: bool = False


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run here, from a quick check, and the reason in plain words: `why`
    in full (the doctor's and an operator's), `brief` in a sentence for each run's note."""

    ok: bool
    why: str
    brief: str = ""

    @property
    def said_briefly(self) -> str:
        return self.brief or self.why


@dataclass(frozen=True)
class EngineHost:
    """What the registry builds every engine from: the settings all engines share and the host's
    places. Each engine reads its own settings (CORDON_<ENGINE>_*) from `environ`."""

    cgroup_parent: str = "cordon"
    # Where the engine keeps what outlives a run (a canary's verdict, warm bases' admission);
    # None for an engine a test builds with no host state (no canary file, no warm starts).
    host_state_dir: Path | None = None
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DoctorContext:
    """What an engine's doctor checks may use: a run through the supervisor (a canary boot), an
    image by name (resolved and verified), and whether to run checks again that have a cached verdict."""

    run: Callable[[RunSpec], RunResult]
    image: Callable[[str], ImageRef]
    recheck: bool = False


@dataclass(frozen=True)
class Diagnosis:
    """An engine's doctor checks, and whether they prove it can serve runs here."""

    checks: list[Check]
    usable: bool


class Engine(ABC):
    name: ClassVar[str]
    isolation: ClassVar[str]
    # Where the program's script appears inside the sandbox (the host side is ctx.scratch_dir).
    script_dir: ClassVar[str] = "/tmp"
    # Whether the sandbox boots before the program starts (a VM's guest kernel and agent): the
    # CPU time until `ready` is the boot's, not the job's, and the boot's length is recorded.
    has_boot_phase: ClassVar[bool] = False
    # Whether a SIGKILL that the host did not send can only be the sandbox's own OOM killer (a
    # guest kernel's): nothing else inside kills the program with it.
    sigkill_means_guest_oom: ClassVar[bool] = False
    # Whether the run's memory cgroup holds just the program and the files in its writable areas
    # (tmpfs: memory), under the one limit memory_mib. Then the program's own memory is the
    # cgroup's less its files' pages, and files count against the limit. Otherwise (a VM's cgroup
    # holds the VMM and the guest's RAM) the host cannot see the program's share: it is unknown.
    files_in_memory_limit: ClassVar[bool] = False
    # Whether the engine can put a run's egress proxy (and nothing else) within its sandbox's reach.
    scoped_egress: ClassVar[bool] = False
    # Whether the engine can make a sandbox before its run is known and hand it over (runner.ready).
    ready_sandboxes: ClassVar[bool] = False
    # Whether a ready sandbox holds the image's interpreter, started and waiting (its class then
    # fixes what an interpreter fixes when it starts), or the sandbox alone (a VM, whose agent
    # starts the program at hand-over).
    ready_interpreter: ClassVar[bool] = True
    # How long the sandbox may take to be ready for the program; past it, the run is a sandbox
    # error (boot_failed), not the program's fault. An engine with a boot reads its own setting.
    boot_timeout_s: float = 20.0

    # --- the engine's own policy: its settings, its checks, what it keeps between runs ---------

    @classmethod
    @abstractmethod
    def from_host(cls, host: EngineHost) -> Engine:
        """The engine, configured from the shared settings and its own (read from host.environ)."""

    @abstractmethod
    def availability(self) -> Availability:
        """Whether this engine can run here, from a quick check: no sandbox starts, no VM boots."""

    @abstractmethod
    def diagnose(self, ctx: DoctorContext) -> Diagnosis:
        """The doctor's checks of this engine (a canary run among them where one is due)."""

    def host_report(self) -> dict[str, Any]:
        """What a worker host says of this engine in its heartbeat (the console shows it)."""
        return {self.name: self.availability().why}

    def warm_up(self, images: ImageStore) -> list[str]:
        """Start making what the engine keeps between runs, as a worker starts (what was started)."""
        return []

    def kept(self) -> list[dict[str, str]]:
        """What the engine keeps between runs on this host, for metrics: one {"kind", "image",
        "state"} each (the smolvm engine's warm bases)."""
        return []

    def sweep_kept(self) -> list[str]:
        """Remove what the engine keeps between runs and no run is using (`runner sweep --bases`)."""
        return []

    def give_back_room(self, image: ImageRef, limits: Limits, enough: Callable[[], bool]) -> list[str]:
        """A run of `image` and `limits` waits for room on this host: remove what the engine keeps
        idle between runs (never what that run would use) until `enough()`; what went."""
        return []

    @abstractmethod
    def cgroup_limits(self, limits: Limits, *, cell: bool = False) -> CgroupLimits:
        """The caps `prepare` gives the run's cgroups: everything the run may take from the host
        (a notebook cell's output area also holds its session files: runner.cells)."""

    def reservation(self, limits: Limits, *, cell: bool = False) -> Footprint:
        """What admission must reserve: all that the run's cgroups allow (derived from the very
        caps `prepare` writes, so the two cannot drift), plus the run's cost outside them."""
        caps = self.cgroup_limits(limits, cell=cell)
        return Footprint(memory_mib=-(-caps.memory_bytes // MIB) + HOST_OVERHEAD_MIB, cpus=caps.cpus)

    def view_root(self, default: Path) -> Path:
        """Where this engine's per-run views live (the supervisor's host-wide default)."""
        return default

    def sandbox_uid_paths(self, default: Path) -> list[Path]:
        """Directories a sandbox's own uid (the slot's) must be able to reach: checked as that uid
        at start-up (Supervisor.check_sandbox_paths), since every run would fail to set up."""
        return []

    def ready(self, ctx: RunContext) -> bool:
        """Whether the sandbox is up and the program started (a VM boots first)."""
        return True

    def failure(self, ctx: RunContext) -> RunnerError | None:
        """An infrastructure failure the engine has learnt of (boot failure, engine crash)."""
        return None

    def not_started(self, ctx: RunContext, said: str) -> RunnerError:
        """The error of a run whose sandbox never started its program (Collected.started false):
        ours, not the user's, retried. `said` is the end of what the sandbox wrote to stderr."""
        return RunnerError("sandbox_setup_failed", f"the sandbox did not start the program: {said}", retryable=True)

    def ready_fit(self, spec: RunSpec, image: ImageRef) -> tuple[str | None, str]:
        """What a ready sandbox of this engine fixes for runs like `spec` beyond their class ("" for
        nothing more), or None and why `spec` starts cold (runner.ready.ready_class)."""
        return "", ""

    def ready_room(self, fixed: str, room: Limits) -> Limits | None:
        """The limits a waiting sandbox's cgroups are made with: the pool's `room`, or what the
        engine's `fixed` part needs; None when that is gone (no sandbox of it can be made)."""
        return room

    def set_cpu_weight(self, ctx: RunContext, cpu_weight: int) -> None:
        """A sandbox's share of a busy CPU from now on (a ready sandbox being made, at the lowest,
        is raised to a run's once that run waits for it). Raises OSError."""
        return None  # an engine with no cgroups of its own has no share to set

    def hand_over(self, ctx: RunContext, host: socket.socket) -> None:
        """Give a ready sandbox (made with `ctx.ready_end`) its run: the run's limits, then the
        program, through `host`. Raises HandOverError if the sandbox cannot take it."""
        raise HandOverError(f"the {self.name} engine makes no ready sandboxes")

    @abstractmethod
    def version(self) -> str: ...

    @abstractmethod
    def prepare(self, ctx: RunContext) -> None:
        """Create the run's host resources (cgroups, mounts, filters). Nothing runs yet."""

    @abstractmethod
    def start(self, ctx: RunContext) -> Process:
        """Start the program; its stdout and stderr are pipes the supervisor reads."""

    @abstractmethod
    def control_fds(self, ctx: RunContext) -> list[int]:
        """Extra fds the supervisor must drain (engine status channels), read via `on_control`."""

    @abstractmethod
    def on_control(self, ctx: RunContext, fd: int, data: bytes) -> None: ...

    @abstractmethod
    def sample(self, ctx: RunContext) -> Sample: ...

    @abstractmethod
    def stop(self, ctx: RunContext, *, grace_s: float) -> str:
        """Polite stop, grace, kill everything, verify it is gone; return how it was killed."""

    @abstractmethod
    def collect(self, ctx: RunContext) -> Collected:
        """After stop: exit status and the host's accounting."""

    @abstractmethod
    def teardown(self, ctx: RunContext) -> list[CleanupCheck]:
        """Remove every host resource of the run (idempotent) and audit that each is gone."""

    @abstractmethod
    def sweep(self, is_live: Any) -> list[str]:
        """Reclaim what crashed supervisors left; `is_live(run_id)` protects running runs."""
