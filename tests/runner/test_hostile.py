"""The hostile battery: every case in tests/hostile/ against every engine this host can run.

A case is a script whose first line declares, as JSON after `cordon:`, the outcome it must
end in (and words its reason must have), its limits, the inputs to stage and extra evidence
to check. Each run must also leave a green cleanup audit and, checked independently here,
nothing on the host.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from runner import upkeep
from runner.config import PROJECT_ROOT, paths_from_env
from runner.egress.policy import Policy
from runner.egress.proxy import EgressSettings
from runner.engines.namespace import check_available
from runner.host import hostfs
from runner.host.admission import Admission, Capacity
from runner.host.cgroups import CgroupLayout
from runner.spec import MIB, Limits, Outcome, RunResult, RunSpec, maxima_from_env
from runner.supervisor import Supervisor
from tests.conftest import child_env
from tests.runner.egress_net import RESOLVER, TEST_NET

pytestmark = pytest.mark.images

HOSTILE_DIR = Path(__file__).resolve().parent.parent / "hostile"
SLOTS = 8
# Under emulated KVM (make test-vm) a microVM now and then shuts itself down for reasons of the
# emulation, mostly while booting, sometimes just after (smolvm then loses the agent mid-exec).
# The harness sets this so such a sandbox failure (sandbox_error with smolvm's own retryable
# boot or exec error, what the product itself retries) is retried, and counted; a wrong outcome
# or a leak is never retried. Off (0) everywhere else.
BOOT_RETRIES = int(os.environ.get("CORDON_TEST_BOOT_RETRIES", "0"))
SANDBOX_FAULTS = ("boot_failed", "boot_error", "exec_error")
# Under emulated KVM guest work runs many times slower than on hardware, so a case's time
# limits buy far less work (a flood meant to fill memory hits its CPU limit first). The harness
# sets this factor: every time limit is multiplied by it except the one the case is about (a
# timed_out case keeps its wall limit, a cpu_limit case its CPU limit). 1 everywhere else. Read
# when a case runs, not at import: the harness's plugin calibrates it as the session starts.


def slowdown() -> float:
    return float(os.environ.get("CORDON_TEST_SLOWDOWN", "1"))


def scaled(limits: Limits, *, wall: bool = True, cpu: bool = True) -> Limits:
    """`limits` with the wall and CPU limits (those asked) times slowdown(), each within the
    service's maxima (CORDON_MAX_*), as any run's limits must be."""
    maxima, factor = maxima_from_env(), slowdown()
    return replace(
        limits,
        wall_timeout_s=min(maxima.wall_timeout_s, limits.wall_timeout_s * factor) if wall else limits.wall_timeout_s,
        cpu_time_s=min(maxima.cpu_time_s, limits.cpu_time_s * factor) if cpu else limits.cpu_time_s,
    )


@dataclass(frozen=True)
class Case:
    path: Path
    runtime: str
    expect: dict[str, Any]

    @property
    def id(self) -> str:
        return self.path.name

    def on(self, engine: str) -> Case:
        """The case as an engine must pass it: its `on` entry for the engine overrides expectations
        (what a guest's own network stack says differs from a namespace's, for the same no path)."""
        return replace(self, expect={**self.expect, **self.expect.get("on", {}).get(engine, {})})

    @property
    def outcomes(self) -> list[str]:
        return list(self.expect.get("outcome_in", [self.expect["outcome"]]))

    @property
    def limits(self) -> Limits:
        limits = replace(Limits(), **self.expect.get("limits", {}))
        return scaled(limits, wall="timed_out" not in self.outcomes, cpu="cpu_limit" not in self.outcomes)


def load_cases() -> list[Case]:
    cases = []
    for path in sorted(HOSTILE_DIR.iterdir()):
        if path.suffix not in (".py", ".js"):
            continue
        first = path.read_text().splitlines()[0]
        marker = first.split("cordon:", 1)
        assert len(marker) == 2, f"{path.name}: first line must declare `cordon: {{...}}`"
        cases.append(Case(path, "python" if path.suffix == ".py" else "node", json.loads(marker[1])))
    return cases


CASES = load_cases()


def engines_here() -> list[Any]:
    """Every engine; whether it can run here is decided per test (smolvm needs a passing canary)."""
    ok, why = check_available()
    return [
        pytest.param("namespace", marks=[] if ok else [pytest.mark.skip(reason=why)]),
        pytest.param("smolvm", marks=[pytest.mark.kvm]),
    ]


@pytest.fixture
def engine_runs_here(engine: str, canary: dict[str, Any]) -> None:
    if engine == "smolvm" and not canary.get("ok"):
        pytest.skip(f"needs a host whose KVM boots microVMs; this host's canary boot failed: {canary.get('reason')}")


@pytest.fixture(scope="module")
def supervisor() -> Supervisor:
    paths = paths_from_env()
    capacity = Capacity(slots=SLOTS, memory_mib=8192, cpus=64.0, wait_s=120.0)
    # The egress cases' destinations: the test's own host, and names the test resolver maps to
    # addresses the proxy must refuse (tests.runner.egress_net).
    egress = EgressSettings(
        ceiling=Policy.parse(["allowed.test:8080", "allowed.test:8443", "meta.test:80"]),
        resolver=RESOLVER,
        public_for_tests=(TEST_NET,),
    )
    sup = Supervisor(paths=paths, admission=Admission(paths.host_state_dir / "admission", capacity), egress=egress)
    upkeep.sweep(sup)
    return sup


class Inputs:
    """Builds the inputs a case asks for, and the host-side listener for network probes."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.paths: list[Path] = []
        self.names: list[str] = []  # the name each input is staged under
        self.listener: socket.socket | None = None

    def build(self, kinds: list[str]) -> tuple[Path, ...]:
        for kind in kinds:
            getattr(self, f"_{kind}")()
        return tuple(self.paths)

    def _file(self, name: str, data: bytes, staged_as: str | None = None) -> Path:
        path = self.tmp / name
        path.write_bytes(data)
        self.paths.append(path)
        self.names.append(staged_as or name)
        return path

    def _nested(self) -> None:
        """Inputs in a folder, as a check program's view of a student's outputs."""
        self._file("result.csv", b"n,double\n21,42\n", staged_as="outputs/result.csv")

    def _data(self) -> None:
        self._file("data.csv", b"name,value\na,10\nb,20\nc,30\n")

    def _host_port(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.setblocking(False)
        self._file("port.txt", str(self.listener.getsockname()[1]).encode())

    def _host_paths(self) -> None:
        paths = paths_from_env()
        names = [PROJECT_ROOT, paths.data_dir, paths.images_dir, Path(sys.prefix), Path.home() / ".bash_history"]
        self._file("host_paths.txt", "\n".join(str(p) for p in names).encode())

    def _symlink(self) -> None:
        target = self.tmp / "real.csv"
        target.write_text("a,b\n")
        link = self.tmp / "link.csv"
        link.symlink_to(target)
        self.paths.append(link)
        self.names.append(link.name)

    def _oversize(self) -> None:
        self._file("big.bin", b"\0" * 4096)

    def _too_many(self) -> None:
        for i in range(5):
            self._file(f"part{i}.txt", b"x")

    def _fifo(self) -> None:
        path = self.tmp / "pipe.csv"
        os.mkfifo(path)
        self.paths.append(path)
        self.names.append(path.name)

    def accepted_connections(self) -> int:
        assert self.listener is not None
        count = 0
        while True:
            try:
                conn, _ = self.listener.accept()
                conn.close()
                count += 1
            except BlockingIOError:
                return count


def run_case(supervisor: Supervisor, case: Case, engine: str, tmp: Path) -> tuple[RunResult, Inputs]:
    inputs = Inputs(tmp)
    spec = RunSpec(
        runtime=case.runtime,
        image=case.expect.get("image"),  # an environment (images/<name>); default: the runtime's own
        script=case.path.read_bytes(),
        limits=case.limits,
        inputs=inputs.build(case.expect.get("inputs", [])),
        input_names=tuple(inputs.names),
        engine=engine,
        stdin=case.expect.get("stdin", "").encode(),
        args=tuple(case.expect.get("args", [])),
        egress=tuple(case.expect.get("egress", [])),
    )
    out = tmp / "exported"
    out.mkdir()
    return supervisor.run(spec, output_dir=out), inputs


def sandbox_fault(outcome: str, error_code: str | None) -> bool:
    """The sandbox itself broke (not the program): the one kind of result a retry may replace."""
    return outcome == Outcome.SANDBOX_ERROR.value and error_code in SANDBOX_FAULTS


# A run whose time limits are only a budget (its test is not about time) that ran out of it: under
# emulated KVM a guest now and then stalls, spinning without progress (make test-vm saw a notebook
# cell that needs seconds spend its 300 s of CPU with no output at all). Retried like a sandbox
# fault, under the harness only; a program that always loops fails every attempt.
BUDGET_RAN_OUT = (Outcome.CPU_LIMIT, Outcome.TIMED_OUT)


def retrying(
    supervisor: Supervisor, attempt: Callable[[int], RunResult], *, budget: bool = False
) -> tuple[RunResult, list[str]]:
    """Run `attempt(n)` (n counts from 0); run it again (up to BOOT_RETRIES times) only when the
    sandbox itself failed, or, with `budget` (the run's time limits are a budget, not what its
    test is about), when it ran out of that budget; and only after checking that the failed
    attempt left nothing behind. The result, and the reasons of the attempts it replaced."""
    retried: list[str] = []
    while True:
        result = attempt(len(retried))
        code = result.error.code if result.error else None
        stalled = budget and result.outcome in BUDGET_RAN_OUT
        if len(retried) >= BOOT_RETRIES or not (stalled or sandbox_fault(result.outcome.value, code)):
            return result, retried
        assert_nothing_left(supervisor, result)
        retried.append(result.reason)


def run_with_boot_retries(
    supervisor: Supervisor, case: Case, engine: str, tmp: Path
) -> tuple[RunResult, Inputs, list[str]]:
    """Run a case, retried as `retrying` says, each attempt in its own folder."""
    tried: list[Inputs] = []

    def attempt(n: int) -> RunResult:
        folder = tmp / f"attempt{n}"
        folder.mkdir()
        result, inputs = run_case(supervisor, case, engine, folder)
        tried.append(inputs)
        return result

    result, retried = retrying(supervisor, attempt)
    return result, tried[-1], retried


def case_record(case: Case, result: RunResult, retried: list[str]) -> dict[str, Any]:
    """What the VM harness's report shows for a case (attached to the test as a property)."""
    return {
        "case": case.id,
        "expected": case.outcomes,
        "outcome": result.outcome.value,
        "reason": result.reason,
        "error": result.error.code if result.error else None,
        "boot_s": result.timings.get("boot_s"),
        "wall_s": result.wall_s,
        "total_s": result.timings.get("total_s"),
        "retries": len(retried),
        "retry_reasons": retried,
        "cleanup_ok": result.cleanup_ok,
        "cleanup_failed": [f"{c.name}: {c.detail}" for c in result.cleanup if not c.ok],
        "engine_version": result.engine_version,
        "vm_start": result.vm_start,
        "engine_note": result.engine_note,
        "start_timings": {
            k: result.timings[k]
            for k in ("branch_s", "mount_s", "refresh_s", "cold_s", "clock_skew_s")
            if k in result.timings
        },
    }


def assert_expected(case: Case, result: RunResult, inputs: Inputs, engine: str) -> None:
    expect, limits = case.expect, case.limits
    shown = {k: v for k, v in result.to_json().items() if k not in ("stdout", "stderr", "limits")}
    summary = (
        json.dumps(shown, indent=1)[:2500] + f"\nstdout: {result.stdout[-400:]!r}\nstderr: {result.stderr[-400:]!r}"
    )
    allowed = {Outcome(o) for o in case.outcomes}
    assert result.outcome in allowed, summary
    stdout, stderr = result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
    for text in expect.get("stdout_has", []):
        assert text in stdout, (text, stdout[-2000:])
    for text in expect.get("stderr_has", []):
        assert text in stderr, (text, stderr[-2000:])
    for text in expect.get("reason_has", []):
        assert text in result.reason, (text, summary)
    for key in ("exit_code", "signal", "stdout_truncated", "stderr_truncated"):
        if key in expect:
            assert getattr(result, key) == expect[key], (key, summary)
    if "outputs" in expect:
        assert sorted(o.name for o in result.outputs) == sorted(expect["outputs"]), summary
    if "outputs_count" in expect:
        assert len(result.outputs) == expect["outputs_count"], summary
    rejected = {r.name: r.reason for r in result.rejected_outputs}
    for name, reason in expect.get("rejected_has", {}).items():
        assert name in rejected and reason in rejected[name], (name, rejected)
    if "max_wall_s" in expect:
        assert result.wall_s is not None and result.wall_s < expect["max_wall_s"] * slowdown()
    if expect.get("escalated") and engine == "namespace":  # a VM's child stops its machine on SIGTERM
        assert result.evidence["kill_method"] not in (None, "SIGTERM", "exited"), result.evidence
    if "error_code" in expect:
        assert result.error is not None and result.error.code == expect["error_code"], summary
    if inputs.listener is not None:
        assert inputs.accepted_connections() == 0, "the sandbox reached a listener on the host"
    if "egress" in expect:
        _assert_egress(expect, result, summary)
    _assert_evidence(result, limits)


def _assert_egress(expect: dict[str, Any], result: RunResult, summary: str) -> None:
    """Every attempt through the run's proxy is on its record, refused ones with why."""
    record = result.egress
    assert record is not None and record["policy"] == expect["egress"], summary
    attempts = record["attempts"]
    refused = [a for a in attempts if not a["allowed"]]
    assert len(refused) == record["refused"] == expect["egress_refused"], attempts
    assert record["connections"] == expect.get("egress_allowed", 0), attempts
    for words in expect.get("egress_reasons_have", []):
        assert any(words in a["reason"] for a in refused), (words, attempts)
    assert all(a["address"] == "" and a["bytes_in"] == a["bytes_out"] == 0 for a in refused), attempts
    for name in expect.get("egress_never_resolved", []):
        assert name.lower() in {a["host"] for a in attempts}, attempts  # asked for, refused...
        assert name.lower() not in RESOLVER.asked, RESOLVER.asked  # ...and never looked up


def _assert_evidence(result: RunResult, limits: Limits) -> None:
    """What the outcome claims must be backed by what the host measured."""
    ev = result.evidence
    if result.isolation == "namespace" and result.error is None:
        # The program's memory and its files' are measured apart, and held together to the limit.
        assert result.peak_memory_bytes is not None and result.peak_memory_bytes <= limits.memory_mib * MIB, ev
        assert result.peak_file_bytes is not None and result.peak_file_bytes <= limits.memory_mib * MIB
    match result.outcome:
        case Outcome.TIMED_OUT:
            assert ev["stopped_by"] == "deadline"
            assert result.wall_s is not None and limits.wall_timeout_s <= result.wall_s < limits.wall_timeout_s + 2.0
        case Outcome.CPU_LIMIT:
            assert ev["stopped_by"] == "cpu" and result.cpu_s is not None and result.cpu_s >= limits.cpu_time_s
        case Outcome.MEMORY_LIMIT:
            # The host's OOM kill, the runtime's own abort, or in a VM the guest kernel's OOM killer
            # (a SIGKILL the host did not send).
            guest_oom = result.isolation == "vm" and ev["guest_oom_kill"]
            assert ev["oom_kills"] > 0 or ev["stopped_by"] == "oom" or result.signal == 6 or guest_oom, ev
            if result.isolation == "vm":  # the host sees the VM's memory, not the program's share of it
                assert result.peak_memory_bytes is None and ev["cgroup_peak_memory_bytes"] > 32 * MIB, ev
            else:
                assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 32 * MIB
        case Outcome.PROCESS_LIMIT:
            assert ev["process_cap_hits"] > 0, ev
        case Outcome.DISK_LIMIT:
            assert ev["scratch_full"], ev
        case Outcome.OUTPUT_LIMIT:
            assert (
                result.stdout_truncated or result.stderr_truncated or ev["output_files_over_cap"]
                or ev["output_area_full"]
            ), ev  # fmt: skip
            if ev.get("oversize_output") is not None:  # the file named was refused, not exported
                assert ev["oversize_output"] in {r.name for r in result.rejected_outputs}, ev
                assert ev["oversize_output"] not in {o.name for o in result.outputs}, ev
            if result.stdout_truncated:
                assert result.stdout_bytes == limits.stdout_max_bytes == len(result.stdout)
            if result.stderr_truncated:
                assert result.stderr_bytes == limits.stderr_max_bytes == len(result.stderr)
        case Outcome.EGRESS_LIMIT:
            assert ev["stopped_by"] == "egress" and ev["egress_limit"], ev
            assert result.egress is not None and result.egress["limit"] == ev["egress_limit"], result.egress
            cap = limits.egress_max_bytes_in  # a cut lets through at most one relayed chunk past the cap
            assert cap < result.egress["bytes_in"] <= cap + 65536 or "connections" in ev["egress_limit"], result.egress
        case Outcome.REJECTED_INPUT:
            assert result.wall_s is None and result.sandbox_id is None, "a sandbox started for refused inputs"
        case Outcome.SUCCEEDED:
            assert result.exit_code == 0 and result.signal is None


def assert_nothing_left(supervisor: Supervisor, result: RunResult) -> None:
    assert result.cleanup_ok, [c for c in result.cleanup if not c.ok]
    names = {c.name for c in result.cleanup}
    if result.sandbox_id is not None:
        assert {"processes", "cgroups", "mounts", "staging", "slot"} <= names
    layout = CgroupLayout.detect()
    for parent in layout.parents(supervisor.settings.cgroup_parent):
        assert not (parent / result.run_id).exists(), f"cgroup left: {parent / result.run_id}"
    run_dir = supervisor.runs_dir / result.run_id
    assert not run_dir.exists() and not (supervisor.locks_dir / f"{result.run_id}.lock").exists()
    assert not hostfs.mounts_under(run_dir)
    assert not hostfs.mounts_under(supervisor.views_dir / result.run_id)
    assert not (supervisor.views_dir / result.run_id).exists()
    assert not supervisor.admission.holds(result.run_id)


def processes_of(uid: int) -> list[str]:
    """Live processes of a host uid, from ps (not from the runner's own helpers)."""
    out = subprocess.run(["ps", "-eo", "pid,uid,stat,comm", "--no-headers"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if int(line.split()[1]) == uid and not line.split()[2].startswith("Z")]


@pytest.mark.usefixtures("engine_runs_here")
@pytest.mark.parametrize("engine", engines_here())
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_case_is_classified_with_evidence_and_leaves_nothing(
    supervisor: Supervisor, case: Case, engine: str, tmp_path: Path, record_property: Any,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    if engine in case.expect.get("not_on", {}):
        pytest.skip(case.expect["not_on"][engine])
    case = case.on(engine)
    if "egress" in case.expect:
        request.getfixturevalue("test_host")  # the egress cases' destination, the test's own host
    result, inputs, retried = run_with_boot_retries(supervisor, case, engine, tmp_path)
    record_property("cordon_case", case_record(case, result, retried))
    assert_expected(case, result, inputs, engine)
    assert_nothing_left(supervisor, result)
    assert result.engine == engine
    assert result.isolation == ("vm" if engine == "smolvm" else "namespace")
    if result.sandbox_id is not None:
        assert result.image is not None and result.image.digest.startswith("sha256:")
        if engine == "namespace":
            assert processes_of(result.evidence["host_uid"]) == []


CONCURRENT = [
    "infinite_loop.py", "memory_bomb.py", "fork_bomb.py", "stdout_flood.py",
    "daemon_double_fork.py", "output_links.py", "disk_fill_scratch.py", "infinite_loop.js",
]  # fmt: skip
# How many of them run at once: all eight, unless a host too small for eight sandboxes (the
# emulated host of make test-vm: two emulated vCPUs) asks for fewer.
AT_ONCE = int(os.environ.get("CORDON_TEST_CONCURRENT", str(len(CONCURRENT))))


@pytest.mark.usefixtures("engine_runs_here")
@pytest.mark.parametrize("engine", engines_here())
def test_hostile_cases_at_once_are_each_classified_with_clean_audits(
    project_root: Path, engine: str, record_property: Any
) -> None:
    """Separate supervisor processes (the CLI), sharing the host's admission."""
    cases = {c.id: c for c in CASES}
    chosen = [name for name in CONCURRENT if engine not in cases[name].expect.get("not_on", {})][:AT_ONCE]

    def one(name: str) -> tuple[Case, dict[str, Any], list[str]]:
        case = cases[name]
        argv = [sys.executable, "-m", "runner", "run", "--runtime", case.runtime, "--engine", engine, "--json"]
        for key in {*case.expect.get("limits", {}), "wall_timeout_s", "cpu_time_s"}:
            argv += [_flag(key), str(getattr(case.limits, key))]
        retried: list[str] = []
        while True:
            proc = subprocess.run(
                [*argv, str(case.path)], cwd=project_root, env=child_env(CORDON_MAX_SLOTS=str(SLOTS)),
                capture_output=True, text=True, timeout=180 + 200 * BOOT_RETRIES,
            )  # fmt: skip
            assert proc.stdout.startswith("{"), (name, proc.returncode, proc.stderr[-3000:])
            result = json.loads(proc.stdout)
            error = result.get("error") or {}
            if len(retried) >= BOOT_RETRIES or not sandbox_fault(result["outcome"], error.get("code")):
                return case, result, retried
            assert result["cleanup"]["ok"], (name, result["cleanup"])  # a leak is never retried
            retried.append(result["reason"])

    with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
        results = list(pool.map(one, chosen))
    record_property(
        "cordon_concurrent",
        [
            {
                "case": c.id,
                "expected": c.outcomes,
                "outcome": r["outcome"],
                "boot_s": r["timings"].get("boot_s"),
                "vm_start": r.get("vm_start"),
                "wall_s": r["wall_s"],
                "retries": len(t),
                "cleanup_ok": r["cleanup"]["ok"],
            }
            for c, r, t in results
        ],
    )
    for case, result, _ in results:
        assert result["outcome"] in case.outcomes, (case.id, result["reason"], result["evidence"])
        assert result["cleanup"]["ok"], (case.id, result["cleanup"])
    assert len({r["run_id"] for _, r, _ in results}) == len(chosen)


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")
