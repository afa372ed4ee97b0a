"""The engines' pure parts, checked without images, Redis, cgroups or a worker: the command lines
they build, the smolvm parent/child protocol, exit status decoding and the typed run state."""

from __future__ import annotations

import json
import os
import resource
import subprocess
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from runner.engines.base import GUEST_ENV, RunContext, guest_env
from runner.engines.common import decode_exit_status
from runner.engines.namespace import NamespaceEngine, NamespaceState, bwrap_argv, parse_status, rlimits
from runner.engines.smolvm.control import ControlChannel
from runner.engines.smolvm.engine import SmolvmEngine
from runner.engines.smolvm.guest import child_config, guest_argv
from runner.engines.smolvm.protocol import (
    EVENTS,
    ChildConfig,
    Deleted,
    DeleteFailed,
    Error,
    Exit,
    Facts,
    Mount,
    Ready,
    Starting,
    decode,
    encode,
)
from runner.host.cgroups import CgroupLayout, RunCgroup
from runner.images import ImageRef
from runner.spec import Limits, RunSpec

FDS = {"root": 3, "input": 4, "scratch": 5, "output": 6, "seccomp": 7, "control": 8, "block": 9}
PROGRAM = ["/usr/bin/python3", "/tmp/main.py"]
ENV = guest_env(Limits())


def _layout(tmp_path: Path) -> CgroupLayout:
    return CgroupLayout(version=2, root=tmp_path / "cgroup")


def _ctx(tmp_path: Path, **limits: Any) -> RunContext:
    view = tmp_path / "view"
    return RunContext(
        run_id="r1", spec=RunSpec(runtime="python", script=b""), limits=replace(Limits(), **limits),
        run_dir=tmp_path / "run", view_dir=view, input_dir=tmp_path / "run" / "in",
        scratch_dir=view / "scratch", output_dir=view / "out", slot=0, uid=1_900_000,
        image=ImageRef("python", "sha256:0", tmp_path / "image.tar", tmp_path / "rootfs"), argv=PROGRAM,
    )  # fmt: skip


def _pairs(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == option]


# --- bwrap's command line -------------------------------------------------------------


def test_the_bwrap_command_line_is_the_reviewed_one_in_its_fixed_order() -> None:
    setenv = [word for key, value in ENV.items() for word in ("--setenv", key, value)]
    assert bwrap_argv("/usr/bin/bwrap", FDS, PROGRAM, ENV) == [
        "/usr/bin/bwrap",
        "--unshare-user", "--uid", "1000", "--gid", "1000",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
        "--disable-userns", "--die-with-parent", "--new-session", "--hostname", "sandbox",
        "--ro-bind-fd", "3", "/",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(8 * 1024 * 1024), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--bind-fd", "5", "/tmp",
        "--ro-bind-fd", "4", "/input",
        "--bind-fd", "6", "/output",
        "--clearenv", *setenv,
        "--chdir", "/tmp",
        "--seccomp", "7",
        "--block-fd", "9",
        "--json-status-fd", "8",
        "--", *PROGRAM,
    ]  # fmt: skip


def test_every_directory_reaches_bwrap_as_an_fd_never_as_a_host_path() -> None:
    argv = bwrap_argv("/usr/bin/bwrap", FDS, PROGRAM, ENV)
    binds = [(argv[i], argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv) if arg.endswith("bind-fd")]
    assert binds == [("--ro-bind-fd", "3", "/"), ("--bind-fd", "5", "/tmp"),
                     ("--ro-bind-fd", "4", "/input"), ("--bind-fd", "6", "/output")]  # fmt: skip
    assert not any(arg in argv for arg in ("--bind", "--ro-bind", "--dev-bind"))


def test_the_environment_is_cleared_before_exactly_the_guest_environment_is_set() -> None:
    argv = bwrap_argv("/usr/bin/bwrap", FDS, PROGRAM, ENV)
    first_setenv = argv.index("--setenv")
    assert argv.index("--clearenv") == first_setenv - 1
    set_keys = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--setenv"]
    set_values = [argv[i + 2] for i, arg in enumerate(argv) if arg == "--setenv"]
    assert dict(zip(set_keys, set_values, strict=True)) == ENV == {**GUEST_ENV, "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize(("cpus", "threads"), [(0.5, "1"), (1.0, "1"), (1.5, "2"), (4.0, "4")])
def test_openmp_gets_the_threads_the_cpu_limit_can_keep_busy_not_one_per_host_cpu(cpus: float, threads: str) -> None:
    assert guest_env(replace(Limits(), cpus=cpus))["OMP_NUM_THREADS"] == threads


def test_the_seccomp_filter_and_the_status_pipe_come_as_the_engines_fds() -> None:
    argv = bwrap_argv("/usr/bin/bwrap", FDS, PROGRAM, ENV)
    assert _pairs(argv, "--seccomp") == ["7"]
    assert _pairs(argv, "--json-status-fd") == ["8"]
    assert argv.index("--seccomp") > argv.index("--clearenv")


def test_the_program_comes_last_after_a_double_dash_even_when_it_looks_like_options() -> None:
    program = ["--bind", "/", "/host", "--setenv", "X", "1"]
    argv = bwrap_argv("/usr/bin/bwrap", FDS, program, ENV)
    assert argv[argv.index("--") :] == ["--", *program]
    assert argv.index("--") == argv.index("--json-status-fd") + 2


# --- the namespace engine's rlimits ---------------------------------------------------


def test_rlimits_forbid_core_dumps_and_leave_file_sizes_to_the_tmpfs(tmp_path: Path) -> None:
    limits = dict(rlimits(_ctx(tmp_path)))
    assert limits[resource.RLIMIT_CORE] == 0
    assert limits[resource.RLIMIT_FSIZE] == resource.RLIM_INFINITY
    assert limits[resource.RLIMIT_NOFILE] == 1024


@pytest.mark.parametrize("max_processes", [1, 64, 512])
def test_the_process_rlimit_is_a_wide_backstop_behind_the_pids_cgroup(tmp_path: Path, max_processes: int) -> None:
    ctx = _ctx(tmp_path, max_processes=max_processes)
    nproc = dict(rlimits(ctx))[resource.RLIMIT_NPROC]
    pids_max = NamespaceEngine(layout=_layout(tmp_path)).cgroup_limits(ctx.limits).pids_max
    assert nproc == max_processes * 4 + 256 and nproc > pids_max


# --- the smolvm guest's command line and the child's config ---------------------------


def test_the_guest_program_runs_with_exactly_the_guest_environment_under_a_process_cap(tmp_path: Path) -> None:
    argv = guest_argv(_ctx(tmp_path, max_processes=40))
    env = sorted(f"{key}={value}" for key, value in {**ENV, "PWD": "/tmp"}.items())
    assert argv == ["/usr/bin/env", "-i", *env, "/usr/bin/prlimit", "--nproc=40", "--core=0", "--", *PROGRAM]


def test_the_child_config_survives_its_trip_through_json_unchanged(tmp_path: Path) -> None:
    config = child_config(
        _ctx(tmp_path), state_root=tmp_path / "state", boot_timeout_s=20.0, control_fd=9, sdk_dir=tmp_path / "smol"
    )
    again = ChildConfig.from_json(config.to_json())
    assert again == config
    assert all(isinstance(mount, Mount) for mount in again.mounts)
    assert again.sdk_path == str(tmp_path)  # the folder the smol package is imported from


def test_the_child_config_on_disk_is_a_plain_json_object_of_its_fields(tmp_path: Path) -> None:
    config = child_config(_ctx(tmp_path), state_root=tmp_path / "state", boot_timeout_s=20.0, control_fd=9)
    raw = json.loads(config.to_json())
    assert set(raw) == {f.name for f in fields(ChildConfig)}
    assert raw["mounts"][2] == [str(tmp_path / "view" / "out"), "/output", False]
    assert raw["sdk_path"] is None


def test_a_child_config_with_a_field_the_child_does_not_know_is_refused(tmp_path: Path) -> None:
    config = child_config(_ctx(tmp_path), state_root=tmp_path / "state", boot_timeout_s=20.0, control_fd=9)
    raw = {**json.loads(config.to_json()), "allow_hosts": ["example.org"]}
    with pytest.raises(TypeError):
        ChildConfig.from_json(json.dumps(raw))


# --- exit status decoding -------------------------------------------------------------


@pytest.mark.parametrize(("status", "signal"), [(129, 1), (137, 9), (143, 15), (192, 64)])
def test_an_exit_status_of_128_plus_n_is_a_death_by_signal_n(status: int, signal: int) -> None:
    assert decode_exit_status(status) == (None, signal)


@pytest.mark.parametrize("status", [0, 1, 2, 127, 128, 193, 255])
def test_an_exit_status_outside_the_signal_range_is_the_programs_exit_code(status: int) -> None:
    assert decode_exit_status(status) == (status, None)


def test_no_exit_status_is_unknown_not_zero() -> None:
    assert decode_exit_status(None) == (None, None)


def _namespace_ctx(tmp_path: Path, status: bytes, returncode: int | None) -> tuple[NamespaceEngine, RunContext]:
    engine = NamespaceEngine(layout=_layout(tmp_path))
    ctx = _ctx(tmp_path)
    ctx.state = NamespaceState(cgroup=RunCgroup(engine.layout, "cordon", ctx.run_id), status=status)
    ctx.process = cast("subprocess.Popen[bytes]", SimpleNamespace(returncode=returncode, pid=10))
    return engine, ctx


def test_the_namespace_engine_reads_the_programs_death_by_signal_from_bwraps_status(tmp_path: Path) -> None:
    engine, ctx = _namespace_ctx(tmp_path, b'{"child-pid": 11}\n{"exit-code": 137}\n', returncode=137)
    assert engine.exit_status(ctx) == (None, 9)
    assert engine.started(ctx)
    assert engine.tooling_pids(ctx) == {10, 11}


def test_bwrap_itself_killed_by_the_supervisor_is_reported_as_its_signal(tmp_path: Path) -> None:
    engine, ctx = _namespace_ctx(tmp_path, b"", returncode=-9)
    assert engine.exit_status(ctx) == (None, 9)
    assert not engine.started(ctx)  # the program never ran: bwrap reported no child pid


def test_bwraps_status_stream_is_read_object_by_object_until_garbage() -> None:
    raw = b' {"child-pid": 5, "cgroup-namespace": "x"}\n{"exit-code": 3}{"exit-code": 4} nonsense {"exit-code": 9}'
    assert parse_status(raw) == {"child-pid": 5, "exit-code": 4}


# --- the smolvm control channel -------------------------------------------------------


def test_garbled_lines_on_the_control_pipe_are_dropped() -> None:
    channel = ControlChannel()
    channel.feed(b'not json\n[1,2]\n"ready"\n{"event":\n\xff\xfe\x00\n{}\n{"event":["ready"]}\n{"event":5}\n')
    assert channel == ControlChannel()


def test_an_event_split_across_reads_is_taken_once_whole() -> None:
    channel = ControlChannel()
    channel.feed(b'{"event":"re')
    assert not channel.ready
    channel.feed(b'ady","boot_s":2}\n')
    assert channel.ready and channel.boot_s == 2.0


def test_unknown_events_are_dropped_with_all_they_carry() -> None:
    channel = ControlChannel()
    channel.feed(b'{"event":"made_up","exit_code":5,"vm_uid":7,"ready":true}\n')
    channel.feed(b'{"event":"READY"}\n{"exit_code":1}\n')
    assert channel == ControlChannel()


def test_a_bool_is_never_taken_for_a_number() -> None:
    channel = ControlChannel()
    channel.feed(b'{"event":"ready","boot_s":true,"vm_uid":true,"vmm_pid":false}\n{"event":"exit","exit_code":true}\n')
    assert channel.ready
    assert channel.boot_s is None and channel.exit_code is None
    assert channel.facts == Facts()


def test_a_field_of_the_wrong_type_is_dropped_but_its_event_is_kept() -> None:
    channel = ControlChannel()
    channel.feed(b'{"event":"ready","boot_s":"1.5","vm_dir":5,"vm_uid":"1000","name":"cordon-x"}\n')
    channel.feed(b'{"event":"exit","exit_code":"0"}\n{"event":"exit","exit_code":1.0}\n')
    assert channel.ready and channel.boot_s is None
    assert channel.facts == Facts(name="cordon-x")
    assert channel.exit_code is None


def test_facts_from_later_events_add_to_earlier_ones() -> None:
    channel = ControlChannel()
    channel.feed(b'{"event":"starting","name":"cordon-x","state_root":"/s"}\n')
    channel.feed(b'{"event":"ready","vm_dir":"/s/vms/ab","vm_uid":2000001,"vmm_pid":42}\n')
    assert channel.facts == Facts(name="cordon-x", state_root="/s", vm_dir="/s/vms/ab", vm_uid=2000001, vmm_pid=42)


def test_the_first_error_is_the_cause_and_its_message_is_bounded() -> None:
    channel = ControlChannel()
    channel.feed(encode(Error(code="boot_failed", message="x" * 5000, phase="boot", retryable=False)))
    channel.feed(encode(Error(code="exec_error", message="later")))
    failure = channel.failure()
    assert failure is not None and failure.code == "boot_failed" and not failure.retryable
    assert failure.message == "x" * 2000


def test_an_error_without_its_fields_is_a_retryable_engine_error() -> None:
    channel = ControlChannel()
    channel.feed(b'{"event":"error"}\n')
    failure = channel.failure()
    assert failure is not None and failure.code == "engine_error" and failure.retryable


def test_a_line_that_never_ends_does_not_grow_the_buffer_without_bound() -> None:
    channel = ControlChannel()
    for _ in range(10):
        channel.feed(b"x" * 100_000)
    assert len(channel.buffer) <= 65536


@pytest.mark.parametrize(
    "event",
    [
        Starting(facts=Facts(name="cordon-x", state_root="/s")),
        Ready(boot_s=1.25, facts=Facts(vm_dir="/s/vms/ab", vm_uid=2000001, vmm_pid=42)),
        Exit(exit_code=137),
        Error(code="kvm_unavailable", message="m", phase="boot", retryable=False, engine_code="KVM_UNAVAILABLE"),
        Deleted(),
        DeleteFailed(message="busy"),
    ],
    ids=lambda event: event.kind,
)
def test_what_the_child_encodes_the_parent_decodes_unchanged(event: Any) -> None:
    line = encode(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line.rstrip(b"\n")) == event


def test_every_event_kind_has_one_class() -> None:
    assert set(EVENTS) == {"starting", "ready", "exit", "error", "deleted", "delete_failed"}
    assert all(cls.kind == kind for kind, cls in EVENTS.items())


# --- the typed run state --------------------------------------------------------------


def test_an_engine_makes_its_run_state_on_first_use(tmp_path: Path) -> None:
    engine = NamespaceEngine(layout=_layout(tmp_path))
    ctx = _ctx(tmp_path)
    state = engine.state(ctx)
    assert isinstance(state, NamespaceState) and ctx.state is state and engine.state(ctx) is state
    assert state.cgroup.name == ctx.run_id and state.control_fd is None and state.status == b""


def test_an_engine_refuses_another_engines_run_state(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    NamespaceEngine(layout=_layout(tmp_path)).state(ctx)
    with pytest.raises(TypeError):
        SmolvmEngine(state_root=tmp_path / "state", layout=_layout(tmp_path)).state(ctx)


def test_a_run_never_prepared_has_nothing_to_stop_and_no_control_pipe(tmp_path: Path) -> None:
    engine = NamespaceEngine(layout=_layout(tmp_path))
    ctx = _ctx(tmp_path)
    assert engine.stop(ctx, grace_s=0.5) == "nothing to stop"
    assert engine.control_fds(ctx) == []
    assert ctx.state is None


def test_a_start_that_fails_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """The views were never made, so opening them fails part-way through the launch."""
    engine = NamespaceEngine(layout=_layout(tmp_path))
    ctx = _ctx(tmp_path)
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        engine.start(ctx)
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert engine.control_fds(ctx) == []
