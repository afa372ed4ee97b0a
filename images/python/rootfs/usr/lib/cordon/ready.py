"""Cordon's ready sandbox program (python): an interpreter started in a new sandbox before its run
is known, waiting for the one run it will ever serve (runner.ready on the host).

    /usr/bin/python3 /usr/lib/cordon/ready.py STACK FD

STACK is "bare" (nothing imported beyond the interpreter's own start), "analyst" (numpy, pandas,
matplotlib with pyplot and its font cache, cloudpickle: what a data script imports; frozen out of
the garbage collector's sight, gc.freeze()) or "cell" (the analyst's, with IPython and the cell
program's shell made: cordon_shell, for the notebook cell program). FD is a
SOCK_SEQPACKET socket to the host. The protocol, one message each way:

    to the host     {"ready": true} once the stack is imported (or {"ready": false, "problem": ...})
    from the host   {"argv": [PROGRAM, ARGS...], "env": {...}, "cwd": "/tmp"}, with the run's stdin
                    as a passed fd (none: /dev/null stays)

Then it becomes `python3 PROGRAM ARGS` as nearly as one interpreter can: the run's environment,
argv, sys.path[0], stdin, stdout and stderr (quiet until now: nothing the imports printed reaches
the run), a fresh __main__, the random module's state (and numpy's global one) drawn again from the
kernel at hand-over, the modules this program needed for the protocol forgotten. What cannot be
made again: the hash seed, drawn when this interpreter started (in this sandbox, for it alone), and
the process's start time, which is the sandbox's. End of file before a message: the host recycled
the sandbox; it exits quietly.
"""

import atexit
import os
import sys

MESSAGE_MAX_BYTES = 2 << 20  # the run's argv (at most 64 arguments of 4 KiB) and environment, as JSON
_interrupted = []  # set when the program ended on an uncaught KeyboardInterrupt


def main() -> int:
    stack, fd = sys.argv[1], int(sys.argv[2])
    atexit.register(_end_as_interrupted)  # first, so it runs last: after the program's own handlers
    out, err = _quiet()
    problem = ""
    try:
        if stack == "analyst":
            _import_analyst_stack()
        elif stack == "cell":
            _make_cell_shell()
        elif stack != "bare":
            problem = f"unknown stack {stack!r}"
    except Exception as exc:  # the host says why the class cannot be made ready
        problem = f"{type(exc).__name__}: {exc}"
    kept = set(sys.modules)
    import json
    import socket

    host = socket.socket(fileno=fd)
    host.send(json.dumps({"ready": not problem, "problem": problem}).encode())
    if problem:
        return 1
    try:
        message, fds, _, _ = socket.recv_fds(host, MESSAGE_MAX_BYTES, 1)
    except OSError:
        message, fds = b"", []
    host.close()
    if not message:
        return 0
    order = json.loads(message)
    if fds:
        os.dup2(fds[0], 0)
        os.close(fds[0])
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    for name in set(sys.modules) - kept:  # json, socket and theirs: not the program's
        del sys.modules[name]
    os.environ.clear()
    os.environ.update(order["env"])
    os.chdir(order["cwd"])
    _reseed()
    return _run(order["argv"][0], order["argv"][1:])


def _quiet() -> "tuple[int, int]":
    """stdout and stderr to /dev/null until the hand-over; the run's pipes kept aside."""
    out, err = os.dup(1), os.dup(2)  # close-on-exec, as os.dup makes them
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    return out, err


def _import_analyst_stack() -> None:
    import cloudpickle  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    import matplotlib  # type: ignore[import-not-found, unused-ignore]
    import numpy  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    import pandas  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401

    matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
    import matplotlib.pyplot  # type: ignore[import-not-found, unused-ignore]
    from matplotlib import font_manager  # type: ignore[import-not-found, unused-ignore]

    font_manager.findfont("DejaVu Sans")  # the font cache, built now, not in the run
    matplotlib.pyplot.close("all")
    # What the stack made lives as long as the interpreter: out of the collector's sight, no
    # collection of the program's walks it, and the exit does not (70 of the 80 ms an interpreter
    # with this stack took to end; gc.get_freeze_count() is the one trace of it).
    import gc

    gc.freeze()


def _make_cell_shell() -> None:
    """The cell program's shell, made before the run is known (about 150 ms of IPython's imports
    and the shell, beside the analyst stack's): the cell program finds it made (cordon_cell), with
    pyplot on the inline backend."""
    import cordon_cell  # type: ignore[import-not-found, unused-ignore]  # noqa: F401 - imports cordon_shell
    import cordon_shell  # type: ignore[import-not-found, unused-ignore]

    shell = cordon_shell.make_shell()
    os.environ["MPLBACKEND"] = cordon_shell.INLINE_BACKEND
    _import_analyst_stack()
    shell.enable_matplotlib("inline")


def _reseed() -> None:
    """State drawn from the kernel's entropy at hand-over, not when the sandbox was made."""
    random = sys.modules.get("random")
    if random is not None:
        random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _run(program: str, args: "list[str]") -> int:
    """`python3 PROGRAM ARGS`: a __main__ of its own, a traceback from the program's frame on."""
    import builtins

    sys.argv = [program, *args]
    sys.orig_argv = [sys.executable, program, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(program))
    module = type(sys)("__main__")
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", program)
    module.__dict__.update(__file__=program, __cached__=None, __builtins__=builtins, __loader__=loader)
    try:
        with open(program, "rb") as handle:
            code = compile(handle.read(), program, "exec", dont_inherit=True)
    except SyntaxError as exc:
        exc.__traceback__ = None  # as python shows it: where in the program, not where compiled
        sys.excepthook(type(exc), exc, None)
        return 1
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - the run's own program, in its own sandbox
    except SystemExit:
        raise
    except BaseException as exc:
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # past this frame
        exc.__traceback__ = tb  # what the hook prints
        sys.excepthook(type(exc), exc, tb)
        if isinstance(exc, KeyboardInterrupt):
            _interrupted.append(True)
        return 1
    return 0


def _end_as_interrupted() -> None:
    """As python ends on an uncaught KeyboardInterrupt: by SIGINT, once the threads were joined and
    every other exit handler ran (the program's, the figures' save)."""
    if _interrupted:
        import signal

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: S110 - closed by the program: nothing left to flush
                pass
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


if __name__ == "__main__":
    raise SystemExit(main())
