"""Where the runner keeps its files, derived from the project root and CORDON_DATA_DIR.

No machine-specific paths: everything hangs off the checkout or the data directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.env import ConfigError, env_bool, env_float, env_int, env_path, env_str

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RECIPES_DIR = PROJECT_ROOT / "images"
# The reference pin, tracked in git: each image's digest and package manifest as a developer
# last pinned them. Builds compare with it; only `python -m runner images pin` writes it.
PIN_PATH = RECIPES_DIR / "lock.json"
ENV_FILE = PROJECT_ROOT / ".env"


@dataclass(frozen=True)
class Paths:
    data_dir: Path
    images_dir: Path
    # Host-wide runtime state (admission ledger, run locks), shared by every Cordon install on
    # the host, since they share its capacity, its cgroup tree and its sandbox uids.
    host_state_dir: Path = Path("/run/cordon")

    @property
    def archives_dir(self) -> Path:
        return self.images_dir / "archives"

    @property
    def rootfs_dir(self) -> Path:
        return self.images_dir / "rootfs"

    @property
    def build_dir(self) -> Path:
        return self.images_dir / "build"

    @property
    def image_record(self) -> Path:
        """This host's record of what it built (digest, packages), which runs resolve images by."""
        return self.images_dir / "built.json"


def paths_from_env(environ: Mapping[str, str] | None = None) -> Paths:
    env = os.environ if environ is None else environ
    data_dir = env_path("CORDON_DATA_DIR", Path("var"), base=PROJECT_ROOT, environ=env)
    images_dir = env_path("CORDON_IMAGES_DIR", data_dir / "images", base=PROJECT_ROOT, environ=env)
    host_state = env_path("CORDON_HOST_STATE_DIR", Path("/run/cordon"), base=PROJECT_ROOT, environ=env)
    return Paths(data_dir=data_dir, images_dir=images_dir, host_state_dir=host_state)


def host_slots(environ: Mapping[str, str] | None = None) -> int:
    """The runs this host admits at once (CORDON_MAX_SLOTS; by default twice its cores, at least 4):
    its admission's slots (runner.host.admission), and the processes of the worker for people's runs,
    each of which waits on one sandbox (playground.settings)."""
    cores = os.cpu_count() or 1
    return env_int("CORDON_MAX_SLOTS", max(4, 2 * cores), minimum=1, maximum=1000, environ=environ)


@dataclass(frozen=True)
class SupervisorSettings:
    """The settings every engine shares; each engine reads its own (Engine.from_host)."""

    uid_base: int = 1_900_000
    stop_grace_s: float = 0.5
    cgroup_parent: str = "cordon"
    require_vm: bool = False

    @classmethod
    def from_env(cls) -> SupervisorSettings:
        return cls(
            uid_base=env_int("CORDON_SANDBOX_UID_BASE", 1_900_000, minimum=1000),
            cgroup_parent=_cgroup_parent(env_str("CORDON_CGROUP_PARENT", "cordon")),
            stop_grace_s=env_float("CORDON_STOP_GRACE_S", 0.5, minimum=0.0),
            require_vm=env_bool("CORDON_REQUIRE_VM", False),
        )


def _cgroup_parent(name: str) -> str:
    """One cgroup directory name: a run's cgroups live under it, and a sweep reclaims what is there."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ConfigError(f"CORDON_CGROUP_PARENT must be one directory name (letters, digits, ._-); got {name!r}")
    return name
