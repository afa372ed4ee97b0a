"""A run's stdin and command-line arguments: what the program sees of them in a real namespace
sandbox, that its stdin is sealed memory it cannot change, and the specs refused before anything runs."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.engines.common import stdin_fd
from runner.spec import ARG_MAX_BYTES, ARGS_MAX_ITEMS, MIB, STDIN_MAX_BYTES, Outcome, RunnerError, RunResult, RunSpec
from runner.supervisor import Supervisor, program_argv
from tests.conftest import child_env

pytestmark = pytest.mark.images

ARGS = ("plain", "two words", "--flag=1", "$HOME;rm -rf /", "", "é ✓")
STDIN = "3 4\nzweite Zeile ✓\n".encode()
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def _run(runtime: str, script: str, *, stdin: bytes = b"", args: tuple[str, ...] = ()) -> RunResult:
    spec = RunSpec(runtime=runtime, script=script.encode(), stdin=stdin, args=args, engine="namespace")
    return Supervisor().run(spec)


def _said(result: RunResult) -> dict[str, Any]:
    assert result.outcome is Outcome.SUCCEEDED, result.to_json()
    assert result.cleanup_ok, result.cleanup
    return dict(json.loads(result.stdout))


# --- what the program sees ----------------------------------------------------------------


def test_a_python_program_reads_its_stdin_and_its_args() -> None:
    script = "import json, sys\nprint(json.dumps({'args': sys.argv[1:], 'stdin': sys.stdin.read()}))\n"
    said = _said(_run("python", script, stdin=STDIN, args=ARGS))
    assert said == {"args": list(ARGS), "stdin": STDIN.decode()}


def test_a_node_program_reads_its_stdin_and_its_args() -> None:
    script = (
        "const stdin = require('fs').readFileSync(0, 'utf8');\n"
        "console.log(JSON.stringify({args: process.argv.slice(2), stdin}));\n"
    )
    said = _said(_run("node", script, stdin=STDIN, args=ARGS))
    assert said == {"args": list(ARGS), "stdin": STDIN.decode()}


def test_a_stdin_larger_than_a_pipe_buffer_is_read_whole() -> None:
    data = b"".join(f"{i:07d}\n".encode() for i in range(200 * 1024 // 8))  # 200 KiB
    script = (
        "import hashlib, json, sys\n"
        "data = sys.stdin.buffer.read()\n"
        "print(json.dumps({'bytes': len(data), 'sha256': hashlib.sha256(data).hexdigest()}))\n"
    )
    assert len(data) == 200 * 1024
    said = _said(_run("python", script, stdin=data))
    assert said == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_the_program_cannot_change_what_a_second_read_of_its_stdin_sees() -> None:
    script = """
import json, os
first = os.read(0, 1 << 20)
tries = {}
for name, attempt in [
    ("write", lambda: os.pwrite(0, b"forged", 0)),
    ("truncate", lambda: os.ftruncate(0, 0)),
    ("grow", lambda: os.ftruncate(0, 1 << 20)),
    ("reopen", lambda: os.write(os.open("/proc/self/fd/0", os.O_WRONLY), b"forged")),
]:
    try:
        attempt()
        tries[name] = "changed"
    except OSError as exc:
        tries[name] = type(exc).__name__
os.lseek(0, 0, os.SEEK_SET)
second = os.read(0, 1 << 20)
print(json.dumps({"same": first == second, "first": first.decode(), "tries": tries,
                  "fd0": os.readlink("/proc/self/fd/0")}))
"""
    said = _said(_run("python", script, stdin=b"the real input\n"))
    assert said["same"] is True and said["first"] == "the real input\n"
    assert set(said["tries"]) == {"write", "truncate", "grow", "reopen"}
    assert "changed" not in said["tries"].values(), said
    assert said["fd0"].startswith("/memfd:cordon-stdin"), said  # memory, not a file on a disk


def test_without_stdin_a_read_gives_nothing_at_once() -> None:
    script = (
        "import json, os, stat, sys, time\n"
        "start = time.monotonic()\n"
        "data = sys.stdin.read()\n"
        "print(json.dumps({'stdin': data, 'chardev': stat.S_ISCHR(os.fstat(0).st_mode),\n"
        "                  'took_s': time.monotonic() - start}))\n"
    )
    said = _said(_run("python", script))
    assert said["stdin"] == "" and said["chardev"] is True  # /dev/null, as before
    assert said["took_s"] < 1.0


def test_the_args_come_after_the_script_each_one_argument_never_parsed() -> None:
    args = ("-c", "print('not me')", "--max-old-space-size=1")
    assert program_argv(RunSpec(runtime="python", script=b"", args=args)) == ["/usr/bin/python3", "/tmp/main.py", *args]
    node = program_argv(RunSpec(runtime="node", script=b"", args=args), "/job")
    assert node[-4:] == ["/job/main.js", *args] and node[0] == "/usr/bin/node"


# --- the stdin's memfd, on the host --------------------------------------------------------


def test_a_stdin_is_a_sealed_memfd_holding_exactly_its_bytes_from_the_start() -> None:
    fd = stdin_fd(b"abc\n")
    try:
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) == SEALS
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0 and os.fstat(fd).st_size == 4
        assert os.read(fd, 100) == b"abc\n"
        assert os.get_inheritable(fd) is False
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"x", 0)
    finally:
        os.close(fd)


def test_no_stdin_is_dev_null() -> None:
    fd = stdin_fd(b"")
    try:
        assert stat.S_ISCHR(os.fstat(fd).st_mode) and os.readlink(f"/proc/self/fd/{fd}") == "/dev/null"
    finally:
        os.close(fd)


# --- refused specs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stdin", "args", "code", "words"),
    [
        (b"x" * (2 * MIB), (), "stdin_too_large", "stdin is 2 MiB; the maximum is 1 MiB"),
        (b"ok \xff\xfe", (), "stdin_not_utf8", "stdin must be valid UTF-8 text; byte 3 is not"),
        (b"", ("fine", "a\x00b"), "args_invalid", "argument 1 contains a NUL character"),
        (b"", ("a",) * (ARGS_MAX_ITEMS + 1), "args_invalid", "65 arguments; the maximum is 64"),
        (b"", ("é" * ARG_MAX_BYTES,), "args_invalid", "argument 0 is 8 KiB; the maximum is 4 KiB"),
        (b"", ("\udcff",), "args_invalid", "argument 0 is not valid UTF-8 text"),
    ],
    ids=["2-mib-stdin", "non-utf8-stdin", "nul-in-arg", "65-args", "8-kib-arg", "lone-surrogate-arg"],
)
def test_a_stdin_or_args_the_engines_cannot_carry_is_refused_before_anything_runs(
    stdin: bytes, args: tuple[str, ...], code: str, words: str
) -> None:
    result = Supervisor().run(RunSpec(runtime="python", script=b"print('ran')", stdin=stdin, args=args))
    assert result.outcome is Outcome.REJECTED_INPUT and not result.outcome.charged
    assert result.error is not None and result.error.code == code and result.error.message == words
    assert not result.error.retryable
    assert result.stdout == b"" and result.wall_s is None and result.engine is None


def test_the_largest_stdin_and_args_allowed_pass_the_check() -> None:
    spec = RunSpec(
        runtime="python", script=b"", stdin=b"x" * STDIN_MAX_BYTES, args=("y" * ARG_MAX_BYTES,) * ARGS_MAX_ITEMS
    )
    spec.check_stdin_and_args()  # raises nothing
    with pytest.raises(RunnerError) as caught:
        RunSpec(runtime="python", script=b"", stdin=b"x" * (STDIN_MAX_BYTES + 1)).check_stdin_and_args()
    assert caught.value.outcome is Outcome.REJECTED_INPUT and caught.value.code == "stdin_too_large"


# --- the command line ---------------------------------------------------------------------


def test_the_cli_takes_a_stdin_file_and_repeated_args(project_root: Path, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("import sys\nprint(sys.argv[1:], repr(sys.stdin.read()))\n")
    (tmp_path / "in.txt").write_bytes(b"line 1\nline 2\n")
    proc = subprocess.run(
        [sys.executable, "-m", "runner", "run", "--runtime", "python", "--engine", "namespace", "--json",
         "--stdin-file", str(tmp_path / "in.txt"), "--arg", "a b", "--arg=--verbose", str(tmp_path / "job.py")],
        cwd=project_root, env=child_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["stdout"] == "['a b', '--verbose'] 'line 1\\nline 2\\n'\n"
