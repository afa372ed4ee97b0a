"""The one engine registry: whether each engine can run here and why not, the engine a run gets
(with and without a canary, under require_vm), and the command line's choices. No sandbox runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from runner.cli import _parser
from runner.config import SupervisorSettings
from runner.engines.base import Availability, Engine
from runner.engines.smolvm.checks import canary_age_s, canary_record, canary_verdict, write_json
from runner.engines.smolvm.engine import SmolvmEngine
from runner.registry import ENGINES, REQUESTABLE, Registry
from runner.spec import CleanupCheck, Outcome, RunnerError, RunResult

NO_CANARY = "no smolvm canary boot has run on this host (python -m runner doctor)"
PASSED = {"ok": True, "reason": "booted in 1.2 s and ran python3", "at": "2026-12-01T10:00:00Z"}
FAILED = {"ok": False, "reason": "boot_failed: no boot progress", "at": "2026-12-01T10:00:00Z"}
FAILED_WHY = "the smolvm canary boot failed (boot_failed: no boot progress, at 2026-12-01T10:00:00Z)"
FAILED_BRIEF = ("no microVM could boot on this host (its canary boot failed at 2026-12-01T10:00:00Z; the host's "
                "doctor result says why)")  # fmt: skip


class FakeEngine:
    def __init__(self, name: str):
        self.name = name


def registry(tmp_path: Path, canary: dict[str, Any] | None = None, *, require_vm: bool = False) -> Registry:
    """A registry of the real engines (each built as on a host, nothing started), with `tmp_path`
    as the host state directory, where the smolvm engine keeps its canary's verdict."""
    if canary is not None:
        (tmp_path / "smolvm-canary.json").write_text(json.dumps(canary))
    return Registry(SupervisorSettings(require_vm=require_vm), tmp_path)


def smolvm_of(reg: Registry) -> SmolvmEngine:
    engine = reg.engines["smolvm"]
    assert isinstance(engine, SmolvmEngine)
    return engine


def chosen(reg: Registry, requested: str) -> tuple[str, str]:
    engine, note = reg.choose(requested)
    return engine.name, note


# --- what can run here -----------------------------------------------------------


def test_a_run_may_ask_for_auto_or_any_engine_by_name() -> None:
    assert REQUESTABLE == ("auto", "namespace", "smolvm") and REQUESTABLE[1:] == ENGINES


def test_smolvm_is_unavailable_until_a_canary_boot_has_run_and_says_how_to_run_one(tmp_path: Path) -> None:
    assert registry(tmp_path).available("smolvm") == Availability(False, NO_CANARY)


def test_a_failed_canary_makes_smolvm_unavailable_naming_its_reason_and_time(tmp_path: Path) -> None:
    assert registry(tmp_path, FAILED).available("smolvm") == Availability(False, FAILED_WHY, FAILED_BRIEF)


def test_a_passed_canary_makes_smolvm_available(tmp_path: Path) -> None:
    assert registry(tmp_path, PASSED).available("smolvm") == Availability(True, "the cached smolvm canary boot passed")


def test_an_unreadable_canary_file_counts_as_no_canary(tmp_path: Path) -> None:
    (tmp_path / "smolvm-canary.json").write_text("{not json")
    reg = registry(tmp_path)
    assert smolvm_of(reg).read_canary() is None and reg.available("smolvm") == Availability(False, NO_CANARY)
    assert canary_verdict({}) == Availability(False, NO_CANARY)


def test_namespace_is_unavailable_without_bubblewrap_and_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    answer = registry(tmp_path).available("namespace")
    assert answer == Availability(False, "bubblewrap is not installed (apt-get install bubblewrap)")


def test_an_unknown_engine_is_not_available_and_the_answer_lists_the_engines(tmp_path: Path) -> None:
    answer = registry(tmp_path).available("firecracker")
    assert not answer.ok and "namespace, smolvm" in answer.why


def test_a_host_serves_only_the_engines_that_pass_their_quick_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bubblewrap
    assert registry(tmp_path).serves() == []
    assert registry(tmp_path, PASSED).serves() == ["smolvm"]


def test_under_require_vm_a_host_serves_only_the_microvm_engine(tmp_path: Path) -> None:
    namespace_ok = registry(tmp_path).available("namespace").ok
    assert registry(tmp_path, PASSED, require_vm=True).serves() == ["smolvm"]
    assert registry(tmp_path, FAILED, require_vm=True).serves() == []
    assert registry(tmp_path, FAILED).serves() == (["namespace"] if namespace_ok else [])


# --- the engine a run gets -------------------------------------------------------


def test_auto_without_a_canary_falls_back_to_namespace_and_says_why(tmp_path: Path) -> None:
    assert chosen(registry(tmp_path), "auto") == ("namespace", f"auto fell back to namespace: {NO_CANARY}")


def test_auto_after_a_failed_canary_falls_back_to_namespace_in_one_short_sentence(tmp_path: Path) -> None:
    assert chosen(registry(tmp_path, FAILED), "auto") == ("namespace", f"auto fell back to namespace: {FAILED_BRIEF}")
    # the canary's own error (smolvm's can run to hundreds of characters) is the doctor's to show, once
    long = {**FAILED, "reason": "boot_failed: Agent error " + "x" * 300}
    assert "Agent error" in registry(tmp_path, long).available("smolvm").why
    _, note = chosen(registry(tmp_path, long), "auto")
    assert "Agent error" not in note and len(note) < 160, note


def test_auto_after_a_passed_canary_chooses_smolvm(tmp_path: Path) -> None:
    note = "auto chose smolvm: the cached smolvm canary boot passed"
    assert chosen(registry(tmp_path, PASSED), "auto") == ("smolvm", note)


def test_an_engine_asked_for_by_name_is_given_as_asked_whatever_the_canary(tmp_path: Path) -> None:
    assert chosen(registry(tmp_path), "smolvm") == ("smolvm", "smolvm as asked")
    assert chosen(registry(tmp_path, PASSED), "namespace") == ("namespace", "namespace as asked")


def test_an_unknown_engine_is_refused_as_unavailable(tmp_path: Path) -> None:
    with pytest.raises(RunnerError) as caught:
        registry(tmp_path).choose("firecracker")
    assert caught.value.code == "engine_unavailable"
    assert caught.value.message == "engine 'firecracker' is not available on this host"


def test_require_vm_refuses_auto_when_no_microvm_can_boot_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(RunnerError) as caught:
        registry(tmp_path, FAILED, require_vm=True).choose("auto")
    assert caught.value.code == "vm_required" and caught.value.outcome is Outcome.SANDBOX_ERROR
    assert caught.value.message == f"this site requires the microVM engine (require_vm), and {FAILED_WHY}"


def test_require_vm_refuses_namespace_asked_for_by_name(tmp_path: Path) -> None:
    with pytest.raises(RunnerError) as caught:
        registry(tmp_path, PASSED, require_vm=True).choose("namespace")
    assert caught.value.code == "vm_required"
    assert caught.value.message == "this site requires the microVM engine (require_vm); 'namespace' was asked for"


def test_require_vm_lets_auto_and_smolvm_through_once_the_canary_passed(tmp_path: Path) -> None:
    reg = registry(tmp_path, PASSED, require_vm=True)
    assert chosen(reg, "auto")[0] == "smolvm" and chosen(reg, "smolvm") == ("smolvm", "smolvm as asked")


def test_a_test_can_put_its_own_engine_in_the_registry(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    reg.engines["smolvm"] = cast(Engine, FakeEngine("a stand-in"))
    assert chosen(reg, "smolvm") == ("a stand-in", "smolvm as asked")


# --- the doctor's conclusion and the canary record --------------------------------


def test_the_conclusion_follows_the_engines_proved_usable(tmp_path: Path) -> None:
    assert registry(tmp_path).conclusion({"namespace": True, "smolvm": True}) == (
        "smolvm",
        "runs use the smolvm engine (isolation vm)",
    )
    auto, conclusion = registry(tmp_path).conclusion({"namespace": True, "smolvm": False})
    assert auto == "namespace" and conclusion.startswith("runs use the namespace engine (isolation namespace")
    assert conclusion.endswith(f"the smolvm engine cannot run here: {NO_CANARY}"), conclusion
    (tmp_path / "passed").mkdir()
    _, conclusion = registry(tmp_path / "passed", PASSED).conclusion({"namespace": True, "smolvm": False})
    assert conclusion.endswith("the smolvm engine cannot run here: its doctor checks failed"), conclusion
    assert registry(tmp_path, require_vm=True).conclusion({"namespace": True, "smolvm": False}) == (
        "namespace",
        "require_vm is set and no microVM can boot here: runs are refused",
    )


def test_a_canary_record_written_is_read_back_and_is_fresh(tmp_path: Path) -> None:
    result = RunResult(outcome=Outcome.SUCCEEDED, run_id="c", engine_version="smolvm 1", timings={"boot_s": 1.3})
    result.cleanup = [CleanupCheck("staging", True, "run directory removed")]
    record = canary_record(result, seconds=3.456)
    assert record["ok"] and record["reason"] == "booted in 1.3 s and ran python3" and record["seconds"] == 3.46
    reg = registry(tmp_path)
    canary_path = smolvm_of(reg).canary_path
    assert canary_path == tmp_path / "smolvm-canary.json"
    write_json(canary_path, record)
    assert smolvm_of(reg).read_canary() == record and 0 <= canary_age_s(record) < 60
    assert reg.available("smolvm").ok


def test_a_canary_that_failed_to_boot_is_recorded_with_its_error() -> None:
    result = RunResult(outcome=Outcome.SANDBOX_ERROR, run_id="c", error=RunnerError("boot_failed", "no boot progress"))
    record = canary_record(result, seconds=20)
    assert not record["ok"] and record["reason"] == "boot_failed: no boot progress"
    assert (
        canary_verdict(record).why
        == f"the smolvm canary boot failed (boot_failed: no boot progress, at {record['at']})"
    )


def test_a_canary_record_with_no_readable_time_is_infinitely_old() -> None:
    assert canary_age_s({"ok": True}) == float("inf")


# --- the command line -------------------------------------------------------------


@pytest.mark.parametrize("requested", REQUESTABLE)
def test_the_command_line_offers_every_requestable_engine(requested: str) -> None:
    args = _parser().parse_args(["run", "--runtime", "python", "--engine", requested, "job.py"])
    assert args.engine == requested


def test_the_command_line_refuses_an_engine_the_registry_does_not_list(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _parser().parse_args(["run", "--runtime", "python", "--engine", "firecracker", "job.py"])
    assert caught.value.code == 64 and "invalid choice: 'firecracker'" in capsys.readouterr().err


def test_the_command_line_asks_for_auto_by_default() -> None:
    assert _parser().parse_args(["run", "--runtime", "python", "job.py"]).engine == "auto"


def test_each_engines_isolation_is_known_without_importing_it_and_a_vm_policy_asks_for_the_vm_engine() -> None:
    from runner.registry import ENGINE_ISOLATION, VM_ISOLATION, engine_class, requested_for

    assert {name: engine_class(name).isolation for name in ENGINES} == ENGINE_ISOLATION
    assert requested_for(require_vm=False) == "auto"
    assert ENGINE_ISOLATION[requested_for(require_vm=True)] == VM_ISOLATION == "vm"


def test_auto_prefers_the_strongest_isolation_usable_and_falls_back_to_namespace() -> None:
    from runner.registry import auto_choice

    assert auto_choice({"namespace", "smolvm"}) == "smolvm"
    assert auto_choice({"namespace"}) == "namespace"
    assert auto_choice(set()) == "namespace"
