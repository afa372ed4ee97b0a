"""The `make test-vm` harness's own logic, without QEMU: reading the console, the watchdog, the verdict."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

from tests.vm.harness import EXIT_FAILED, EXIT_INFRA, EXIT_OK, Boot, Console, summarise


def _console(tmp_path: Path, boot: Boot, silence_s: float = 300.0) -> Console:
    return Console(tmp_path, boot, io.StringIO(), silence_s=silence_s, deadline_s=600.0)


def _case(name: str, status: str = "passed", **record: object) -> str:
    case = {"case": name, "expected": ["timed_out"], "outcome": "timed_out", "boot_s": 7.1, "wall_s": 1.6,
            "total_s": 12.0, "retries": 0, "cleanup_ok": True, **record}  # fmt: skip
    line = {"test": f"tests/runner/test_hostile.py::test_x[smolvm-{name}]", "status": status, "when": "call"}
    return "@@CASE " + json.dumps({**line, "cordon_case": case})


def test_console_markers_become_records_doctor_verdicts_and_the_end(tmp_path: Path) -> None:
    boot = Boot(1)
    console = _console(tmp_path, boot)
    doctor = {"try": 1, "report": {"engines": {"smolvm": True}, "checks": [
        {"name": "smolvm canary boot", "ok": True, "detail": "booted in 9.2 s"}]}}  # fmt: skip
    for text in [
        "[    1.2] random kernel noise",
        "@@DOCTOR " + json.dumps(doctor),
        "\x1b[0m" + _case("infinite_loop.py"),  # a marker after other bytes on the same line still counts
        "@@CASE {not json",
        "@@PYTEST rc=0",
        "@@DONE 321.0",
    ]:
        console.line(text, 1.0)
    assert [r["cordon_case"]["case"] for r in boot.records] == ["infinite_loop.py"]
    assert boot.doctor == [doctor] and boot.pytest_rc == 0 and boot.done and boot.infra is None


def test_the_emulated_hosts_kernel_faults_are_recorded(tmp_path: Path) -> None:
    boot = Boot(1)
    console = _console(tmp_path, boot)
    console.line("[  441.2] watchdog: BUG: soft lockup - CPU#1 stuck for 48s! [block worker:1853]", 441.0)
    console.line("[  812.0] Kernel panic - not syncing: corrupted stack end detected", 812.0)
    assert len(boot.faults) == 2 and "Kernel panic" in boot.faults[1]


def test_the_watchdog_stops_an_emulated_host_that_only_its_kernel_still_speaks_for(tmp_path: Path) -> None:
    """A process standing in for a wedged QEMU (no monitor socket): one marker from init, then only
    kernel lockup reports, as seen when the emulated host hung."""
    boot = Boot(2)
    kernel_spam = "while True: print('rcu: INFO: rcu_preempt self-detected stall on CPU', flush=True); time.sleep(0.2)"
    silent = subprocess.Popen(
        [sys.executable, "-c", f"import time\nprint('@@L1 up', flush=True)\n{kernel_spam}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    started = time.monotonic()
    _console(tmp_path, boot, silence_s=1.0).watch(silent)
    assert silent.returncode is not None and time.monotonic() - started < 30
    assert boot.infra is not None and "no sign of life" in boot.infra and not boot.done and boot.faults


def _boot(*lines: str, done: bool = True) -> Boot:
    boot = Boot(1, doctor=[{"try": 1, "report": {"engines": {"smolvm": True}}}])
    console = Console(Path("."), boot, io.StringIO(), silence_s=300.0, deadline_s=600.0)
    for text in lines:
        console.line(text, 0.0)
    if done:
        console.line("@@PYTEST rc=0", 0.0)
        console.line("@@DONE", 0.0)
    return boot


def test_the_verdict_passes_only_a_finished_battery_without_failures(capsys: object) -> None:
    skipped = json.dumps({"test": "t[smolvm-fork_bomb_sh.py]", "status": "skipped", "when": "setup",
                          "skip_reason": "in a VM the process cap is enforced inside the guest"})  # fmt: skip
    code, report = summarise([_boot(_case("a.py"), "@@CASE " + skipped)], "smolvm 1.32.2", 5.0, 60.0)
    assert code == EXIT_OK and report["engine_version"] == "smolvm 1.32.2"

    code, _ = summarise([_boot(_case("a.py"), _case("b.py", status="failed", outcome="succeeded"))], "v", 5, 60)
    assert code == EXIT_FAILED

    code, _ = summarise([_boot(_case("a.py"), done=False)], "v", 5.0, 60.0)
    assert code == EXIT_INFRA

    no_canary = _boot(_case("a.py"))
    no_canary.doctor = [{"try": 3, "report": {"engines": {"smolvm": False}}}]
    code, _ = summarise([no_canary], "v", 5.0, 60.0)
    assert code == EXIT_FAILED


def test_boot_retries_are_counted_in_the_report() -> None:
    code, report = summarise([_boot(_case("a.py", retries=2), _case("b.py", retries=1))], "v", 5.0, 60.0)
    assert code == EXIT_OK and report["boot_retries"] == 3
