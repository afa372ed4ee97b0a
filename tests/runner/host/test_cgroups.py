"""cgroup mechanics. The host's own cgroup version runs for real in the hostile battery; the other
version's interface files are checked here against a directory laid out like its cgroupfs."""

import os
from pathlib import Path

import pytest

from runner.host.cgroups import CgroupLayout, RunCgroup
from runner.spec import BACKGROUND_CPU_WEIGHT


def test_this_host_has_a_usable_layout() -> None:
    layout = CgroupLayout.detect()
    assert layout.version in (1, 2)
    if layout.version == 1:
        assert {"memory", "pids", "cpuacct"} <= set(layout.v1_controllers)


@pytest.fixture
def fake_v2(tmp_path: Path) -> Path:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    (tmp_path / "cordon").mkdir()
    (tmp_path / "cordon" / "cgroup.subtree_control").write_text("")
    return tmp_path


def test_on_a_v2_only_host_one_leaf_carries_every_limit(fake_v2: Path) -> None:
    layout = CgroupLayout.detect(fake_v2)
    assert layout.version == 2 and layout.describe() == "cgroup v2 (unified)"
    cgroup = RunCgroup(layout, "cordon", "run1")
    cgroup.create(memory_bytes=256 << 20, pids_max=66, cpus=1.5)
    leaf = fake_v2 / "cordon" / "run1"
    assert (leaf / "memory.max").read_text() == str(256 << 20)
    assert (leaf / "pids.max").read_text() == "66"
    assert (leaf / "cpu.max").read_text() == "150000 100000"
    assert (leaf / "cpu.weight").read_text() == "100"  # v2's own default: a person's run
    assert set((fake_v2 / "cordon" / "cgroup.subtree_control").read_text().split()) == {"+cpu", "+memory", "+pids"}
    assert cgroup.procs_files == [str(leaf / "cgroup.procs")]


def test_v2_accounting_is_read_from_its_own_files(fake_v2: Path) -> None:
    layout = CgroupLayout.detect(fake_v2)
    leaf = fake_v2 / "cordon" / "run2"
    leaf.mkdir()
    (leaf / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    (leaf / "pids.events").write_text("max 12\n")
    (leaf / "memory.peak").write_text("123456789\n")
    cgroup = RunCgroup(layout, "cordon", "run2")
    assert cgroup.cpu_seconds() == 2.5
    assert cgroup.oom_kills() == 1 and cgroup.pids_max_hits() == 12
    assert cgroup.memory_peak_bytes() == 123456789
    assert cgroup.memory_bytes() is None  # unknown, not zero, when the kernel does not say


def test_a_host_without_cgroups_is_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no usable cgroups"):
        CgroupLayout.detect(tmp_path)


def test_a_background_run_has_a_tenth_of_the_cpu_weight(fake_v2: Path) -> None:
    cgroup = RunCgroup(CgroupLayout.detect(fake_v2), "cordon", "grading")
    cgroup.create(memory_bytes=64 << 20, pids_max=16, cpus=1.0, cpu_weight=BACKGROUND_CPU_WEIGHT)
    assert (fake_v2 / "cordon" / "grading" / "cpu.weight").read_text() == "10"


def test_on_this_host_the_weight_is_the_cgroup_cpu_share() -> None:
    layout = CgroupLayout.detect()
    cgroup = RunCgroup(layout, "cordon-test-weights", f"run{os.getpid()}")
    try:
        cgroup.create(memory_bytes=64 << 20, pids_max=16, cpus=1.0, cpu_weight=BACKGROUND_CPU_WEIGHT)
        if layout.version == 2:
            assert (cgroup.dirs[0] / "cpu.weight").read_text().strip() == "10"
        else:
            assert (cgroup.v1["cpu"] / "cpu.shares").read_text().strip() == "102"  # of v1's 1024
    finally:
        cgroup.remove()
        for parent in layout.parents("cordon-test-weights"):
            parent.rmdir()
