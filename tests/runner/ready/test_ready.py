"""Ready sandboxes (runner.ready) on the namespace engine, for real: bubblewrap, cgroups and the
images' waiting interpreters. Each run here that says `ready` was handed a sandbox made before it
was asked for; these tests hold that such a sandbox is fresh, bound by the run's own limits,
used once, replaced by a cold start when it cannot take its run, and swept after a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from runner import upkeep
from runner.config import paths_from_env
from runner.doctor import ready_checks
from runner.engines.common import CgroupState
from runner.host import hostfs
from runner.host.admission import Admission, Capacity
from runner.host.cgroups import CgroupLayout
from runner.ready import (
    MAKER_CPU_WEIGHT,
    SMOOTHING,
    Ready,
    ReadyClass,
    ReadyPool,
    ReadyReused,
    ReadySettings,
    ready_class,
)
from runner.spec import MIB, Limits, Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor
from tests.conftest import child_env
from tests.runner.test_hostile import CASES, Case, assert_expected, assert_nothing_left, processes_of, run_case

pytestmark = pytest.mark.images

SETTINGS = ReadySettings(enabled=True, classes=3, wait_s=30.0, room_mib=384)

FRESH_PY = textwrap.dedent("""
    import sys
    protocol_modules = sorted(m for m in ("json", "socket", "_socket", "array") if m in sys.modules)
    import json, os, random, time, uuid
    with open("/proc/self/stat") as f:
        started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    print(json.dumps({
        "urandom": os.urandom(16).hex(), "random": random.random(), "hash": hash("x"),
        "uuid4": str(uuid.uuid4()), "started_s": started_ticks / os.sysconf("SC_CLK_TCK"), "uptime": uptime,
        "time": time.time(), "tmp": sorted(os.listdir("/tmp")), "argv": sys.argv,
        "protocol_modules": protocol_modules,
        "seed_env": os.environ.get("PYTHONHASHSEED"), "pwd": os.environ.get("PWD"),
    }))
""").encode()

FRESH_JS = textwrap.dedent("""
    const fs = require('fs'), crypto = require('crypto');
    const stat = fs.readFileSync('/proc/self/stat', 'utf8').split(')').pop().trim().split(' ');
    console.log(JSON.stringify({
      urandom: crypto.randomBytes(16).toString('hex'), random: Math.random(), uuid4: crypto.randomUUID(),
      started_ticks: Number(stat[19]), uptime: Number(fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0]),
      time: Date.now() / 1000, tmp: fs.readdirSync('/tmp').sort(), argv: process.argv,
    }));
""").encode()


@pytest.fixture(scope="module")
def supervisor() -> Iterator[Supervisor]:
    paths = paths_from_env()
    capacity = Capacity(slots=6, memory_mib=8192, cpus=16.0, wait_s=60.0)
    supervisor = Supervisor(
        paths=paths, admission=Admission(paths.host_state_dir / "admission", capacity), ready=SETTINGS
    )
    yield supervisor
    ReadyPool.here(supervisor).close()


def pool(supervisor: Supervisor) -> ReadyPool:
    return ReadyPool.here(supervisor)


def run(supervisor: Supervisor, script: bytes, runtime: str = "python", **fields: Any) -> RunResult:
    result = supervisor.run(RunSpec(runtime=runtime, script=script, engine="namespace", **fields))
    assert_nothing_left(supervisor, result)
    return result


def ready_run(supervisor: Supervisor, script: bytes, runtime: str = "python", **fields: Any) -> RunResult:
    """A run of a class whose sandbox is ready (made first, by a run of the class, if need be)."""
    spec = RunSpec(runtime=runtime, script=script, engine="namespace", **fields)
    cls = class_of(supervisor, spec)
    wait_ready(supervisor, cls)
    result = run(supervisor, script, runtime, **fields)
    assert result.sandbox_start == "ready", result.engine_note
    return result


def class_of(supervisor: Supervisor, spec: RunSpec) -> ReadyClass:
    cls, why = ready_class(spec, supervisor.images.resolve(spec.image_name), supervisor.engines["namespace"])
    assert cls is not None, why
    return cls


def wait_ready(supervisor: Supervisor, cls: ReadyClass, timeout_s: float = 60.0) -> Ready:
    """The class's idle sandbox, once made (a first run of the class asks for it)."""
    the_pool = pool(supervisor)
    ready = the_pool.wait_ready(cls, timeout_s)
    assert ready is not None, f"no ready sandbox of {cls.label} within {timeout_s} s: {the_pool.status()}"
    return ready


def said(result: RunResult) -> dict[str, Any]:
    assert result.outcome is Outcome.SUCCEEDED, (result.reason, result.stderr[-2000:])
    facts: dict[str, Any] = json.loads(result.stdout)
    return facts


def assert_fresh(first: dict[str, Any], second: dict[str, Any], before: float, after: float) -> None:
    for key in ("urandom", "random", "uuid4"):
        assert first[key] != second[key], key
    assert first["tmp"] == second["tmp"] == ["main.py"] or first["tmp"] == second["tmp"] == ["main.js"]
    assert before <= first["time"] <= second["time"] <= after  # the host's clock


def test_two_ready_python_runs_are_fresh_and_each_was_made_before_it_was_asked_for(supervisor: Supervisor) -> None:
    before = time.time()
    runs = [ready_run(supervisor, FRESH_PY) for _ in range(2)]
    after = time.time()
    first, second = (said(r) for r in runs)
    assert_fresh(first, second, before, after)
    assert first["hash"] != second["hash"] and first["seed_env"] is None  # a hash seed each, drawn by itself
    assert first["argv"] == ["/tmp/main.py"] and first["pwd"] == "/tmp"
    assert first["protocol_modules"] == []  # what the waiting interpreter needed is forgotten
    starts = []
    for result, facts in zip(runs, (first, second), strict=True):
        waited = result.evidence["ready_sandbox"]["waited_s"]
        # The interpreter started when its sandbox was made: after the one before it was handed over,
        # and `waited` seconds before this run (give or take a clock tick and the run's own time).
        assert facts["uptime"] - facts["started_s"] == pytest.approx(waited, abs=0.5)
        assert result.timings["handover_s"] < 5 and "staging_s" in result.timings
        starts.append(facts["started_s"])
    assert starts[0] != starts[1]


def test_two_ready_node_runs_are_fresh(supervisor: Supervisor) -> None:
    before = time.time()
    runs = [ready_run(supervisor, FRESH_JS, "node") for _ in range(2)]
    after = time.time()
    first, second = (said(r) for r in runs)
    assert_fresh(first, second, before, after)
    assert first["argv"] == ["/usr/bin/node", "/tmp/main.js"]
    assert first["started_ticks"] != second["started_ticks"]


def test_a_ready_run_behaves_as_a_cold_one(supervisor: Supervisor) -> None:
    """Exit status, stdin, stderr and a traceback from the program's own frame, as in a cold run."""
    script = b"import sys\nprint(sys.stdin.read().upper())\ndef f():\n    raise ValueError('no')\nf()\n"
    ready = ready_run(supervisor, script, stdin=b"hello\n")
    cold = Supervisor(ready=ReadySettings(enabled=False)).run(
        RunSpec(runtime="python", script=script, stdin=b"hello\n")
    )
    assert cold.sandbox_start == "cold"
    for result in (ready, cold):
        assert result.outcome is Outcome.FAILED and result.exit_code == 1
        assert result.stdout == b"HELLO\n\n"
    assert ready.stderr == cold.stderr
    assert b"ready.py" not in ready.stderr
    exit3 = ready_run(supervisor, b"import sys; sys.exit(3)")
    assert exit3.exit_code == 3
    # An uncaught KeyboardInterrupt: the exit handlers run, then python ends by SIGINT.
    interrupted = b"import atexit\natexit.register(lambda: print('bye'))\nraise KeyboardInterrupt\n"
    ready = ready_run(supervisor, interrupted)
    cold = Supervisor(ready=ReadySettings(enabled=False)).run(RunSpec(runtime="python", script=interrupted))
    for result in (ready, cold):
        assert (result.signal, result.stdout) == (2, b"bye\n")
    assert ready.stderr == cold.stderr and ready.stderr.endswith(b"KeyboardInterrupt\n")


def test_limits_written_at_hand_over_bind_the_run_not_the_class(supervisor: Supervisor) -> None:
    """The class's room is 384 MiB; the run asked for 96: its memory bomb ends there."""
    bomb = b"hoard = []\nwhile True:\n    hoard.append(bytearray(8 << 20))\n"
    result = ready_run(supervisor, bomb, limits=Limits(memory_mib=96, max_processes=5))
    assert result.outcome is Outcome.MEMORY_LIMIT, result.reason
    assert result.reason == "ran out of its 96 MiB of memory"
    assert result.evidence["cgroup_peak_memory_bytes"] <= 96 * MIB
    assert SETTINGS.room_mib * MIB > 2 * 96 * MIB
    # The cpu the waiting interpreter spent before the hand-over is not the run's.
    quick = ready_run(supervisor, b"pass", limits=Limits(memory_mib=96, max_processes=5))
    assert quick.cpu_s is not None and quick.cpu_s < 0.5
    # More than the room, and more processes than the room's default: both are the run's to have.
    big = ready_run(
        supervisor,
        b"import subprocess\nhoard = bytearray(450 << 20)\nhoard[::4096] = b'x' * len(hoard[::4096])\n"
        b"procs = [subprocess.Popen(['sleep', '2']) for _ in range(80)]\nprint(len(procs))\n",
        limits=Limits(memory_mib=600, max_processes=100),
    )
    assert big.outcome is Outcome.SUCCEEDED and big.stdout == b"80\n", (big.reason, big.stderr[-500:])
    assert big.peak_memory_bytes is not None and big.peak_memory_bytes > 450 * MIB


def test_a_notebook_cell_gets_ipython_and_the_analyst_stack_already_imported(supervisor: Supervisor) -> None:
    script = (
        b"import sys\n"
        b"print(sorted(m for m in ('pandas', 'numpy', 'matplotlib.pyplot', 'IPython') if m in sys.modules))\n"
        b"print(type(get_ipython()).__name__, get_ipython().execution_count, len(In))\n"
    )
    result = ready_run(supervisor, script, cell=True, limits=Limits(wall_timeout_s=60, cpu_time_s=60))
    assert result.stdout == b"['IPython', 'matplotlib.pyplot', 'numpy', 'pandas']\nCellShell 1 2\n", result.stdout
    assert any(f.name == "state" for f in result.session)  # the cell program ran, and kept its names
    assert "python/cell" in result.evidence["ready_sandbox"]["class"]


def test_a_sandbox_that_fails_at_hand_over_is_removed_and_the_run_starts_cold(supervisor: Supervisor) -> None:
    script = b"print('still ran')"
    cls = class_of(supervisor, RunSpec(runtime="python", script=script))
    ready = wait_ready(supervisor, cls)
    state = ready.ctx.state
    assert isinstance(state, CgroupState)
    state.cgroup.kill()  # its interpreter dies while it waits
    assert ready.ctx.process is not None
    ready.ctx.process.wait(timeout=10)
    fell_back = pool(supervisor).counts["fell_back"]
    result = run(supervisor, script)
    assert result.outcome is Outcome.SUCCEEDED and result.stdout == b"still ran\n"
    assert result.sandbox_start == "cold"
    assert "its ready sandbox failed at hand-over (its process had exited)" in result.engine_note
    torn = {c.name: c.ok for c in result.cleanup if c.name.startswith("ready sandbox ")}
    assert torn == {"ready sandbox processes": True, "ready sandbox cgroups": True, "ready sandbox mounts": True,
                    "ready sandbox staging": True}  # fmt: skip
    assert {c.name: c.ok for c in result.cleanup}["single use"]
    assert pool(supervisor).counts["fell_back"] == fell_back + 1
    assert not (supervisor.views_dir / ready.id).exists() and not ready.ctx.run_dir.exists()


def test_a_ready_sandbox_never_serves_a_second_run_and_the_audit_would_say_so(supervisor: Supervisor) -> None:
    cls = class_of(supervisor, RunSpec(runtime="python", script=b"pass"))
    ready = wait_ready(supervisor, cls)
    the_pool = pool(supervisor)
    with the_pool.changed:
        del the_pool.idle[cls]  # taken out of the pool by hand, as a claim does
    try:
        ready.claim("run-one")
        with pytest.raises(ReadyReused, match="already served run run-one"):
            ready.claim("run-two")
        check = ready.single_use_check("run-one")
        assert not check.ok and "run-two" in check.detail
    finally:
        the_pool._discard(ready)
    assert not (supervisor.views_dir / ready.id).exists()
    result = ready_run(supervisor, b"pass")  # its replacement is another sandbox
    assert result.evidence["ready_sandbox"]["id"] != ready.id
    assert {c.name: c.ok for c in result.cleanup}["single use"]


def test_runs_that_cannot_use_one_start_cold_and_say_why(supervisor: Supervisor) -> None:
    engine = supervisor.engines["namespace"]
    image = supervisor.images.resolve("python")
    cls, why = ready_class(RunSpec(runtime="python", script=b"", egress=("example.org:443",)), image, engine)
    assert cls is None and "egress" in why
    node = supervisor.images.resolve("node")
    cls, why = ready_class(RunSpec(runtime="node", script=b"", stdin=b"x"), node, engine)
    assert cls is None and "stdin" in why
    result = run(supervisor, b"console.log(require('fs').readFileSync(0, 'utf8'))", "node", stdin=b"typed\n")
    assert result.sandbox_start == "cold" and "stdin" in result.engine_note and result.stdout == b"typed\n\n"


def test_a_killed_worker_leaves_its_ready_sandboxes_to_the_sweep_which_removes_every_part(tmp_path: Path) -> None:
    """A process with a ready sandbox is killed (SIGKILL: no atexit); the sandbox's interpreter dies
    with it (bwrap's --die-with-parent); its cgroups, mounts and directories stay until the sweep."""
    program = textwrap.dedent("""
        import json, sys, time
        from runner.ready import ReadyPool, ReadySettings
        from runner.spec import RunSpec
        from runner.supervisor import Supervisor
        supervisor = Supervisor(ready=ReadySettings(enabled=True, wait_s=30.0))
        supervisor.run(RunSpec(runtime="python", script=b"pass", engine="namespace"))
        pool = ReadyPool.here(supervisor)
        while not pool.idle:
            time.sleep(0.05)
        ready = next(iter(pool.idle.values()))
        print(json.dumps({"id": ready.id, "uid": ready.ctx.uid, "pid": ready.ctx.process.pid}), flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, env=child_env(),
                             cwd=Path(__file__).parents[3])  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, "the worker made no ready sandbox"
        made = json.loads(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    supervisor = Supervisor(ready=ReadySettings(enabled=False))
    layout = CgroupLayout.detect()
    cgroups = [parent / made["id"] for parent in layout.parents(supervisor.settings.cgroup_parent)]
    view, run_dir = supervisor.views_dir / made["id"], supervisor.runs_dir / made["id"]
    assert view.exists() and any(c.exists() for c in cgroups)  # what the sweep is for
    deadline = time.monotonic() + 10
    while processes_of(made["uid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_of(made["uid"]) == []
    swept = upkeep.sweep(supervisor)
    assert f"cgroup {made['id']}" in swept and f"view {made['id']}" in swept
    assert not any(c.exists() for c in cgroups)
    assert not view.exists() and not hostfs.mounts_under(view)
    assert not run_dir.exists() and not (supervisor.locks_dir / f"{made['id']}.lock").exists()
    assert not supervisor.admission.holds(made["id"])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_hostile_battery_through_ready_sandboxes(supervisor: Supervisor, case: Case, tmp_path: Path) -> None:
    """Every hostile case whose class can have one, run in a sandbox made before it was asked for:
    classified as a cold run is, with every part of the sandbox removed after it."""
    if "egress" in case.expect:
        pytest.skip("a run with egress starts cold (tested above); the hostile battery has its egress cases")
    case = case.on("namespace")
    spec = RunSpec(runtime=case.runtime, image=case.expect.get("image"), script=case.path.read_bytes(),
                   limits=case.limits, engine="namespace", stdin=case.expect.get("stdin", "").encode())  # fmt: skip
    cls, why = ready_class(spec, supervisor.images.resolve(spec.image_name), supervisor.engines["namespace"])
    ready = wait_ready(supervisor, cls) if cls is not None else None
    result, inputs = run_case(supervisor, case, "namespace", tmp_path)
    assert_expected(case, result, inputs, "namespace")
    assert_nothing_left(supervisor, result)
    if ready is None:
        assert result.sandbox_start == "cold" and why in result.engine_note
        return
    assert {c.name: c.ok for c in result.cleanup}["single use"]
    if result.outcome is Outcome.REJECTED_INPUT:  # refused at staging: no program ever started in it
        assert result.sandbox_start is None
    else:
        assert result.sandbox_start == "ready", result.engine_note
        assert result.evidence["ready_sandbox"]["id"] == ready.id
    layout = CgroupLayout.detect()
    assert not any((parent / ready.id).exists() for parent in layout.parents(supervisor.settings.cgroup_parent))
    assert not (supervisor.views_dir / ready.id).exists() and not ready.ctx.run_dir.exists()


def test_a_waiting_sandbox_holds_its_slot_and_room_in_admission_and_is_made_anew_when_old(
    supervisor: Supervisor,
) -> None:
    """A pool of its own (recycling after 1 s) beside the module's, on the same host's admission."""
    young = ReadyPool(supervisor, ReadySettings(enabled=True, max_age_s=1.0, room_mib=128))
    try:
        cls = class_of(supervisor, RunSpec(runtime="python", script=b"pass"))
        first = young.wait_ready(cls, 60)
        assert first is not None, young.status()
        [held] = [r for r in supervisor.admission.active() if r.run_id == first.id]
        assert held.slot == first.ctx.slot and held.slot >= 0
        assert held.memory_mib == supervisor.engines["namespace"].reservation(Limits(memory_mib=128)).memory_mib
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with young.changed:
                now = young.idle.get(cls)
            if now is not None and now.id != first.id:
                break
            time.sleep(0.1)
        assert now is not None and now.id != first.id and young.counts["recycled"] >= 1
        assert not supervisor.admission.holds(first.id) and not (supervisor.views_dir / first.id).exists()
    finally:
        young.close()
    assert not young.idle and not supervisor.admission.holds(now.id)


def test_idle_sandboxes_give_their_room_to_a_run_that_waits_for_it(supervisor: Supervisor) -> None:
    """A run of any process that waits for room marks it (runner.host.admission); every pool holding an
    idle sandbox then tears it down, and makes none until no run waits."""
    cls = class_of(supervisor, RunSpec(runtime="python", script=b"pass"))
    ready = wait_ready(supervisor, cls)
    the_pool = pool(supervisor)
    marker = supervisor.admission._waiting_dir / "a-run-that-waits"
    supervisor.admission._mark_waiting(marker.name)
    try:
        assert supervisor.admission.waiting() == 1
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (cls in the_pool.idle or supervisor.admission.holds(ready.id)):
            time.sleep(0.05)  # taken out of the pool, then torn down
        assert cls not in the_pool.idle and not supervisor.admission.holds(ready.id)
        time.sleep(1.0)
        assert cls not in the_pool.idle and cls not in the_pool.making  # none made while it waits
    finally:
        marker.unlink()
    assert wait_ready(supervisor, cls, timeout_s=15).id != ready.id  # made again once nobody waits


# --- a notebook's cells, one after another ----------------------------------------------------------

CELL_LIMITS = Limits(wall_timeout_s=60, cpu_time_s=60)


def cpu_weight(ready: Ready) -> int:
    """The ready sandbox's own cgroup's CPU weight, read on the host: cgroup v2's cpu.weight, or on
    v1 the weight its cpu.shares stands for (runner.host.cgroups writes weight * 1024 // 100)."""
    cgroup = cast(Any, ready.engine).state(ready.ctx).cgroup
    if cgroup.layout.version == 2:
        return int((cgroup.dirs[0] / "cpu.weight").read_text())
    shares = int((cgroup.v1["cpu"] / "cpu.shares").read_text())
    return 1 if shares <= 10 else shares * 100 // 1024


def test_a_waiting_sandbox_has_the_lowest_cpu_weight_and_its_run_gets_its_own_at_hand_over(
    supervisor: Supervisor,
) -> None:
    spec = RunSpec(runtime="python", script=b"", engine="namespace", cell=True, limits=CELL_LIMITS)
    cls = class_of(supervisor, spec)
    first = wait_ready(supervisor, cls)
    assert cpu_weight(first) == MAKER_CPU_WEIGHT  # waiting: only CPU no run wants was its
    the_pool = pool(supervisor)
    results: list[RunResult] = []
    sleeper = threading.Thread(target=lambda: results.append(
        supervisor.run(replace(spec, script=b"import time\ntime.sleep(3)\nprint('slept')"))))  # fmt: skip
    sleeper.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and first.id not in the_pool.in_use and sleeper.is_alive():
            time.sleep(0.02)
        assert first.id in the_pool.in_use, the_pool.status()
        deadline = time.monotonic() + 10  # handed over (its limits written) just after it is taken
        while time.monotonic() < deadline and cpu_weight(first) != spec.cpu_weight:
            time.sleep(0.02)
        assert cpu_weight(first) == spec.cpu_weight
    finally:
        sleeper.join()
    [slept] = results
    assert said_text(slept) == "slept\n" and slept.evidence["ready_sandbox"]["id"] == first.id


def test_a_run_that_waits_for_a_sandbox_being_made_raises_its_cpu_weight_to_its_own(supervisor: Supervisor) -> None:
    """A pool of its own, beside the module's: while its first sandbox of a class is being made, a
    run asks for it (as claim() does); from then on it is made with the run's weight."""
    own = ReadyPool(supervisor, ReadySettings(enabled=True, room_mib=384))
    try:
        cls = class_of(supervisor, RunSpec(runtime="python", script=b"", cell=True, limits=CELL_LIMITS))
        with own.changed:
            own._want(cls)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with own.changed:
                if cls in own.being_made:
                    own._hurry(cls, 100)
                    break
            time.sleep(0.002)
        else:
            raise AssertionError(f"no sandbox of {cls.label} was being made: {own.status()}")
        ready = own.wait_ready(cls, 60)
        assert ready is not None, own.status()
        assert cpu_weight(ready) == 100 and not own.hurried and not own.being_made
    finally:
        own.close()


def said_text(result: RunResult) -> str:
    assert result.outcome is Outcome.SUCCEEDED, (result.reason, result.stderr[-2000:])
    return result.stdout.decode()


def test_a_run_starts_cold_rather_than_wait_for_a_making_longer_than_what_a_ready_sandbox_saves(
    supervisor: Supervisor,
) -> None:
    """A pool of its own whose cell class's making took 30 s lately, and saved a run 0.2 s: a run that
    finds one being made does not wait for it (a notebook's Run all: its next cell starts cold, the
    one after finds it made), and the making goes on at its lowest weight."""
    own = ReadyPool(supervisor, ReadySettings(enabled=True, room_mib=384, wait_s=30.0))
    try:
        spec = RunSpec(runtime="python", script=b"print(1)", engine="namespace", cell=True, limits=CELL_LIMITS)
        cls = class_of(supervisor, spec)
        with own.changed:
            own.make_s[cls] = 30.0
            own.took_s[(cls, "cold")], own.took_s[(cls, "ready")] = 0.3, 0.1
            own._want(cls)
        deadline = time.monotonic() + 30
        while cls not in own.making and time.monotonic() < deadline:
            time.sleep(0.002)
        assert cls in own.making, own.status()
        own.run_begins()
        asked = time.monotonic()
        ready, why = own.claim(supervisor.engines["namespace"], spec, supervisor.images.resolve("python"), "r1")
        answered_s = time.monotonic() - asked
        own.run_ends("r1", "cold", 0.5)
        assert ready is None and why == "its class's sandbox is being made, and starting cold is sooner"
        assert answered_s < 1.0 and cls not in own.hurried
        assert own.took_s[(cls, "cold")] == pytest.approx(0.3 + SMOOTHING * (0.5 - 0.3))  # a moving average
        made = own.wait_ready(cls, 60)  # made all the same, for the run after
        assert made is not None and cpu_weight(made) == MAKER_CPU_WEIGHT, own.status()
        assert own.make_s[cls] < 30.0  # its real making moved the average down
    finally:
        own.close()


def test_the_pool_learns_what_making_a_class_takes_and_what_its_runs_take(supervisor: Supervisor) -> None:
    """What _worth_waiting weighs comes from runs: a ready run's time (without its wait for the
    making) and a making's, shown by status() for doctor."""
    script = b"print('learned')"
    cls = class_of(supervisor, RunSpec(runtime="python", script=script, engine="namespace"))
    the_pool = pool(supervisor)
    before = the_pool.took_s.get((cls, "ready"))
    result = ready_run(supervisor, script)
    took = the_pool.took_s[(cls, "ready")]
    measured = took if before is None else before + (took - before) / SMOOTHING  # this run's, from the average
    assert 0 < measured <= result.timings["total_s"] + 0.001 and 0 < the_pool.make_s[cls] < 60
    [shown] = [c for c in the_pool.status()["classes"] if c["class"] == cls.label]
    assert shown["ready_run_s"] == round(took, 3) and shown["make_s"] == round(the_pool.make_s[cls], 3)
    the_pool._publish()
    [line] = [c for c in ready_checks(supervisor) if c.name == f"ready {cls.label}" and str(os.getpid()) in c.detail]
    assert f"lately: making one {shown['make_s']:g} s, a ready run {shown['ready_run_s']:g} s" in line.detail


@pytest.mark.images
def test_each_environment_is_a_class_of_its_own_and_its_ready_runs_are_fresh(supervisor: Supervisor) -> None:
    """A python-data run is never handed a sandbox of python's image (and the other way round):
    the class is the image; a python-data ready run is fresh like any other and has its wheels."""
    data, plain = (class_of(supervisor, RunSpec(runtime="python", image=image, script=b"", engine="namespace"))
                   for image in ("python-data", "python"))  # fmt: skip
    assert (data.image, plain.image) == ("python-data", "python") and data != plain
    before = time.time()
    runs = [ready_run(supervisor, FRESH_PY, image="python-data") for _ in range(2)]
    first, second = (said(r) for r in runs)
    assert_fresh(first, second, before, time.time())
    assert {r.image.name for r in runs if r.image} == {"python-data"}
    found = ready_run(supervisor, b"import polars\nprint(polars.__version__)\n", image="python-data",
                      limits=Limits(memory_mib=512))  # fmt: skip
    assert found.stdout == b"2.1.0\n", found.stderr[-2000:]
    missing = ready_run(supervisor, b"import polars\n")
    assert missing.outcome is Outcome.FAILED and b"No module named 'polars'" in missing.stderr
