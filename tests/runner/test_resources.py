"""A run's memory figures agree with the limit the user set: the program's own memory and what its
files in /tmp and /output hold are measured apart, and together they are held to that limit.
Its samples are dense enough that a short run has a curve, and few enough for a long one.
Real namespace sandboxes, except for the pure parts at the end."""

from __future__ import annotations

from typing import Any

import pytest

from runner.engines.common import Peaks
from runner.spec import DEFAULT_MAXIMA, MIB, Limits, Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor
from runner.watch import SAMPLE_INTERVAL_S, record_interval


def _run(script: str, **limits: Any) -> tuple[RunResult, list[dict[str, Any]]]:
    samples: list[dict[str, Any]] = []

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "sample":
            samples.append(event)

    spec = RunSpec(runtime="python", script=script.encode(), limits=Limits(**limits), engine="namespace")
    result = Supervisor().run(spec, on_event=on_event)
    assert result.cleanup_ok, result.to_json()
    return result, samples


@pytest.mark.images
def test_a_memory_bomb_is_held_to_its_limit_and_its_peak_says_so() -> None:
    result, _ = _run("hoard = []\nwhile True:\n    hoard.append(bytearray(16 << 20))\n", memory_mib=128)
    assert result.outcome is Outcome.MEMORY_LIMIT
    assert result.reason == "ran out of its 128 MiB of memory"
    assert result.peak_memory_bytes is not None
    assert 120 * MIB <= result.peak_memory_bytes <= 128 * MIB, result.peak_memory_bytes
    assert result.peak_file_bytes == 0


@pytest.mark.images
def test_100_mib_written_to_tmp_are_the_files_not_the_programs_memory() -> None:
    script = "with open('/tmp/big', 'wb') as f:\n    for _ in range(100):\n        f.write(b'x' * (1 << 20))\n"
    result, samples = _run(script + "import time\ntime.sleep(0.2)\n", memory_mib=256, disk_mib=128)
    assert result.outcome is Outcome.SUCCEEDED, result.to_json()
    assert result.peak_file_bytes == 100 * MIB
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes < 32 * MIB
    assert samples[-1]["file_bytes"] == 100 * MIB and samples[-1]["memory_bytes"] < 32 * MIB


@pytest.mark.images
def test_files_that_fill_the_memory_limit_are_named_as_what_filled_it() -> None:
    """/tmp is memory here, within the one limit: past it the kernel stops the run as out of memory."""
    script = "with open('/tmp/big', 'wb') as f:\n    for _ in range(100):\n        f.write(b'x' * (1 << 20))\n"
    result, _ = _run(script, memory_mib=64, disk_mib=128)
    assert result.outcome is Outcome.MEMORY_LIMIT
    assert result.reason.startswith("ran out of its 64 MiB of memory, ")
    assert result.reason.endswith(" MiB of it held by its files in /tmp and /output")
    assert result.peak_file_bytes is not None and result.peak_memory_bytes is not None
    assert result.peak_file_bytes + result.peak_memory_bytes <= 64 * MIB + 4 * MIB  # peaks need not coincide


@pytest.mark.images
def test_a_half_second_run_has_a_curve_of_samples_from_its_start_to_its_end() -> None:
    result, samples = _run("import time\nblocks = []\nfor _ in range(10):\n"
                           "    blocks.append(bytearray(4 << 20))\n    time.sleep(0.05)\n")  # fmt: skip
    assert result.outcome is Outcome.SUCCEEDED and result.wall_s is not None
    times = [s["t"] for s in samples]
    assert len(times) >= 6, times
    assert times == sorted(times) and times[0] < 0.15 and times[-1] <= result.wall_s
    assert all(isinstance(s["memory_bytes"], int) and isinstance(s["file_bytes"], int) for s in samples)
    # It grew by its 40 MiB, and the samples saw it. The last sample may come as the program exits
    # and frees them (CI saw 3.7 MiB there after 7.4 at the start), so the curve's top is compared.
    assert max(s["memory_bytes"] for s in samples) >= samples[0]["memory_bytes"] + 24 * MIB, samples


def test_samples_are_recorded_densely_at_first_and_ever_more_sparsely() -> None:
    assert record_interval(0.0) == SAMPLE_INTERVAL_S == record_interval(1.99)
    assert record_interval(2.0) == 0.25 == record_interval(9.9)
    assert record_interval(10.0) == 1.0 == record_interval(3600.0)


def test_the_longest_run_the_default_maxima_allow_records_well_under_600_samples() -> None:
    t, rows = 0.0, 0
    while t < DEFAULT_MAXIMA.wall_timeout_s:
        t += record_interval(t)
        rows += 1
    assert rows < 400


def test_the_programs_peak_is_the_cgroups_less_the_most_its_files_held() -> None:
    peaks = Peaks()
    peaks.add(5 * MIB, 0)
    peaks.add(6 * MIB, 40 * MIB)
    # Between two samples the program reached more than either saw; the cgroup's peak shows it.
    assert peaks.program(cgroup_peak=60 * MIB) == 20 * MIB
    assert peaks.program(cgroup_peak=None) == 6 * MIB  # no peak from the kernel: the samples'
    assert peaks.files == 40 * MIB


def test_a_peak_nobody_measured_is_unknown_not_zero() -> None:
    assert Peaks().program(cgroup_peak=None) is None
    peaks = Peaks()
    peaks.add(None, None)
    assert (peaks.program(cgroup_peak=None), peaks.files) == (None, None)
