"""The `smolvm` engine: a fresh microVM with its own guest kernel per run (isolation "vm").

The supervisor starts a per-run child (runner.engines.smolvm_child) inside the run's cgroup;
the child drives the SDK and so owns the VMM, which dies with it. Control facts come back on
a dedicated pipe (never mixed with guest output); CPU time and peak memory come from the
host's cgroup. Teardown deletes the machine through smolvm's CLI and audits the VMM process,
the machine record, the VM directory, the per-VM uid marker, lock files, cgroups and mounts.
"""

from __future__ import annotations

import ctypes
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
from typing import Any

from runner.cgroups import CgroupLayout, RunCgroup
from runner.engines.base import GUEST_ENV, CgroupLimits, Collected, Engine, RunContext, Sample
from runner.engines.common import (
    area_full,
    bind_views,
    cgroup_checks,
    join_cgroups,
    mount_output_area,
    mounts_check,
    output_area_bytes,
    processes_of_uid,
    reap,
    stop_cgroup,
    sweep_cgroups,
)
from runner.spec import MIB, CleanupCheck, Limits, RunnerError

GUEST_WORKDIR = "/tmp"
VMM_OVERHEAD_MIB = 768 + 64  # smolvm's own VMM allowance, plus the Python child
MACHINE_PREFIX = "cordon-"
GUEST_UID = "1000:1000"
KNOWN_EVENTS = frozenset({"starting", "ready", "exit", "error", "deleted", "delete_failed"})
_PR_SET_PDEATHSIG = 1
COMPONENTS = ("smol-vmm", "libkrun.so", "libkrunfw.so.5", "_native.abi3.so", "agent-rootfs.tar.zst")


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
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


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
    """Parses the child's control pipe: one JSON object per line, known events and typed fields
    only. Anything else is dropped. Guest output never reaches this pipe."""

    buffer: bytes = b""
    ready: bool = False
    boot_s: float | None = None
    exit_code: int | None = None
    error: dict[str, Any] | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def feed(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        self.buffer = self.buffer[-65536:]
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") in KNOWN_EVENTS:
                self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        for key in ("vm_dir", "name", "state_root"):
            if isinstance(event.get(key), str):
                self.facts[key] = event[key]
        for key in ("vm_uid", "vmm_pid"):
            if isinstance(event.get(key), int) and not isinstance(event.get(key), bool):
                self.facts[key] = event[key]
        kind = event["event"]
        if kind == "ready":
            self.ready = True
            if isinstance(event.get("boot_s"), int | float):
                self.boot_s = float(event["boot_s"])
        elif kind == "exit" and isinstance(event.get("exit_code"), int) and not isinstance(event["exit_code"], bool):
            self.exit_code = event["exit_code"]
        elif kind == "error" and self.error is None:
            self.error = {
                "code": str(event.get("code", "engine_error")),
                "message": str(event.get("message", ""))[:2000],
                "phase": str(event.get("phase", "")),
                "retryable": bool(event.get("retryable", True)),
            }

    def failure(self) -> RunnerError | None:
        if self.error is None:
            return None
        return RunnerError(self.error["code"], self.error["message"], retryable=self.error["retryable"])


def machine_name(run_id: str) -> str:
    return f"{MACHINE_PREFIX}{run_id}"


def child_config(
    ctx: RunContext, *, state_root: Path, boot_timeout_s: float, control_fd: int, sdk_dir: Path | None = None
) -> dict[str, Any]:
    """What the child needs to create, run and delete the machine; no shell strings anywhere."""
    limits = ctx.limits
    return {
        "sdk_path": str(sdk_dir.parent) if sdk_dir else None,
        "name": machine_name(ctx.run_id),
        "state_root": str(state_root),
        "image": str(ctx.view_dir / "root"),
        "cpus": max(1, round(limits.cpus)),
        "memory_mib": limits.memory_mib,
        # The VM's own disks bound what the guest can write outside /output (GiB, at least 1).
        "storage_gb": max(1, -(-limits.disk_mib // 1024)),
        "overlay_gb": 1,
        "mounts": [
            [str(ctx.view_dir / "in"), "/input", True],
            [str(ctx.scratch_dir), "/job", True],
            [str(ctx.output_dir), "/output", False],
        ],
        "output_dir": str(ctx.output_dir),
        "argv": guest_argv(ctx),
        "env": dict(GUEST_ENV),
        "user": GUEST_UID,
        "workdir": GUEST_WORKDIR,
        # The guest's own timeout is a backstop; the supervisor's deadline on the host decides.
        "exec_timeout_s": limits.wall_timeout_s + 5.0,
        "boot_timeout_s": boot_timeout_s,
        "control_fd": control_fd,
    }


def guest_argv(ctx: RunContext) -> list[str]:
    """The program with exactly Cordon's guest environment (the agent's container adds its own,
    e.g. TERM; the namespace engine's job sees GUEST_ENV and PWD, so this one does too), under
    an in-guest process cap (the guest kernel has no pids cgroup for it)."""
    env = [f"{key}={value}" for key, value in sorted({**GUEST_ENV, "PWD": GUEST_WORKDIR}.items())]
    return [
        "/usr/bin/env", "-i", *env,
        "/usr/bin/prlimit", f"--nproc={ctx.limits.max_processes}", "--core=0", "--", *ctx.argv,
    ]  # fmt: skip


class SmolvmEngine(Engine):
    name = "smolvm"
    isolation = "vm"
    script_dir = "/job"
    has_boot_phase = True
    sigkill_means_guest_oom = True

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
        self.child_module = child_module
        self.state_root = state_root
        self.boot_timeout_s = boot_timeout_s
        self.cgroup_parent = cgroup_parent
        self.layout = layout or CgroupLayout.detect()
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
        cgroup = RunCgroup(self.layout, self.cgroup_parent, ctx.run_id)
        ctx.state["cgroup"] = cgroup
        caps = self.cgroup_limits(ctx.limits)
        cgroup.create(memory_bytes=caps.memory_bytes, pids_max=caps.pids_max, cpus=caps.cpus)
        self.state_root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_root, 0o755)  # noqa: S103 - per-VM uids must traverse it
        # The image is the verified rootfs, bound read-only: smolvm serves a directory image live
        # through virtiofs (nothing to flatten per boot, unlike an archive, which it unpacks in
        # the guest every time: 45-60 s per run under emulated KVM against 8-12 s for this), and
        # the read-only mount keeps even a VMM running as root from writing into the image.
        bind_views(ctx, {"root": ctx.image.rootfs, "in": ctx.input_dir})
        ctx.scratch_dir.mkdir(mode=0o755)  # holds the script, mounted read-only at /job
        # The VMM runs as a per-VM uid known only once it starts; it is in the kvm group (it opens
        # /dev/kvm), so the area is root:kvm 0770 until the child hands it to that uid.
        mount_output_area(ctx, uid=0, gid=_kvm_gid(), mode=0o770)
        ctx.state["control"] = ControlChannel()

    def start(self, ctx: RunContext) -> subprocess.Popen[bytes]:
        cgroup: RunCgroup = ctx.state["cgroup"]
        read_fd, write_fd = os.pipe()
        config = child_config(
            ctx,
            state_root=self.state_root,
            boot_timeout_s=self.boot_timeout_s,
            control_fd=write_fd,
            sdk_dir=self.runtime(),
        )
        config_path = ctx.run_dir / "smolvm-child.json"
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(config, handle)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", self.child_module, str(config_path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                preexec_fn=_enter_cgroup(cgroup.procs_files),
                env=self.child_env(),
                cwd="/",
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        ctx.state["control_fd"] = read_fd
        return process

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

    def control_fds(self, ctx: RunContext) -> list[int]:
        return [ctx.state["control_fd"]] if "control_fd" in ctx.state else []

    def on_control(self, ctx: RunContext, fd: int, data: bytes) -> None:
        ctx.state["control"].feed(data)

    def ready(self, ctx: RunContext) -> bool:
        control: ControlChannel = ctx.state["control"]
        return control.ready

    def failure(self, ctx: RunContext) -> RunnerError | None:
        control: ControlChannel = ctx.state["control"]
        return control.failure()

    def sample(self, ctx: RunContext) -> Sample:
        cgroup: RunCgroup = ctx.state["cgroup"]
        # A host memcg OOM here kills the VMM, i.e. the whole guest; the guest's own OOM kills are
        # inside the VM and reported through the exit status only.
        return Sample(cgroup.cpu_seconds(), cgroup.memory_bytes(), cgroup.oom_kills(), 0)

    # stop / collect

    def stop(self, ctx: RunContext, *, grace_s: float) -> str:
        """Kill the child and the VMM at once: the host cannot signal the guest's program, and a
        graceful machine delete would let it run on past the deadline (seen: +2 s under emulated
        KVM). Teardown deletes the machine record through smolvm's CLI."""
        cgroup: RunCgroup | None = ctx.state.get("cgroup")
        if cgroup is None:
            return "nothing to stop"
        method = stop_cgroup(cgroup, spare=(), grace_s=0.0)
        reap(ctx.process)
        return method

    def collect(self, ctx: RunContext) -> Collected:
        cgroup: RunCgroup = ctx.state["cgroup"]
        control: ControlChannel = ctx.state["control"]
        code: int | None = control.exit_code
        signo: int | None = None
        if control.exit_code is not None and 128 < control.exit_code <= 128 + 64:
            code, signo = None, control.exit_code - 128  # the agent reports a signal death as 128 + N
        return Collected(
            exit_code=code,
            signal=signo,
            cpu_s=cgroup.cpu_seconds(),
            peak_memory_bytes=cgroup.memory_peak_bytes(),
            oom_kills=cgroup.oom_kills(),
            process_cap_hits=0,
            scratch_full=False,  # the guest's disks are not visible from the host
            output_area_full=area_full(ctx.output_dir),
            started=control.ready,
        )

    # teardown / sweep

    def teardown(self, ctx: RunContext) -> list[CleanupCheck]:
        name = machine_name(ctx.run_id)
        control: ControlChannel = ctx.state.get("control") or ControlChannel()
        cgroup: RunCgroup = ctx.state.get("cgroup") or RunCgroup(self.layout, self.cgroup_parent, ctx.run_id)
        vm_uid = control.facts.get("vm_uid")
        checks = cgroup_checks(
            cgroup,
            lambda: self.vmm_processes(name) + (processes_of_uid(vm_uid) if vm_uid else []),
            "VMM of this machine",
        )
        fd = ctx.state.pop("control_fd", None)
        if fd is not None:
            os.close(fd)
        checks.extend(self.machine_checks(name, control.facts.get("vm_dir")))
        checks.append(mounts_check(ctx))
        return checks

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
        swept = sweep_cgroups(self.layout, self.cgroup_parent, is_live)
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


def _enter_cgroup(procs_files: list[str]) -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)

    def enter() -> None:
        join_cgroups(procs_files)
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
