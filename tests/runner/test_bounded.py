"""runner.bounded: host-side work in a child with bounds of its own (CPU, wall, memory, input and
answer bytes), that dies with its parent and with its process group, whatever the caller ignores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import pytest

from runner import bounded
from runner.bounded import Bounds, HostWorkError
from runner.bounded_child import EXIT_UNKNOWN_JOB, JOB_MODULES
from runner.config import PROJECT_ROOT

JOBS = "tests.runner.bounded_jobs"
QUICK = Bounds(cpu_s=1, wall_s=10.0, memory_mib=256)


def survivors(marker: str, *, started: bool = False) -> list[int]:
    """Live processes whose command line holds runner.bounded's mark and `marker`; `started`:
    only those that are Python already (past setpriv and env, which exec it in the same pid)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "comm").read_text()
        except OSError:
            continue
        if started and not command.startswith("python"):
            continue
        if bounded.MARK.encode() in argv and marker.encode() in b" ".join(argv) and state != "Z":
            found.append(int(entry.name))
    return found


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_a_job_answers_from_a_child_of_its_own_at_a_lower_priority() -> None:
    answer = bounded.call(f"{JOBS}:echo", {"text": "é\n\0", "n": [1, 2]}, QUICK)
    assert answer["payload"] == {"text": "é\n\0", "n": [1, 2]}
    assert answer["ppid"] == os.getpid() and answer["pid"] != os.getpid()
    assert answer["nice"] >= os.nice(0) + QUICK.nice or answer["nice"] == 19


def test_the_child_sees_none_of_the_callers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORDON_SECRET_KEY", "not for the child")
    assert set(bounded.call(f"{JOBS}:environment", {}, QUICK)) <= {"PATH", "LC_ALL", "LC_CTYPE", "OPENBLAS_NUM_THREADS"}


def test_a_job_that_spins_is_killed_by_its_cpu_limit() -> None:
    started = time.monotonic()
    with pytest.raises(HostWorkError) as caught:
        bounded.call(f"{JOBS}:spin", {}, QUICK)
    assert caught.value.code == "cpu_time" and "1 s of CPU time" in caught.value.message
    assert time.monotonic() - started < QUICK.wall_s


def test_a_job_that_sleeps_is_killed_at_the_wall_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(HostWorkError) as caught:
        bounded.call(f"{JOBS}:sleep", {"seconds": 60}, Bounds(cpu_s=1, wall_s=0.5))
    assert caught.value.code == "wall_time"
    assert time.monotonic() - started < 5
    assert survivors("bounded_jobs:sleep") == []


def test_a_job_that_allocates_past_its_memory_is_stopped() -> None:
    with pytest.raises(HostWorkError) as caught:
        bounded.call(f"{JOBS}:allocate", {"mib": 1024}, QUICK)
    assert caught.value.code == "memory" and "256 MiB" in caught.value.message
    assert bounded.call(f"{JOBS}:allocate", {"mib": 16}, QUICK) == 16 << 20


def test_an_input_over_its_cap_is_refused_before_any_child_starts() -> None:
    with pytest.raises(HostWorkError) as caught:
        bounded.call(f"{JOBS}:echo", {"text": "x" * 2000}, Bounds(input_max_bytes=1000))
    assert caught.value.code == "too_large" and "at most 1000" in caught.value.message


def test_an_answer_over_its_cap_is_refused() -> None:
    with pytest.raises(HostWorkError) as caught:
        bounded.call(f"{JOBS}:answer", {"chars": 5000}, Bounds(output_max_bytes=1000))
    assert caught.value.code == "output_too_large"


def test_a_job_that_raises_says_why() -> None:
    with pytest.raises(HostWorkError) as caught:
        bounded.call(f"{JOBS}:fail", {"why": "a reason"}, QUICK)
    assert caught.value.code == "failed" and caught.value.message == "ValueError: a reason"


def test_a_job_outside_the_job_modules_is_refused_and_nothing_of_it_is_imported(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "planted_job.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef job(): return 1\n")
    with pytest.raises(HostWorkError) as caught:
        bounded.call("planted_job:job", {}, QUICK)
    assert caught.value.code == "unknown_job" and "planted_job:job" in caught.value.message
    # The child refuses on its own too, whoever starts it: its module is never imported.
    child = subprocess.run(
        [sys.executable, "-E", "-S", "-m", bounded.MARK, "planted_job:job", str(os.getpid()), "1", "256", "1000", "0",
         str(tmp_path)],
        cwd=PROJECT_ROOT, input=b"{}", capture_output=True, timeout=30,
    )  # fmt: skip
    assert child.returncode == EXIT_UNKNOWN_JOB and child.stdout == b"" and not marker.exists()


def test_the_job_modules_are_the_ones_the_import_contract_keeps_free_of_django() -> None:
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"] if "bounded child's jobs" in c["name"]]
    assert "django" in contract["forbidden_modules"]
    assert set(contract["source_modules"]) == JOB_MODULES - {JOBS}


# A parent as a Celery pool process is: SIGTERM ignored (the child inherits an ignored signal
# across exec), waiting on a job that would spin for a minute.
PARENT = textwrap.dedent(
    """
    import signal, sys
    from runner import bounded
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("waiting", flush=True)
    try:
        bounded.call("tests.runner.bounded_jobs:spin", {"seconds": 60}, bounded.Bounds(cpu_s=120, wall_s=120))
    except bounded.HostWorkError as exc:
        print(exc.code, exc.message, flush=True)
    """
)


def start_parent() -> subprocess.Popen[str]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert parent.stdout is not None and parent.stdout.readline() == "waiting\n"
    # Until env has exec'd Python, the child still ignores SIGTERM as its parent does (env
    # --default-signal is what gives it back): a test stops the parent once the job runs.
    wait_for(lambda: survivors("bounded_jobs:spin", started=True))
    return parent


def test_the_child_dies_with_its_parent_when_the_parent_is_killed() -> None:
    parent = start_parent()
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: survivors("bounded_jobs:spin") == [], timeout=5)
    finally:
        os.killpg(parent.pid, signal.SIGKILL) if parent.poll() is None else None
        for pid in survivors("bounded_jobs:spin"):
            os.kill(pid, signal.SIGKILL)


def test_the_child_dies_with_its_process_group_even_where_the_parent_ignores_sigterm() -> None:
    parent = start_parent()
    try:
        os.killpg(parent.pid, signal.SIGTERM)  # as a process manager stops a worker
        wait_for(lambda: survivors("bounded_jobs:spin") == [], timeout=5)
        assert parent.stdout is not None
        assert parent.stdout.readline().startswith("failed exit status -15")  # the parent went on
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
