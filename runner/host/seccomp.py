"""The namespace engine's seccomp deny-list, compiled to BPF for `bwrap --seccomp FD`.

Default allow, then deny the calls a job never needs and that widen the kernel surface:
tracing, mounts and namespaces, kernel keyrings, BPF, io_uring, module and kexec loading,
clock setting, and sockets of families other than unix/inet/inet6.
"""

from __future__ import annotations

import errno
import os
import socket
from functools import lru_cache

import pyseccomp as seccomp

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at",
    "clock_settime", "clock_adjtime", "settimeofday", "adjtimex",
    "swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "vhangup",
    "fanotify_init", "lookup_dcookie", "iopl", "ioperm",
)  # fmt: skip
ALLOWED_SOCKET_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)
TIOCSTI = 0x5412


@lru_cache(maxsize=1)
def bpf_program() -> bytes:
    """The compiled filter (built once per process; about half a kilobyte)."""
    flt = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED:
        try:
            flt.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError):
            continue  # a call this architecture or libseccomp does not know
    # Deny every socket family but the three a job may use (the network namespace is empty anyway).
    flt.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.GE, socket.AF_INET6 + 1))
    for family in range(socket.AF_INET6):
        if family not in ALLOWED_SOCKET_FAMILIES:
            flt.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.EQ, family))
    flt.add_rule(seccomp.ERRNO(errno.EPERM), "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
    with os.fdopen(os.memfd_create("cordon-seccomp-build", 0), "w+b") as scratch:
        flt.export_bpf(scratch)
        scratch.seek(0)
        return scratch.read()


def bpf_fd() -> int:
    """A memfd holding the filter, positioned at 0, for bwrap to read (the caller closes it)."""
    fd = os.memfd_create("cordon-seccomp", 0)
    os.write(fd, bpf_program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
