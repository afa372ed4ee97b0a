"""The fork server that starts sandboxes: one small helper process per supervisor process.

A sandbox's launcher must run steps between fork and exec (join the run's cgroups, set rlimits,
raise the OOM score, drop to the slot's uid), so the supervisor cannot use vfork: it forks, and a
fork copies the page tables of its whole address space (measured: 2.3 ms from a 25 MiB process,
5 ms from a 99 MiB Celery worker, 1.1 ms from a small helper). This helper is that small
process. Started once per supervisor process with nothing but the standard library
(`python -I -S`), it receives the argv, the environment, the fds (SCM_RIGHTS) and the steps
as data over a private socketpair, forks, and in the child does exactly those steps — the
cgroups first, so that nothing of the run ever executes outside them — then execs. It reaps
its children and reports how each ended; the supervisor signals them through pidfds, so a
recycled pid is never hit. It exits when the supervisor's end of the socket closes (the
supervisor is gone), killing what it started; bwrap's --die-with-parent follows.

It is also the subreaper of what it starts: bwrap's monitor returns as soon as the init of the
sandbox's pid namespace reports the program's exit, without waiting for that init, which is
then an orphan. Orphans come here (PR_SET_CHILD_SUBREAPER), not to the host's init, and are
reaped at once: none is left a zombie, under a container without an init too.

This file is also the helper's program, so it imports nothing outside the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import resource
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

MAX_MESSAGE = 1 << 20  # a request: argv, environment and paths; far below this
MAX_FDS = 32


@dataclass(frozen=True)
class Steps:
    """What the child does between fork and exec, in this order."""

    cgroup_procs: list[str]  # cgroup.procs files of the run's cgroups, joined first
    uid: int  # the slot's unprivileged host uid (and gid), dropped to last
    rlimits: list[tuple[int, int]] = field(default_factory=list)  # (resource, soft = hard)
    oom_score_adj: int = 1000
    # A network namespace to join (the fd's number in the child, one of the targets; closed once
    # joined), after the cgroups and before the drop: a run with scoped egress (runner.host.netns).
    netns_fd: int = -1


CLONE_NEWNET = 0x40000000
PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)  # loaded before any fork


def join_netns(fd: int) -> None:
    """In a forked child before exec: into the network namespace `fd`, then close it (setns(2)).
    The one way into a run's egress namespace (runner.host.netns), for every launcher."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")
    os.close(fd)


def join_cgroups(procs_files: list[str]) -> None:
    """In a forked child before exec, its first act: into the run's cgroups (plain syscalls only),
    so that nothing of the run ever executes outside them."""
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        os.write(fd, b"0")
        os.close(fd)


def drop(steps: Steps) -> None:
    """The forked child's last acts before exec: its limits, then the slot's uid (plain syscalls)."""
    for which, value in steps.rlimits:
        resource.setrlimit(which, (value, value))
    fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
    os.write(fd, str(steps.oom_score_adj).encode())
    os.close(fd)
    os.setgroups([])
    os.setresgid(steps.uid, steps.uid, steps.uid)
    os.setresuid(steps.uid, steps.uid, steps.uid)


# --- the helper ---------------------------------------------------------------------------


def serve(sock: socket.socket) -> None:
    """The helper's loop: spawn on request, report each child's end, reap the orphans it adopts,
    stop when the client goes."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    woken, wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signo, frame: None)  # a child ended: `woken` turns readable
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, None)
    selector.register(woken, selectors.EVENT_READ, "reap")
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        for key, _ in selector.select():
            if key.data == "reap":
                with contextlib.suppress(BlockingIOError):  # emptied: the next SIGCHLD wakes it again
                    while os.read(woken, 4096):
                        pass
                _reap(children, selector, sock)
            elif key.data is None:
                message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
                if not message:  # the supervisor is gone: so is everything it started
                    for pid in children.values():
                        _kill(pid)
                    return
                try:
                    reply, reply_fds = _spawn(json.loads(message), fds, selector, children)
                except LaunchFailed as exc:  # the client raises it, with the step
                    reply, reply_fds = {"error": str(exc), "step": exc.step}, []
                except Exception as exc:  # refused or failed: the client raises it
                    reply, reply_fds = {"error": f"{type(exc).__name__}: {exc}"}, []
                finally:
                    for fd in fds:
                        os.close(fd)
                socket.send_fds(sock, [json.dumps(reply).encode()], reply_fds)
                for fd in reply_fds:
                    os.close(fd)
            else:  # a child's pidfd: it has exited
                _reap(children, selector, sock)


def _reap(children: dict[int, int], selector: selectors.BaseSelector, sock: socket.socket) -> None:
    """Collect every child that has ended: a program it started is reported to the supervisor; an
    orphan it adopted (a sandbox's pid-namespace init) is reaped and nothing more."""
    pidfds = {pid: pidfd for pidfd, pid in children.items()}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        pidfd = pidfds.pop(pid, None)
        if pidfd is not None:
            del children[pidfd]
            selector.unregister(pidfd)
            os.close(pidfd)
            sock.send(json.dumps({"exit": pid, "status": status}).encode())


def _spawn(
    request: dict[str, Any], fds: list[int], selector: selectors.BaseSelector, children: dict[int, int]
) -> tuple[dict[str, Any], list[int]]:
    argv, env, targets = request["argv"], request["env"], request["targets"]
    steps = Steps(**request["steps"])
    if len(targets) != len(fds) or not os.path.isabs(argv[0]):
        raise ValueError("a request needs one target per fd and an absolute program path")
    failed_read, failed_write = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        failed = failed_write
        try:
            os.close(failed_read)
            # Above every target first: a dup2 into place must not land on the failure pipe.
            failed = fcntl.fcntl(failed_write, fcntl.F_DUPFD_CLOEXEC, max(targets, default=2) + 1)
            _child(argv, env, fds, targets, failed, steps)
        except BaseException as exc:
            os.write(failed, json.dumps({"step": _step, "error": f"{type(exc).__name__}: {exc}"[:2000]}).encode())
        finally:
            os._exit(127)
    os.close(failed_write)
    pidfd = os.pidfd_open(pid)
    failure = b""
    while chunk := os.read(failed_read, 4096):  # EOF at exec (close-on-exec) or at the child's end
        failure += chunk
    os.close(failed_read)
    if failure:
        os.waitpid(pid, 0)
        os.close(pidfd)
        raise LaunchFailed(**json.loads(failure))
    children[pidfd] = pid
    selector.register(pidfd, selectors.EVENT_READ, pid)
    return {"pid": pid}, [os.dup(pidfd)]


class LaunchFailed(Exception):
    """A sandbox launcher failed between fork and exec, at `step`."""

    def __init__(self, step: str, error: str):
        super().__init__(f"the sandbox launcher failed {STEP_WORDS.get(step, step)}: {error}")
        self.step, self.error = step, error


# The launcher's steps, in order, as its failure names them (the step under way when it failed).
STEP_WORDS = {
    "start": "as it started",
    "cgroups": "joining the run's cgroups",
    "fds": "putting the sandbox's fds in place",
    "netns": "joining the run's network namespace",
    "drop": "setting its limits and dropping to the sandbox uid",
    "exec": "starting the sandbox (exec)",
}
_step = "start"  # the forked child's step under way


def _child(argv: list[str], env: dict[str, str], fds: list[int], targets: list[int], failed: int,
           steps: Steps) -> None:  # fmt: skip
    """Between fork and exec: into the cgroups, the fds into place (a network namespace joined)
    and nothing else open, the limits and the uid drop (last: /proc/self/fd is not readable once
    the uid has changed). Each step is named as it begins, for the failure to say."""
    global _step
    _step = "cgroups"
    join_cgroups(steps.cgroup_procs)
    _step = "fds"
    for signo in (signal.SIGPIPE, signal.SIGXFSZ):  # as subprocess restores them for its children
        signal.signal(signo, signal.SIG_DFL)
    floor = max([*targets, failed]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]  # clear of every target
    for source, target in zip(moved, targets, strict=True):
        os.dup2(source, target)  # inheritable
    if steps.netns_fd >= 0:
        _step = "netns"
        join_netns(steps.netns_fd)
        _step = "fds"
    keep = {*targets, failed} - {steps.netns_fd}
    for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own fd, closed already
    os.chdir("/")
    _step = "drop"
    drop(steps)
    _step = "exec"
    os.execve(argv[0], argv, env)  # noqa: S606 - an argv list by design, never a shell


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --- the supervisor's side ----------------------------------------------------------------


class SpawnError(OSError):
    """The helper could not start the program (or is gone). `step` names the launcher's step that
    failed (STEP_WORDS), or is "spawner" when the helper itself failed or is gone."""

    def __init__(self, message: str, *, step: str = "spawner"):
        super().__init__(message)
        self.step = step


class Spawner:
    """The supervisor's handle on its helper: one per process, started on first use."""

    _mine: ClassVar[dict[int, Spawner]] = {}
    _mine_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def here(cls) -> Spawner:
        """This process's helper (a forked child starts its own; a dead one is replaced)."""
        with cls._mine_lock:
            for pid in [pid for pid in cls._mine if pid != os.getpid()]:
                cls._mine.pop(pid).sock.close()  # a parent's, inherited by fork: its helper is not ours
            spawner = cls._mine.get(os.getpid())
            if spawner is None or spawner.process.poll() is not None:
                spawner = cls._mine[os.getpid()] = Spawner()
            return spawner

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/",
            )  # fmt: skip
        finally:
            theirs.close()
        self.sock = mine
        self.lock = threading.Lock()
        self.ended: dict[int, int] = {}  # pid -> wait status, as the helper reported them

    def spawn(self, argv: list[str], *, env: dict[str, str], fds: dict[int, int], steps: Steps) -> Spawned:
        """Start `argv` with `fds` ({number in the child: fd here}) and nothing else open."""
        request = {"argv": argv, "env": env, "targets": list(fds), "steps": asdict(steps)}
        with self.lock:
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds.values()))
                while True:
                    reply, received = self._receive(timeout=30.0)
                    if "exit" not in reply:
                        break
            except OSError as exc:
                raise SpawnError(f"the sandbox spawner is unreachable: {exc}") from exc
        if not reply:
            raise SpawnError("the sandbox spawner did not answer within 30 s")
        if "error" in reply:
            raise SpawnError(reply["error"], step=reply.get("step", "spawner"))
        return Spawned(self, argv, reply["pid"], received[0])

    def _receive(self, *, timeout: float | None) -> tuple[dict[str, Any], list[int]]:
        """One message (lock held); exit reports are filed as they come. ({}, []) on timeout."""
        self.sock.settimeout(timeout)
        try:
            message, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, MAX_FDS)
        except (TimeoutError, BlockingIOError):
            return {}, []
        if not message:
            raise SpawnError("the sandbox spawner exited")
        reply: dict[str, Any] = json.loads(message)
        if "exit" in reply:
            self.ended[reply["exit"]] = reply["status"]
        return reply, fds

    def collect(self, pid: int, *, timeout: float) -> int | None:
        """The wait status of `pid` once the helper has reported it (waiting up to `timeout`)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while pid not in self.ended:
                reply, _ = self._receive(timeout=max(0.0, deadline - time.monotonic()))
                if not reply:  # nothing more came in the time left
                    return None
            return self.ended.pop(pid)


class Spawned:
    """A program the helper started, with what the engines use of a Popen: pid, poll, wait,
    kill, returncode (negative for a signal), and the pipes the engine attaches."""

    def __init__(self, spawner: Spawner, args: list[str], pid: int, pidfd: int) -> None:
        self.spawner, self.args, self.pid, self.pidfd = spawner, args, pid, pidfd
        self.returncode: int | None = None
        self.stdout: Any = None
        self.stderr: Any = None

    def poll(self) -> int | None:
        # The pidfd turns readable at the exit: until then the helper has nothing to report, and
        # its lock (which a spawn in another thread holds for a while) is not waited for.
        if self.returncode is None and (self.pidfd < 0 or _readable(self.pidfd)):
            self._collect(timeout=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            # The pidfd turns readable when the program exits; the helper reports it just after.
            selectors_ = selectors.DefaultSelector()
            selectors_.register(self.pidfd, selectors.EVENT_READ)
            ready = selectors_.select(None if remaining is None else min(remaining, 1.0))
            selectors_.close()
            self._collect(timeout=1.0 if ready else 0.0)
        return self.returncode

    def send_signal(self, signo: int) -> None:
        if self.returncode is None and self.pidfd >= 0:
            try:
                signal.pidfd_send_signal(self.pidfd, signo)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _collect(self, *, timeout: float) -> None:
        status = self.spawner.collect(self.pid, timeout=timeout)
        if status is not None:
            self.returncode = os.waitstatus_to_exitcode(status)
            self._close()

    def _close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def __del__(self) -> None:
        self._close()


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
