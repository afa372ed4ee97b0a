"""The `smolvm` engine: a fresh microVM with its own guest kernel per run (isolation "vm").

The supervisor starts a per-run child (runner.engines.smolvm_child) inside the run's cgroup;
the child drives the SDK and so owns the VMM, which dies with it. Control facts come back on
a dedicated pipe (never mixed with guest output); CPU time and peak memory come from the
host's cgroup. Teardown deletes the machine through smolvm's CLI and audits the VMM process,
the machine record, the VM directory, the per-VM uid marker, lock files, cgroups and mounts.
"""

from __future__ import annotations

import ctypes
import dataclasses
import grp
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from runner.cgroups import CgroupLayout
from runner.engines.base import CgroupLimits, Collected, RunContext, guest_env
from runner.engines.common import (
    CgroupEngine,
    CgroupState,
    Launch,
    bind_views,
    decode_exit_status,
    mount_output_area,
    output_area_bytes,
    processes_of_uid,
)
from runner.engines.smolvm_protocol import ChildConfig, Error, Event, Exit, Facts, Mount, Ready, decode
from runner.spec import MIB, CleanupCheck, Limits, RunnerError

GUEST_WORKDIR = "/tmp"
VMM_OVERHEAD_MIB = 768 + 64  # smolvm's own VMM allowance, plus the Python child
MACHINE_PREFIX = "cordon-"
GUEST_UID = "1000:1000"
_PR_SET_PDEATHSIG = 1
COMPONENTS = ("smol-vmm", "libkrun.so", "libkrunfw.so.5", "_native.abi3.so", "agent-rootfs.tar.zst")
CONTROL_KEPT_BYTES = 65536
ERROR_MESSAGE_CHARS = 2000
VM_STARTS = ("cold", "branch")


@lru_cache(maxsize=1)
def wheel_dir() -> Path | None:
    """The installed smolmachines wheel's `smol/` folder (found without importing the SDK)."""
    spec = importlib.util.find_spec("smol")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def runtime_copy(root: Path) -> Path:
    """A root-owned, world-readable copy of the wheel's `smol/` package under `root`.

    smolvm drops each VMM to a per-VM uid, which must reach smol-vmm, libkrun and the agent
    rootfs; a virtualenv below a private directory (a fresh clone in a 0700 temp dir) would
    hide them. The copy is keyed by the components' hashes and checked against the wheel.
    """
    source = wheel_dir()
    if source is None:
        raise RunnerError("engine_unavailable", "the smolmachines wheel is not installed")
    hashes = component_hashes()
    key = hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:16]
    target = root / f"{engine_version().replace(' ', '-')}-{key}" / "smol"
    if target.is_dir():
        return target
    staging = target.parent.with_name(target.parent.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging / "smol", ignore=shutil.ignore_patterns("__pycache__", "*.ext4"))
    for path in [staging, *staging.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() or path.stat().st_mode & 0o111 else 0o644)
    copied = {name: _sha256(staging / "smol" / name) for name in hashes}
    if copied != hashes:
        shutil.rmtree(staging, ignore_errors=True)
        raise RunnerError("engine_unavailable", "the copy of the smolvm runtime does not match the wheel")
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # noqa: S103 - per-VM uids traverse it
    try:
        staging.rename(target.parent)
    except OSError:  # another supervisor won the race; its copy is as good
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def engine_version() -> str:
    try:
        return f"smolvm {importlib.metadata.version('smolmachines')}"
    except importlib.metadata.PackageNotFoundError:
        return "smolvm (not installed)"


@lru_cache(maxsize=1)
def component_hashes() -> dict[str, str]:
    folder = wheel_dir()
    return {name: _sha256(folder / name) for name in COMPONENTS if folder and (folder / name).is_file()}


@dataclass
class ControlChannel:
    """Reads the child's control pipe: one event a line (smolvm_protocol), known events and typed
    fields only. Anything else is dropped. Guest output never reaches this pipe."""

    buffer: bytes = b""
    ready: bool = False
    boot_s: float | None = None
    vm_start: str | None = None
    exit_code: int | None = None
    error: Error | None = None  # the first one: what went wrong first is the cause
    facts: Facts = field(default_factory=Facts)

    def feed(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        self.buffer = self.buffer[-CONTROL_KEPT_BYTES:]
        for line in lines:
            event = decode(line)
            if event is not None:
                self.facts = self.facts.updated(event.facts)
                self._apply(event)

    def _apply(self, event: Event) -> None:
        if isinstance(event, Ready):
            self.ready = True
            if event.boot_s is not None:
                self.boot_s = event.boot_s
            if event.vm_start in VM_STARTS:
                self.vm_start = event.vm_start
        elif isinstance(event, Exit) and event.exit_code is not None:
            self.exit_code = event.exit_code
        elif isinstance(event, Error) and self.error is None:
            self.error = dataclasses.replace(event, message=event.message[:ERROR_MESSAGE_CHARS])

    def failure(self) -> RunnerError | None:
        if self.error is None:
            return None
        return RunnerError(self.error.code, self.error.message, retryable=self.error.retryable)


def machine_name(run_id: str) -> str:
    return f"{MACHINE_PREFIX}{run_id}"


def child_config(
    ctx: RunContext, *, state_root: Path, boot_timeout_s: float, control_fd: int, sdk_dir: Path | None = None
) -> ChildConfig:
    """What the child needs to create, run and delete the machine."""
    limits = ctx.limits
    return ChildConfig(
        sdk_path=str(sdk_dir.parent) if sdk_dir else None,
        name=machine_name(ctx.run_id),
        state_root=str(state_root),
        image=str(ctx.view_dir / "root"),
        cpus=max(1, round(limits.cpus)),
        memory_mib=limits.memory_mib,
        # The VM's own disks bound what the guest can write outside /output (GiB, at least 1).
        storage_gb=max(1, -(-limits.disk_mib // 1024)),
        overlay_gb=1,
        mounts=[
            Mount(str(ctx.view_dir / "in"), "/input", read_only=True),
            Mount(str(ctx.scratch_dir), "/job", read_only=True),
            Mount(str(ctx.output_dir), "/output", read_only=False),
        ],
        output_dir=str(ctx.output_dir),
        argv=guest_argv(ctx),
        env=guest_env(limits),
        user=GUEST_UID,
        workdir=GUEST_WORKDIR,
        # The guest's own timeout is a backstop; the supervisor's deadline on the host decides.
        exec_timeout_s=limits.wall_timeout_s + 5.0,
        boot_timeout_s=boot_timeout_s,
        control_fd=control_fd,
    )


# A run's stdin, written beside the script in /job (read-only) and given to the program by the
# guest's shell: smolvm's agent hands a streamed command no stdin (ExecOptions.stdin reached the
# program empty under make test-vm). The shell's script is this constant; the program and its
# arguments reach it as positional parameters, never parsed as shell text.
STDIN_NAME = "stdin"
STDIN_REDIRECT = ["/bin/sh", "-c", f'exec "$@" < /job/{STDIN_NAME}', "sh"]


def guest_argv(ctx: RunContext) -> list[str]:
    """The program with exactly Cordon's guest environment (the agent's container adds its own,
    e.g. TERM; the namespace engine's job sees guest_env and PWD, so this one does too), under
    an in-guest process cap (the guest kernel has no pids cgroup for it), its stdin from /job."""
    env = [f"{key}={value}" for key, value in sorted({**guest_env(ctx.limits), "PWD": GUEST_WORKDIR}.items())]
    redirect = STDIN_REDIRECT if ctx.spec.stdin else []
    return [
        "/usr/bin/env", "-i", *env,
        "/usr/bin/prlimit", f"--nproc={ctx.limits.max_processes}", "--core=0", "--", *redirect, *ctx.argv,
    ]  # fmt: skip


@dataclass
class SmolvmState(CgroupState):
    control: ControlChannel = field(default_factory=ControlChannel)  # fed from control_fd


class SmolvmEngine(CgroupEngine[SmolvmState]):
    name = "smolvm"
    isolation = "vm"
    script_dir = "/job"
    has_boot_phase = True
    sigkill_means_guest_oom = True
    state_type = SmolvmState
    # The host's figures are the VMM's: a host memcg OOM kills the VMM, i.e. the whole guest; the
    # guest's own OOM kills are inside the VM and reported through the exit status only.
    process_cap_on_host = False  # guest processes are capped inside; the host cap bounds VMM threads
    scratch_on_host = False  # the guest's disks are not visible from the host
    # The host sees the VMM's memory (the guest's RAM as far as touched, its kernel and page cache
    # included, and smolvm's own), never the program's share of it: that is unknown, not a guess.
    # The guest's RAM is memory_mib; the output area is host memory beside it.
    files_in_memory_limit = False
    # Stop kills the child and the VMM at once: the host cannot signal the guest's program, and a
    # graceful machine delete would let it run on past the deadline (seen: +2 s under emulated
    # KVM). Teardown deletes the machine record through smolvm's CLI.
    polite_stop = False

    def __init__(
        self,
        *,
        state_root: Path,
        boot_timeout_s: float = 20.0,
        cgroup_parent: str = "cordon",
        layout: CgroupLayout | None = None,
        extra_env: dict[str, str] | None = None,
        child_module: str = "runner.engines.smolvm_child",
    ):
        super().__init__(cgroup_parent=cgroup_parent, layout=layout)
        self.child_module = child_module
        self.state_root = state_root
        self.boot_timeout_s = boot_timeout_s
        self.extra_env = extra_env or {}

    def version(self) -> str:
        return engine_version()

    def cgroup_limits(self, limits: Limits) -> CgroupLimits:
        # The VMM's cgroup holds the guest's memory, smolvm's own allowance, and the output area's
        # tmpfs pages, which the VMM writes on the guest's behalf.
        return CgroupLimits(
            memory_bytes=(limits.memory_mib + VMM_OVERHEAD_MIB) * MIB + output_area_bytes(limits),
            pids_max=4096,  # host threads of the child and the VMM; guest processes are capped inside
            cpus=limits.cpus + 1.0,  # the vCPUs plus the VMM's own I/O threads
        )

    def view_root(self, default: Path) -> Path:
        # smolvm refuses to share paths under /run (a "protected system path"), so the views it
        # mounts into the guest live beside its state root.
        return self.state_root.parent / "views"

    # prepare / start

    def prepare(self, ctx: RunContext) -> None:
        if wheel_dir() is None:
            raise RunnerError("engine_unavailable", "the smolmachines wheel is not installed")
        blocked = first_untraversable(self.state_root)
        if blocked is not None:
            raise RunnerError(
                "state_root_not_traversable",
                f"smolvm's per-VM uids cannot traverse {blocked}; set CORDON_SMOLVM_STATE_DIR to a path "
                "whose every parent is world-executable",
            )
        super().prepare(ctx)

    def prepare_views(self, ctx: RunContext) -> None:
        self.state_root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_root, 0o755)  # noqa: S103 - per-VM uids must traverse it
        # The image is the verified rootfs, bound read-only: smolvm serves a directory image live
        # through virtiofs (nothing to flatten per boot, unlike an archive, which it unpacks in
        # the guest every time: 45-60 s per run under emulated KVM against 8-12 s for this), and
        # the read-only mount keeps even a VMM running as root from writing into the image.
        bind_views(ctx, {"root": ctx.image.rootfs, "in": ctx.input_dir})
        ctx.scratch_dir.mkdir(mode=0o755)  # holds the script, mounted read-only at /job
        if ctx.spec.stdin:  # and the stdin, which the guest's shell opens as the program's fd 0
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(ctx.scratch_dir / STDIN_NAME, flags, 0o444), "wb") as handle:
                handle.write(ctx.spec.stdin)
        # The VMM runs as a per-VM uid known only once it starts; it is in the kvm group (it opens
        # /dev/kvm), so the area is root:kvm 0770 until the child hands it to that uid.
        mount_output_area(ctx, uid=0, gid=_kvm_gid(), mode=0o770)

    def launch(self, ctx: RunContext, fds: dict[str, int]) -> Launch:
        config = child_config(
            ctx,
            state_root=self.state_root,
            boot_timeout_s=self.boot_timeout_s,
            control_fd=fds["control"],
            sdk_dir=self.runtime(),
        )
        config_path = ctx.run_dir / "smolvm-child.json"
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(config.to_json())
        return Launch(
            argv=[sys.executable, "-m", self.child_module, str(config_path)],
            env=self.child_env(),
            before_exec=_die_with_parent(),
        )

    def runtime(self) -> Path:
        """The smol package the child imports and whose smol-vmm the CLI runs (a traversable copy)."""
        return runtime_copy(self.state_root.parent / "runtime")

    def child_env(self) -> dict[str, str]:
        folder = self.runtime() if wheel_dir() is not None else None
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.state_root),
            "LANG": "C.UTF-8",
            "SMOLVM_LIB_DIR": str(folder) if folder else "",
            "SMOLVM_SECCOMP": "enforce",
            "SMOLVM_LANDLOCK": "enforce",
            "SMOLVM_IMAGE_SEEDS": "0",  # no image-seed helper VM (unadmitted, 8 GiB by default)
            "SMOLVM_EGRESS_FLOOR": "strict",
        }
        env.update(self.extra_env)
        env.pop("SMOL_CLOUD_TOKEN", None)
        return env

    def on_control(self, ctx: RunContext, fd: int, data: bytes) -> None:
        self.state(ctx).control.feed(data)

    def ready(self, ctx: RunContext) -> bool:
        return self.state(ctx).control.ready

    def failure(self, ctx: RunContext) -> RunnerError | None:
        return self.state(ctx).control.failure()

    # collect

    def exit_status(self, ctx: RunContext) -> tuple[int | None, int | None]:
        return decode_exit_status(self.state(ctx).control.exit_code)

    def collect(self, ctx: RunContext) -> Collected:
        return dataclasses.replace(super().collect(ctx), vm_start=self.state(ctx).control.vm_start)

    def started(self, ctx: RunContext) -> bool:
        return self.state(ctx).control.ready

    # teardown / sweep

    def stray_processes(self, ctx: RunContext) -> list[int]:
        vm_uid = self.state(ctx).control.facts.vm_uid
        return self.vmm_processes(machine_name(ctx.run_id)) + (processes_of_uid(vm_uid) if vm_uid else [])

    def strays_described(self, ctx: RunContext) -> str:
        return "VMM of this machine"

    def engine_checks(self, ctx: RunContext) -> list[CleanupCheck]:
        return self.machine_checks(machine_name(ctx.run_id), self.state(ctx).control.facts.vm_dir)

    def machine_checks(self, name: str, vm_dir: str | None) -> list[CleanupCheck]:
        """Delete the machine record if any, then audit what smolvm keeps per machine."""
        deleted = self.delete_machine(name)
        listed = name in self.machine_names()
        checks = [CleanupCheck("machine record", not listed, f"{name} {'still listed' if listed else deleted}")]
        vms = self.state_root / ".cache" / "smolvm" / "vms"
        lock = vms / f".{name}.fork-operation.lock"
        lock.unlink(missing_ok=True)  # the SDK leaves one behind for every machine
        leftovers = [str(p) for p in vms.iterdir() if p.is_dir() and _names(p, name)] if vms.is_dir() else []
        if vm_dir:
            leftovers += [vm_dir] if Path(vm_dir).exists() else []
        checks.append(CleanupCheck("vm directory", not leftovers, f"left: {leftovers}" if leftovers else "removed"))
        markers = _uid_markers(self.state_root, Path(vm_dir).name) if vm_dir else []
        checks.append(CleanupCheck("uid marker", not markers, f"left: {markers}" if markers else "released"))
        checks.append(CleanupCheck("lock files", not lock.exists(), "fork-operation lock removed"))
        return checks

    def sweep(self, is_live: Callable[[str], bool]) -> list[str]:
        swept = super().sweep(is_live)
        if not (self.state_root / ".local" / "share" / "smolvm").exists():
            return swept
        for name in sorted(self.machine_names()):
            if name.startswith(MACHINE_PREFIX) and not is_live(name.removeprefix(MACHINE_PREFIX)):
                self.delete_machine(name)
                swept.append(f"smolvm machine {name}")
        vms = self.state_root / ".cache" / "smolvm" / "vms"
        for lock in sorted(vms.glob(f".{MACHINE_PREFIX}*.fork-operation.lock")) if vms.is_dir() else ():
            run_id = lock.name.removeprefix(f".{MACHINE_PREFIX}").removesuffix(".fork-operation.lock")
            if not is_live(run_id):
                lock.unlink(missing_ok=True)
                swept.append(f"smolvm lock file {lock.name}")
        return swept

    # smolvm's CLI, against the same state root

    def cli(self, *args: str, timeout: float = 30.0) -> tuple[int, str, str]:
        if wheel_dir() is None:
            return 127, "", "smolmachines is not installed"
        folder = self.runtime()
        proc = subprocess.run(
            [str(folder / "smol-vmm"), *args, "--error-format", "json"],
            env=self.child_env(), capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        return proc.returncode, proc.stdout, proc.stderr

    def machine_names(self) -> list[str]:
        rc, out, _ = self.cli("machine", "ls", "--json")
        if rc != 0:
            return []
        try:
            listed = json.loads(out or "[]")
        except ValueError:
            return []
        return [str(item.get("name")) for item in listed if isinstance(item, dict)]

    def delete_machine(self, name: str) -> str:
        rc, _, err = self.cli("machine", "delete", "--name", name, "-f")
        if rc == 0:
            return "deleted"
        return "not present" if '"NOT_FOUND"' in err else f"delete failed: {err.strip()[-300:]}"

    def vmm_processes(self, name: str) -> list[int]:
        """VMM processes (comm `libkrun VM` or `VM:*`) serving a machine of this state root and name."""
        found = []
        vms = str(self.state_root / ".cache" / "smolvm" / "vms")
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                comm = Path(f"/proc/{entry.name}/comm").read_text().strip()
                if comm != "libkrun VM" and not comm.startswith("VM:"):
                    continue
                cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().decode(errors="replace")
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            if vms in cmdline:
                config = cmdline.split("\0")[-2] if cmdline.count("\0") >= 2 else ""
                if not config or _names(Path(config).parent, name) or not Path(config).parent.exists():
                    found.append(int(entry.name))
        return found


def _names(vm_dir: Path, name: str) -> bool:
    try:
        return (vm_dir / "name").read_text().strip() == name
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return False


def _uid_markers(state_root: Path, vm_hash: str) -> list[str]:
    uids = state_root / ".cache" / "smolvm" / "uids"
    found = []
    for marker in uids.iterdir() if uids.is_dir() else ():
        try:
            if marker.is_file() and marker.read_text().strip() == vm_hash:
                found.append(str(marker))
        except PermissionError:
            continue
    return found


def first_untraversable(path: Path) -> Path | None:
    """The first existing ancestor of `path` that other users cannot traverse, if any."""
    for parent in [*reversed(path.parents), path]:
        try:
            mode = parent.stat().st_mode
        except FileNotFoundError:
            return None
        if not mode & 0o001:
            return parent
    return None


def _die_with_parent() -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)

    def enter() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # the child, and so its VMM, dies with us
        # The VMM writes the guest's /output files on the host: a file size limit inherited from
        # the worker would kill it (SIGXFSZ) on an oversize file, a sandbox_error instead of the
        # output_limit export finds. The area's size is the bound, as in the namespace engine.
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    return enter


def _kvm_gid() -> int:
    try:
        return grp.getgrnam("kvm").gr_gid
    except KeyError:
        return 0
