"""The precedence of outcomes is fixed: whoever stopped the run first, then evidence, then exit."""

import pytest

from runner.classify import Evidence, classify
from runner.spec import Limits, Outcome, RunnerError

LIMITS = Limits(wall_timeout_s=2, cpu_time_s=1, memory_mib=128)


def test_a_clean_exit_zero_succeeds() -> None:
    assert classify(Evidence(exit_code=0), LIMITS) == (Outcome.SUCCEEDED, "exited 0")


def test_cancel_beats_every_other_reason() -> None:
    ev = Evidence(cancelled=True, stopped_by="deadline", oom_kills=3, exit_code=1)
    assert classify(ev, LIMITS)[0] is Outcome.CANCELLED


def test_an_engine_error_is_a_sandbox_error_and_not_charged() -> None:
    outcome, reason = classify(Evidence(engine_error=RunnerError("boot_failed", "no boot progress")), LIMITS)
    assert outcome is Outcome.SANDBOX_ERROR and not outcome.charged
    assert reason == "boot_failed: no boot progress"


@pytest.mark.parametrize(
    ("stopped_by", "outcome"),
    [("deadline", Outcome.TIMED_OUT), ("cpu", Outcome.CPU_LIMIT), ("stdout", Outcome.OUTPUT_LIMIT),
     ("oom", Outcome.MEMORY_LIMIT), ("process_cap", Outcome.PROCESS_LIMIT)],
)  # fmt: skip
def test_the_supervisors_stop_reason_decides(stopped_by: str, outcome: Outcome) -> None:
    ev = Evidence(stopped_by=stopped_by, stream_cap_hit="stdout" if stopped_by == "stdout" else None, signal=9)
    assert classify(ev, LIMITS)[0] is outcome


def test_the_deadline_wins_over_evidence_gathered_after_it() -> None:
    ev = Evidence(stopped_by="deadline", oom_kills=1, process_cap_hits=5, scratch_full=True, signal=9)
    assert classify(ev, LIMITS) == (Outcome.TIMED_OUT, "stopped after the 2 s wall-clock limit")


def test_oom_evidence_beats_process_cap_and_disk() -> None:
    ev = Evidence(oom_kills=1, process_cap_hits=2, scratch_full=True, signal=9)
    assert classify(ev, LIMITS)[0] is Outcome.MEMORY_LIMIT


def test_output_files_over_cap_beat_oom() -> None:
    ev = Evidence(output_files_over_cap=True, oom_kills=1, exit_code=0)
    assert classify(ev, LIMITS)[0] is Outcome.OUTPUT_LIMIT


def test_an_output_file_over_the_byte_cap_is_named_and_beats_the_programs_own_failure() -> None:
    ev = Evidence(output_files_over_cap=True, oversize_output="big", oversize_output_bytes=2 << 30, exit_code=1)
    limits = Limits(output_max_bytes=1048576)
    assert classify(ev, limits) == (Outcome.OUTPUT_LIMIT, "output file big is over the cap of 1 MiB")


def test_a_file_within_the_cap_that_takes_the_outputs_over_it_is_named_as_such() -> None:
    ev = Evidence(output_files_over_cap=True, oversize_output="sub/b.csv", oversize_output_bytes=600, exit_code=0)
    assert classify(ev, Limits(output_max_bytes=1000)) == (
        Outcome.OUTPUT_LIMIT,
        "output file sub/b.csv takes the output files over their cap of 1000 bytes",
    )


def test_too_many_output_files_is_an_output_limit_saying_so() -> None:
    ev = Evidence(output_files_over_cap=True, exit_code=0)
    assert classify(ev, Limits(output_max_files=8)) == (
        Outcome.OUTPUT_LIMIT,
        "wrote more output files than the cap of 8",
    )


def test_output_folders_too_deep_to_walk_are_an_output_limit_saying_so() -> None:
    ev = Evidence(output_files_over_cap=True, output_too_deep="d/d", oversize_output="big", exit_code=0)
    assert classify(ev, LIMITS) == (Outcome.OUTPUT_LIMIT, "wrote output folders nested more than 16 deep")


def test_brushing_a_limit_and_exiting_zero_is_success() -> None:
    assert classify(Evidence(process_cap_hits=3, scratch_full=True, exit_code=0), LIMITS)[0] is Outcome.SUCCEEDED


def test_a_full_disk_explains_a_failure() -> None:
    assert classify(Evidence(scratch_full=True, exit_code=1), LIMITS)[0] is Outcome.DISK_LIMIT


def test_the_programs_own_signal_is_a_failure_named_by_signal() -> None:
    assert classify(Evidence(signal=11), LIMITS) == (Outcome.FAILED, "killed by its own signal SIGSEGV")


def test_exit_statuses_of_the_cli_follow_the_outcome() -> None:
    assert Outcome.SUCCEEDED.exit_status == 0
    assert {o.exit_status for o in (Outcome.FAILED, Outcome.TIMED_OUT, Outcome.MEMORY_LIMIT)} == {1}
    assert {o.exit_status for o in (Outcome.REJECTED_INPUT, Outcome.SANDBOX_ERROR, Outcome.CANCELLED)} == {2}


def test_running_out_of_memory_says_how_much_of_it_files_held_when_that_was_a_good_part() -> None:
    ev = Evidence(oom_kills=1, signal=9, memory_file_bytes=100 * 1024 * 1024)
    assert classify(ev, LIMITS) == (
        Outcome.MEMORY_LIMIT,
        "ran out of its 128 MiB of memory, 100.0 MiB of it held by its files in /tmp and /output",
    )


@pytest.mark.parametrize("files", [None, 0, 4096])
def test_running_out_of_memory_does_not_mention_files_that_held_little_or_do_not_count(files: int | None) -> None:
    ev = Evidence(oom_kills=1, signal=9, memory_file_bytes=files)
    assert classify(ev, LIMITS) == (Outcome.MEMORY_LIMIT, "ran out of its 128 MiB of memory")


def test_an_egress_cap_beats_output_caps_and_the_programs_own_end_but_not_the_cpu_limit() -> None:
    cut = "more than 1024 bytes in"
    ev = Evidence(stopped_by="egress", egress_limit=cut, stream_cap_hit="stdout", oom_kills=1, exit_code=1)
    assert classify(ev, LIMITS) == (Outcome.EGRESS_LIMIT, f"stopped when its egress passed its cap ({cut})")
    # The program ended before the stop landed: the cut connection is still why.
    assert classify(Evidence(egress_limit=cut, exit_code=0), LIMITS)[0] is Outcome.EGRESS_LIMIT
    assert classify(Evidence(stopped_by="cpu", egress_limit=cut), LIMITS)[0] is Outcome.CPU_LIMIT
    assert Outcome.EGRESS_LIMIT.charged and Outcome.EGRESS_LIMIT.exit_status == 1


def test_a_stream_cap_is_said_in_human_units() -> None:
    ev = Evidence(stopped_by="stdout", stream_cap_hit="stdout", signal=9)
    assert classify(ev, Limits(stdout_max_bytes=1 << 20)) == (
        Outcome.OUTPUT_LIMIT,
        "stopped when stdout passed its cap of 1 MiB",
    )
    ev = Evidence(output_area_full=True, exit_code=1)
    assert classify(ev, Limits(output_max_bytes=64 << 20))[1] == "filled its output area of 64 MiB"
