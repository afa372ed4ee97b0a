"""Warm starts' lifecycle: a base built (by a keeper in its own cgroup, holding its memory in the
admission ledger), branched by runs, superseded by a new image digest and rebuilt, swept, and the
cold fallback — with the real supervisor, cgroups, locks, admission and smolvm CLI, and the fake
smolvm child as keeper and run child (nothing boots here)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from runner import upkeep
from runner.config import PROJECT_ROOT, SupervisorSettings
from runner.engines.smolvm.bases import BASE_PREFIX, FAILED_BASE_RETRY_S, MAX_BRANCH_FAILURES, BaseKey
from runner.engines.smolvm.engine import SmolvmEngine, state_root_from_env
from runner.engines.smolvm.protocol import Facts
from runner.engines.smolvm.warm import REPLACE_IDLE_S, WarmSettings
from runner.host import hostfs
from runner.host.admission import NO_SLOT
from runner.host.cgroups import CgroupLayout
from runner.images import ImageRef
from runner.ready import ReadyPool, ReadySettings, ready_class
from runner.spec import Limits, Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and mounts need root")


def _warm_supervisor(monkeypatch: pytest.MonkeyPatch, *, mode: str = "true", child: str = "forge") -> Supervisor:
    monkeypatch.setenv("FAKE_CHILD_MODE", child)
    settings = SupervisorSettings.from_env()
    supervisor = Supervisor(settings=settings)
    state = supervisor.paths.host_state_dir
    engine = SmolvmEngine(
        state_root=state_root_from_env(),
        cgroup_parent=settings.cgroup_parent,
        child_module="tests.runner.fake_smolvm_child",
        extra_env={"PYTHONPATH": str(PROJECT_ROOT), "FAKE_CHILD_MODE": child},
        warm=WarmSettings(
            mode=mode,
            canary_file=state / "smolvm-warm-canary.json",
            admission_dir=supervisor.admission.state_dir,
            memory_budget_mib=supervisor.admission.capacity.memory_mib,
        ),
    )
    supervisor.engines["smolvm"] = engine
    return supervisor


@pytest.fixture
def supervisor(monkeypatch: pytest.MonkeyPatch) -> Iterator[Supervisor]:
    supervisor = _warm_supervisor(monkeypatch)
    yield supervisor
    engine = _engine(supervisor)
    left = engine.sweep_bases(everything=True)
    assert not [line for line in left if "LEFT" in line], left
    assert engine.bases.names() == []


def _engine(supervisor: Supervisor) -> SmolvmEngine:
    engine = supervisor.engines["smolvm"]
    assert isinstance(engine, SmolvmEngine)
    return engine


def _run(supervisor: Supervisor, script: bytes = b"pass") -> RunResult:
    result = supervisor.run(RunSpec(runtime="python", script=script, engine="smolvm"))
    assert result.outcome is Outcome.SUCCEEDED, (result.error, result.reason, result.engine_note)
    assert result.cleanup_ok, [c for c in result.cleanup if not c.ok]
    return result


def _frozen_base(supervisor: Supervisor) -> str:
    """The first run boots cold and starts the build; the base is frozen soon after."""
    first = _run(supervisor)
    assert first.vm_start == "cold"
    assert "booted cold: no warm base for python" in first.engine_note and "building one now" in first.engine_note
    engine = _engine(supervisor)
    [name] = engine.bases.names()
    record = engine.wait_for_base(name, timeout_s=20)
    assert record is not None and record.state == "frozen", record
    return name


def _keeper_cgroup(pid: int) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text().strip().split("::", 1)[1]


def test_a_base_is_built_in_its_own_cgroup_holding_its_memory_and_runs_branch_it(supervisor: Supervisor) -> None:
    engine = _engine(supervisor)
    name = _frozen_base(supervisor)
    record = engine.bases.read(name)
    assert record is not None and record.keeper_alive() and name.startswith(BASE_PREFIX)
    # Its cgroup is beside the runs' parent, never under it (the run sweep reclaims all there).
    cgroup = _keeper_cgroup(record.keeper_pid)
    assert cgroup.endswith(f"/{supervisor.settings.cgroup_parent}-bases/{name}"), cgroup
    layout = CgroupLayout.detect()
    assert not any((parent / name).exists() for parent in layout.parents(supervisor.settings.cgroup_parent))
    held = [r for r in supervisor.admission.active() if r.run_id == name]
    assert [(r.slot, r.memory_mib, r.pid) for r in held] == [
        (NO_SLOT, record.key.memory_mib + 832, record.keeper_pid)
    ]  # the host's, not a run's: no slot, owned by the keeper
    root = engine.bases.folder(name) / "root"
    assert hostfs.mounts_under(engine.bases.folder(name)) == [root] and (root / "usr" / "bin").is_dir()

    runs = [_run(supervisor) for _ in range(2)]
    assert [r.vm_start for r in runs] == ["branch", "branch"]
    for result in runs:
        assert "booted cold" not in result.engine_note
        assert {"branch_s", "mount_s", "refresh_s", "clock_skew_s"} <= set(result.timings), result.timings
        assert result.to_json()["vm_start"] == "branch"
    assert engine.bases.served(name) == 2
    [shown] = engine.describe_bases()
    assert shown["name"] == name and shown["state"] == "frozen" and shown["served"] == 2
    assert shown["image"] == "python" and str(shown["image_digest"]).startswith("sha256:")
    assert shown["size_class"] == record.key.size_class and shown["keeper_alive"] is True


def test_a_new_image_digest_builds_a_new_base_and_the_superseded_one_is_swept(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(supervisor)
    old = _frozen_base(supervisor)
    old_keeper = engine.bases.read(old)
    assert old_keeper is not None
    real_key = SmolvmEngine.base_key

    def new_digest(self: SmolvmEngine, image: ImageRef, limits: Any) -> BaseKey:
        return dataclasses.replace(real_key(self, image, limits), image_digest="sha256:" + "e" * 64)

    monkeypatch.setattr(SmolvmEngine, "base_key", new_digest)
    stale = _run(supervisor)
    assert stale.vm_start == "cold" and "building one now" in stale.engine_note
    new = next(n for n in engine.bases.names() if n != old)
    assert engine.wait_for_base(new, timeout_s=20) is not None
    # While a run holds a branch of the old base (its lock shared), the sweep leaves it.
    holding = engine.bases.lock(old, exclusive=False)
    assert holding is not None
    try:
        assert not [line for line in upkeep.sweep(supervisor) if old in line]
        assert engine.bases.read(old) is not None and old_keeper.keeper_alive()
    finally:
        os.close(holding)
    swept = upkeep.sweep(supervisor)
    assert [line for line in swept if old in line] == [
        f"smolvm base {old} (superseded by {new} (image sha256:eeeeeeeeeeee))"
    ]
    assert old not in engine.bases.names() and not engine.bases.folder(old).exists()
    assert not old_keeper.keeper_alive()
    assert not [r for r in supervisor.admission.active() if r.run_id == old]  # its memory is the host's again
    assert _run(supervisor).vm_start == "branch" and engine.bases.served(new) == 1


def test_a_dead_keeper_or_warm_turned_off_gets_its_base_swept(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(supervisor)
    name = _frozen_base(supervisor)
    record = engine.bases.read(name)
    assert record is not None
    os.kill(record.keeper_pid, signal.SIGKILL)
    psutil.Process(record.keeper_pid).wait(5) if psutil.pid_exists(record.keeper_pid) else None
    gone = _run(supervisor)
    assert gone.vm_start == "cold" and "the warm base's keeper is gone" in gone.engine_note
    assert [line for line in upkeep.sweep(supervisor) if name in line] == [
        f"smolvm base {name} (its keeper is gone (frozen))"
    ]
    rebuilt = _frozen_base(supervisor)  # the next run builds it again
    assert rebuilt == name
    engine.warm = dataclasses.replace(engine.warm, mode="false")
    off = _run(supervisor)
    assert off.vm_start == "cold" and "warm starts are off" in off.engine_note
    assert [line for line in upkeep.sweep(supervisor) if name in line] == [f"smolvm base {name} (warm starts are off)"]
    assert engine.bases.names() == []


def test_a_failed_branch_boots_cold_and_retires_the_base_after_three_in_a_row(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(supervisor)
    name = _frozen_base(supervisor)
    monkeypatch.setenv("FAKE_CHILD_MODE", "branch_fail")
    engine.extra_env["FAKE_CHILD_MODE"] = "branch_fail"
    for failures in range(1, MAX_BRANCH_FAILURES + 1):
        result = _run(supervisor)
        assert result.vm_start == "cold" and "the warm start failed (fake)" in result.engine_note
        assert {"branch_s", "cold_s"} <= set(result.timings)  # both phases, as the child timed them
        record = engine.bases.read(name)
        assert record is not None and record.branch_failures == failures
    assert engine.bases.served(name) == 0
    retired = _run(supervisor)
    assert retired.vm_start == "cold" and f"failed {MAX_BRANCH_FAILURES} branches in a row" in retired.engine_note
    assert [line for line in upkeep.sweep(supervisor) if name in line] == [
        f"smolvm base {name} ({MAX_BRANCH_FAILURES} failed branches in a row)"
    ]


def test_a_base_that_fails_to_build_is_recorded_and_built_again_a_while_later(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(supervisor)
    engine.extra_env["FAKE_KEEPER_MODE"] = "fail"
    assert _run(supervisor).vm_start == "cold"
    [name] = engine.bases.names()
    record = engine.wait_for_base(name, timeout_s=20)
    assert record is not None and record.state == "failed" and "fake boot failure" in record.error
    again = _run(supervisor)
    assert again.vm_start == "cold" and "failed: SmolError: fake boot failure" in again.engine_note
    assert "building one now" not in again.engine_note  # not before FAILED_BASE_RETRY_S
    # That long after the failure, a run that needs the base builds it again (a failure may pass).
    aged = time.time() - FAILED_BASE_RETRY_S - 1
    os.utime(engine.bases.folder(name) / "base.json", (aged, aged))
    engine.extra_env.pop("FAKE_KEEPER_MODE")
    rebuilding = _run(supervisor)
    assert rebuilding.vm_start == "cold" and "building one now" in rebuilding.engine_note, rebuilding.engine_note
    record = engine.wait_for_base(name, timeout_s=20)
    assert record is not None and record.state == "frozen", record
    assert _run(supervisor).vm_start == "branch"


def test_a_base_that_fails_to_build_is_swept(supervisor: Supervisor) -> None:
    engine = _engine(supervisor)
    engine.extra_env["FAKE_KEEPER_MODE"] = "fail"
    assert _run(supervisor).vm_start == "cold"
    [name] = engine.bases.names()
    record = engine.wait_for_base(name, timeout_s=20)
    assert record is not None and record.state == "failed"
    psutil.Process(record.keeper_pid).wait(10) if record.keeper_alive() else None  # it holds the base's lock
    assert [line for line in upkeep.sweep(supervisor) if name in line] == [
        f"smolvm base {name} (failed: SmolError: fake boot failure)"
    ]


def test_idle_bases_give_their_memory_back_to_a_run_that_waits_but_not_the_one_it_branches(
    supervisor: Supervisor,
) -> None:
    """Four bases held 3.5 of a 4 GiB host's budget and every run was refused (make test-vm in CI):
    a base is a cache, and a run that waits for room makes the idle ones go."""
    engine = _engine(supervisor)
    mine = _frozen_base(supervisor)
    bigger = supervisor.run(RunSpec(runtime="python", script=b"pass", engine="smolvm", limits=Limits(memory_mib=384)))
    assert bigger.outcome is Outcome.SUCCEEDED and "building one now" in bigger.engine_note
    [other] = [n for n in engine.bases.names() if n != mine]
    other_record = engine.wait_for_base(other, timeout_s=20)
    assert other_record is not None and other_record.state == "frozen"
    held = {r.run_id: r.memory_mib for r in supervisor.admission.active()}
    assert set(held) == {mine, other} and held[other] == 384 + 832
    need = engine.reservation(Limits()).memory_mib
    # Room for the run beside its own base, not beside both (the run's kept output is under 600 MiB).
    budget = held[mine] + held[other] + need - 600
    supervisor.admission.capacity = dataclasses.replace(supervisor.admission.capacity, memory_mib=budget, wait_s=20)
    assert not supervisor.admission.room_for(need)

    result = _run(supervisor)
    assert result.vm_start == "branch" and engine.bases.served(mine) == 1  # its own base stayed
    assert result.evidence["room_given_back"] == [f"smolvm base {other} (python at 1 vCPU, 384 MiB, 1 GiB disk, idle)"]
    assert engine.bases.names() == [mine] and not other_record.keeper_alive()
    assert {r.run_id for r in supervisor.admission.active()} == {mine}


def test_auto_turns_warm_starts_on_only_where_the_warm_canary_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = _warm_supervisor(monkeypatch, mode="auto")
    engine = _engine(supervisor)
    canary = engine.warm.canary_file
    assert canary is not None
    canary.unlink(missing_ok=True)
    try:
        assert engine.warm_enabled() == (
            False, "warm starts are off: no warm canary has passed here (python -m runner doctor)"
        )  # fmt: skip
        result = _run(supervisor)
        assert result.vm_start == "cold" and engine.bases.names() == []  # nothing built
        canary.write_text(json.dumps({"ok": False, "reason": "branches read the same urandom"}))
        assert engine.warm_enabled()[0] is False and "branches read the same urandom" in engine.warm_enabled()[1]
        canary.write_text(json.dumps({"ok": True, "reason": "two branches fresh"}))
        assert engine.warm_enabled() == (True, "warm starts are on: the warm canary passed")
    finally:
        canary.unlink(missing_ok=True)


def test_a_run_of_another_size_gets_its_own_base_and_the_bound_on_bases_holds(
    supervisor: Supervisor,
) -> None:
    engine = _engine(supervisor)
    engine.warm = dataclasses.replace(engine.warm, max_bases=1)
    name = _frozen_base(supervisor)
    limits = Limits(memory_mib=384)
    bigger = supervisor.run(RunSpec(runtime="python", script=b"pass", engine="smolvm", limits=limits))
    assert bigger.vm_start == "cold" and "not built: 1 bases already (at most 1)" in bigger.engine_note
    assert engine.bases.names() == [name]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _run(supervisor).vm_start != "branch":
        time.sleep(0.1)
    assert engine.bases.served(name) >= 1
    # Unbranched for REPLACE_IDLE_S, the base makes way for one of the size now asked for.
    idle_since = time.time() - REPLACE_IDLE_S - 1
    for path in (engine.bases.folder(name) / "served", engine.bases.folder(name) / "base.json"):
        os.utime(path, (idle_since, idle_since))
    replacing = supervisor.run(RunSpec(runtime="python", script=b"pass", engine="smolvm", limits=limits))
    assert replacing.vm_start == "cold" and "building one now" in replacing.engine_note, replacing.engine_note
    [new] = engine.bases.names()
    assert new != name and not supervisor.admission.holds(name)
    record = engine.wait_for_base(new, timeout_s=20)
    assert record is not None and record.state == "frozen" and record.key.memory_mib == 384


def test_a_ready_branch_of_the_frozen_base_takes_one_run_and_one_that_fails_at_hand_over_starts_it_cold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    supervisor = _warm_supervisor(monkeypatch, child="echo")
    supervisor.ready_settings = ReadySettings(enabled=True, wait_s=10.0)
    engine = _engine(supervisor)
    pool = ReadyPool.here(supervisor)
    try:
        name = _frozen_base(supervisor)
        spec = RunSpec(runtime="python", script=b"print('mine')", engine="smolvm", stdin=b"typed")
        cls, why = ready_class(spec, supervisor.images.resolve("python"), engine)
        assert cls is not None and cls.fixed == name and cls.stack == "vm", why
        made = pool.wait_ready(cls, timeout_s=30)
        assert made is not None, pool.status()
        assert [r.run_id for r in supervisor.admission.active() if r.run_id == made.id] == [made.id]  # its room held

        result = supervisor.run(spec)
        assert (result.outcome, result.sandbox_start, result.vm_start) == (Outcome.SUCCEEDED, "ready", "branch"), (
            result.reason, result.engine_note,
        )  # fmt: skip
        said = json.loads(result.stdout)
        assert said["job"] == {"main.py": "print('mine')", "stdin": "typed"}  # the run's, staged at hand-over
        redirect = ["/bin/sh", "-c", 'exec "$@" < /job/stdin', "sh"]  # the run's stdin, its program
        assert said["argv"][-6:] == [*redirect, "/usr/bin/python3", "/job/main.py"], said["argv"]
        assert result.cleanup_ok and "single use" in [c.name for c in result.cleanup], result.cleanup
        assert result.evidence["ready_sandbox"]["id"] == made.id and engine.bases.served(name) >= 1
        assert not engine.machine_names()  # the branch made as the ready sandbox's machine is gone

        engine.extra_env["FAKE_CHILD_MODE"] = "refresh_fail"  # the next ready branch's refresh fails
        pool.drain()
        assert pool.wait_ready(cls, timeout_s=30) is not None, pool.status()
        fell = supervisor.run(spec)
        assert fell.outcome is Outcome.SUCCEEDED and fell.sandbox_start == "cold", fell.engine_note
        assert "its ready sandbox failed at hand-over (the branch's refresh failed: refresh exited 1: fake)" in (
            fell.engine_note
        )
        assert fell.cleanup_ok and [c for c in fell.cleanup if c.name.startswith("ready sandbox ")], fell.cleanup
    finally:
        pool.close()
        left = engine.sweep_bases(everything=True)
    assert not [line for line in upkeep.sweep(supervisor) if "ready-" in line]  # the pool left nothing
    assert not [line for line in left if "LEFT" in line], left


# --- the real child's warm start, against the SDK with Machine replaced (nothing boots) ---------


class _FakeBranch:
    """A branch as the SDK gives it: the refresh exec answers with a guest clock `skew` seconds off."""

    def __init__(self, skew: float) -> None:
        self.skew, self.deleted = skew, False
        self.execs: list[list[str]] = []
        self.streamed: list[tuple[list[str], str]] = []

    def exec(self, argv: list[str], opts: Any) -> Any:
        self.execs.append(argv)
        return _Result(0, f"{time.time() + self.skew:.9f}\n", "")

    def exec_stream(self, argv: list[str], opts: Any) -> Any:
        self.streamed.append((argv, opts.user))
        return iter([{"kind": "exit", "exit_code": 0}])

    def delete(self) -> None:
        self.deleted = True


@dataclasses.dataclass
class _Result:
    exit_code: int
    stdout: str
    stderr: str


def _child_events(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    skew: float,
    mount_fails: bool = False,
    order: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], _FakeBranch, list[Any], list[str]]:
    """The real child against the SDK with Machine replaced. With an `order` it is a ready branch,
    and a thread plays the engine's side of the hand-over: what it saw is in `calls`."""
    import smol

    from runner.engines.smolvm import child as smolvm_child
    from runner.engines.smolvm.guest import child_config
    from tests.runner.engines.smolvm.test_smolvm import _ctx, run_child

    branch, created, calls = _FakeBranch(skew), [], []

    class FakeBase:
        def branch(self, name: str, *, freeze_source: bool) -> _FakeBranch:
            calls.append(f"branch {name} freeze_source={freeze_source}")
            return branch

    def open_machine(name: str, conn: Any) -> Any:
        calls.append(f"open {name}")
        if name.startswith("cordon-"):  # after delete_by_name: the branch is gone
            raise smol.SmolError("NOT_FOUND", "no such machine")
        return FakeBase()

    def add_mount(cli: Path, name: str, mount: Any) -> None:
        calls.append(f"mount {mount.target}")
        if mount_fails:
            raise smolvm_child.WarmStartFailed(f"mount add {mount.target}: refused")

    monkeypatch.setattr(smol.Machine, "open", open_machine)
    monkeypatch.setattr(smol.Machine, "delete_by_name", lambda name, conn: calls.append(f"delete {name}"))

    def create(config: Any, conn: Any) -> _FakeBranch:
        created.append(config)
        return _FakeBranch(0)

    monkeypatch.setattr(smol.Machine, "create", create)
    monkeypatch.setattr(smolvm_child, "add_mount", add_mount)
    monkeypatch.setattr(smolvm_child, "vm_facts", lambda root, name: Facts(vm_dir=str(tmp_path)))
    monkeypatch.setattr(smolvm_child, "processes_serving", lambda vm_dir: [os.getpid()])  # the VMM: in our cgroup
    monkeypatch.setenv("HOME", os.environ.get("HOME", "/root"))
    ctx = _ctx(tmp_path)
    ctx.output_dir.mkdir(parents=True)
    lock = tmp_path / "lock"
    lock.touch()
    state = tmp_path / "state"
    engine_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def engine_side() -> None:
        said = json.loads(engine_end.recv(65536))
        calls.append(f"said {said} after {len(branch.execs)} execs")
        engine_end.send(json.dumps(order).encode())
        calls.append(f"answered {json.loads(engine_end.recv(65536))}")

    hand_over = threading.Thread(target=engine_side) if order is not None else None
    if hand_over is not None:
        hand_over.start()
    try:
        _, events = run_child(
            tmp_path,
            lambda fd: child_config(
                ctx, state_root=state, boot_timeout_s=20, control_fd=fd, base="cordonbase-x", base_lock=lock,
                ready_fd=child_end.detach() if order is not None else None,  # the child's to close
            ),
        )  # fmt: skip
    finally:
        if hand_over is not None:
            hand_over.join(10)
        engine_end.close()
        child_end.close()  # (if not handed to the child)
    return events, branch, created, calls


def test_the_child_branches_mounts_and_refreshes_before_the_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events, branch, created, calls = _child_events(tmp_path, monkeypatch, skew=0.0)
    assert calls == ["open cordonbase-x", "branch cordon-abc123 freeze_source=True",
                     "mount /input", "mount /job", "mount /output"]  # fmt: skip
    assert not created  # no cold boot
    [refresh] = branch.execs  # the refresh, before the program: a seed of 64 host bytes and the host's time
    assert refresh[:2] == ["/usr/bin/perl", "-e"] and "RNDRESEEDCRNG" in refresh[2] and "0x5207" in refresh[2]
    assert len(refresh[3]) == 128 and abs(float(refresh[4]) - time.time()) < 5
    assert len(branch.streamed) == 1  # then the program
    [ready] = [e for e in events if e["event"] == "ready"]
    assert ready["vm_start"] == "branch" and "vm_note" not in ready
    assert {"branch_s", "mount_s", "refresh_s", "clock_skew_s"} <= set(ready) and "cold_s" not in ready
    assert "vm_uid" not in ready  # a branch's uid is its base's: not this run's to audit
    assert branch.deleted


def test_a_ready_branch_mounts_first_and_is_refreshed_and_given_its_program_at_hand_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order = {"argv": ["/usr/bin/python3", "/job/main.py"], "env": {"RUN": "mine"}, "exec_timeout_s": 12.0}
    events, branch, created, calls = _child_events(tmp_path, monkeypatch, skew=0.0, order=order)
    assert calls[:-1] == [
        "open cordonbase-x",
        "branch cordon-abc123 freeze_source=True",
        "mount /input",
        "mount /job",
        "mount /output",
        "said {'ready': True} after 0 execs",
    ]  # fmt: skip  (ready: mounted, no refresh yet)
    assert calls[-1].startswith("answered {'handed': True, 'refresh_s': "), calls[-1]
    [refresh] = branch.execs  # at hand-over: the entropy and clock of that moment
    assert "RNDRESEEDCRNG" in refresh[2] and abs(float(refresh[4]) - time.time()) < 5
    assert branch.streamed == [(order["argv"], "1000:1000")] and not created  # the run's program, no cold boot
    [ready] = [e for e in events if e["event"] == "ready"]
    assert ready["vm_start"] == "branch" and {"branch_s", "mount_s", "refresh_s"} <= set(ready)
    assert branch.deleted


@pytest.mark.parametrize(
    ("skew", "mount_fails", "why"),
    [(3.0, False, "the guest clock is +"), (0.0, True, "mount add /input: refused")],
)
def test_a_warm_start_that_fails_deletes_its_branch_and_boots_cold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skew: float, mount_fails: bool, why: str
) -> None:
    events, branch, created, calls = _child_events(tmp_path, monkeypatch, skew=skew, mount_fails=mount_fails)
    assert "delete cordon-abc123" in calls and calls[-1] == "open cordon-abc123"  # gone before the cold boot
    assert len(created) == 1 and created[0].name == "cordon-abc123" and created[0].mounts  # cold, with its mounts
    assert branch.streamed == []  # no program ran in the failed branch
    [ready] = [e for e in events if e["event"] == "ready"]
    assert (
        ready["vm_start"] == "cold"
        and ready["vm_note"].startswith("the warm start failed (")
        and why in ready["vm_note"]
    )
    assert "branch_s" in ready and "cold_s" in ready
