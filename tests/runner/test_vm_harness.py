"""The `make test-vm` harness's own logic, without QEMU: reading the console, the watchdog, the passes,
the verdict."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.vm import plugin
from tests.vm.harness import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    Boot,
    Console,
    carried_calibration,
    done_entries,
    passes_left,
    restart_helps,
    summarise,
)


def _console(tmp_path: Path, boot: Boot, silence_s: float = 300.0) -> Console:
    return Console(tmp_path, boot, io.StringIO(), silence_s=silence_s, deadline_s=600.0)


def _case(name: str, status: str = "passed", run_in: str = "warm", **record: object) -> str:
    case = {"case": name, "expected": ["timed_out"], "outcome": "timed_out", "boot_s": 7.1, "wall_s": 1.6,
            "total_s": 12.0, "retries": 0, "cleanup_ok": True, "vm_start": "branch", **record}  # fmt: skip
    line = {"test": f"tests/runner/test_hostile.py::test_x[{name}-smolvm]", "pass": run_in, "status": status,
            "when": "call"}  # fmt: skip
    return "@@CASE " + json.dumps({**line, "cordon_case": case})


def _freshness(ok: bool, **more: object) -> str:
    fresh = {"vm_starts": 6, "distinct_urandom": 6 if ok else 1, "distinct_os_urandom": 6, "distinct_random": 6,
             "max_clock_skew_s": 0.4, "ok": ok, **more}  # fmt: skip
    status = "passed" if ok else "failed"
    line = {
        "test": "tests/runner/engines/smolvm/test_warm.py::test_fresh[smolvm]",
        "pass": "warm",
        "status": status,
        "when": "call",
    }
    return "@@CASE " + json.dumps({**line, "cordon_freshness": fresh})


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
        "@@PYTEST pass=warm rc=0",
        "@@PYTEST pass=cold rc=1",
        "@@DONE 321.0",
    ]:
        console.line(text, 1.0)
    assert [r["cordon_case"]["case"] for r in boot.records] == ["infinite_loop.py"]
    assert boot.records[0]["pass"] == "warm"
    assert boot.doctor == [doctor] and boot.pytest_rc == {"warm": 0, "cold": 1} and boot.done and boot.infra is None


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


def _boot(*lines: str, done: bool = True, finished: tuple[str, ...] = ("warm", "cold"), rc: int = 0) -> Boot:
    boot = Boot(1, doctor=[{"try": 1, "report": {"engines": {"smolvm": True}}}])
    console = Console(Path("."), boot, io.StringIO(), silence_s=300.0, deadline_s=600.0)
    for text in lines:
        console.line(text, 0.0)
    for name in finished if done else ():
        console.line(f"@@PYTEST pass={name} rc={rc}", 0.0)
    if done:
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


def test_the_report_sets_the_warm_pass_branched_starts_beside_the_cold_pass_boots(capsys: Any) -> None:
    cold_note = "auto: kvm; booted cold: no base yet for python"
    boot = _boot(
        _case("a.py", boot_s=1.0),
        _case("b.py", boot_s=2.0),
        _case("c.py", boot_s=3.0),
        _case("d.py", boot_s=15.0, vm_start="cold", engine_note=cold_note),
        _case("e.py", boot_s=None, vm_start=None, outcome="rejected_input", expected=["rejected_input"]),
        _case("a.py", run_in="cold", boot_s=10.0, vm_start="cold", engine_note="; booted cold: warm starts are off"),
        _case("b.py", run_in="cold", boot_s=12.0, vm_start="cold"),
        _case("c.py", run_in="cold", boot_s=20.0, vm_start="cold"),
    )
    code, report = summarise([boot], "v", 5.0, 60.0)
    assert code == EXIT_OK
    warm, cold = report["passes"]["warm"], report["passes"]["cold"]
    assert warm["cases_run"] == 5 and cold["cases_run"] == 3 and warm["pytest_rc"] == cold["pytest_rc"] == 0
    assert warm["starts"]["by_start"]["branch"] == {"runs": 3, "median_s": 2.0, "max_s": 3.0}
    assert warm["starts"]["by_start"]["cold"]["runs"] == 1
    assert warm["starts"]["cold_reasons"] == {"no base yet for python": 1}
    assert cold["starts"]["all"] == {"runs": 3, "median_s": 12.0, "max_s": 20.0}
    assert cold["starts"]["cold_reasons"] == {"warm starts are off": 1, "no reason given": 2}
    assert report["warm_cold"] == {
        "branch_median_s": 2.0, "cold_median_s": 12.0, "ratio": 0.167,
        "warm_pass_cold_median_s": 15.0, "warm_pass_cold_ratio": 1.25,
    }  # fmt: skip
    assert report["warnings"] == [] and json.loads(json.dumps(report)) == report
    shown = capsys.readouterr().out
    assert "warm pass: warm starts on" in shown and "cold pass: warm starts off" in shown
    assert "= 0.167 (6.0x faster)" in shown and "1 x no base yet for python" in shown
    row = next(line for line in shown.splitlines() if line.startswith("d.py "))
    assert row.split()[3:5] == ["cold", "15.0"]


def test_without_branched_or_cold_runs_the_ratio_is_unknown_not_zero(capsys: Any) -> None:
    code, report = summarise([_boot(_case("a.py", vm_start="cold"), finished=("warm",))], "v", 5.0, 60.0, ("warm",))
    assert code == EXIT_OK and report["warm_cold"]["ratio"] is None
    assert report["warnings"] == ["no single run of the warm pass branched (every VM booted cold)"]
    assert "= unknown" in capsys.readouterr().out


def test_a_stale_freshness_record_fails_the_run_like_a_failed_case() -> None:
    code, report = summarise([_boot(_case("a.py"), _freshness(ok=True))], "v", 5.0, 60.0)
    assert code == EXIT_OK and report["freshness"][0]["distinct_urandom"] == 6
    assert report["freshness"][0]["test"].endswith("test_fresh[smolvm]") and report["freshness"][0]["pass"] == "warm"

    stale = _freshness(ok=False).replace('"status": "failed"', '"status": "passed"')  # the record alone decides
    code, report = summarise([_boot(_case("a.py"), stale)], "v", 5.0, 60.0)
    assert code == EXIT_FAILED and "freshness" in report["verdict"]


def test_ready_branches_starts_are_set_beside_the_cold_boots_with_their_target(capsys: Any) -> None:
    cold = [_case(n, run_in="cold", boot_s=10.0, vm_start="cold") for n in ("a.py", "b.py")]
    boot = _boot(_case("c.py"), _freshness(ok=True, ready_start_s=[1.5, 2.5, 6.0]), *cold)
    code, report = summarise([boot], "v", 5.0, 60.0)
    assert code == EXIT_OK
    ratio = report["warm_cold"]
    assert (ratio["ready_median_s"], ratio["ready_runs"], ratio["ready_ratio"]) == (2.5, 3, 0.25)
    assert "/ cold = 0.250 (target <= 0.4: pass)" in capsys.readouterr().out
    slow = _boot(_case("c.py"), _freshness(ok=True, ready_start_s=[5.0]), *cold)
    summarise([slow], "v", 5.0, 60.0)
    assert "(target <= 0.4: FAIL)" in capsys.readouterr().out


def test_both_passes_must_finish_and_a_pass_with_nothing_left_to_run_is_not_an_error() -> None:
    code, _ = summarise([_boot(_case("a.py"), finished=("warm",))], "v", 5.0, 60.0)
    assert code == EXIT_INFRA

    code, _ = summarise([_boot(_case("a.py"), rc=5)], "v", 5.0, 60.0)
    assert code == EXIT_OK

    code, _ = summarise([_boot(_case("a.py"), rc=2)], "v", 5.0, 60.0)
    assert code == EXIT_FAILED


def test_a_restarted_emulated_host_runs_the_passes_left_and_skips_what_each_pass_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _boot(_case("a.py"), _case("b.py"), done=False)
    first.pytest_rc = {"warm": 0}
    second = _boot(_case("a.py", run_in="cold"), done=False)
    assert passes_left([first], ("warm", "cold")) == ["cold"]
    assert passes_left([first, second], ("warm", "cold")) == ["cold"]

    done = tmp_path / "done"
    done.write_text(done_entries([first, second]))
    monkeypatch.setenv(plugin.DONE_FILE, str(done))
    nodeids = [f"tests/runner/test_hostile.py::test_x[{name}-smolvm]" for name in ("a.py", "b.py", "c.py")]

    def kept(run_in: str) -> list[str]:
        monkeypatch.setenv(plugin.PASS, run_in)
        items: list[Any] = [SimpleNamespace(nodeid=n) for n in nodeids]
        deselected: list[Any] = []
        config: Any = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
        plugin.pytest_collection_modifyitems(config, items)
        assert len(items) + len(deselected) == len(nodeids)
        return [item.nodeid.split("[")[1].split("-")[0] for item in items]

    assert kept("warm") == ["c.py"]
    assert kept("cold") == ["b.py", "c.py"]


def test_a_restarted_emulated_host_is_given_the_calibration_an_earlier_boot_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured = {"pass": "warm", "base_cpu_s": 0.42, "vm_cpu_s": 44.9, "slowdown": 212.7, "note": "2 x 44.9 s / 0.42 s"}
    floor = {"pass": "warm", "slowdown": 10.0, "note": "the job did not succeed (boot_failed): the floor"}
    first, second = Boot(1), Boot(2)
    first.calibrations, second.calibrations = [measured], [floor]
    assert carried_calibration([]) == ""
    assert carried_calibration([Boot(1)]) == ""
    assert json.loads(carried_calibration([first, second])) == {k: v for k, v in measured.items() if k != "pass"}
    assert carried_calibration([second]) == ""  # the floor is no measurement: the next boot measures

    monkeypatch.setattr(plugin, "CALIBRATED", tmp_path / "calibration.json")
    monkeypatch.setattr(plugin, "_console", lambda line: None)
    monkeypatch.setattr(plugin, "calibrate", lambda: pytest.fail("measured again"))
    monkeypatch.setenv(plugin.PASS, "warm")
    monkeypatch.setenv(plugin.CARRIED, carried_calibration([first, second]))
    monkeypatch.setenv(plugin.SLOWDOWN, "10")
    plugin.pytest_sessionstart(cast(pytest.Session, SimpleNamespace()))
    assert float(os.environ[plugin.SLOWDOWN]) == 212.7
    kept = json.loads((tmp_path / "calibration.json").read_text())
    assert kept["vm_cpu_s"] == 44.9 and kept["note"] == "2 x 44.9 s / 0.42 s, measured by an earlier boot"
    # A third boot is given what the second reported, carried already: said once.
    (tmp_path / "calibration.json").unlink()
    second.calibrations = [{"pass": "warm", **kept}]
    monkeypatch.setenv(plugin.CARRIED, carried_calibration([first, second]))
    plugin.pytest_sessionstart(cast(pytest.Session, SimpleNamespace()))
    again = json.loads((tmp_path / "calibration.json").read_text())
    assert again["note"] == "2 x 44.9 s / 0.42 s, measured by an earlier boot"


def test_the_plugin_records_the_pass_and_the_cordon_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugin.PASS, "cold")
    fresh = {"vm_starts": 2, "ok": True}
    report = pytest.TestReport(
        "t.py::test_a[smolvm]", ("t.py", 1, "test_a"), {}, "passed", None, "call",
        user_properties=[("cordon_case", {"case": "a.py"}), ("cordon_freshness", fresh), ("other", 1)],
    )  # fmt: skip
    assert plugin.record(report) == {
        "test": "t.py::test_a[smolvm]", "pass": "cold", "status": "passed", "when": "call",
        "cordon_case": {"case": "a.py"}, "cordon_freshness": fresh,
    }  # fmt: skip


def test_an_emulated_host_that_hangs_before_its_doctor_reports_is_restarted_and_is_no_verdict_on_cordon() -> None:
    hung = Boot(1)
    hung.infra = "no sign of life from the emulated host for 150 s (hung)"
    assert restart_helps(hung)
    code, _ = summarise([hung], "v", 5.0, 60.0)
    assert code == EXIT_INFRA  # QEMU's software CPU failed: nothing proven either way

    said_no = Boot(2, doctor=[{"try": 3, "report": {"engines": {"smolvm": False}}}])
    said_no.infra = "the emulated host stopped before the end (QEMU exit 0)"
    assert not restart_helps(said_no)  # the canary cannot boot: a restart would say so again
    code, _ = summarise([hung, said_no], "v", 5.0, 60.0)
    assert code == EXIT_FAILED

    finished = _boot(_case("a.py"))
    assert not restart_helps(finished)


def test_a_run_out_of_its_time_budget_is_retried_only_when_its_limits_are_a_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under the harness a stalled emulated guest spends a cell's whole budget: retried, counted; a
    run whose test is about its limits is not, and a program that always loops fails every try."""
    from runner.spec import Outcome
    from tests.runner import test_hostile

    monkeypatch.setattr(test_hostile, "BOOT_RETRIES", 2)
    monkeypatch.setattr(test_hostile, "assert_nothing_left", lambda supervisor, result: None)

    def runs(*outcomes: Outcome) -> Any:
        results = iter(SimpleNamespace(outcome=o, error=None, reason=o.value) for o in outcomes)
        return lambda n: next(results)

    stalled_once = runs(Outcome.CPU_LIMIT, Outcome.SUCCEEDED)
    result, retried = test_hostile.retrying(cast(Any, None), stalled_once, budget=True)
    assert result.outcome is Outcome.SUCCEEDED and retried == ["cpu_limit"]
    result, retried = test_hostile.retrying(cast(Any, None), runs(Outcome.TIMED_OUT), budget=False)
    assert result.outcome is Outcome.TIMED_OUT and retried == []
    always = runs(Outcome.CPU_LIMIT, Outcome.TIMED_OUT, Outcome.CPU_LIMIT, Outcome.SUCCEEDED)
    result, retried = test_hostile.retrying(cast(Any, None), always, budget=True)
    assert result.outcome is Outcome.CPU_LIMIT and retried == ["cpu_limit", "timed_out"]
    result, retried = test_hostile.retrying(cast(Any, None), runs(Outcome.FAILED), budget=True)
    assert result.outcome is Outcome.FAILED and retried == []
