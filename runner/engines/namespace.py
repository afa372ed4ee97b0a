"""The `namespace` engine: bubblewrap + cgroups + rlimits + seccomp, on the host's kernel.

Launch: the supervisor's spawner (runner.host.spawner, a small fork server) forks; the child joins
the run's cgroups, keeps only the fds bwrap is given, sets rlimits, raises its OOM score and
drops to the slot's unprivileged host uid, then execs bwrap, which builds
fresh user/pid/ipc/uts/net namespaces around a read-only image rootfs. A run with an egress
policy gets no fresh network namespace from bwrap: its launcher first joins the run's own
(runner.host.netns: loopback and the egress proxy's listener, nothing else), and HTTP(S)_PROXY
names the proxy. Every directory is
handed to bwrap as an fd, so the sandbox uid needs no access to the host paths above them.

Whether the program ever ran is bwrap's to say, not its exit status's (a setup failure exits 1,
as a program may): bwrap reports {"exit-code": N} on its status fd only for a program it exec'd,
and reads one byte from its --block-fd as its last step after the mounts. A sandbox that did
neither never ran the program: a sandbox error named by the step bwrap said failed, never the
user's failure (`not_started`).
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import shutil
import socket
import subprocess
import termios
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from runner.engines.base import (
    Availability,
    CgroupLimits,
    Check,
    Diagnosis,
    DoctorContext,
    EngineHost,
    HandOverError,
    RunContext,
    run_env,
)
from runner.engines.common import (
    CgroupEngine,
    CgroupState,
    Drop,
    Launch,
    areas_used_bytes,
    bind_views,
    decode_exit_status,
    mount_output_area,
    processes_of_uid,
    stdin_fd,
)
from runner.host import hostfs
from runner.host.cgroups import CgroupLayout
from runner.host.seccomp import bpf_fd, bpf_program
from runner.images import ImageError, ImageRef
from runner.spec import MIB, CleanupCheck, Limits, Outcome, RunnerError, RunSpec

SHM_BYTES = 8 * MIB
SANDBOX_UID_INSIDE = 1000
STATUS_KEPT_BYTES = 65536


@dataclass
class NamespaceState(CgroupState):
    status: bytes = b""  # the end of bwrap's --json-status-fd stream, read from control_fd
    # The write end of bwrap's --block-fd pipe, holding one byte until bwrap's setup reads it.
    block_fd: int | None = None


class NamespaceEngine(CgroupEngine[NamespaceState]):
    name = "namespace"
    isolation = "namespace"
    state_type = NamespaceState
    files_in_memory_limit = True  # see cgroup_limits
    scoped_egress = True
    ready_sandboxes = True

    def __init__(self, *, cgroup_parent: str = "cordon", layout: CgroupLayout | None = None):
        super().__init__(cgroup_parent=cgroup_parent, layout=layout)
        self.bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"

    # --- the engine's own policy ---------------------------------------------------------------

    @classmethod
    def from_host(cls, host: EngineHost) -> NamespaceEngine:
        return cls(cgroup_parent=host.cgroup_parent)  # it has no settings of its own

    def availability(self) -> Availability:
        return Availability(*check_available())

    def diagnose(self, ctx: DoctorContext) -> Diagnosis:
        """bubblewrap, the seccomp filter, then (when both are there) a canary run through the
        supervisor: a sandbox made, a print, everything removed and audited."""
        checks = [_bwrap_check(), _seccomp_check()]
        if all(c.ok for c in checks):
            checks.append(_canary(ctx))
        return Diagnosis(checks, all(c.ok for c in checks) and len(checks) == 3 and self.availability().ok)

    def version(self) -> str:
        # Asked once per binary, not once per run (it cost a fork and exec each time); keyed by
        # the file's identity, so a bwrap upgraded under a running worker is asked again.
        try:
            st = os.stat(self.bwrap)
        except OSError:
            return "bubblewrap (unknown version)"
        return _bwrap_version(self.bwrap, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def cgroup_limits(self, limits: Limits, *, cell: bool = False) -> CgroupLimits:
        # The limit holds everything the run keeps in memory: the program, and the files in its
        # tmpfs areas (/tmp, /output, /dev/shm), whose pages are charged to the same cgroup. With
        # the areas' sizes added on top, a program whose areas were empty had their room too (a
        # 128 MiB memory bomb reached 216 MiB): the kernel cannot keep the two apart, so the
        # figure the user set is the whole, and the files' share is reported beside the program's.
        return CgroupLimits(
            memory_bytes=limits.memory_mib * MIB,
            pids_max=limits.max_processes + 2,  # + bwrap and its init
            cpus=limits.cpus,
        )

    def sandbox_uid_paths(self, default: Path) -> list[Path]:
        # bwrap, already the slot's uid, resolves the view directories it is handed as fds.
        return [self.view_root(default)]

    # prepare / start

    def prepare_views(self, ctx: RunContext) -> None:
        bind_views(ctx, {"root": ctx.image.rootfs, "in": ctx.input_dir})
        ctx.scratch_dir.mkdir(mode=0o700)
        hostfs.mount_tmpfs(ctx.scratch_dir, size_bytes=ctx.limits.disk_mib * MIB, uid=ctx.uid)
        mount_output_area(ctx, uid=ctx.uid)

    def launch(self, ctx: RunContext, fds: dict[str, int]) -> Launch:
        fds["root"] = os.open(ctx.view_dir / "root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds["input"] = os.open(ctx.view_dir / "in", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds["scratch"] = os.open(ctx.scratch_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds["output"] = os.open(ctx.output_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        fds["seccomp"] = bpf_fd()
        if ctx.egress is not None:
            fds["netns"] = os.dup(ctx.egress.netns_fd)
        fds["block"] = self._block_pipe(ctx)
        program = ctx.argv
        if ctx.ready_end is not None:  # a ready sandbox's interpreter, told where its socket is
            fds["ready"] = os.dup(ctx.ready_end.fileno())
            program = [*ctx.argv, str(fds["ready"])]
        return Launch(
            argv=bwrap_argv(self.bwrap, fds, program, run_env(ctx), own_network=ctx.egress is not None),
            env={"PATH": "/usr/bin:/bin"},
            drop=Drop(uid=ctx.uid, rlimits=rlimits(ctx), netns_fd=fds.get("netns", -1)),
            stdin=ctx.spec.stdin,
        )

    def _block_pipe(self, ctx: RunContext) -> int:
        """The read end of a pipe holding one byte, for bwrap's --block-fd; the write end stays in
        the run's state, where `_set_up` sees whether bwrap's setup got as far as reading it."""
        read, write = os.pipe2(os.O_CLOEXEC)
        os.write(write, b"\0")
        self.state(ctx).block_fd = write
        return read

    def ready_fit(self, spec: RunSpec, image: ImageRef) -> tuple[str | None, str]:
        if spec.runtime == "node" and spec.stdin:
            return None, "a node run with stdin starts cold (node cannot be handed it)"
        return "", ""

    def hand_over(self, ctx: RunContext, host: socket.socket) -> None:
        self.bind_run_limits(ctx)
        state = self.state(ctx)
        cgroup = state.cgroup
        state.files_at_start = areas_used_bytes(self.file_areas(ctx)) or 0
        state.cpu_base_s = cgroup.cpu_seconds() or 0.0
        # The environment bwrap gives a program it starts in /tmp (--chdir sets PWD).
        order = {"argv": handed_argv(ctx.argv), "env": {**run_env(ctx), "PWD": "/tmp"}, "cwd": "/tmp"}
        stdin = stdin_fd(ctx.spec.stdin) if ctx.spec.stdin else -1
        try:
            socket.send_fds(host, [json.dumps(order).encode()], [stdin] if stdin >= 0 else [])
        except OSError as exc:
            raise HandOverError(f"its interpreter could not be reached: {exc}") from exc
        finally:
            if stdin >= 0:
                os.close(stdin)

    def on_control(self, ctx: RunContext, fd: int, data: bytes) -> None:
        state = self.state(ctx)
        state.status = (state.status + data)[-STATUS_KEPT_BYTES:]

    # stop / collect

    def tooling_pids(self, ctx: RunContext) -> set[int]:
        # The polite stop goes to the program only: bwrap and its init would take everything down at once.
        status = parse_status(self.state(ctx).status)
        return {ctx.process.pid if ctx.process else -1, status.get("child-pid", -1)}

    def exit_status(self, ctx: RunContext) -> tuple[int | None, int | None]:
        returncode = ctx.process.returncode if ctx.process else None
        code = parse_status(self.state(ctx).status).get("exit-code", returncode)
        if code is not None and code < 0:
            return None, -code  # bwrap itself was killed (by the supervisor)
        return decode_exit_status(code)

    def started(self, ctx: RunContext) -> bool:
        # An exit code is reported only for a program bwrap exec'd. Without one, bwrap ended on
        # its own before the program ran, or the supervisor killed it: the program ran if bwrap
        # had got past its setup by then (a setup that hangs is ours too).
        state = self.state(ctx)
        if "exit-code" in parse_status(state.status):
            return True
        killed = ctx.process is not None and (ctx.process.returncode or 0) < 0
        return killed and _set_up(state)

    def not_started(self, ctx: RunContext, said: str) -> RunnerError:
        state = self.state(ctx)
        words = bwrap_said(said)
        if not words:
            words = "its setup was stopped before it finished" if not _set_up(state) else "it gave no reason"
        return RunnerError(
            setup_step_code(words), f"the sandbox was not set up, so the program never ran: {words}", retryable=True
        )

    # teardown

    def engine_checks(self, ctx: RunContext) -> list[CleanupCheck]:
        state = self.state(ctx)
        if state.block_fd is not None:
            os.close(state.block_fd)
            state.block_fd = None
        return []

    def stray_processes(self, ctx: RunContext) -> list[int]:
        return processes_of_uid(ctx.uid)

    def strays_described(self, ctx: RunContext) -> str:
        return f"as uid {ctx.uid}"


@lru_cache(maxsize=4)
def _bwrap_version(path: str, *identity: int) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip() or "bubblewrap (unknown version)"


def bwrap_argv(
    bwrap: str, fds: dict[str, int], program: list[str], env: dict[str, str], *, own_network: bool = False
) -> list[str]:
    """The bwrap command line, in a fixed, reviewed order. Directories come in as fds, and bwrap
    reports the program's pid and exit status as JSON on fds["control"]. With `own_network` the
    launcher has joined the run's egress namespace already, and bwrap makes no network namespace."""
    net = [] if own_network else ["--unshare-net"]
    argv = [
        bwrap,
        "--unshare-user", "--uid", str(SANDBOX_UID_INSIDE), "--gid", str(SANDBOX_UID_INSIDE),
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", *net, "--unshare-cgroup-try",
        "--disable-userns", "--die-with-parent", "--new-session", "--hostname", "sandbox",
        "--ro-bind-fd", str(fds["root"]), "/",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--bind-fd", str(fds["scratch"]), "/tmp",
        "--ro-bind-fd", str(fds["input"]), "/input",
        "--bind-fd", str(fds["output"]), "/output",
        "--clearenv",
    ]  # fmt: skip
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += [
        "--chdir", "/tmp",
        "--seccomp", str(fds["seccomp"]),
        "--block-fd", str(fds["block"]),
        "--json-status-fd", str(fds["control"]),
        "--", *program,
    ]  # fmt: skip
    return argv


# bwrap's words for the step that failed ("bwrap: Can't find source path ...") -> the error code.
SETUP_STEPS = (
    ("execvp", "sandbox_exec_failed"),  # the image's interpreter
    ("seccomp", "sandbox_seccomp_failed"),
    ("namespace", "sandbox_namespaces_failed"),
    ("uid map", "sandbox_namespaces_failed"),
    ("Can't find source path", "sandbox_mounts_failed"),
    ("mount", "sandbox_mounts_failed"),
    ("Can't mkdir", "sandbox_mounts_failed"),
    ("Can't create", "sandbox_mounts_failed"),
    ("Can't access", "sandbox_mounts_failed"),
    ("newroot", "sandbox_mounts_failed"),
    ("oldroot", "sandbox_mounts_failed"),
    ("pivot_root", "sandbox_mounts_failed"),
    ("chdir", "sandbox_mounts_failed"),
)


def bwrap_said(stderr_tail: str) -> str:
    """bwrap's own last complaint ("Can't find source path ...: Permission denied"), or ""."""
    lines = [line for line in stderr_tail.splitlines() if line.startswith("bwrap: ")]
    said = lines[-1].removeprefix("bwrap: ")[:300] if lines else ""
    return "".join(ch if ch.isprintable() else "?" for ch in said)


def setup_step_code(words: str) -> str:
    """The code of the setup step bwrap's words name; sandbox_setup_failed for any other."""
    return next((code for needle, code in SETUP_STEPS if needle in words), "sandbox_setup_failed")


def _set_up(state: NamespaceState) -> bool:
    """Whether bwrap read its --block-fd byte: its mounts and namespaces were all made."""
    if state.block_fd is None:
        return False
    waiting = bytearray(4)
    fcntl.ioctl(state.block_fd, termios.FIONREAD, waiting)
    return int.from_bytes(waiting, "little") == 0


def handed_argv(argv: list[str]) -> list[str]:
    """What a ready sandbox's interpreter is told to run: the program and its arguments, without
    the interpreter and its options (a ready class fixes those: runner.ready)."""
    rest = argv[1:]
    while rest and rest[0].startswith("-"):
        rest = rest[1:]
    return rest


def rlimits(ctx: RunContext) -> list[tuple[int, int]]:
    return [
        (resource.RLIMIT_CORE, 0),
        # No file size limit: every writable place is a size-capped tmpfs, which bounds real bytes,
        # while a file size limit only refuses an apparent size (a sparse file costs nothing) and,
        # refusing, destroys the evidence: the program sees EFBIG (or dies of SIGXFSZ) and leaves
        # an empty file, so an oversize output looked like the program's own failure. Unlimited,
        # the file exists at its size and export refuses and names it, as in a microVM.
        (resource.RLIMIT_FSIZE, resource.RLIM_INFINITY),
        (resource.RLIMIT_NOFILE, 1024),
        # Counted per host uid, exited helpers awaiting the host init's reaping included: a wide
        # backstop, so that the pids cgroup, which leaves evidence, always bites first.
        (resource.RLIMIT_NPROC, ctx.limits.max_processes * 4 + 256),
    ]


def parse_status(raw: bytes) -> dict[str, int]:
    """bwrap's --json-status-fd stream: JSON objects such as {"child-pid": N}, {"exit-code": N}."""
    status: dict[str, int] = {}
    decoder = json.JSONDecoder()
    text = raw.decode(errors="replace")
    index = 0
    while index < len(text):
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            break
        try:
            obj, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            break
        if isinstance(obj, dict):
            status.update({k: v for k, v in obj.items() if isinstance(v, int)})
    return status


def check_available() -> tuple[bool, str]:
    if shutil.which("bwrap") is None:
        return False, "bubblewrap is not installed (apt-get install bubblewrap)"
    try:
        CgroupLayout.detect()
    except RuntimeError as exc:
        return False, str(exc)
    return True, "bubblewrap and cgroups present"


def _bwrap_check() -> Check:
    path = shutil.which("bwrap")
    if path is None:
        return Check("bubblewrap", False, "not installed (apt-get install bubblewrap)")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    userns = Path("/proc/sys/user/max_user_namespaces")
    limit = userns.read_text().strip() if userns.exists() else "unknown"
    if limit == "0":
        return Check("bubblewrap", False, f"{version}; user namespaces are disabled (user.max_user_namespaces=0)")
    return Check("bubblewrap", True, f"{version} at {path}; user.max_user_namespaces={limit}")


def _seccomp_check() -> Check:
    try:
        program = bpf_program()
    except Exception as exc:  # libseccomp missing or refusing: report, do not crash the doctor
        return Check("seccomp", False, f"cannot build the filter: {exc}")
    return Check("seccomp", True, f"deny-list filter built ({len(program)} bytes of BPF)")


def _canary(ctx: DoctorContext) -> Check:
    try:
        ctx.image("python")
    except ImageError as exc:
        return Check("namespace canary", False, f"not run: the python image is not usable here ({exc})")
    started = time.monotonic()
    result = ctx.run(
        RunSpec(runtime="python", script=b"print('canary')", limits=Limits(wall_timeout_s=20), engine="namespace")
    )
    took = time.monotonic() - started
    ok = result.outcome is Outcome.SUCCEEDED and result.stdout == b"canary\n" and result.cleanup_ok
    cleanup = "ok" if result.cleanup_ok else "INCOMPLETE"
    detail = f"supervised run {result.outcome.value} in {took * 1000:.0f} ms, cleanup {cleanup}"
    if result.error:
        detail += f"; {result.error.code}: {result.error.message}"
    return Check("namespace canary", ok, detail)


__all__ = ["NamespaceEngine", "RunnerError", "bwrap_argv", "check_available"]
