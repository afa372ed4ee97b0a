"""The smolvm engine: its config and control channel, and, with the real binary on a host whose
KVM cannot boot a guest (these machines), a prompt, classified and leak-free failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.config import PROJECT_ROOT, SupervisorSettings, paths_from_env
from runner.egress.policy import Policy
from runner.egress.proxy import EgressSettings
from runner.engines.base import EngineHost, RunContext
from runner.engines.smolvm.control import ControlChannel
from runner.engines.smolvm.engine import SmolvmEngine, state_root_from_env
from runner.engines.smolvm.guest import STDIN_REDIRECT, child_config, machine_name
from runner.engines.smolvm.protocol import ChildConfig, Facts
from runner.spec import Limits, Outcome, RunSpec
from runner.supervisor import Supervisor, program_argv
from tests.conftest import child_env

pytestmark = pytest.mark.images


def _ctx(tmp_path: Path, spec: RunSpec | None = None, **limits: Any) -> RunContext:
    store = Supervisor().images
    spec = spec or RunSpec(runtime="python", script=b"")
    return RunContext(
        run_id="abc123", spec=spec, limits=replace(Limits(), **limits),
        run_dir=tmp_path / "run", view_dir=tmp_path / "view", input_dir=tmp_path / "run" / "in",
        scratch_dir=tmp_path / "view" / "scratch", output_dir=tmp_path / "view" / "out", slot=0, uid=0,
        image=store.resolve("python"), argv=program_argv(spec, "/job"),
    )  # fmt: skip


def test_the_child_config_keeps_the_guest_offline_and_bounded(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, memory_mib=512, cpus=2.0, disk_mib=1500, max_processes=40, wall_timeout_s=7)
    config = child_config(ctx, state_root=tmp_path / "state", boot_timeout_s=20, control_fd=9)
    assert config.name == machine_name("abc123") == "cordon-abc123"
    assert config.image == str(tmp_path / "view" / "root")  # the verified rootfs, bound read-only
    assert (config.cpus, config.memory_mib, config.storage_gb, config.overlay_gb) == (2, 512, 2, 1)
    assert config.mounts == [
        (str(tmp_path / "view" / "in"), "/input", True),
        (str(tmp_path / "view" / "scratch"), "/job", True),
        (str(tmp_path / "view" / "out"), "/output", False),
    ]
    env = ["HOME=/tmp", "LANG=C.UTF-8", "NODE_PATH=/input", "OMP_NUM_THREADS=2", "PATH=/usr/local/bin:/usr/bin:/bin",
           "PWD=/tmp", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "TMPDIR=/tmp"]  # fmt: skip
    assert config.argv == [
        "/usr/bin/env", "-i", *env,
        "/usr/bin/prlimit", "--nproc=40", "--core=0", "--", "/usr/bin/python3", "/job/main.py",
    ]  # fmt: skip
    assert config.user == "1000:1000" and config.workdir == "/tmp"
    assert config.exec_timeout_s > 7  # a backstop only: the host deadline decides
    assert config.control_fd == 9 and config.boot_timeout_s == 20
    assert set(config.env) == {
        "PATH", "HOME", "TMPDIR", "LANG", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "NODE_PATH", "OMP_NUM_THREADS",
    }  # fmt: skip


def test_the_guest_reads_its_stdin_from_job_through_a_constant_shell_and_args_follow_the_script(
    tmp_path: Path,
) -> None:
    spec = RunSpec(runtime="python", script=b"", stdin="3 4\nü\n".encode(), args=("a b", "--x", "$(id)"))
    config = child_config(_ctx(tmp_path, spec), state_root=tmp_path / "state", boot_timeout_s=20, control_fd=9)
    program = ["/usr/bin/python3", "/job/main.py", "a b", "--x", "$(id)"]
    assert config.argv[-9:] == [*STDIN_REDIRECT, *program]  # the args are positional, never shell text
    assert STDIN_REDIRECT[2] == 'exec "$@" < /job/stdin'
    assert ChildConfig.from_json(config.to_json()) == config
    plain = child_config(_ctx(tmp_path), state_root=tmp_path / "state", boot_timeout_s=20, control_fd=9)
    assert "/bin/sh" not in plain.argv  # no stdin: the program as before, stdin the agent's (empty)


def run_child(tmp_path: Path, config_for: Callable[[int], ChildConfig]) -> tuple[ChildConfig, list[dict[str, Any]]]:
    """Run smolvm_child.main in this process on the config made for a control pipe's write end;
    the config and the events it said on the pipe."""
    from runner.engines.smolvm import child as smolvm_child

    read, write = os.pipe()
    config = config_for(write)
    (tmp_path / "config.json").write_text(config.to_json())
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert smolvm_child.main(str(tmp_path / "config.json")) == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        os.close(write)
    with os.fdopen(read, "rb") as control:
        return config, [json.loads(line) for line in control.read().splitlines()]


def test_the_child_asks_the_agent_for_no_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """smolvm_child itself, against the SDK with only Machine.create replaced: nothing boots."""
    import smol

    class FakeMachine:
        def __init__(self) -> None:
            self.opts: Any = None
            self.deleted = False

        def exec_stream(self, argv: list[str], opts: Any) -> Any:
            self.argv, self.opts = argv, opts
            return iter([{"kind": "exit", "exit_code": 0}])

        def delete(self) -> None:
            self.deleted = True

    machine = FakeMachine()
    monkeypatch.setattr(smol.Machine, "create", lambda config, connect: machine)
    monkeypatch.setenv("HOME", os.environ.get("HOME", "/root"))  # the child sets its own
    spec = RunSpec(runtime="python", script=b"", stdin=b"line\n", args=("x",))
    ctx = _ctx(tmp_path, spec)
    ctx.output_dir.mkdir(parents=True)
    config, said = run_child(tmp_path, lambda fd: child_config(ctx, state_root=tmp_path / "state", boot_timeout_s=20,
                                                               control_fd=fd))  # fmt: skip
    assert [event["event"] for event in said] == ["starting", "ready", "exit", "deleted"]
    assert isinstance(machine.opts, smol.ExecOptions) and machine.opts.stdin is None
    assert machine.argv == config.argv and machine.argv[-1] == "x" and machine.deleted


def test_the_child_environment_is_built_from_nothing_and_hardened(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMOL_CLOUD_TOKEN", "secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    env = SmolvmEngine(state_root=Path("/var/lib/x")).child_env()
    assert "SMOL_CLOUD_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["SMOLVM_SECCOMP"] == env["SMOLVM_LANDLOCK"] == "enforce"
    assert env["SMOLVM_IMAGE_SEEDS"] == "0" and env["HOME"] == "/var/lib/x"


def test_the_control_channel_takes_typed_known_events_across_reads() -> None:
    channel = ControlChannel()
    channel.feed(b'{"event":"starting","name":"cordon-x"}\n{"event":"rea')
    assert not channel.ready
    channel.feed(b'dy","boot_s":1.5,"vm_start":"warm","vm_uid":2000001,"vm_dir":"/s/vms/ab"}\nnot json\n')
    channel.feed(b'{"event":"exit","exit_code":"0"}\n{"event":"made_up","exit_code":5}\n[1,2]\n')
    assert channel.ready and channel.boot_s == 1.5
    assert channel.vm_start is None  # only "cold" or "branch" is a VM start
    channel.feed(b'{"event":"ready","vm_start":"branch"}\n')
    assert channel.vm_start == "branch"
    assert channel.facts == Facts(name="cordon-x", vm_uid=2000001, vm_dir="/s/vms/ab")
    assert channel.exit_code is None  # a string is not an exit code; unknown events are dropped
    channel.feed(b'{"event":"exit","exit_code":3}\n{"event":"error","code":"exec_error","message":"m"}\n')
    channel.feed(b'{"event":"error","code":"later","message":"ignored"}\n')
    assert channel.exit_code == 3
    failure = channel.failure()
    assert failure is not None and failure.code == "exec_error" and failure.outcome is Outcome.SANDBOX_ERROR


def _fake_supervisor(mode: str, monkeypatch: pytest.MonkeyPatch) -> Supervisor:
    monkeypatch.setenv("FAKE_CHILD_MODE", mode)
    settings = SupervisorSettings.from_env()
    engine = SmolvmEngine(
        state_root=state_root_from_env(),
        child_module="tests.runner.fake_smolvm_child",
        extra_env={"PYTHONPATH": str(PROJECT_ROOT), "FAKE_CHILD_MODE": mode},
    )
    supervisor = Supervisor(settings=settings)
    supervisor.engines["smolvm"] = engine
    return supervisor


def test_a_guest_printing_control_messages_cannot_fool_the_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = _fake_supervisor("forge", monkeypatch)
    result = supervisor.run(RunSpec(runtime="python", script=b"pass", engine="smolvm"))
    assert result.outcome is Outcome.SUCCEEDED, result.to_json()
    assert result.exit_code == 0 and result.error is None
    assert b'"code":"boot_failed"' in result.stdout and b'"exit_code":99' in result.stdout
    assert result.isolation == "vm" and result.cleanup_ok, result.cleanup


def test_a_boot_error_on_the_control_channel_is_a_retryable_sandbox_error(monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = _fake_supervisor("boot_error", monkeypatch)
    result = supervisor.run(RunSpec(runtime="python", script=b"pass", engine="smolvm"))
    assert result.outcome is Outcome.SANDBOX_ERROR and not result.outcome.charged
    assert result.error is not None and result.error.code == "boot_failed" and result.error.retryable
    assert result.wall_s is None  # the program never started
    assert result.cleanup_ok, result.cleanup


def test_a_run_hands_its_stdin_and_args_to_the_smolvm_child(monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = _fake_supervisor("echo", monkeypatch)
    spec = RunSpec(runtime="python", script=b"pass", engine="smolvm", stdin=b"in\xc3\xbc\n", args=("-v", "a b"))
    result = supervisor.run(spec)
    assert result.outcome is Outcome.SUCCEEDED, result.to_json()
    said = json.loads(result.stdout)
    assert said["job"] == {"main.py": "pass", "stdin": "inü\n"}  # /job, read-only in the guest
    assert said["argv"][-8:] == [*STDIN_REDIRECT, "/usr/bin/python3", "/job/main.py", "-v", "a b"]
    assert result.cleanup_ok, result.cleanup
    assert result.vm_start == "cold" and result.to_json()["vm_start"] == "cold"  # as the child said


def test_a_run_with_egress_puts_the_child_and_its_vmm_in_the_runs_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child (whose VMM would open the guest's sockets) runs in the run's egress namespace: it
    sees loopback only and reaches the run's proxy there; the guest gets TSI network and the proxy."""
    supervisor = _fake_supervisor("egress", monkeypatch)
    supervisor.egress = EgressSettings(ceiling=Policy.parse(["api.example.org:443"]))
    result = supervisor.run(RunSpec(runtime="python", script=b"pass", engine="smolvm", egress=("api.example.org:443",)))
    assert result.outcome is Outcome.SUCCEEDED and result.cleanup_ok, result.to_json()
    said = json.loads(result.stdout)
    assert said["netns"] != os.readlink("/proc/self/ns/net") and said["interfaces"] == ["lo"]
    assert said["network"] is True and said["floor"] == "off"  # the namespace bounds it, not smolvm's floor
    assert said["env"]["HTTPS_PROXY"] == said["env"]["http_proxy"] == "http://127.0.0.1:3128"
    assert {"HTTPS_PROXY=http://127.0.0.1:3128", "http_proxy=http://127.0.0.1:3128"} <= set(said["argv"])  # env -i
    assert said["proxy"] == "HTTP/1.1 403 Forbidden" and "egress" in said["cold_reason"]
    assert result.egress is not None and result.egress["attempts"][0]["host"] == "elsewhere.example.org"
    assert "egress" in {c.name for c in result.cleanup}


@pytest.mark.parametrize("mode", ["sparse_output", "dense_output"])
def test_an_output_file_over_the_cap_is_an_output_limit_naming_it(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's real output area and export, with the guest's writes made as the VMM makes
    them: the area has room to show the file over the cap, as in the namespace engine."""
    supervisor = _fake_supervisor(mode, monkeypatch)
    limits = Limits(output_max_bytes=1024 * 1024)
    result = supervisor.run(RunSpec(runtime="python", script=b"pass", engine="smolvm", limits=limits))
    assert result.outcome is Outcome.OUTPUT_LIMIT, result.to_json()
    assert result.reason == "output file big is over the cap of 1 MiB"
    assert [r.name for r in result.rejected_outputs] == ["big"] and result.outputs == []
    assert result.cleanup_ok, result.cleanup


# --- the real engine, on a host whose KVM cannot boot a guest --------------------------


@pytest.fixture
def failing_kvm(canary: dict[str, object]) -> None:
    if canary.get("ok"):
        pytest.skip("this host boots microVMs (its canary passed): there is no boot failure to test")


def _nothing_of(run_id: str) -> list[str]:
    """What the state root, views, staging, locks and cgroups still hold of a run."""
    engine = SmolvmEngine(state_root=state_root_from_env())
    name = machine_name(run_id)
    left = []
    vms = state_root_from_env() / ".cache" / "smolvm" / "vms"
    for path in vms.iterdir() if vms.is_dir() else ():
        names_it = path.is_dir() and (path / "name").exists() and (path / "name").read_text().strip() == name
        if path.name == f".{name}.fork-operation.lock" or names_it:
            left.append(str(path))
    if name in engine.machine_names():
        left.append(f"machine record {name}")
    left += [str(p) for p in engine.vmm_processes(name)]
    paths = paths_from_env()
    for path in (state_root_from_env().parent / "views" / run_id, paths.data_dir / "runs" / run_id,
                 paths.host_state_dir / "locks" / f"{run_id}.lock"):  # fmt: skip
        if path.exists():
            left.append(str(path))
    for parent in engine.layout.parents("cordon"):
        if (parent / run_id).exists():
            left.append(str(parent / run_id))
    return left


@pytest.mark.usefixtures("failing_kvm")
def test_a_smolvm_run_here_ends_as_a_prompt_boot_error_leaving_nothing(project_root: Path, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('never runs here')\n")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--runtime", "python", "--engine", "smolvm", "--json", str(script)],
        cwd=project_root, env=child_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    took = time.monotonic() - started
    result = json.loads(proc.stdout)
    assert proc.returncode == 2
    assert result["outcome"] == "sandbox_error", result
    assert result["error"]["code"] in ("boot_failed", "kvm_unavailable"), result["error"]
    assert result["error"]["message"]  # the engine's own words (or the bound that fired)
    assert took < SmolvmEngine.from_host(EngineHost(environ=os.environ)).boot_timeout_s + 10
    assert result["engine"] == "smolvm" and result["isolation"] == "vm"
    assert result["cleanup"]["ok"], result["cleanup"]
    names = {c["name"] for c in result["cleanup"]["checks"]}
    assert {"processes", "cgroups", "machine record", "vm directory", "uid marker", "lock files", "mounts"} <= names
    assert _nothing_of(result["run_id"]) == []


@pytest.mark.usefixtures("failing_kvm")
def test_a_supervisor_killed_mid_boot_is_swept_clean(project_root: Path, tmp_path: Path) -> None:
    views = state_root_from_env().parent / "views"
    before = {p.name for p in views.iterdir()} if views.is_dir() else set()
    script = tmp_path / "job.py"
    script.write_text("print('never runs here')\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run", "--runtime", "python", "--engine", "smolvm", "--json", str(script)],
        cwd=project_root, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    engine = SmolvmEngine(state_root=state_root_from_env())
    deadline = time.monotonic() + 30
    run_id = None
    while time.monotonic() < deadline and run_id is None:
        for entry in views.iterdir() if views.is_dir() else ():
            if entry.name not in before and engine.vmm_processes(machine_name(entry.name)):
                run_id = entry.name
        time.sleep(0.1)
    assert run_id is not None, "no VMM started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone_by = time.monotonic() + 10
    while engine.vmm_processes(machine_name(run_id)) and time.monotonic() < gone_by:
        time.sleep(0.2)
    assert engine.vmm_processes(machine_name(run_id)) == [], "the VMM outlived its supervisor"
    assert _nothing_of(run_id), "expected debris after the crash"
    sweep = subprocess.run([sys.executable, "-m", "runner", "sweep"], cwd=project_root, env=child_env(),
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    assert _nothing_of(run_id) == []


@pytest.mark.usefixtures("failing_kvm")
def test_doctor_reports_the_canary_failure_with_its_reason(project_root: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "runner", "doctor", "--json", "--recheck"], cwd=project_root,
                          env=child_env(), capture_output=True, text=True, timeout=180)  # fmt: skip
    report = json.loads(proc.stdout)
    canary = next(c for c in report["checks"] if c["name"] == "smolvm canary boot")
    assert not canary["ok"]
    assert "FAILED" in canary["detail"] and ("boot_failed" in canary["detail"] or "kvm_unavailable" in canary["detail"])
    assert report["engines"] == {"namespace": True, "smolvm": False}
    assert report["auto"] == "namespace" and "the smolvm engine cannot run here" in report["conclusion"]
    assert "canary boot failed" in report["conclusion"], report["conclusion"]
    egress = next(c for c in report["checks"] if c["name"] == "egress")  # the ceiling is empty unless set
    assert egress["ok"] and "ceiling empty: no run has network" in egress["detail"], egress
    assert proc.returncode == 0  # the namespace engine still serves
    assert canary["advisory"] and "no microVM boots on this host" in canary["detail"]
    # As `make run` prints it on a first start: a note beside the conclusion, not a FAIL.
    shown = subprocess.run([sys.executable, "-m", "runner", "doctor"], cwd=project_root, env=child_env(),
                           capture_output=True, text=True, timeout=180)  # fmt: skip
    [line] = [line for line in shown.stdout.splitlines() if "smolvm canary boot" in line]
    assert line.startswith("note  smolvm canary boot: no microVM boots on this host"), line
    assert not [line for line in shown.stdout.splitlines() if line.startswith("FAIL  smolvm")], shown.stdout
    assert "conclusion: runs use the namespace engine" in shown.stdout


def test_a_failed_advisory_check_is_a_fail_when_no_engine_serves() -> None:
    from runner.doctor import render

    check = {"name": "smolvm canary boot", "ok": False, "detail": "no microVM boots", "advisory": True}
    report = {"checks": [check], "engines": {"smolvm": False}, "conclusion": "no engine"}
    assert render(report).splitlines()[0] == "FAIL  smolvm canary boot: no microVM boots"
    assert render({**report, "engines": {"smolvm": False, "namespace": True}}).startswith("note  smolvm")
    assert render({**report, "checks": [{**check, "advisory": False}], "engines": {"namespace": True}}).startswith(
        "FAIL"
    )


@pytest.mark.usefixtures("failing_kvm")
def test_auto_falls_back_to_namespace_and_says_why(project_root: Path, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--runtime", "python", "--engine", "auto", "--json", str(script)],
        cwd=project_root, env=child_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    result = json.loads(proc.stdout)
    assert result["outcome"] == "succeeded" and result["engine"] == "namespace"
    assert result["engine_note"].startswith("auto fell back to namespace: ")
    assert "canary" in result["engine_note"]


@pytest.mark.parametrize("engine", ["auto", "namespace"])
def test_require_vm_refuses_to_fall_back(
    project_root: Path, tmp_path: Path, engine: str, canary: dict[str, object]
) -> None:
    if canary.get("ok") and engine == "auto":
        pytest.skip("this host boots microVMs: auto would not fall back")
    script = tmp_path / "job.py"
    script.write_text("print('must not run')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--runtime", "python", "--engine", engine, "--json", str(script)],
        cwd=project_root, env=child_env(CORDON_REQUIRE_VM="true"), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    result = json.loads(proc.stdout)
    assert proc.returncode == 2
    assert result["outcome"] == "sandbox_error" and result["error"]["code"] == "vm_required"
    assert "requires the microVM engine" in result["error"]["message"]
    assert result["stdout"] == "" and result["wall_s"] is None


def test_with_per_vm_uids_the_job_and_its_output_area_take_the_vmm_uid(tmp_path: Path) -> None:
    """virtiofs acts with the guest caller's credentials, which a per-VM uid VMM can take only
    for its own uid: the job runs as that uid, and the output area is that uid's."""
    from runner.engines.smolvm.child import hand_over_output, vmm_uid

    out = tmp_path / "out"
    out.mkdir(mode=0o770)
    assert hand_over_output(str(out), "1000:1000", 2000007) == "2000007:2000007"
    assert (out.stat().st_uid, out.stat().st_gid) == (2000007, 2000007)
    # The VMM as root (harness only): virtiofs passes the guest user's uid through.
    assert hand_over_output(str(out), "1000:1000", 0) == "1000:1000"
    assert (out.stat().st_uid, out.stat().st_gid) == (1000, 1000)
    assert vmm_uid(Facts(vm_uid=2000003)) == 2000003
    assert vmm_uid(Facts(vmm_pid=os.getpid())) == os.getuid()  # from the VMM process's owner
    assert vmm_uid(Facts()) == 0


def test_a_uid_marker_smolvm_left_for_a_machine_whose_directory_is_gone_is_reclaimed_and_said(tmp_path: Path) -> None:
    """smolvm's own allocator counts such a marker stale (seen under emulated KVM: a cold VM with
    egress stopped at its cap); teardown removes it and the audit says so. A marker of another
    machine, or of one whose directory is still there, is left alone (and, for this machine, reported)."""
    engine = SmolvmEngine.from_host(EngineHost(environ={**os.environ, "CORDON_SMOLVM_STATE_DIR": str(tmp_path / "s")}))
    uids = engine.state_root / ".cache" / "smolvm" / "uids"
    uids.mkdir(parents=True)
    (uids / "2000001").write_text("deadbeef")
    (uids / "2000002").write_text("another")
    vm_dir = engine.state_root / ".cache" / "smolvm" / "vms" / "deadbeef"
    checks = {c.name: c for c in engine.machine_checks("cordon-gone", str(vm_dir))}
    assert checks["uid marker"].ok and checks["uid marker"].detail == "released (smolvm left 2000001, stale: removed)"
    assert sorted(p.name for p in uids.iterdir()) == ["2000002"]
    (uids / "2000003").write_text("alive")
    (engine.state_root / ".cache" / "smolvm" / "vms" / "alive").mkdir(parents=True)
    vm_dir = engine.state_root / ".cache" / "smolvm" / "vms" / "alive"
    checks = {c.name: c for c in engine.machine_checks("cordon-alive", str(vm_dir))}
    assert not checks["vm directory"].ok and not checks["uid marker"].ok
    assert (uids / "2000003").exists()
