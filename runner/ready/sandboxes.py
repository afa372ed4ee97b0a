"""What a ready sandbox is: its settings (CORDON_READY_*), the class of run it serves
(ReadyClass, ready_class: which runs may take which sandbox, and why one starts cold), the
program that waits in it, the sandbox itself (Ready), used once, and what the pool that makes and
hands them out (runner.ready) needs of the supervisor that owns it (Maker)."""

from __future__ import annotations

import json
import math
import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from runner.config import Paths, SupervisorSettings
from runner.engines.base import Engine, HandOverError, RunContext
from runner.env import env_bool, env_float, env_int
from runner.host.admission import Admission
from runner.host.locks import RunLock
from runner.images import ImageRef, ImageStore
from runner.spec import CleanupCheck, Limits, RunSpec

READY_PROGRAMS = {"python": "/usr/lib/cordon/ready.py", "node": "/usr/lib/cordon/ready.js"}
# Words that make a python script's class "analyst": a linear search of the script's bytes.
ANALYST_WORDS = (b"pandas", b"matplotlib")
STATUS_DIR = "ready"  # under the host state directory: one file per process with a pool, for doctor


@dataclass(frozen=True)
class ReadySettings:
    enabled: bool = True
    classes: int = 2  # classes this process keeps a ready sandbox of, the most recently used
    max_age_s: float = 900.0  # an idle sandbox older than this is made anew
    free_slots: int = 1  # admission slots ready sandboxes never take: a cold run always finds one
    room_mib: int = 256  # the memory a waiting sandbox's cgroup allows (its imports need room)
    wait_s: float = 2.0  # how long a run waits for its class's sandbox that is being made
    make_timeout_s: float = 60.0
    max_failures: int = 3  # failures in a row after which a class is not made again (doctor says why)

    @classmethod
    def from_env(cls) -> ReadySettings:
        return cls(
            enabled=env_bool("CORDON_READY", True),
            classes=env_int("CORDON_READY_CLASSES", 2, minimum=1, maximum=16),
            max_age_s=env_float("CORDON_READY_MAX_AGE_S", 900.0, minimum=1.0),
            free_slots=env_int("CORDON_READY_FREE_SLOTS", 1, minimum=0, maximum=1000),
            room_mib=env_int("CORDON_READY_ROOM_MIB", 256, minimum=64),
            wait_s=env_float("CORDON_READY_WAIT_S", 2.0, minimum=0.0),
            make_timeout_s=env_float("CORDON_READY_MAKE_TIMEOUT_S", 60.0, minimum=1.0),
            max_failures=env_int("CORDON_READY_MAX_FAILURES", 3, minimum=1),
        )


@dataclass(frozen=True)
class ReadyClass:
    """What a waiting interpreter fixed when it started: a run of another class cannot use it."""

    engine: str
    image: str
    digest: str
    runtime: str
    stack: str  # "bare", "analyst" or "cell"; "vm" where no interpreter waits (Engine.ready_interpreter)
    threads: int  # OMP_NUM_THREADS, read as numpy loads
    heap_mib: int  # node's --max-old-space-size (0 for python, and where no interpreter waits)
    fixed: str = ""  # what the engine fixes beyond these (Engine.ready_fit): a microVM's base

    @property
    def label(self) -> str:
        extra = f", heap {self.heap_mib} MiB" if self.heap_mib else ""
        extra += f", branch of {self.fixed}" if self.fixed else ""
        where = f"{self.image} {self.digest[7:19]}, {self.threads} threads{extra}"
        return f"{self.runtime}/{self.stack} on {self.engine} ({where})"


def ready_class(spec: RunSpec, image: ImageRef, engine: Engine) -> tuple[ReadyClass | None, str]:
    """The class of a run, or None and why it starts cold."""
    if not engine.ready_sandboxes:
        return None, f"the {engine.name} engine makes no ready sandboxes"
    if spec.egress:
        return None, "a run with egress starts cold (its network is joined before its sandbox is made)"
    if spec.runtime not in READY_PROGRAMS:
        return None, f"no ready program for {spec.runtime}"
    fixed, why = engine.ready_fit(spec, image)
    if fixed is None:
        return None, why
    stack, heap = "vm", 0
    if engine.ready_interpreter:
        stack = _python_stack(spec) if spec.runtime == "python" else "bare"
        heap = max(16, int(spec.limits.memory_mib * 0.6)) if spec.runtime == "node" else 0  # program_argv's
    return ReadyClass(
        engine=engine.name,
        image=image.name,
        digest=image.digest,
        runtime=spec.runtime,
        stack=stack,
        threads=max(1, math.ceil(spec.limits.cpus)),
        heap_mib=heap,
        fixed=fixed,
    ), ""


def _python_stack(spec: RunSpec) -> str:
    if spec.cell:
        return "cell"  # the analyst's, IPython, and the cell program's shell made
    return "analyst" if any(word in spec.script for word in ANALYST_WORDS) else "bare"


def ready_argv(cls: ReadyClass) -> list[str]:
    """The waiting interpreter's argv (the launch adds its socket's fd number)."""
    if cls.runtime == "node":
        return ["/usr/bin/node", f"--max-old-space-size={cls.heap_mib}", READY_PROGRAMS["node"], cls.stack]
    return ["/usr/bin/python3", READY_PROGRAMS["python"], cls.stack]


class ReadyReused(RuntimeError):
    """A ready sandbox asked to serve a second run: refused, always."""


@dataclass
class Ready:
    """One ready sandbox: made for no run, handed to exactly one."""

    id: str
    cls: ReadyClass
    engine: Engine
    ctx: RunContext
    host: socket.socket
    lock: RunLock
    made_at: float  # time.monotonic()
    make_s: float
    memory_bytes: int  # what its program's memory held once ready (0 where unknown: a VM)
    reserved_mib: int = 0  # what it holds in admission while it waits
    claims: list[str] = field(default_factory=list)

    def claim(self, run_id: str) -> None:
        """Mark it as `run_id`'s, on the host too (a file made once, in its own run directory)."""
        if self.claims:
            self.claims.append(run_id)
            raise ReadyReused(f"ready sandbox {self.id} already served run {self.claims[0]}")
        self.claims.append(run_id)
        marker = os.open(self.ctx.run_dir / "claimed", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(marker, "w") as handle:
            handle.write(run_id)

    def single_use_check(self, run_id: str) -> CleanupCheck:
        """The audit's word that this sandbox served this run and no other."""
        try:
            marked = (self.ctx.run_dir / "claimed").read_text()
        except OSError:
            marked = ""  # removed with the run directory: the in-memory record stands
        ok = self.claims == [run_id] and marked in ("", run_id)
        detail = f"ready sandbox {self.id} served this run only"
        if not ok:
            detail = f"ready sandbox {self.id} was claimed by {self.claims} (marked {marked!r})"
        return CleanupCheck("single use", ok, detail)

    def for_run(self, run_id: str, spec: RunSpec, argv: list[str]) -> RunContext:
        """The sandbox's context as the run's: its paths, cgroups and process, the run's spec."""
        return replace(self.ctx, run_id=run_id, spec=spec, limits=spec.limits, argv=argv, ready_end=None)


class Maker(Protocol):
    """What a pool needs of the supervisor that owns it, and nothing else of it: the host's
    admission, the engines and images, the settings that name the install, and how a sandbox's
    context is made and a sandbox torn down (runner.supervisor.Supervisor is one)."""

    @property
    def paths(self) -> Paths: ...
    @property
    def settings(self) -> SupervisorSettings: ...
    @property
    def maxima(self) -> Limits: ...
    @property
    def admission(self) -> Admission: ...
    @property
    def images(self) -> ImageStore: ...
    @property
    def locks_dir(self) -> Path: ...
    @property
    def engines(self) -> dict[str, Engine]: ...

    def context(self, spec: RunSpec, run_id: str, slot: int, image: Any, engine: Engine) -> RunContext: ...

    def teardown_sandbox(
        self, engine: Engine | None, ctx: RunContext | None, run_id: str, *, release: bool = True
    ) -> list[CleanupCheck]: ...


def status_files(host_state_dir: Path) -> list[dict[str, Any]]:
    """Every live process's published pool (a dead process's file is removed)."""
    found = []
    directory = host_state_dir / STATUS_DIR
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            pid = int(path.stem)
            os.kill(pid, 0)
            found.append(json.loads(path.read_text()))
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (ValueError, OSError):
            continue
    return found


def receive_ready(host: socket.socket, *, timeout: float) -> dict[str, Any]:
    """What the program waiting in a sandbox being made says once it is ready (or why it is not)."""
    host.settimeout(timeout)
    try:
        message = host.recv(65536)
    except TimeoutError as exc:
        raise HandOverError(f"it was not ready within {timeout:g} s") from exc
    host.settimeout(None)
    if not message:
        raise HandOverError("it exited before it was ready")
    said: dict[str, Any] = json.loads(message)
    return said
