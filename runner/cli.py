"""The `python -m runner` command line: images, runs, doctor, sweep, and offline receipt checks.

Exit status: 0 success, 1 a failed check, 2 an operational error, 64 a usage error.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import NoReturn

from runner import __version__, receipt, upkeep
from runner.config import ENV_FILE, paths_from_env
from runner.env import ConfigError, load_env_file
from runner.images import BuildResult, ImageError, ImageStore, recipe_names
from runner.registry import REQUESTABLE
from runner.spec import RUNTIMES, Limits, RunResult, RunSpec
from runner.supervisor import Supervisor

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
    build = image_commands.add_parser(
        "build", help="build images from their recipes (cached), record them here, compare them with images/lock.json"
    )
    build.add_argument("names", nargs="*", help="image names (default: every recipe)")
    build.add_argument("--force", action="store_true", help="rebuild even when up to date")
    build.add_argument("--jobs", type=int, default=2, help="images built at once (default 2)")
    pin = image_commands.add_parser("pin", help="make this host's builds the reference pin (writes images/lock.json)")
    pin.add_argument("names", nargs="*", help="image names (default: every recipe)")
    verify = image_commands.add_parser(
        "verify", help="check archives against this host's record, trees against archives"
    )
    verify.add_argument("names", nargs="*", help="image names (default: every recipe and built image)")
    image_commands.add_parser("list", help="list the images built here, whether present, and whether pinned")

    run = commands.add_parser("run", help="run a script in a sandbox and report what happened")
    run.add_argument("--runtime", required=True, choices=RUNTIMES)
    run.add_argument("--engine", default="auto", choices=REQUESTABLE)
    run.add_argument("--environment", metavar="NAME",
                     help="an image of this runtime (images/NAME; default: the runtime's own)")  # fmt: skip
    defaults = Limits()
    for flag, field_name, kind, unit in LIMIT_FLAGS:
        default = getattr(defaults, field_name)
        run.add_argument(flag, *FLAG_ALIASES.get(field_name, ()), dest=field_name, type=kind, default=default,
                         help=f"{unit}; default {default}")  # fmt: skip
    run.add_argument("--input", action="append", default=[], type=Path, help="a file to show under /input (repeat)")
    run.add_argument("--output-dir", type=Path, help="where files the job writes under /output are exported")
    run.add_argument("--stdin-file", type=Path, help="a file whose bytes are the program's stdin (default: none)")
    run.add_argument("--arg", action="append", default=[], dest="args", metavar="VALUE",
                     help="an argument after the script (repeat; --arg=-x for one starting with a dash)")  # fmt: skip
    run.add_argument("--egress", action="append", default=[], metavar="HOST:PORT",
                     help="a destination the run may reach through its egress proxy, host:port or *.suffix:port, "
                     "within CORDON_EGRESS_CEILING (repeat; default: no network)")  # fmt: skip
    run.add_argument("--json", action="store_true", help="print only the result object")
    run.add_argument("script", help="the script to run ('-' reads it from standard input)")

    sweep = commands.add_parser("sweep", help="reclaim what crashed supervisors left behind")
    sweep.add_argument("--bases", action="store_true", help="also remove every warm smolvm base not in use")
    doctor = commands.add_parser("doctor", help="report what this host supports, from checks that run")
    doctor.add_argument("--json", action="store_true")
    doctor.add_argument("--recheck", action="store_true", help="boot a fresh canary VM even if one is cached")
    doctor.add_argument(
        "--no-image-hashes", dest="hash_images", action="store_false",
        help="check that each image is built and present, without hashing its files again (minutes on a slow host)",
    )  # fmt: skip
    receipts = commands.add_parser("receipt", help="check run receipts offline (no database, no network)")
    receipt_commands = receipts.add_subparsers(dest="receipt_command", required=True, parser_class=_Parser)
    check = receipt_commands.add_parser(
        "verify", help="check receipts' hashes and signatures (and the links between those of one host) and print them"
    )
    check.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="a receipt (GET /api/runs/{id}/receipt); '-' reads one from standard input",
    )
    check.add_argument("--key", required=True, help="the site's public key: ed25519:<base64>, or a file holding it")
    check.add_argument("--json", action="store_true", help="print each checked receipt's body, one JSON line each")
    return parser


# One flag per Limits field, named after it (`--wall-timeout-s`); `--timeout-s` is kept as an alias.
LIMIT_FLAGS = tuple(
    (f"--{f.name.replace('_', '-')}", f.name, type(getattr(Limits(), f.name)), f.metadata["unit"])
    for f in fields(Limits)
)
FLAG_ALIASES = {"wall_timeout_s": ("--timeout-s",)}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "receipt":  # needs nothing of this host: not even its .env
        return _receipt_verify(args)
    try:
        load_env_file(ENV_FILE)
        if args.command == "images":
            return _images(ImageStore(paths_from_env()), args)
        if args.command == "run":
            return _run(args)
        if args.command == "doctor":
            from runner.doctor import diagnose, render

            report = diagnose(recheck=args.recheck, hash_images=args.hash_images)
            print(json.dumps(report, indent=2) if args.json else render(report))
            return 0 if any(report["engines"].values()) else 1
        if args.command == "sweep":
            supervisor = Supervisor()
            lines = upkeep.sweep(supervisor)
            if args.bases:
                lines += upkeep.sweep_bases(supervisor)
            for line in lines:
                print(f"swept {line}")
            return 0
    except (ConfigError, ImageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command}")


def _images(store: ImageStore, args: argparse.Namespace) -> int:
    if args.images_command == "build":
        names = args.names or recipe_names()
        for result in store.build(names, force=args.force, jobs=args.jobs, log=_log):
            state = "cached" if result.skipped else "built"
            print(f"{result.name}\t{state}\t{result.digest}\t{_pin_state(result)}")
        return 0
    if args.images_command == "pin":
        for pinned in store.pin(args.names or recipe_names(store.recipes_dir), log=_log):
            print(f"{pinned.name}\t{'pinned' if pinned.changed else 'unchanged'}\t{pinned.digest}")
        return 0
    if args.images_command == "verify":
        names = args.names or sorted(set(store.built()) | set(recipe_names(store.recipes_dir)))
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
        built, pins = store.built(), store.pinned()
        print("NAME\tDIGEST\tBUILT\tPACKAGES\tLOCAL\tPIN")
        for name in sorted(set(built) | set(recipe_names(store.recipes_dir))):
            entry, pin = built.get(name), pins.get(name)
            if entry is None:
                print(f"{name}\t-\t-\t-\tnot built\t{pin.digest if pin else 'unpinned'}")
                continue
            present = store.archive_path(entry.digest).is_file() and store.rootfs_path(entry.digest).is_dir()
            here = "present" if present else "missing"
            state = "unpinned" if pin is None else "pinned" if pin.digest == entry.digest else f"pin is {pin.digest}"
            print(f"{name}\t{entry.digest}\t{entry.built_at}\t{len(entry.packages)}\t{here}\t{state}")
        return 0
    raise AssertionError(args.images_command)


def _receipt_verify(args: argparse.Namespace) -> int:
    """Each receipt checked against the key and printed; 1 if one does not hold (or the links
    between those of one host do not), 2 if a file or the key cannot be read."""
    try:
        public = receipt.parse_public_key(args.key)
    except receipt.ReceiptError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    bodies, hashes, worst = [], [], 0
    for path in args.files:
        try:
            data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
            body = receipt.verify(receipt.load(data), public)
        except OSError as exc:
            print(f"{path}: error: cannot read it: {exc.strerror or exc}", file=sys.stderr)
            worst = max(worst, 2)
            continue
        except receipt.ReceiptError as exc:
            print(f"{path}: {'NOT VALID' if exc.is_forgery else 'error'}: {exc.message}", file=sys.stderr)
            worst = max(worst, 1 if exc.is_forgery else 2)
            continue
        bodies.append(body)
        hashes.append(receipt.digest(body))
        if args.json:
            print(json.dumps(body, sort_keys=True))
        else:
            print(f"{path}: valid, signed by key {receipt.key_id(public)}")
            print("\n".join(f"  {label + ':':<16}{value}" for label, value in receipt.facts(body)))
    for problem in receipt.chain_problems(bodies, hashes):
        print(f"NOT VALID: the chain is broken: {problem}", file=sys.stderr)
        worst = max(worst, 1)
    return worst


def _pin_state(result: BuildResult) -> str:
    """Whether a build is the digest images/lock.json pins (the build's log says what differs)."""
    return {True: "pinned", False: "differs-from-pin", None: "unpinned"}[result.reproduced]


def _run(args: argparse.Namespace) -> int:
    script = sys.stdin.buffer.read() if args.script == "-" else Path(args.script).read_bytes()
    limits = Limits(**{name: getattr(args, name) for _, name, _, _ in LIMIT_FLAGS})
    stdin = args.stdin_file.read_bytes() if args.stdin_file is not None else b""
    spec = RunSpec(
        runtime=args.runtime, script=script, limits=limits, inputs=tuple(args.input), engine=args.engine,
        stdin=stdin, args=tuple(args.args), egress=tuple(args.egress), image=args.environment,
    )  # fmt: skip
    cancel = threading.Event()
    for signo in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signo, lambda *_: cancel.set())
    supervisor = Supervisor()
    upkeep.check_sandbox_paths(supervisor)
    upkeep.sweep(supervisor)
    if args.output_dir is not None:
        args.output_dir.mkdir(parents=True, exist_ok=True)
    result = supervisor.run(
        spec, on_event=None if args.json else _live_output, cancelled=cancel.is_set, output_dir=args.output_dir
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        _summary(result)
    return result.outcome.exit_status


def _live_output(event: dict[str, object]) -> None:
    data = event.get("data")
    if event["type"] == "chunk" and isinstance(data, bytes):
        target = sys.stdout if event["stream"] == "stdout" else sys.stderr
        target.buffer.write(data)
        target.flush()


def _mib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / (1 << 20):.1f} MiB"


def _summary(result: RunResult) -> None:
    def figure(value: object, unit: str) -> str:
        return "unknown" if value is None else f"{value}{unit}"

    lines = [
        f"outcome: {result.outcome.value} ({result.reason})",
        f"exit: code {result.exit_code} signal {result.signal}",
        f"wall {figure(result.wall_s, ' s')}, cpu {figure(result.cpu_s, ' s')}, "
        f"memory {_mib(result.peak_memory_bytes)}"
        f"{f' of {result.limits.memory_mib} MiB' if result.limits else ''}, "
        f"files {_mib(result.peak_file_bytes)}",
        f"stdout {result.stdout_bytes} bytes{' (truncated)' if result.stdout_truncated else ''}, "
        f"stderr {result.stderr_bytes} bytes{' (truncated)' if result.stderr_truncated else ''}",
        f"engine {result.engine} ({result.isolation}), image "
        f"{result.image.name + ' ' + result.image.digest if result.image else 'none'}",
    ]
    lines += [f"output {o.name} {o.size} bytes sha256:{o.sha256}" for o in result.outputs]
    lines += [f"rejected output {r.name}: {r.reason}" for r in result.rejected_outputs]
    if result.egress is not None:
        lines.append(
            f"egress {result.egress['connections']} connections, {result.egress['refused']} refused, "
            f"{result.egress['bytes_out']} bytes out, {result.egress['bytes_in']} in"
        )
        lines += [
            f"  {a['method']} {a['host']}:{a['port']} "
            f"{'allowed, ' + a['address'] if a['allowed'] else 'refused'}{': ' + a['reason'] if a['reason'] else ''}"
            for a in result.egress["attempts"]
        ]
    lines.append(f"cleanup: {'ok' if result.cleanup_ok else 'INCOMPLETE'}")
    lines += [f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in result.cleanup]
    if result.error:
        lines.append(f"error: {result.error.code}: {result.error.message}")
    print("\n".join(f"[cordon] {line}" for line in lines), file=sys.stderr)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
