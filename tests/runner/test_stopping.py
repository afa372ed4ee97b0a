"""Which limit stops a run first: cancel > engine error > boot timeout > deadline > cpu > oom >
process cap, each at its exact boundary. Pure decisions: no sandbox, no clock."""

from typing import Any

import pytest

from runner.stopping import Usage, stop_reason

# The program started (ready); now is 100 s, the wall deadline 110 s, the CPU cap 5 s.
NOW, BOOT_DEADLINE, DEADLINE, CPU_TIME_S = 100.0, 90.0, 110.0, 5.0


def decide(**overrides: Any) -> str | None:
    facts: dict[str, Any] = {
        "stopped": False,
        "cancelled": False,
        "engine_failed": False,
        "ready": True,
        "now": NOW,
        "boot_deadline": BOOT_DEADLINE,
        "deadline": DEADLINE,
        "cpu_time_s": CPU_TIME_S,
        "usage": None,
    }
    return stop_reason(**{**facts, **overrides})


EVERY_LIMIT_PASSED = {
    "cancelled": True,
    "engine_failed": True,
    "now": DEADLINE + 1,
    "usage": Usage(cpu_s=CPU_TIME_S + 1, oom_kills=1, process_cap_hits=1),
}


def test_a_run_within_every_limit_goes_on() -> None:
    assert decide(usage=Usage(cpu_s=1.0)) is None


def test_a_run_already_stopped_is_not_stopped_again_whatever_else_applies() -> None:
    assert decide(stopped=True, **EVERY_LIMIT_PASSED) is None


def test_cancel_beats_every_other_reason() -> None:
    assert decide(**EVERY_LIMIT_PASSED) == "cancel"


def test_cancel_beats_an_engine_failure() -> None:
    assert decide(cancelled=True, engine_failed=True) == "cancel"


def test_an_engine_failure_beats_the_boot_timeout() -> None:
    assert decide(ready=False, engine_failed=True, now=BOOT_DEADLINE) == "engine_error"


def test_an_engine_failure_beats_the_deadline_and_every_usage_limit() -> None:
    assert decide(**{**EVERY_LIMIT_PASSED, "cancelled": False}) == "engine_error"


def test_cancel_stops_a_sandbox_that_is_still_booting() -> None:
    assert decide(ready=False, cancelled=True, now=BOOT_DEADLINE - 1) == "cancel"


def test_the_boot_timeout_fires_exactly_at_the_boot_deadline() -> None:
    assert decide(ready=False, now=BOOT_DEADLINE) == "boot_timeout"


def test_a_sandbox_still_booting_before_its_boot_deadline_is_left_to_boot() -> None:
    assert decide(ready=False, now=BOOT_DEADLINE - 0.001) is None


def test_a_sandbox_that_has_not_booted_has_no_wall_deadline_only_its_boot_deadline() -> None:
    assert decide(ready=False, now=DEADLINE + 1, boot_deadline=DEADLINE + 2) is None
    assert decide(ready=False, now=DEADLINE + 2, boot_deadline=DEADLINE + 2) == "boot_timeout"


def test_the_boot_timeout_beats_the_deadline_because_a_sandbox_that_has_not_booted_has_none() -> None:
    assert decide(ready=False, now=DEADLINE + 1) == "boot_timeout"


def test_once_the_program_has_started_the_boot_deadline_no_longer_applies() -> None:
    assert decide(ready=True, now=BOOT_DEADLINE + 5) is None


def test_the_wall_deadline_fires_exactly_at_the_deadline() -> None:
    assert decide(now=DEADLINE) == "deadline"


def test_a_moment_before_the_deadline_the_run_goes_on() -> None:
    assert decide(now=DEADLINE - 0.001) is None


def test_the_deadline_beats_cpu_time_used_up_in_the_same_round() -> None:
    assert decide(now=DEADLINE, usage=Usage(cpu_s=CPU_TIME_S + 1, oom_kills=1, process_cap_hits=1)) == "deadline"


def test_cpu_time_exactly_at_the_cap_stops_the_run() -> None:
    assert decide(usage=Usage(cpu_s=CPU_TIME_S)) == "cpu"


def test_cpu_time_just_under_the_cap_lets_the_run_go_on() -> None:
    assert decide(usage=Usage(cpu_s=CPU_TIME_S - 0.001)) is None


def test_cpu_time_the_host_cannot_measure_never_stops_the_run() -> None:
    assert decide(usage=Usage(cpu_s=None)) is None
    assert decide(usage=Usage(cpu_s=None, oom_kills=1)) == "oom"


def test_cpu_time_used_up_beats_an_oom_kill_in_the_same_sample() -> None:
    assert decide(usage=Usage(cpu_s=CPU_TIME_S, oom_kills=1, process_cap_hits=1)) == "cpu"


def test_an_oom_kill_beats_a_process_cap_hit_in_the_same_sample() -> None:
    assert decide(usage=Usage(cpu_s=0.5, oom_kills=1, process_cap_hits=1)) == "oom"


def test_a_process_cap_hit_stops_the_run() -> None:
    assert decide(usage=Usage(cpu_s=0.5, process_cap_hits=1)) == "process_cap"


@pytest.mark.parametrize("usage", [Usage(cpu_s=CPU_TIME_S + 1), Usage(cpu_s=0, oom_kills=1),
                                   Usage(cpu_s=0, process_cap_hits=1)])  # fmt: skip
def test_usage_limits_wait_until_the_program_has_started(usage: Usage) -> None:
    assert decide(ready=False, now=BOOT_DEADLINE - 1, usage=usage) is None


def test_a_round_without_a_sample_checks_only_the_clock() -> None:
    assert decide(usage=None) is None
    assert decide(usage=None, now=DEADLINE) == "deadline"


def test_a_passed_egress_cap_stops_the_run_after_the_deadline_and_before_any_sampled_limit() -> None:
    assert decide(egress_limit=True) == "egress"  # on any round, sampled or not
    assert decide(egress_limit=True, usage=Usage(cpu_s=CPU_TIME_S + 1, oom_kills=1)) == "egress"
    assert decide(egress_limit=True, now=DEADLINE + 1) == "deadline"
    assert decide(egress_limit=True, ready=False, boot_deadline=NOW + 10) is None  # nothing runs before ready
    assert decide(egress_limit=True, stopped=True) is None
