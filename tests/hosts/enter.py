"""A worker host's mounts, made inside its fresh mount namespace, then the worker under a small init.

Started as

    unshare --mount --pid --fork --kill-child --mount-proc --propagation private -- \\
        python -m tests.hosts.enter ...

this program is pid 1 of the host's own PID namespace, with the namespace's own /proc already
mounted (by unshare, before anything else: the mounts below leave /proc alone). It binds the host's
own directory and the shared images (read-only) into place, hides everything else the harness keeps
(the other host's directory, the web's, PostgreSQL's) and the project's var/ under empty tmpfs
mounts, then forks the command after `--` and stays the namespace's init:

- it reaps every process orphaned in the namespace (the sandboxes' exited helpers among them), as
  a machine's init does; the worker's own children are the worker's to reap;
- it passes SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1 and SIGUSR2 on to the command (pid 1 gets
  only the signals it handles: SIGTERM to it is a warm shutdown of the worker, as on a machine);
- it exits with the command's status when the command ends, and the kernel then SIGKILLs whatever
  is left in the namespace, nested namespaces included; SIGKILL to it does the same at once.

The mounts vanish with the mount namespace, that is with the host's last process. Not pid 1 (no
PID namespace of its own), it makes the mounts and execs the command in its place.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from types import FrameType

PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def init(command: list[str]) -> int:
    """Fork the command, reap every process of the namespace, return the command's exit status."""
    child = os.fork()
    if child == 0:
        for signo in PASSED_ON:
            signal.signal(signo, signal.SIG_DFL)
        os.execvp(command[0], command)  # noqa: S606 - an argv list, as every command here

    def pass_on(signo: int, frame: FrameType | None) -> None:
        try:
            os.kill(child, signo)
        except ProcessLookupError:
            pass

    for signo in PASSED_ON:
        signal.signal(signo, pass_on)
    orphans = 0
    while True:
        pid, status = os.wait()  # the command or any orphan: reaped, never left a zombie
        if pid != child:
            orphans += 1
            continue
        code = os.waitstatus_to_exitcode(status)
        print(f"init: {command[0]} exited ({code}); {orphans} orphans reaped", file=sys.stderr, flush=True)
        return 128 - code if code < 0 else code


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.hosts.enter")
    parser.add_argument("--own", nargs=2, metavar=("SOURCE", "TARGET"), required=True)
    parser.add_argument("--images", nargs=2, metavar=("SOURCE", "TARGET"), required=True)
    parser.add_argument("--hide", action="append", default=[], metavar="PATH")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run after the mounts is required (after --)")
    # The binds first: their sources are hidden by the tmpfs mounts that follow.
    mount("--rbind", *args.own)  # with what is mounted below it (a data disk of its own: tests/hosts/chaos.py)
    mount("--bind", *args.images)
    mount("-o", "remount,bind,ro", args.images[1])
    for path in args.hide:
        mount("-t", "tmpfs", "-o", "mode=0755,size=64k", "tmpfs", path)
    if os.getpid() != 1:
        os.execvp(command[0], command)  # noqa: S606 - an argv list, as every command here
    sys.exit(init(command))


if __name__ == "__main__":
    main(sys.argv[1:])
