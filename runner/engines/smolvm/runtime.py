"""smolvm's runtime on this host: the smolmachines wheel, the traversable copy of it every VMM
runs from, its version and components' hashes, and the sizes a VM is given besides its limits."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path

from runner.spec import Limits, RunnerError

COMPONENTS = ("smol-vmm", "libkrun.so", "libkrunfw.so.5", "_native.abi3.so", "agent-rootfs.tar.zst")
VMM_OVERHEAD_MIB = 768 + 64  # smolvm's own VMM allowance, plus the Python child
OVERLAY_GB = 1


@lru_cache(maxsize=1)
def wheel_dir() -> Path | None:
    """The installed smolmachines wheel's `smol/` folder (found without importing the SDK)."""
    spec = importlib.util.find_spec("smol")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def runtime_copy(root: Path) -> Path:
    """A root-owned, world-readable copy of the wheel's `smol/` package under `root`.

    smolvm drops each VMM to a per-VM uid, which must reach smol-vmm, libkrun and the agent
    rootfs; a virtualenv below a private directory (a fresh clone in a 0700 temp dir) would
    hide them. The copy is keyed by the components' hashes and checked against the wheel.
    """
    source = wheel_dir()
    if source is None:
        raise RunnerError("engine_unavailable", "the smolmachines wheel is not installed")
    hashes = component_hashes()
    key = hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:16]
    target = root / f"{engine_version().replace(' ', '-')}-{key}" / "smol"
    if target.is_dir():
        return target
    staging = target.parent.with_name(target.parent.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging / "smol", ignore=shutil.ignore_patterns("__pycache__", "*.ext4"))
    for path in [staging, *staging.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() or path.stat().st_mode & 0o111 else 0o644)
    copied = {name: _sha256(staging / "smol" / name) for name in hashes}
    if copied != hashes:
        shutil.rmtree(staging, ignore_errors=True)
        raise RunnerError("engine_unavailable", "the copy of the smolvm runtime does not match the wheel")
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # noqa: S103 - per-VM uids traverse it
    try:
        staging.rename(target.parent)
    except OSError:  # another supervisor won the race; its copy is as good
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def engine_version() -> str:
    try:
        return f"smolvm {importlib.metadata.version('smolmachines')}"
    except importlib.metadata.PackageNotFoundError:
        return "smolvm (not installed)"


@lru_cache(maxsize=1)
def component_hashes() -> dict[str, str]:
    folder = wheel_dir()
    return {name: _sha256(folder / name) for name in COMPONENTS if folder and (folder / name).is_file()}


def storage_gb(limits: Limits) -> int:
    """The VM's own disks bound what the guest can write outside /output (GiB, at least 1)."""
    return max(1, -(-limits.disk_mib // 1024))
