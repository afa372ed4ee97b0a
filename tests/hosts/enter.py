"""A worker host's mounts, made inside its fresh mount namespace, then the worker itself.

Started as `unshare --mount --propagation private -- python -m tests.hosts.enter ...`: binds
the host's own directory and the shared images (read-only) into place, hides everything else
the harness keeps (the other host's directory, the web's, PostgreSQL's) and the project's var/
under empty tmpfs mounts, then execs the command after `--`. The mounts vanish with the
namespace, that is with the host's last process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


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
    mount("--bind", *args.own)
    mount("--bind", *args.images)
    mount("-o", "remount,bind,ro", args.images[1])
    for path in args.hide:
        mount("-t", "tmpfs", "-o", "mode=0755,size=64k", "tmpfs", path)
    os.execvp(command[0], command)  # noqa: S606 - an argv list, as every command here


if __name__ == "__main__":
    main(sys.argv[1:])
