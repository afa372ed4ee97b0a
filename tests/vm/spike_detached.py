"""Spike for issue 17, part 2: a detached base built by one process, branched by others.

`python -m tests.vm --script tests/vm/spike_detached.py`. Questions: does a base created with
`persistent=True, detach=True` by a process that then exits keep running (and stay in the cgroup
that process was in)? Can other processes `Machine.open` it and branch it, two at once? Where does
a branch's VMM land (the branching process's cgroup)? Does deleting everything leave nothing?
Every step is guarded and printed; exits 0 whatever the findings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.vm.spike_branch import SPIKE, STATE_ROOT, cli, engine, image_view, say, sh, step

BASE = "cordonbase-detached"
CGROUPS = Path("/sys/fs/cgroup")
PRELUDE = textwrap.dedent(
    f"""
    import os, sys, time, json
    sys.path.insert(0, {str(engine.runtime().parent)!r})
    from smol import ConnectOptions, ExecOptions, Machine, MachineConfig, ResourceSpec, SmolError
    LOCAL = ConnectOptions(target="local")
    def join(group):
        path = "/sys/fs/cgroup/" + group
        os.makedirs(path, exist_ok=True)
        open(path + "/cgroup.procs", "w").write(str(os.getpid()))
    """
)
BUILD = PRELUDE + textwrap.dedent(
    """
    join("spike-bases")
    t = time.monotonic()
    m = Machine.create(MachineConfig(name=sys.argv[1], image=sys.argv[2], mounts=[],
        resources=ResourceSpec(cpus=1, memory_mb=512, network=False, storage_gb=1, overlay_gb=1),
        network=False, branchable=True, persistent=True, detach=True, ready_timeout_seconds=150.0), LOCAL)
    print("created", round(time.monotonic() - t, 2), "s; state", m.state(), flush=True)
    """
)
BRANCH = PRELUDE + textwrap.dedent(
    """
    join("spike-run-" + sys.argv[2])
    t = time.monotonic()
    base = Machine.open(sys.argv[1], LOCAL)
    print("opened", sys.argv[1], "state", base.state(), round(time.monotonic() - t, 2), "s", flush=True)
    clone = base.branch(sys.argv[2], freeze_source=True)
    print("branched", sys.argv[2], round(time.monotonic() - t, 2), "s", flush=True)
    r = clone.exec(["/bin/sh", "-c", "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\\\n'; echo; date +%s.%N"],
                   ExecOptions(timeout=60))
    print("exec", r.exit_code, r.stdout.strip().replace(chr(10), " "), r.stderr.strip(), flush=True)
    pids = os.popen("pgrep -f " + sys.argv[2]).read().split()
    for pid in pids:
        print("pid", pid, open("/proc/%s/cgroup" % pid).read().strip(), open("/proc/%s/comm" % pid).read().strip())
    if sys.argv[3] == "delete":
        clone.delete()
        print("deleted", sys.argv[2], flush=True)
    """
)


def py(code: str, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    text = (proc.stdout + proc.stderr).strip()
    say(f"rc {proc.returncode}: {text[-4000:]}")
    return text


def listing(also: str = "") -> None:
    """smolvm's machines, then the VMM processes (and `also`, when given)."""
    cli("machine", "ls", "--json")
    vmms()
    if also:
        say(also)


def vmms() -> None:
    say(sh("ps -eo pid,ppid,comm,args | grep -E 'libkrun|VM:' | grep -v grep || true"))
    for line in sh("pgrep -f 'libkrun|smol-vmm' || true").split():
        say(f"pid {line} cgroup {sh(f'cat /proc/{line}/cgroup')} comm {sh(f'cat /proc/{line}/comm')}")


def main() -> int:
    for key, value in engine.child_env().items():
        os.environ[key] = value
    root = step("image view", image_view)
    if not root:
        return 0
    try:
        step("build a detached base in a process that exits", lambda: py(BUILD, BASE, str(root)))
        time.sleep(3)
        step("after the builder exited: machines and VMMs", listing)
        step("branch a from another process (kept)", lambda: py(BRANCH, BASE, "cordon-da", "keep"))
        step("machines after a", listing)

        def two_at_once() -> None:
            argv = [sys.executable, "-c", BRANCH, BASE]
            procs = [
                subprocess.Popen([*argv, name, "delete"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for name in ("cordon-db", "cordon-dc")
            ]
            for proc in procs:
                out, _ = proc.communicate(timeout=300)
                say(f"rc {proc.returncode}: {out.strip()[-3000:]}")

        step("two branches at once from two processes (deleted)", two_at_once)
        step("machines after b, c", listing)
        volume = f"{SPIKE}:/input:ro"
        step("mount add on a (stopped)", lambda: cli("machine", "mount", "add", "--name", "cordon-da", "-v", volume))
    finally:
        step("delete a", lambda: cli("machine", "delete", "--name", "cordon-da", "-f"))
        step("delete base", lambda: cli("machine", "delete", "--name", BASE, "-f"))
        vms = f"ls -la {STATE_ROOT}/.cache/smolvm/vms"
        step("left", lambda: listing(sh(vms)))
        group = CGROUPS / "spike-bases"
        step("base cgroup", lambda: say(sh(f"cat {group}/cgroup.procs; cat {group}/memory.current")))
        from runner.host import hostfs

        step("unmount", lambda: hostfs.unmount(SPIKE / "root"))
    say(json.dumps({"done": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
