"""The `smolvm` engine: a fresh microVM with its own guest kernel per run (isolation "vm").

The supervisor starts a per-run child (runner.engines.smolvm.child) inside the run's cgroup;
the child drives the SDK and so owns the VMM, which dies with it. Control facts come back on
a dedicated pipe (never mixed with guest output); CPU time and peak memory come from the
host's cgroup. Teardown deletes the machine through smolvm's CLI and audits the VMM process,
the machine record, the VM directory, the per-VM uid marker, lock files, cgroups and mounts.
"""

from __future__ import annotations

import ctypes
import dataclasses
import grp
import json
import os
import resource
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.config import PROJECT_ROOT
from runner.engines.base import (
    Availability,
    CgroupLimits,
    Collected,
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
    Launch,
    bind_views,
    decode_exit_status,
    mount_output_area,
    output_area_bytes,
    processes_of_uid,
)
from runner.engines.smolvm import checks
from runner.engines.smolvm.bases import Bases
from runner.engines.smolvm.control import ControlChannel
from runner.engines.smolvm.guest import MACHINE_PREFIX, child_config, guest_argv, machine_name, write_stdin
from runner.engines.smolvm.runtime import (
    VMM_OVERHEAD_MIB,
    component_hashes,
    engine_version,
    runtime_copy,
    wheel_dir,
)
from runner.engines.smolvm.warm import WarmSettings, WarmStarts
from runner.env import env_choice, env_float, env_int, env_path
from runner.host.admission import Capacity
from runner.host.cgroups import CgroupLayout, run_names
from runner.host.spawner import join_netns
from runner.images import ImageRef, ImageStore
from runner.spec import MIB, CleanupCheck, Limits, RunnerError, RunSpec

# Where VMs keep their state unless CORDON_SMOLVM_STATE_DIR says otherwise.
DEFAULT_STATE_ROOT = Path("/var/lib/cordon/smolvm")
# Harness-only smolvm switches an engine passes on to smolvm when its environment sets them.
PASSTHROUGH = frozenset({"SMOLVM_VM_UID_DROP"})
_PR_SET_PDEATHSIG = 1
# A ready branch's hand-over: the child refreshes the guest's entropy and clock (bounded by its
# REFRESH_TIMEOUT_S) before it answers.
HAND_OVER_TIMEOUT_S = 60.0


def state_root_from_env(environ: Mapping[str, str] | None = None) -> Path:
    """Where VMs keep their state: CORDON_SMOLVM_STATE_DIR, relative to the project if not absolute."""
    return env_path("CORDON_SMOLVM_STATE_DIR", DEFAULT_STATE_ROOT, base=PROJECT_ROOT, environ=environ)


@dataclass
class SmolvmState(CgroupState):
    control: ControlChannel = field(default_factory=ControlChannel)  # fed from control_fd
    base: str | None = None  # the warm base this run was given to branch
    machine: str = ""  # the machine's name: its run's, or the ready sandbox's it was made as


class SmolvmEngine(WarmStarts, CgroupEngine[SmolvmState]):
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
    # A run with egress: its child, and so the VMM it spawns, joins the run's network namespace
    # (loopback and the egress proxy only) before exec, and the guest gets smolvm's TSI network:
    # a guest socket its own stack cannot serve is opened by the VMM, in that namespace. So the
    # guest reaches 127.0.0.1:3128, the proxy, and no route off the machine (make test-vm).
    scoped_egress = True
    # A ready sandbox is a branch of a warm base, made ahead with the areas of its run-to-be
    # mounted, its child waiting on the hand-over socket; at hand-over the child refreshes the
    # guest's entropy and clock, then starts the program through the agent. No interpreter waits:
    # the program starts in the guest as in any VM run.
    ready_sandboxes = True
    ready_interpreter = False

    def __init__(
        self,
        *,
        state_root: Path,
        boot_timeout_s: float = 20.0,
        cgroup_parent: str = "cordon",
        layout: CgroupLayout | None = None,
        extra_env: dict[str, str] | None = None,
        child_module: str = "runner.engines.smolvm.child",
        warm: WarmSettings | None = None,
        canary_path: Path | None = None,
    ):
        super().__init__(cgroup_parent=cgroup_parent, layout=layout)
        self.child_module = child_module
        self.state_root = state_root
        self.boot_timeout_s = boot_timeout_s
        self.extra_env = extra_env or {}
        self.warm = warm or WarmSettings(mode="false")
        self.canary_path = canary_path  # the canary boot's verdict (runner.engines.smolvm.checks)
        self.bases = Bases(state_root.parent / "bases")
        self._build_lock = threading.Lock()

    # --- the engine's own policy ---------------------------------------------------------------

    @classmethod
    def from_host(cls, host: EngineHost) -> SmolvmEngine:
        """Its settings, CORDON_SMOLVM_*: where VMs keep their state, the boot's bound, warm starts.
        Without a host state directory (a test's engine) there is no canary file and no warm start."""
        env = host.environ
        state = host.host_state_dir
        warm = WarmSettings(
            mode=env_choice("CORDON_SMOLVM_WARM", "auto", ("auto", "true", "false"), environ=env),
            build=env_choice("CORDON_SMOLVM_WARM_BUILD", "lazy", ("lazy", "start"), environ=env),
            max_bases=env_int("CORDON_SMOLVM_WARM_MAX_BASES", 4, minimum=1, maximum=64, environ=env),
            max_age_s=env_float("CORDON_SMOLVM_WARM_MAX_AGE_S", 86400.0, minimum=60.0, environ=env),
            canary_file=state / checks.WARM_CANARY_FILE if state else None,
            admission_dir=state / "admission" if state else None,
            memory_budget_mib=Capacity.from_env(env).memory_mib,
        )
        return cls(
            state_root=state_root_from_env(env),
            boot_timeout_s=env_float("CORDON_SMOLVM_BOOT_TIMEOUT_S", 20.0, minimum=1.0, environ=env),
            cgroup_parent=host.cgroup_parent,
            extra_env={k: v for k, v in env.items() if k in PASSTHROUGH},
            warm=warm if state else WarmSettings(mode="false"),
            canary_path=state / checks.CANARY_FILE if state else None,
        )

    def read_canary(self) -> dict[str, Any] | None:
        return checks.read_json(self.canary_path) if self.canary_path else None

    def availability(self) -> Availability:
        # Only a boot proves a microVM can run here: the verdict of the last canary boot.
        return checks.canary_verdict(self.read_canary())

    def installed(self) -> Availability:
        """Whether the smolmachines wheel is installed, with its version and its components' hashes."""
        if wheel_dir() is None:
            return Availability(False, "the smolmachines wheel is not installed")
        hashes = ", ".join(f"{name} {digest[:16]}" for name, digest in component_hashes().items())
        return Availability(True, f"{engine_version()}; sha256: {hashes}")

    def diagnose(self, ctx: DoctorContext) -> Diagnosis:
        return checks.diagnose(self, ctx)

    def host_report(self) -> dict[str, Any]:
        return {"smolvm_canary": self.read_canary() or {}}

    def warm_up(self, images: ImageStore) -> list[str]:
        """With warm starts on and CORDON_SMOLVM_WARM_BUILD=start, start building the base of each
        image at the default size (a worker calls this as it starts); what was started."""
        if self.warm.build != "start" or not self.warm_enabled()[0] or not self.availability().ok:
            return []
        started = []
        for name in sorted(images.built()):
            ref = images.resolve(name)
            key = self.base_key(ref, Limits())
            if self.bases.read(key.name) is None and self.build_base(ref, key):
                started.append(key.name)
        return started

    def kept(self) -> list[dict[str, str]]:
        """Each warm base: its image and state ("dead" once its keeper is gone; a sweep removes it)."""
        return [
            {"kind": "warm_base", "image": r.key.image, "state": r.state if r.keeper_alive() else "dead"}
            for r in self.bases.records()
        ]

    def sweep_kept(self) -> list[str]:
        return self.sweep_bases(everything=True)

    def version(self) -> str:
        return engine_version()

    def cgroup_limits(self, limits: Limits, *, cell: bool = False) -> CgroupLimits:
        # The VMM's cgroup holds the guest's memory, smolvm's own allowance, and the output area's
        # tmpfs pages, which the VMM writes on the guest's behalf.
        return CgroupLimits(
            memory_bytes=(limits.memory_mib + VMM_OVERHEAD_MIB) * MIB + output_area_bytes(limits, cell=cell),
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
        write_stdin(ctx)  # and the stdin, which the guest's shell opens as the program's fd 0
        # The VMM runs as a per-VM uid known only once it starts; it is in the kvm group (it opens
        # /dev/kvm), so the area is root:kvm 0770 until the child hands it to that uid.
        mount_output_area(ctx, uid=0, gid=_kvm_gid(), mode=0o770)

    def launch(self, ctx: RunContext, fds: dict[str, int]) -> Launch:
        if ctx.egress is None:
            base, cold_reason = self.warm_base(ctx)
        else:  # a base and its branches have no network; a run with egress boots its own VM
            base, cold_reason = None, "the run has egress, which a warm base's branches cannot have"
            fds["netns"] = os.dup(ctx.egress.netns_fd)
        if ctx.ready_end is not None:  # a ready branch: of its class's base, or none is made
            if base is None:
                raise RunnerError("base_unusable", f"a ready branch needs a frozen base: {cold_reason}")
            fds["ready"] = os.dup(ctx.ready_end.fileno())
        state = self.state(ctx)
        state.base, state.machine = base, machine_name(ctx.run_id)
        config = child_config(
            ctx,
            state_root=self.state_root,
            boot_timeout_s=self.boot_timeout_s,
            control_fd=fds["control"],
            sdk_dir=self.runtime(),
            base=base,
            base_lock=self.bases.folder(base) / "lock" if base else None,
            cold_reason=cold_reason,
            ready_fd=fds.get("ready"),
        )
        config_path = ctx.run_dir / "smolvm-child.json"
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(config.to_json())
        return Launch(
            argv=[sys.executable, "-m", self.child_module, str(config_path)],
            env=self.child_env(egress=ctx.egress is not None),
            before_exec=_die_with_parent(netns_fd=fds.get("netns", -1)),
        )

    def runtime(self) -> Path:
        """The smol package the child imports and whose smol-vmm the CLI runs (a traversable copy)."""
        return runtime_copy(self.state_root.parent / "runtime")

    def child_env(self, *, egress: bool = False) -> dict[str, str]:
        """The child's environment. With egress the VMM's network namespace is the bound, and smolvm's
        egress floor, which refuses loopback (where the proxy listens, measured: EACCES in the
        guest), is off; without, the guest has no network and the floor is strict besides."""
        folder = self.runtime() if wheel_dir() is not None else None
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.state_root),
            "LANG": "C.UTF-8",
            "SMOLVM_LIB_DIR": str(folder) if folder else "",
            "SMOLVM_SECCOMP": "enforce",
            "SMOLVM_LANDLOCK": "enforce",
            "SMOLVM_IMAGE_SEEDS": "0",  # no image-seed helper VM (unadmitted, 8 GiB by default)
            "SMOLVM_EGRESS_FLOOR": "off" if egress else "strict",
        }
        env.update(self.extra_env)
        env.pop("SMOL_CLOUD_TOKEN", None)
        return env

    def ready_fit(self, spec: RunSpec, image: ImageRef) -> tuple[str | None, str]:
        """The warm base a ready branch for runs like `spec` is made from (the runs its branches
        serve: same image, vCPUs, memory and disk)."""
        on, why = self.warm_enabled()
        base, why = self.bases.usable(self.base_key(image, spec.limits)) if on else (None, why)
        return base, "" if base else f"a ready branch needs a warm base: {why}"

    def ready_room(self, fixed: str, room: Limits) -> Limits | None:
        record = self.bases.read(fixed)
        if record is None or record.state != "frozen":
            return None
        key = record.key  # base_key of these limits is `key` again: the launch branches this base
        return Limits(memory_mib=key.memory_mib, cpus=float(key.cpus), disk_mib=key.storage_gb * 1024,
                      max_processes=room.max_processes)  # fmt: skip

    def hand_over(self, ctx: RunContext, host: socket.socket) -> None:
        """The run's limits on the branch's cgroups and output area, its stdin beside its script in
        /job, then its program and environment to the child, which refreshes the guest's entropy
        and clock and starts it."""
        self.bind_run_limits(ctx)
        try:
            write_stdin(ctx)
        except OSError as exc:
            raise HandOverError(f"its stdin could not be written: {exc}") from exc
        order = {"argv": guest_argv(ctx), "env": run_env(ctx), "exec_timeout_s": ctx.limits.wall_timeout_s + 5.0}
        try:
            host.send(json.dumps(order).encode())
            host.settimeout(HAND_OVER_TIMEOUT_S)
            answer = host.recv(65536)
        except OSError as exc:  # a time-out too
            raise HandOverError(f"its child did not take the run: {exc}") from exc
        finally:
            host.settimeout(None)
        said = json.loads(answer) if answer else {"problem": "its child exited"}
        if not said.get("handed"):
            raise HandOverError(f"the branch's refresh failed: {said.get('problem') or said}")

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
        state = self.state(ctx)
        control = state.control
        if state.base and control.ready:  # the base's record of its branches: served, or failed in a row
            self.bases.count_branch(state.base, ok=control.vm_start == "branch")
        return dataclasses.replace(
            super().collect(ctx), vm_start=control.vm_start, vm_note=control.vm_note, timings=control.timings
        )

    def started(self, ctx: RunContext) -> bool:
        return self.state(ctx).control.ready

    # teardown / sweep

    def stray_processes(self, ctx: RunContext) -> list[int]:
        # A branch's uid is its base's and its siblings': the child reports a VM uid for a cold
        # boot only, the one whose every process is this run's.
        vm_uid = self.state(ctx).control.facts.vm_uid
        return self.vmm_processes(self._machine(ctx)) + (processes_of_uid(vm_uid) if vm_uid else [])

    def strays_described(self, ctx: RunContext) -> str:
        return "VMM of this machine"

    def engine_checks(self, ctx: RunContext) -> list[CleanupCheck]:
        return self.machine_checks(self._machine(ctx), self.state(ctx).control.facts.vm_dir)

    def _machine(self, ctx: RunContext) -> str:
        """The run's machine: named when it was launched (a ready branch, as its sandbox)."""
        return self.state(ctx).machine or machine_name(ctx.run_id)

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
        released = "released"
        if markers and not leftovers:
            # smolvm left the per-VM uid's marker of a machine whose directory is gone (seen when a
            # cold VM with egress was stopped at its cap): its own allocator counts such a marker
            # stale and reclaims it lazily (process.rs, allocate_vm_uid). Reclaimed now, and said.
            for marker in markers:
                Path(marker).unlink(missing_ok=True)
            released = f"released (smolvm left {', '.join(Path(m).name for m in markers)}, stale: removed)"
            markers = [m for m in markers if Path(m).exists()]
        checks.append(CleanupCheck("uid marker", not markers, f"left: {markers}" if markers else released))
        checks.append(CleanupCheck("lock files", not lock.exists(), "fork-operation lock removed"))
        return checks

    def sweep(self, is_live: Callable[[str], bool]) -> list[str]:
        swept = super().sweep(is_live)
        if self.bases.root.is_dir() or run_names(self.layout, self._bases_parent()):
            swept += self.sweep_bases()
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


def _die_with_parent(*, netns_fd: int = -1) -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)

    def enter() -> None:
        if netns_fd >= 0:  # the run's egress namespace, before anything else
            join_netns(netns_fd)
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
