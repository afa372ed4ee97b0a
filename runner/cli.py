"""The `python -m runner` command line: image management now; runs and doctor build on it.

Exit status: 0 success, 1 a failed check, 2 an operational error, 64 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from runner import __version__
from runner.config import paths_from_env
from runner.env import ConfigError
from runner.images import ImageError, ImageStore, read_lock, recipe_names

EXIT_USAGE = 64


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m runner", description="Cordon's sandbox supervisor.")
    parser.add_argument("--version", action="version", version=f"cordon-runner {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    images = commands.add_parser("images", help="build, verify and list guest images")
    image_commands = images.add_subparsers(dest="images_command", required=True, parser_class=_Parser)
    build = image_commands.add_parser("build", help="build images from their recipes (cached)")
    build.add_argument("names", nargs="*", help="image names (default: every recipe)")
    build.add_argument("--force", action="store_true", help="rebuild even when up to date")
    build.add_argument("--jobs", type=int, default=2, help="images built at once (default 2)")
    verify = image_commands.add_parser("verify", help="check archives against the lock and trees against archives")
    verify.add_argument("names", nargs="*", help="image names (default: every pinned image)")
    image_commands.add_parser("list", help="list pinned images and whether they are present here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        store = ImageStore(paths_from_env())
        if args.command == "images":
            return _images(store, args)
    except (ConfigError, ImageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command}")


def _images(store: ImageStore, args: argparse.Namespace) -> int:
    if args.images_command == "build":
        names = args.names or recipe_names()
        for result in store.build(names, force=args.force, jobs=args.jobs, log=_log):
            state = "cached" if result.skipped else "built"
            print(f"{result.name}\t{state}\t{result.digest}")
        return 0
    if args.images_command == "verify":
        names = args.names or sorted(read_lock(store.lock_path))
        failed = False
        for name in names:
            report = store.verify(name)
            if report.ok:
                print(f"{name}: ok ({report.digest}, {report.files_checked} paths checked)")
            else:
                failed = True
                print(f"{name}: FAILED ({report.digest})")
                for problem in report.problems:
                    print(f"  {problem}")
        return 1 if failed else 0
    if args.images_command == "list":
        lock = read_lock(store.lock_path)
        print("NAME\tDIGEST\tBUILT\tPACKAGES\tLOCAL")
        for name in sorted(set(lock) | set(recipe_names())):
            entry = lock.get(name)
            if entry is None:
                print(f"{name}\t-\t-\t-\tnot built")
                continue
            present = store.archive_path(entry.digest).is_file() and store.rootfs_path(entry.digest).is_dir()
            here = "present" if present else "missing"
            print(f"{name}\t{entry.digest}\t{entry.built_at}\t{len(entry.packages)}\t{here}")
        return 0
    raise AssertionError(args.images_command)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
