"""`python -m runner run`: the JSON contract, exit statuses, cancel, and the sweep after a crash."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.config import SupervisorSettings, paths_from_env
from runner.host import hostfs
from runner.host.cgroups import CgroupLayout
from runner.images import read_lock
from tests.conftest import child_env

pytestmark = pytest.mark.images

CONTRACT_KEYS = {
    "outcome", "exit_code", "signal", "wall_s", "cpu_s", "peak_memory_bytes", "peak_file_bytes", "stdout_bytes",
    "stderr_bytes",
    "stdout_truncated", "stderr_truncated", "stdout", "stderr", "outputs", "rejected_outputs", "engine",
    "engine_version", "isolation", "image", "cleanup", "error",
}  # fmt: skip


def _run(project_root: Path, *args: str, script: str, tmp_path: Path, **kwargs) -> subprocess.CompletedProcess[str]:
    path = tmp_path / ("job.js" if "node" in args else "job.py")
    path.write_text(script)
    return subprocess.run(
        [sys.executable, "-m", "runner", "run", *args, str(path)], cwd=project_root, env=child_env(),
        capture_output=True, text=True, timeout=120, **kwargs,
    )  # fmt: skip


def test_json_prints_the_result_object_with_the_image_digest_built_here(project_root: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    script = "print('hello')\nopen('/output/r.txt', 'w').write('done')\n"
    proc = _run(
        project_root, "--runtime", "python", "--json", "--output-dir", str(out_dir), script=script, tmp_path=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) >= CONTRACT_KEYS
    assert result["outcome"] == "succeeded" and result["exit_code"] == 0 and result["signal"] is None
    assert result["stdout"] == "hello\n" and result["stdout_bytes"] == 6
    assert result["image"] == {"name": "python", "digest": read_lock()["python"].digest}
    assert result["engine"] == "namespace" and result["isolation"] == "namespace"
    assert result["engine_version"].startswith("bubblewrap ")
    assert result["cleanup"]["ok"] and {c["name"] for c in result["cleanup"]["checks"]} >= {
        "processes",
        "cgroups",
        "mounts",
        "staging",
    }
    assert result["outputs"] == [{"name": "r.txt", "size": 4, "sha256": hashlib.sha256(b"done").hexdigest()}]
    assert result["peak_file_bytes"] == 4096  # r.txt's one page; the script the host wrote is not the program's
    assert (out_dir / "r.txt").read_text() == "done"
    assert result["cpu_s"] is not None and result["peak_memory_bytes"] is not None and result["error"] is None


def test_without_json_the_output_streams_and_a_summary_follows(project_root: Path, tmp_path: Path) -> None:
    proc = _run(project_root, "--runtime", "node", script="console.log('from node')", tmp_path=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == "from node\n"
    assert "[cordon] outcome: succeeded" in proc.stderr and "[cordon] cleanup: ok" in proc.stderr


@pytest.mark.parametrize(
    ("script", "extra", "status"),
    [("import sys; sys.exit(3)", [], 1), ("while True: pass", ["--wall-timeout-s", "0.5"], 1),
     ("print(1)", ["--memory-mib", "999999"], 2), ("print(1)", ["--timeout-s", "soon"], 64)],
)  # fmt: skip
def test_exit_status_follows_the_outcome(
    project_root: Path, tmp_path: Path, script: str, extra: list[str], status: int
) -> None:
    proc = _run(project_root, "--runtime", "python", "--json", *extra, script=script, tmp_path=tmp_path)
    assert proc.returncode == status, proc.stdout + proc.stderr
    if status == 2:
        result = json.loads(proc.stdout)
        assert result["outcome"] == "rejected_input"
        assert "memory_mib is 999999; the maximum on this service is" in result["error"]["message"]


def test_egress_is_refused_past_the_sites_ceiling_and_each_attempt_is_summarised(
    project_root: Path, tmp_path: Path
) -> None:
    script = (
        "import urllib.request, urllib.error\n"
        "try:\n    urllib.request.urlopen('http://other.example.org/', timeout=10)\n"
        "except urllib.error.HTTPError as exc:\n    print(exc.code, exc.read().decode().strip())\n"
    )
    args = ("--runtime", "python", "--egress", "api.example.org:443")
    refused = _run(project_root, *args, "--json", script=script, tmp_path=tmp_path)  # no ceiling: nothing allowed
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["code"] == "egress_outside_ceiling"
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "run", *args, str(tmp_path / "job.py")], cwd=project_root,
        env=child_env(CORDON_EGRESS_CEILING="*.example.org:443, *.example.org:80"), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr  # a name outside the policy: refused without a lookup
    assert proc.stdout == "403 egress to other.example.org:80 refused: not in the run's egress policy\n"
    assert "[cordon] egress 0 connections, 1 refused, 0 bytes out, 0 in" in proc.stderr
    assert "[cordon]   GET other.example.org:80 refused: not in the run's egress policy" in proc.stderr


def test_ctrl_c_cancels_the_run_within_two_seconds_with_a_clean_audit(project_root: Path, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    before = _views()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run", "--runtime", "python", "--json", str(script)], cwd=project_root,
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _wait_for_run_start(before)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 2.0
    result = json.loads(stdout)
    assert proc.returncode == 2
    assert result["outcome"] == "cancelled" and result["cleanup"]["ok"]


def _views() -> set[str]:
    return {p.name for p in (paths_from_env().host_state_dir / "views").iterdir()}


def _wait_for_run_start(before: set[str], timeout: float = 30) -> str:
    """The id of a run that appeared after `before` was taken and whose sandbox is mounted."""
    views = paths_from_env().host_state_dir / "views"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in views.iterdir():
            if entry.name not in before and len(hostfs.mounts_under(entry)) >= 4:
                time.sleep(0.3)
                return entry.name
        time.sleep(0.05)
    raise AssertionError("the run never started")


def test_a_sigkilled_supervisor_leaves_debris_that_the_sweep_removes(project_root: Path, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import time\ntime.sleep(60)\n")
    before = _views()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "run", "--runtime", "python", "--json", str(script)], cwd=project_root,
        env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run_id = _wait_for_run_start(before)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    runs = paths_from_env().data_dir / "runs"
    layout = CgroupLayout.detect()
    leaves = [parent / run_id for parent in layout.parents(SupervisorSettings.from_env().cgroup_parent)]
    assert (runs / run_id).exists() and any(leaf.exists() for leaf in leaves), "expected debris after a crash"
    time.sleep(1.5)  # bwrap's --die-with-parent takes the sandbox down with its supervisor
    sweep = subprocess.run([sys.executable, "-m", "runner", "sweep"], cwd=project_root, env=child_env(),
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr
    assert f"swept cgroup {run_id}" in sweep.stdout and f"swept run directory {run_id}" in sweep.stdout
    assert f"swept view {run_id}" in sweep.stdout
    views = paths_from_env().host_state_dir / "views"
    assert not (views / run_id).exists() and not hostfs.mounts_under(views / run_id)
    assert not any(leaf.exists() for leaf in leaves)
    assert not (runs / run_id).exists()
    assert not (paths_from_env().host_state_dir / "locks" / f"{run_id}.lock").exists()
    assert not hostfs.mounts_under(runs / run_id)
