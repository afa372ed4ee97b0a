"""Scoped egress end to end: real runs on the namespace engine (bubblewrap, cgroups, the run's own
network namespace) reaching the test's own host (tests.runner.egress_net) through the run's
egress proxy, and nothing else. Names resolve only through the test resolver; the test host's
network is treated as public by this supervisor alone."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.config import paths_from_env
from runner.egress.policy import Policy
from runner.egress.proxy import EgressSettings
from runner.engines.namespace import check_available
from runner.host.admission import Admission, Capacity
from runner.spec import Limits, Outcome, RunResult, RunSpec
from runner.supervisor import Supervisor
from tests.runner.egress_net import RESOLVER, TEST_HOST, TEST_NET, EgressTestHost

pytestmark = [
    pytest.mark.images,
    pytest.mark.skipif(not check_available()[0], reason=check_available()[1]),
]

CEILING = [
    "allowed.test:8080", "allowed.test:8443", "other.test:80", "loop.test:80", "private.test:8080", "meta.test:80"
]  # fmt: skip


@pytest.fixture(scope="module")
def supervisor() -> Supervisor:
    paths = paths_from_env()
    capacity = Capacity(slots=4, memory_mib=4096, cpus=16.0, wait_s=60.0)
    return Supervisor(
        paths=paths,
        admission=Admission(paths.host_state_dir / "admission", capacity),
        egress=EgressSettings(ceiling=Policy.parse(CEILING), resolver=RESOLVER, public_for_tests=(TEST_NET,)),
    )


def run(
    supervisor: Supervisor, script: str, egress: list[str], *, runtime: str = "python", inputs: tuple[Path, ...] = (),
    **limits: Any,
) -> RunResult:  # fmt: skip
    spec = RunSpec(
        runtime=runtime,
        script=script.encode(),
        egress=tuple(egress),
        inputs=inputs,
        limits=replace(Limits(wall_timeout_s=30, cpu_time_s=30), **limits),
        engine="namespace",
    )
    result = supervisor.run(spec)
    assert result.cleanup_ok, [c for c in result.cleanup if not c.ok]
    return result


FETCH = """
import json, ssl, sys, time, urllib.error, urllib.request
said = {}
for url in sys.argv[1:]:
    started = time.monotonic()
    try:
        context = ssl.create_default_context(cafile="/input/ca.pem")
        with urllib.request.urlopen(url, timeout=20, context=context) as response:
            said[url] = [response.status, response.read().decode()]
    except urllib.error.HTTPError as exc:
        said[url] = [exc.code, exc.read().decode()]
    except urllib.error.URLError as exc:
        said[url] = [0, str(exc.reason)]
    said[url].append(round(time.monotonic() - started, 3))
print(json.dumps(said))
"""


def fetch(supervisor: Supervisor, host: EgressTestHost, urls: list[str], egress: list[str], **limits: Any) -> tuple[
    RunResult, dict[str, list[Any]]
]:  # fmt: skip
    spec_script = FETCH.replace("sys.argv[1:]", json.dumps(urls))
    result = run(supervisor, spec_script, egress, inputs=(_ca(host),), **limits)
    said = json.loads(result.stdout) if result.stdout.strip() else {}
    return result, said


def _ca(host: EgressTestHost) -> Path:
    """The test host's certificate, named as the run's /input/ca.pem."""
    path = host.ca.parent / "ca.pem"
    if not path.exists():
        path.write_bytes(host.ca.read_bytes())
    return path


def test_an_allowed_host_is_reached_over_http_and_https_and_every_attempt_is_on_the_record(
    supervisor: Supervisor, test_host: EgressTestHost
) -> None:
    started = time.time()
    result, said = fetch(
        supervisor, test_host, ["http://allowed.test:8080/hello", "https://allowed.test:8443/hello"],
        ["allowed.test:8080", "allowed.test:8443"],
    )  # fmt: skip
    assert result.outcome is Outcome.SUCCEEDED, (result.reason, result.stderr[-2000:])
    assert said["http://allowed.test:8080/hello"][:2] == [200, "hello from the test host, allowed.test:8080 /hello\n"]
    assert said["https://allowed.test:8443/hello"][:2] == [200, "hello from the test host, allowed.test:8443 /hello\n"]
    record = result.egress
    assert record is not None and record["policy"] == ["allowed.test:8080", "allowed.test:8443"]
    first, second = record["attempts"]
    assert (first["method"], first["host"], first["port"], first["allowed"], first["address"]) == (
        "GET", "allowed.test", 8080, True, TEST_HOST,
    )  # fmt: skip
    assert second["method"] == "CONNECT" and second["allowed"] and second["bytes_in"] > 1000  # TLS: certificate
    assert started <= first["at"] <= second["at"] <= time.time()
    assert record["connections"] == 2 and record["refused"] == 0 and record["limit"] == ""
    assert record["bytes_in"] == first["bytes_in"] + second["bytes_in"] > 0
    assert [c.name for c in result.cleanup if c.name == "egress"] == ["egress"]


def test_refused_destinations_fail_at_once_inside_the_run_and_are_recorded(
    supervisor: Supervisor, test_host: EgressTestHost
) -> None:
    refused = {
        "http://other.test:80/": "not in the run's egress policy",
        "https://allowed.test:22/": "not in the run's egress policy",
        "http://198.18.7.2:8080/hello": "not in the run's egress policy",
        "http://private.test:8080/": "private.test resolves to 10.1.2.3, a private address",
        "http://meta.test/latest/meta-data/": "meta.test resolves to 169.254.169.254, the cloud metadata address",
        "http://loop.test:80/": "loop.test resolves to 127.0.0.1, an address of this host",
    }
    policy = ["allowed.test:8080", "private.test:8080", "meta.test:80", "loop.test:80"]  # other.test: not in it
    result, said = fetch(supervisor, test_host, list(refused), policy)
    assert result.outcome is Outcome.SUCCEEDED, (result.reason, result.stderr[-2000:])
    for url, why in refused.items():
        status, text, seconds = said[url]
        assert status in (403, 0) and seconds < 2.0, (url, said[url])  # a proxy error at once, never a hang
        if status == 403:
            assert why in text, (url, text)
        else:  # a refused CONNECT: urllib says "Tunnel connection failed: 403 Forbidden"
            assert "403" in text, (url, text)
    record = result.egress
    assert record is not None and record["connections"] == 0 and record["refused"] == len(refused)
    reasons = {f"{a['host']}:{a['port']}": a["reason"] for a in record["attempts"]}
    assert reasons == {
        "other.test:80": "not in the run's egress policy",
        "allowed.test:22": "not in the run's egress policy",
        "198.18.7.2:8080": "not in the run's egress policy",
        "private.test:8080": "private.test resolves to 10.1.2.3, a private address",
        "meta.test:80": "meta.test resolves to 169.254.169.254, the cloud metadata address",
        "loop.test:80": "loop.test resolves to 127.0.0.1, an address of this host",
    }
    assert all(a["bytes_in"] == a["bytes_out"] == 0 and a["address"] == "" for a in record["attempts"])


RAW = f"""
import errno, json, socket
out = {{"interfaces": sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:])}}
def attempt(key, make):
    try:
        make()
        out[key] = "REACHED"
    except OSError as exc:
        out[key] = errno.errorcode.get(exc.errno, str(exc))
attempt("tcp", lambda: socket.create_connection(("{TEST_HOST}", 8080), timeout=3).close())
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
attempt("udp_dns", lambda: udp.sendto(b"\\0" * 12, ("{TEST_HOST}", 53)))
attempt("udp_public_dns", lambda: udp.sendto(b"\\0" * 12, ("192.0.2.53", 53)))
try:
    socket.getaddrinfo("allowed.test", 8080)
    out["resolve"] = "RESOLVED"
except socket.gaierror as exc:
    out["resolve"] = "no resolver"
import os
out["proxy"] = os.environ.get("HTTPS_PROXY")
print(json.dumps(out))
"""


def test_raw_tcp_udp_and_dns_have_no_path_out_of_a_run_with_egress(
    supervisor: Supervisor, test_host: EgressTestHost
) -> None:
    result = run(supervisor, RAW, ["allowed.test:8080"])
    assert result.outcome is Outcome.SUCCEEDED, (result.reason, result.stderr[-2000:])
    assert json.loads(result.stdout) == {
        "interfaces": ["lo"],
        "tcp": "ENETUNREACH",  # the test host is up and reachable from the host, not from the run
        "udp_dns": "ENETUNREACH",
        "udp_public_dns": "ENETUNREACH",
        "resolve": "no resolver",
        "proxy": "http://127.0.0.1:3128",
    }
    assert result.egress is not None and result.egress["attempts"] == []


def test_a_download_over_the_bytes_cap_stops_the_run_as_egress_limit(
    supervisor: Supervisor, test_host: EgressTestHost
) -> None:
    script = """
import time, urllib.request
data = urllib.request.urlopen("http://allowed.test:8080/bytes/4194304", timeout=20).read()
print("read", len(data))
time.sleep(30)
"""
    started = time.monotonic()
    result = run(supervisor, script, ["allowed.test:8080"], egress_max_bytes_in=256 * 1024)
    assert result.outcome is Outcome.EGRESS_LIMIT, (result.reason, result.stderr[-1000:])
    assert result.reason == "stopped when its egress passed its cap (more than 256 KiB in)"
    assert result.evidence["stopped_by"] == "egress" and time.monotonic() - started < 20
    record = result.egress
    assert record is not None and record["limit"] == "more than 256 KiB in"
    [attempt] = record["attempts"]
    assert attempt["allowed"] and attempt["reason"].startswith("cut: the run's egress cap")
    assert 256 * 1024 < record["bytes_in"] <= 256 * 1024 + 65536 + 4096


def test_connections_past_the_cap_stop_the_run(supervisor: Supervisor, test_host: EgressTestHost) -> None:
    script = """
import urllib.request
for n in range(5):
    print(n, urllib.request.urlopen("http://allowed.test:8080/hello", timeout=20).status, flush=True)
"""
    result = run(supervisor, script, ["allowed.test:8080"], egress_max_connections=2)
    assert result.outcome is Outcome.EGRESS_LIMIT and "more than 2 connections" in result.reason
    assert result.stdout.decode().splitlines()[:2] == ["0 200", "1 200"]
    assert result.egress is not None and [a["allowed"] for a in result.egress["attempts"]] == [True, True, False]


def test_a_node_program_tunnels_through_the_proxy_it_is_given(
    supervisor: Supervisor, test_host: EgressTestHost
) -> None:
    # Node 18 (Debian 12's) reads no proxy variable itself: a program uses the proxy it is given.
    script = """
const http = require("http"), tls = require("tls"), fs = require("fs");
const proxy = new URL(process.env.HTTPS_PROXY);
const req = http.request({host: proxy.hostname, port: proxy.port, method: "CONNECT", path: "allowed.test:8443"});
req.on("connect", (res, socket) => {
  const secure = tls.connect({socket, servername: "allowed.test", ca: fs.readFileSync("/input/ca.pem")}, () => {
    secure.write("GET /hello HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n");
  });
  let body = "";
  secure.on("data", (d) => body += d);
  secure.on("end", () => console.log(res.statusCode, body.split("\\r\\n\\r\\n")[1].trim()));
});
req.end();
"""
    result = run(supervisor, script, ["allowed.test:8443"], runtime="node", inputs=(_ca(test_host),))
    assert result.outcome is Outcome.SUCCEEDED, (result.reason, result.stderr[-2000:])
    assert result.stdout.decode().strip() == "200 hello from the test host, allowed.test /hello"
    assert result.egress is not None and result.egress["connections"] == 1


@pytest.mark.parametrize(
    ("egress", "code", "words"),
    [
        (["api.example.org:443"], "egress_outside_ceiling", "egress to api.example.org:443 is outside this service's"),
        (["*.allowed.test:8080"], "egress_outside_ceiling", "*.allowed.test:8080"),
        (["10.0.0.1:80"], "egress_invalid", "destinations are names, never addresses"),
        (["allowed.test"], "egress_invalid", "a destination is host:port"),
    ],
)
def test_a_policy_outside_the_ceiling_or_malformed_is_refused_before_any_sandbox(
    supervisor: Supervisor, egress: list[str], code: str, words: str
) -> None:
    result = supervisor.run(RunSpec(runtime="python", script=b"print(1)", egress=tuple(egress), engine="namespace"))
    assert result.outcome is Outcome.REJECTED_INPUT and result.error is not None
    assert result.error.code == code and words in result.error.message, result.error.message
    assert result.sandbox_id is None and result.egress is None


def test_without_a_policy_nothing_changes(supervisor: Supervisor) -> None:
    script = (
        "import os; print(sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').read().splitlines()[2:]),"
        " os.environ.get('HTTP_PROXY'))"
    )
    result = run(supervisor, script, [])
    assert result.outcome is Outcome.SUCCEEDED and result.stdout.decode().strip() == "['lo'] None"
    assert result.egress is None and "egress" not in {c.name for c in result.cleanup}


def test_an_engine_that_cannot_confine_egress_refuses_a_run_with_a_policy(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor.engines["namespace"], "scoped_egress", False)
    result = supervisor.run(
        RunSpec(runtime="python", script=b"print(1)", egress=("allowed.test:8080",), engine="namespace")
    )
    assert result.outcome is Outcome.REJECTED_INPUT and result.error is not None
    assert result.error.code == "egress_unsupported" and result.sandbox_id is None and result.cleanup_ok
