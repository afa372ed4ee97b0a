"""Spike for issue 18 (scoped egress) on smolvm: can a microVM reach the run's egress proxy, and
nothing else, when its VMM lives in the run's network namespace (loopback and the proxy only)?

`python -m tests.vm --script tests/vm/spike_egress.py`. The SDK's published sockets are dropped on
every SDK start path (probed on the host: only the CLI's own start wires them), so this tries
smolvm's TSI network (`network=True`): a guest socket the guest's own stack cannot serve is
impersonated by the VMM on the host, in the VMM's namespace. With the VMM in the run's namespace,
the guest can reach 127.0.0.1:3128 (the proxy) and nothing off the machine. Tried with the egress
floor strict and off. Every step is guarded and printed; exits 0 whatever the findings.
"""

from __future__ import annotations

import functools
import http.server
import ipaddress
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from runner.egress.policy import Policy
from runner.egress.proxy import EgressProxy, StaticResolver
from runner.host import netns
from runner.host.spawner import join_netns
from tests.vm.spike_branch import engine, image_view, say, sh, step

PROBE = r"""
import errno, json, os, socket, urllib.error, urllib.request
out = {"interfaces": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])}
def attempt(key, fn):
    try:
        out[key] = fn()
    except urllib.error.HTTPError as exc:
        out[key] = f"HTTP {exc.code} {exc.read().decode().strip()}"
    except OSError as exc:
        out[key] = f"{type(exc).__name__} {errno.errorcode.get(exc.errno, exc.errno)} {exc}"
attempt("allowed", lambda: urllib.request.urlopen("http://allowed.test:%(port)d/hello", timeout=20).read().decode())
attempt("refused", lambda: urllib.request.urlopen("http://other.test/", timeout=20).read().decode())
attempt("tcp_off_machine", lambda: socket.create_connection(("192.0.2.1", 80), timeout=5).close() or "CONNECTED")
attempt("tcp_host_loopback", lambda: socket.create_connection(("127.0.0.1", %(port)d), timeout=5).close() or "CONN")
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt("udp_dns", lambda: udp.sendto(b"\0" * 12, ("192.0.2.53", 53)) and "SENT")
attempt("resolve", lambda: str(socket.getaddrinfo("deb.debian.org", 80)[0][4]))
print(json.dumps(out))
"""

CHILD = textwrap.dedent(
    """
    import os, sys, time, json
    sys.path.insert(0, {runtime!r})
    from smol import ConnectOptions, ExecOptions, Machine, MachineConfig, ResourceSpec
    t = time.monotonic()
    m = Machine.create(MachineConfig(name=sys.argv[1], image=sys.argv[2], mounts=[],
        resources=ResourceSpec(cpus=1, memory_mb=512, network=True, storage_gb=1, overlay_gb=1),
        network=True, ready_timeout_seconds=150.0), ConnectOptions(target="local"))
    print("created", round(time.monotonic() - t, 2), "s", flush=True)
    try:
        for pid in os.popen("pgrep -f " + sys.argv[1]).read().split():
            try:
                print("pid", pid, os.readlink("/proc/%s/ns/net" % pid), open("/proc/%s/comm" % pid).read().strip())
            except OSError:
                pass
        env = {{"HTTP_PROXY": "http://127.0.0.1:3128", "http_proxy": "http://127.0.0.1:3128", "PATH": "/usr/bin:/bin"}}
        r = m.exec(["python3", "-c", sys.argv[3]], ExecOptions(timeout=120, env=env))
        print("exec", r.exit_code, r.stdout.strip(), r.stderr.strip()[-2000:], flush=True)
    finally:
        m.delete()
        print("deleted", flush=True)
    """
)


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from the host namespace, {self.headers.get('Host')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def one(floor: str, root: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)  # in the host's namespace
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    space = netns.create()
    say(f"run namespace {os.readlink(f'/proc/self/fd/{space.fd}')}; host's {os.readlink('/proc/self/ns/net')}")
    proxy = EgressProxy(
        Policy.parse([f"allowed.test:{port}"]),
        resolver=StaticResolver({"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}),
        own_addresses=frozenset(),
        public_for_tests=[ipaddress.ip_network("127.0.0.0/8")],  # the spike's own server, on the host's loopback
    )
    proxy.serve(space.listener)
    env = {**engine.child_env(), "SMOLVM_EGRESS_FLOOR": floor}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD.format(runtime=str(engine.runtime().parent)), f"cordon-egress-{floor}",
             str(root), PROBE % {"port": port}],
            env=env, capture_output=True, text=True, timeout=400, preexec_fn=lambda: join_netns(space.fd),
        )  # fmt: skip
        say(f"rc {proc.returncode}\n{proc.stdout.strip()}\n{proc.stderr.strip()[-3000:]}")
    finally:
        proxy.close()
        space.close()
        server.shutdown()
    say("proxy record: " + json.dumps(proxy.record(), indent=1))


def main() -> None:
    root = step("image", image_view)
    if root is None:
        return
    for floor in ("strict", "off"):
        title = f"a VM with TSI network, its VMM in the run's namespace, egress floor {floor}"
        step(title, functools.partial(one, floor, root))
    say(sh("ps -eo pid,comm,args | grep -E 'libkrun|VM:' | grep -v grep || true"))


if __name__ == "__main__":
    main()
