# cordon: {"outcome": "succeeded", "inputs": ["host_paths", "data"], "stdout_has": ["host paths visible: []", "write /input/x: refused", "write /usr/x: refused", "write /etc/passwd: refused", "write /: refused", "write /dev/x: refused", "write /tmp/x: ok", "write /output/x: ok", "uid 1000 gid 1000", "CapEff: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2"], "not_on": {"smolvm": "checks namespace-specific facts (seccomp mode, capabilities); a VM has its own kernel"}}
import os

hosts = [line for line in open("/input/host_paths.txt").read().splitlines() if line]
print(f"host paths visible: {[p for p in hosts if os.path.exists(p)]}")
for path in ("/input/x", "/usr/x", "/etc/passwd", "/x", "/dev/x", "/tmp/x", "/output/x"):
    try:
        with open(path, "a") as handle:
            handle.write("x")
        print(f"write {path if path != '/x' else '/'}: ok")
    except OSError as exc:
        print(f"write {path if path != '/x' else '/'}: refused ({exc.strerror})")
os.unlink("/output/x")
print(f"uid {os.getuid()} gid {os.getgid()}")
for line in open("/proc/self/status"):
    if line.startswith(("CapEff", "NoNewPrivs", "Seccomp:")):
        print(line.strip().replace("\t", " "))
