# cordon: {"outcome": "succeeded", "stdout_has": ["ptrace: refused", "mount: refused", "unshare: refused", "clock_settime: refused", "keyctl: refused", "bpf: refused", "netlink socket: refused"], "not_on": {"smolvm": "checks the namespace engine's seccomp deny-list; a VM's boundary is its own kernel"}}
import ctypes
import errno
import socket

libc = ctypes.CDLL(None, use_errno=True)


def report(name, rc):
    err = ctypes.get_errno()
    print(f"{name}: {'ALLOWED' if rc == 0 else 'refused'} ({errno.errorcode.get(err, err)})")


report("ptrace", libc.ptrace(0, 0, None, None))  # PTRACE_TRACEME
report("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
report("unshare", libc.unshare(0x10000000))  # CLONE_NEWUSER
ts = (ctypes.c_long * 2)(0, 0)
report("clock_settime", libc.clock_settime(0, ts))
report("keyctl", libc.syscall(250, 0, 0, 0, 0))  # keyctl on x86_64
report("bpf", libc.syscall(321, 0, 0, 0))  # bpf on x86_64
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    print("netlink socket: ALLOWED")
except OSError as exc:
    print(f"netlink socket: refused ({exc.strerror})")
