"""What each engine gives a run on the host: admission reserves all its cgroups allow, and the
output area, the same in every engine, has room to show a file over the cap.

Each engine's `prepare` runs for real here, with the kernel calls (cgroup writes, mounts)
recorded instead of made, so the figures checked are the ones `prepare` would write."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runner.engines.base import Engine, RunContext
from runner.engines.namespace import NamespaceEngine
from runner.engines.smolvm import engine as smolvm
from runner.engines.smolvm.engine import SmolvmEngine
from runner.engines.smolvm.runtime import wheel_dir
from runner.host import hostfs
from runner.host.cgroups import CgroupLayout, RunCgroup
from runner.images import ImageRef
from runner.spec import MIB, Limits, RunSpec

ENGINES = ("namespace", "smolvm")
SIZES = [
    Limits(),
    Limits(memory_mib=4096, cpus=4.0, disk_mib=1024, output_max_bytes=256 * MIB, max_processes=512),
    Limits(memory_mib=64, cpus=0.5, disk_mib=8, output_max_bytes=1000, max_processes=4),
]


@dataclass
class Prepared:
    """What an engine's prepare asked of the kernel."""

    cgroup: dict[str, Any] = field(default_factory=dict)
    tmpfs: dict[Path, dict[str, Any]] = field(default_factory=dict)


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Prepared:
    prepared = Prepared()

    def create(self: RunCgroup, **caps: Any) -> None:
        prepared.cgroup = caps

    def mount_tmpfs(target: Path, **options: Any) -> None:
        prepared.tmpfs[target] = options

    monkeypatch.setattr(RunCgroup, "create", create)
    monkeypatch.setattr(hostfs, "mount_tmpfs", mount_tmpfs)
    monkeypatch.setattr(hostfs, "bind_readonly", lambda source, target: None)
    # The state root lives under pytest's private temporary directory here.
    monkeypatch.setattr(smolvm, "first_untraversable", lambda path: None)
    return prepared


def _engine(name: str, tmp_path: Path) -> Engine:
    layout = CgroupLayout(version=2, root=tmp_path / "cgroup")
    if name == "namespace":
        return NamespaceEngine(layout=layout)
    return SmolvmEngine(state_root=tmp_path / "smolvm" / "state", layout=layout)


def _prepare(engine: Engine, limits: Limits, tmp_path: Path) -> RunContext:
    view = tmp_path / "view"
    ctx = RunContext(
        run_id="r1", spec=RunSpec(runtime="python", script=b"", limits=limits), limits=limits,
        run_dir=tmp_path / "run", view_dir=view, input_dir=tmp_path / "run" / "in",
        scratch_dir=view / "scratch", output_dir=view / "out", slot=0, uid=1_900_000,
        image=ImageRef("python", "sha256:0", tmp_path / "image.tar", tmp_path / "rootfs"), argv=[],
    )  # fmt: skip
    if isinstance(engine, SmolvmEngine) and wheel_dir() is None:
        pytest.skip("the smolmachines wheel is not installed")
    engine.prepare(ctx)
    return ctx


@pytest.mark.parametrize("limits", SIZES, ids=["default", "maxima", "small"])
@pytest.mark.parametrize("name", ENGINES)
def test_admission_reserves_at_least_what_the_runs_cgroups_allow(
    kernel: Prepared, tmp_path: Path, name: str, limits: Limits
) -> None:
    engine = _engine(name, tmp_path)
    _prepare(engine, limits, tmp_path)
    reserved = engine.reservation(limits)
    assert reserved.memory_mib * MIB >= kernel.cgroup["memory_bytes"]
    assert reserved.cpus >= kernel.cgroup["cpus"]


@pytest.mark.parametrize("limits", SIZES, ids=["default", "maxima", "small"])
def test_a_microvm_reserves_more_than_a_namespace_sandbox_with_the_same_limits(tmp_path: Path, limits: Limits) -> None:
    """The VMM's own allowance and an extra CPU for its threads. (A namespace sandbox's scratch
    is a tmpfs, memory, but within its memory limit, so this holds at every size.)"""
    namespace, vm = (_engine(name, tmp_path).reservation(limits) for name in ENGINES)
    assert vm.memory_mib > namespace.memory_mib
    assert vm.cpus > namespace.cpus


@pytest.mark.parametrize("name", ENGINES)
def test_the_output_area_holds_more_than_the_cap_and_its_memory_is_in_the_cgroup(
    kernel: Prepared, tmp_path: Path, name: str
) -> None:
    """A file can only be seen to be over the cap if the area lets it be; the area's tmpfs pages
    are charged to the run's memory cgroup. In a namespace sandbox they are within the memory
    limit, with the program's (the kernel cannot keep the two apart, so the limit is the whole);
    a VM's guest memory is the limit, and its cgroup makes room for the area beside it."""
    limits = Limits(output_max_bytes=MIB, memory_mib=128)
    engine = _engine(name, tmp_path)
    ctx = _prepare(engine, limits, tmp_path)
    area = kernel.tmpfs[ctx.output_dir]["size_bytes"]
    assert area > limits.output_max_bytes
    if engine.files_in_memory_limit:
        assert kernel.cgroup["memory_bytes"] == limits.memory_mib * MIB
    else:
        assert kernel.cgroup["memory_bytes"] >= limits.memory_mib * MIB + area


def test_both_engines_give_the_same_output_area(kernel: Prepared, tmp_path: Path) -> None:
    areas = []
    for name in ENGINES:
        ctx = _prepare(_engine(name, tmp_path / name), Limits(output_max_bytes=3 * MIB + 1), tmp_path / name)
        options = kernel.tmpfs[ctx.output_dir]
        areas.append((options["size_bytes"], options["max_inodes"]))
    assert areas[0] == areas[1]
