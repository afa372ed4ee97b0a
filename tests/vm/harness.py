"""`make test-vm`: the hostile battery through real smolvm microVMs, on a host without usable KVM.

No machine here can boot a microVM directly (their /dev/kvm runs no normal guest kernel). QEMU
in software mode with an emulated AMD EPYC CPU exposes SVM well enough for Debian's kvm_amd,
and smolvm boots real microVMs on that (12-22 s a boot, measured). This harness:

1. builds (cached under $CORDON_DATA_DIR/test-vm) an emulated host from Debian packages and
   PyPI only: a bookworm root with its kernel, a venv with Cordon's dependencies (the
   smolmachines wheel among them), this checkout, the verified guest images, and smolvm's
   runtime copy with its disk templates expanded here at native speed;
2. boots it with QEMU (`-accel tcg,thread=multi -cpu EPYC`); its init (tests/vm/l1-init)
   loads kvm_amd, runs `python -m runner doctor` (the canary must boot) and the
   engine-parametrised hostile battery with `--engine smolvm`;
3. reads the results from the console (`@@` markers), with a watchdog: a silent emulated
   host is stopped after its vCPU state is dumped, and reported as an infrastructure failure;
   one restart carries on with the cases not yet reported;
4. prints the report and saves it as JSON. Exit 0 only when every case that applies to a VM
   was classified as expected with a green audit; 1 on any wrong outcome or leak; 3 when the
   emulated host itself failed (infrastructure).

`--script FILE` runs that Python script in the emulated host instead of the doctor and the
battery (a spike or a probe: same build, boot, environment, watchdog and restarts). Its
stdout and stderr come back line by line (`@@OUT`, `@@ERR`), then its exit code (`@@SCRIPT`);
the harness exits with that code, or 3 if no boot of the emulated host finished the script.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from runner.config import PROJECT_ROOT, paths_from_env
from runner.images import ImageStore

SUITE = "bookworm"
L1_PACKAGES = (
    "linux-image-amd64", "kmod", "python3", "python3-venv", "zstd", "procps", "e2fsprogs",
    "iproute2", "ca-certificates", "util-linux", "passwd",
)  # fmt: skip
L1_VENV = "/opt/venv"
L1_PROJECT = "/opt/cordon"
# Where the smolvm engine keeps its runtime copy (CORDON_SMOLVM_STATE_DIR's default parent).
L1_RUNTIME_ROOT = "/var/lib/cordon/runtime"
DISK_SIZE = "16G"
# QEMU settings from the measured recipe: multi-threaded TCG (single-threaded was too slow for
# smolvm's 30 s boot-progress watchdog), an EPYC model for SVM with nested paging.
QEMU_CPU, QEMU_SMP, QEMU_MEM = "EPYC", "2", "8G"
EXIT_OK, EXIT_FAILED, EXIT_INFRA = 0, 1, 3
MARKER = re.compile(r"@@([A-Z0-9]+)(?: (.*))?$")
# The emulated host's kernel saying the emulation failed it (panics, lockups, stalls).
KERNEL_FAULTS = ("Kernel panic", "BUG: ", "stack guard page", "rcu_preempt self-detected stall")


def log(message: str) -> None:
    print(f"[test-vm {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, text=True, capture_output=True, **kwargs)
    if proc.returncode != 0:
        raise SystemExit(f"test-vm: {' '.join(argv[:4])}... failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc


def chroot(root: Path, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    return run(["chroot", str(root), *argv], env={**base, **env})


def digest_of(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


# --- building the emulated host ------------------------------------------------------------


class Builder:
    """Builds the emulated host's root tree (cached by what went into it) and its disk."""

    def __init__(self, work: Path, rebuild: bool):
        self.work = work
        self.root = work / "l1root"
        self.rebuild = rebuild

    def base(self) -> None:
        key = digest_of(SUITE, *L1_PACKAGES)
        stamp = self.root / ".cordon-l1-base"
        if not self.rebuild and stamp.is_file() and stamp.read_text() == key:
            log("emulated host root: cached")
            return
        tmp = self.work / "l1root.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)
        log(f"emulated host root: mmdebstrap {SUITE} ({len(L1_PACKAGES)} packages)")
        with open(self.work / "mmdebstrap.log", "w") as out:
            proc = subprocess.run(
                ["mmdebstrap", "--mode=root", "--variant=minbase", f"--include={','.join(L1_PACKAGES)}",
                 SUITE, str(tmp)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False,
            )  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(f"test-vm: mmdebstrap failed; see {self.work / 'mmdebstrap.log'}")
        (tmp / ".cordon-l1-base").write_text(key)
        tmp.rename(self.root)

    def venv(self) -> None:
        """Cordon's dependencies and the test runner, installed by pip inside the root (PyPI)."""
        project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
        tools = [r for r in project["optional-dependencies"]["dev"] if r.startswith("pytest")]
        requirements = [*project["dependencies"], *tools]
        key = digest_of(self.root.joinpath(".cordon-l1-base").read_text(), *requirements)
        venv = self.root / L1_VENV.lstrip("/")
        stamp = venv / ".cordon-requirements"
        if stamp.is_file() and stamp.read_text() == key:
            log("emulated host venv: cached")
            return
        shutil.rmtree(venv, ignore_errors=True)
        log(f"emulated host venv: pip install {len(requirements)} requirements")
        self._network_for_chroot()
        chroot(self.root, ["/usr/bin/python3", "-m", "venv", L1_VENV])
        pip_env = {"PIP_CERT": "/etc/ssl/certs/ca-certificates.crt", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        pip_env.update({k: v for k, v in os.environ.items() if k in ("PIP_INDEX_URL", "PIP_DEFAULT_TIMEOUT")})
        chroot(self.root, [f"{L1_VENV}/bin/pip", "install", "-q", *requirements], **pip_env)
        stamp.write_text(key)

    def _project_on_path(self) -> None:
        """The project is imported from its copy in the root (refreshed every run), by every
        interpreter of the venv: the supervisor's children run with a clean environment."""
        for site in (self.root / L1_VENV.lstrip("/") / "lib").glob("python3*/site-packages"):
            (site / "cordon-project.pth").write_text(L1_PROJECT + "\n")

    def _network_for_chroot(self) -> None:
        """pip in the chroot resolves and verifies like the host: its resolv.conf and CA bundle."""
        shutil.copyfile("/etc/resolv.conf", self.root / "etc/resolv.conf")
        bundle = Path(os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
        if bundle.is_file():
            shutil.copyfile(bundle, self.root / "etc/ssl/certs/ca-certificates.crt")

    def project(self) -> None:
        """This checkout as it is now (tracked files, uncommitted edits included), without var/."""
        target = self.root / L1_PROJECT.lstrip("/")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        names = run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT).stdout.split("\0")
        count = 0
        for name in names:
            source = PROJECT_ROOT / name
            if not name or not source.is_file():
                continue  # deleted in the working tree
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
            count += 1
        self._project_on_path()
        log(f"emulated host project: {count} files of this checkout")

    def images(self) -> None:
        """The images this host built, verified here first (in the emulated host a full verification
        would take minutes; its fresh stamp lets the runs there skip it), with the host's record
        that the runs there resolve them by."""
        paths = paths_from_env()
        store = ImageStore(paths)
        target = self.root / L1_PROJECT.lstrip("/") / "var" / "images"
        for name, entry in sorted(store.built().items()):
            report = store.verify(name)
            if not report.ok:
                raise SystemExit(f"test-vm: image {name} failed verification: {report.problems[:3]} (make images)")
            ref = store.resolve(name)
            for source in (ref.archive, ref.rootfs, store.verified_stamp(entry.digest)):
                relative = source.relative_to(paths.images_dir)
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                run(["cp", "-a", str(source), str(target / relative)])
            log(f"emulated host image {name}: {entry.digest[:19]} verified and copied")
        run(["cp", "-a", str(store.record_path), str(target / store.record_path.name)])

    def smolvm_runtime(self) -> str:
        """smolvm's runtime copy, made by the engine's own code in the root, with the disk
        templates expanded here (smol-vmm would take about 5 minutes to do it under emulation)."""
        code = "from pathlib import Path; from runner.engines.smolvm import runtime_copy, engine_version; "
        code += f"print(runtime_copy(Path({L1_RUNTIME_ROOT!r}))); print(engine_version())"
        out = chroot(self.root, [f"{L1_VENV}/bin/python", "-c", code], PYTHONPATH=L1_PROJECT).stdout.split("\n")
        runtime, version = out[0].strip(), out[1].strip()
        folder = self.root / runtime.lstrip("/")
        for template in sorted(folder.glob("*-template.ext4.zst")):
            expanded = template.with_suffix("")
            if not expanded.exists():
                run(["zstd", "-d", "-q", "--sparse", str(template), "-o", str(expanded)])
        log(f"emulated host runtime: {version}, templates expanded")
        return version

    def configure(self, settings: dict[str, str], script: Path | None = None) -> None:
        shutil.copy2(PROJECT_ROOT / "tests" / "vm" / "l1-init", self.root / "cordon-l1-init")
        if script is not None:
            self._script_init(script)
        body = "".join(f"export {key}={_sh_quote(value)}\n" for key, value in sorted(settings.items()))
        (self.root / "etc" / "cordon-vm.env").write_text(body)

    def disk(self) -> Path:
        """A fresh disk for every boot (mke2fs from the tree): no state of a previous boot."""
        disk = self.work / "l1.ext4"
        disk.unlink(missing_ok=True)
        run(["truncate", "-s", DISK_SIZE, str(disk)])
        run(["mke2fs", "-q", "-t", "ext4", "-L", "cordon-l1", "-d", str(self.root), str(disk)])
        return disk

    def kernel(self) -> tuple[Path, Path]:
        kernels = sorted((self.root / "boot").glob("vmlinuz-*"))
        if not kernels:
            raise SystemExit("test-vm: the emulated host root has no kernel")
        version = kernels[-1].name.removeprefix("vmlinuz-")
        return kernels[-1], self.root / "boot" / f"initrd.img-{version}"

    def _script_init(self, script: Path) -> None:
        """l1-init up to the doctor (mounts, kvm_amd, heartbeat, the harness's settings), then the
        script instead of the doctor and the battery, its output streamed to the console."""
        init = self.root / "cordon-l1-init"
        head, found, _ = init.read_text().partition(SCRIPT_CUT)
        if not found:
            raise SystemExit(f"test-vm: tests/vm/l1-init has no {SCRIPT_CUT.strip()!r} line to run a script at")
        shutil.copy2(script, self.root / L1_SCRIPT.lstrip("/"))
        init.write_text(head + SCRIPT_RUN.format(script=L1_SCRIPT, python=f"{L1_VENV}/bin/python"))


# Script mode: where l1-init's doctor-and-battery part starts, and what replaces it.
SCRIPT_CUT = "\ntries=0\n"
L1_SCRIPT = "/cordon-vm-script.py"
SCRIPT_RUN = """
echo "@@L1 running {script}"
mkfifo /tmp/script.out /tmp/script.err
sed -u 's/^/@@OUT /' < /tmp/script.out & out=$!
sed -u 's/^/@@ERR /' < /tmp/script.err & err=$!
{python} -u {script} > /tmp/script.out 2> /tmp/script.err
rc=$?
sleep 2  # the relays' last lines (not `wait`: a process the script left could hold the pipes)
kill $out $err 2>/dev/null
echo "@@SCRIPT rc=$rc"
finish
"""


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


# --- booting it, watching it -----------------------------------------------------------------


@dataclass
class Boot:
    """What one boot of the emulated host reported."""

    number: int
    records: list[dict[str, Any]] = field(default_factory=list)
    doctor: list[dict[str, Any]] = field(default_factory=list)
    pytest_rc: int | None = None
    done: bool = False
    infra: str | None = None  # why the emulated host failed, if it did
    faults: list[str] = field(default_factory=list)  # what its kernel reported (panics, lockups)
    seconds: float = 0.0
    output: list[str] = field(default_factory=list)  # script mode: `out|err <line>`, in order
    script_rc: int | None = None  # script mode: its exit code, once it finished


class Console:
    """Reads QEMU's serial console line by line into the boot log, with a watchdog on the emulated
    host's own signs of life: its init's markers (a heartbeat every 20 s). Kernel messages do
    not count: a wedged host can go on printing soft-lockup reports for ever."""

    def __init__(self, work: Path, boot: Boot, log_file: TextIO, silence_s: float, deadline_s: float):
        self.work, self.boot, self.log_file = work, boot, log_file
        self.silence_s, self.deadline_s = silence_s, deadline_s
        self.last_sign = time.monotonic()

    def watch(self, qemu: subprocess.Popen[bytes]) -> None:
        assert qemu.stdout is not None
        fd = qemu.stdout.fileno()
        started = self.last_sign = time.monotonic()
        buffer = b""
        while True:
            ready, _, _ = select.select([fd], [], [], 5.0)
            now = time.monotonic()
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    break
                buffer += data
                while b"\n" in buffer:
                    raw, buffer = buffer.split(b"\n", 1)
                    self.line(raw.decode("utf-8", "replace").rstrip("\r"), now - started)
            if now - self.last_sign > self.silence_s:
                self.stop(qemu, f"no sign of life from the emulated host for {self.silence_s:.0f} s (hung)")
                break
            if now - started > self.deadline_s:
                self.stop(qemu, f"the emulated host ran past the harness's {self.deadline_s:.0f} s limit")
                break
        qemu.wait()
        self.boot.seconds = time.monotonic() - started

    def line(self, text: str, at: float) -> None:
        self.log_file.write(f"[{at:7.1f}] {text}\n")
        self.log_file.flush()
        if any(sign in text for sign in KERNEL_FAULTS):
            self.boot.faults.append(text.strip()[:200])
            log(f"boot {self.boot.number}: emulated host kernel: {text.strip()[:160]}")
        found = MARKER.search(text)
        if not found:
            return
        self.last_sign = time.monotonic()
        kind, rest = found.group(1), found.group(2) or ""
        if kind == "CASE":
            self.case(rest)
        elif kind == "DOCTOR":
            self.doctor(rest)
        elif kind == "PYTEST":
            self.boot.pytest_rc = int(rest.split("=", 1)[1]) if "=" in rest else None
        elif kind == "DONE":
            self.boot.done = True
        elif kind in ("OUT", "ERR"):
            self.boot.output.append(f"{kind.lower()}| {rest}")
            log(f"{kind.lower()}| {rest}")
        elif kind == "SCRIPT":
            self.boot.script_rc = int(rest.split("=", 1)[1].split()[0]) if "=" in rest else None
        elif kind == "L1":
            log(f"boot {self.boot.number}: {rest}")

    def case(self, payload: str) -> None:
        try:
            record = json.loads(payload)
        except ValueError:
            log(f"unreadable case record: {payload[:200]}")
            return
        self.boot.records.append(record)
        case = record.get("cordon_case") or {}
        status = record["status"].upper() if record["status"] != "skipped" else "n/a"
        detail = (
            f"{case.get('outcome')} in {_num(case.get('total_s'))} s, boot {_num(case.get('boot_s'))} s, "
            f"retries {case.get('retries')}, audit {'green' if case.get('cleanup_ok') else 'RED'}"
            if case else record.get("skip_reason", "")[:90]
        )  # fmt: skip
        log(f"{status:7} {record['test'].split('::')[-1]}  {detail}")

    def doctor(self, payload: str) -> None:
        try:
            verdict = json.loads(payload)
        except ValueError:
            verdict = {"unreadable": payload[:500]}
        self.boot.doctor.append(verdict)
        canary = next(
            (c for c in verdict.get("report", {}).get("checks", []) if c["name"].startswith("smolvm canary")), None
        )
        said = f"{'ok' if canary['ok'] else 'FAILED'}: {canary['detail']}" if canary else "no canary check"
        log(f"boot {self.boot.number}: doctor (try {verdict.get('try')}): smolvm canary {said}")

    def stop(self, qemu: subprocess.Popen[bytes], why: str) -> None:
        """Dump the emulated vCPUs' state from QEMU's monitor, then stop QEMU."""
        self.boot.infra = why
        log(f"boot {self.boot.number}: {why}; dumping its vCPU state")
        dump = self.work / f"l1-state-boot{self.boot.number}.txt"
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(5.0)
                sock.connect(str(self.work / "hmp.sock"))
                sock.sendall(b"info registers -a\ninfo cpus\n")
                time.sleep(2.0)
                dump.write_bytes(sock.recv(1 << 20))
            log(f"vCPU state saved in {dump}")
        except OSError as exc:
            log(f"could not reach QEMU's monitor: {exc}")
        qemu.send_signal(signal.SIGTERM)
        try:
            qemu.wait(20)
        except subprocess.TimeoutExpired:
            qemu.kill()


def boot_once(builder: Builder, number: int, silence_s: float, deadline_s: float) -> Boot:
    boot = Boot(number)
    disk = builder.disk()
    kernel, initrd = builder.kernel()
    append = "console=ttyS0,115200 root=/dev/vda rw rootfstype=ext4 init=/cordon-l1-init panic=-1 loglevel=4"
    (builder.work / "hmp.sock").unlink(missing_ok=True)
    argv = [
        "qemu-system-x86_64", "-accel", "tcg,thread=multi", "-machine", "q35", "-cpu", QEMU_CPU,
        "-smp", QEMU_SMP, "-m", QEMU_MEM, "-display", "none", "-no-reboot", "-serial", "stdio",
        "-monitor", f"unix:{builder.work / 'hmp.sock'},server=on,wait=off",
        "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
        "-drive", f"file={disk},format=raw,if=virtio,cache=unsafe", "-nic", "none",
    ]  # fmt: skip
    log(f"boot {number}: {' '.join(argv[:12])} ...")
    with open(builder.work / f"boot{number}.log", "w") as log_file:
        qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            Console(builder.work, boot, log_file, silence_s, deadline_s).watch(qemu)
        finally:
            if qemu.poll() is None:
                qemu.kill()
                qemu.wait()
    if not boot.done and boot.infra is None:
        boot.infra = f"the emulated host stopped before the end (QEMU exit {qemu.returncode})"
    disk.unlink(missing_ok=True)  # 16 GiB sparse; the next boot makes a fresh one
    return boot


# --- the report ---------------------------------------------------------------------------------


def _case_name(test: str) -> str:
    """`test_x[case.py-smolvm]` -> `case.py`."""
    return test.split("[")[-1].rstrip("]").removesuffix("-smolvm") if "[" in test else test.split("::")[-1]


def _num(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def summarise(boots: list[Boot], version: str, build_s: float, total_s: float) -> tuple[int, dict[str, Any]]:
    records = [r for boot in boots for r in boot.records]
    cases = [r for r in records if r.get("cordon_case") or r["status"] != "skipped"]
    not_applicable = [r for r in records if r["status"] == "skipped"]
    failed = [r for r in records if r["status"] == "failed"]
    canary_ok = any(d.get("report", {}).get("engines", {}).get("smolvm") for b in boots for d in b.doctor)
    infra = [
        f"boot {b.number}: {b.infra}" + (f" (kernel: {b.faults[0]})" if b.faults else "") for b in boots if b.infra
    ]
    finished = any(b.done and b.pytest_rc is not None for b in boots)
    retries = sum((r.get("cordon_case") or {}).get("retries", 0) for r in records)
    retries += sum(c.get("retries", 0) for r in records for c in r.get("cordon_concurrent") or [])
    print()
    print("=" * 118)
    print(f"make test-vm: the hostile battery through real smolvm microVMs ({version}) under emulated KVM")
    print("=" * 118)
    header = f"{'case':30} {'expected':28} {'outcome':16} {'boot s':>7} {'run s':>7} {'retries':>7}  {'audit':6} result"
    print(header)
    print("-" * len(header))
    for r in cases:
        result = "ok" if r["status"] == "passed" else "FAILED"
        rows = [(_case_name(r["test"]), r.get("cordon_case") or {})]
        if r.get("cordon_concurrent"):  # several cases at once: one row each, judged on its own
            rows = [(f"[at once] {c['case']}", c) for c in r["cordon_concurrent"]]
        for name, c in rows:
            if name.startswith("[at once]"):
                result = "ok" if c.get("outcome") in c.get("expected", []) and c.get("cleanup_ok") else "FAILED"
            expected = "|".join(c.get("expected", [])) or "-"
            audit = "-" if "cleanup_ok" not in c else ("green" if c["cleanup_ok"] else "RED")
            print(
                f"{name[:30]:30} {expected[:28]:28} {str(c.get('outcome', '-'))[:16]:16} {_num(c.get('boot_s')):>7} "
                f"{_num(c.get('wall_s')):>7} {c.get('retries', 0):>7}  {audit:6} {result}"
            )
    if not_applicable:
        print("\nnot applicable to a VM (with the reason):")
        for r in not_applicable:
            print(f"  {_case_name(r['test'])[:30]:30} {r.get('skip_reason', '')}")
    for r in failed:
        said = [line for line in r.get("failure", "").splitlines() if line.startswith("E ")][:12]
        print(f"\nFAILED {r['test']}:\n" + "\n".join(said or [r.get("failure", "")[-800:]]))
    boot_times = [c["boot_s"] for r in cases if (c := r.get("cordon_case") or {}) and c.get("boot_s")]
    passed = sum(1 for r in cases if r["status"] == "passed")
    print("\ntotals:")
    print(f"  cases run {len(cases)}: passed {passed}, failed {len(failed)}; not applicable {len(not_applicable)}")
    print(f"  retries after a microVM failed (emulation faults, counted): {retries}")
    if boot_times:
        print(
            f"  microVM boot: median {sorted(boot_times)[len(boot_times) // 2]:.1f} s, max {max(boot_times):.1f} s "
            f"over {len(boot_times)} runs"
        )
    print(f"  emulated host boots: {len(boots)} ({', '.join(f'{b.seconds:.0f} s' for b in boots)})")
    print(f"  infrastructure failures: {len(infra)}" + "".join(f"\n    {i}" for i in infra))
    tries = sum(len(b.doctor) for b in boots)
    canary_failures = sum(
        1 for b in boots for d in b.doctor if not d.get("report", {}).get("engines", {}).get("smolvm")
    )
    print(
        f"  doctor's canary microVM: {'booted' if canary_ok else 'FAILED'} "
        f"({tries} doctor runs over {len(boots)} boots, {canary_failures} failed to boot and were retried)"
    )
    print(f"  build {build_s:.0f} s, total {total_s / 60:.1f} min")
    if failed:
        verdict, code = "FAILED: a case was misclassified or left something behind", EXIT_FAILED
    elif not canary_ok:
        verdict, code = "FAILED: the canary microVM did not boot in the emulated host", EXIT_FAILED
    elif not finished or not cases:
        verdict, code = "INFRASTRUCTURE FAILURE: the emulated host did not finish the battery", EXIT_INFRA
    elif any(b.pytest_rc not in (None, 0) for b in boots if b.done):
        verdict, code = "FAILED: pytest reported an error outside the cases", EXIT_FAILED
    else:
        verdict, code = "passed: every applicable case classified as expected, every audit green", EXIT_OK
    print(f"verdict: {verdict}")
    report = {
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "engine_version": version,
        "verdict": verdict,
        "exit_code": code,
        "build_s": round(build_s, 1),
        "total_s": round(total_s, 1),
        "boot_retries": retries,
        "canary_tries": tries,
        "canary_failures": canary_failures,
        "infrastructure_failures": infra,
        "boots": [
            {
                "number": b.number,
                "seconds": round(b.seconds, 1),
                "done": b.done,
                "pytest_rc": b.pytest_rc,
                "infra": b.infra,
                "faults": b.faults,
                "doctor": b.doctor,
            }
            for b in boots
        ],
        "records": records,
    }
    return code, report


# --- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.vm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="rebuild the emulated host's root from scratch")
    parser.add_argument("-k", dest="select", default="", help="pytest -k expression (a subset of the battery)")
    parser.add_argument("--silence-s", type=float, default=150.0, help="watchdog: no heartbeat this long = hung")
    parser.add_argument("--limit-s", type=float, default=2400.0, help="upper bound for one emulated-host boot")
    parser.add_argument(
        "--per-vm-uids", action="store_true",
        help="keep smolvm's per-VM uids (production's mode; the emulated host often hangs with them)",
    )  # fmt: skip
    parser.add_argument("--boots", type=int, default=5, help="emulated host boots at most (1 = no restart)")
    parser.add_argument(
        "--script", type=Path, help="run this Python script in the emulated host instead of the doctor and battery"
    )
    args = parser.parse_args(argv)
    if args.script is not None and not args.script.is_file():
        print(f"--script: no such file {args.script}", file=sys.stderr)
        return 64
    if os.geteuid() != 0:
        print("make test-vm needs root (mmdebstrap, chroot, mounts inside the emulated host)", file=sys.stderr)
        return 64
    started = time.monotonic()
    work = paths_from_env().data_dir / "test-vm"
    work.mkdir(parents=True, exist_ok=True)
    builder = Builder(work, args.rebuild)
    builder.base()
    builder.venv()
    builder.project()
    builder.images()
    version = builder.smolvm_runtime()
    build_s = time.monotonic() - started
    boots: list[Boot] = []
    done_file = builder.root / "etc" / "cordon-vm-done"
    done_file.unlink(missing_ok=True)
    while len(boots) < args.boots:
        builder.configure(
            {
                "CORDON_VM_DONE": "/etc/cordon-vm-done",
                "CORDON_VM_CASE_TIMEOUT_S": "900",
                "CORDON_VM_SELECT": args.select,
                "CORDON_VM_PER_VM_UIDS": "1" if args.per_vm_uids else "0",
            },
            args.script,
        )
        remaining = args.limit_s - (time.monotonic() - started - build_s)
        boot = boot_once(builder, len(boots) + 1, args.silence_s, max(remaining, 60.0))
        boots.append(boot)
        if args.script is not None:
            if boot.script_rc is not None or not boot.infra:
                break
            log(f"boot {boot.number} failed ({boot.infra}) before the script finished; running it again")
            continue
        if boot.done or not boot.infra or not any(d.get("report") for d in boot.doctor):
            break  # finished, or failed before the battery started: a restart would not help
        log(f"boot {boot.number} failed ({boot.infra}); restarting with the cases not yet reported")
        done_file.write_text("".join(r["test"] + "\n" for b in boots for r in b.records))
    if args.script is not None:
        return script_summary(boots, args.script, work, build_s, time.monotonic() - started)
    code, report = summarise(boots, version, build_s, time.monotonic() - started)
    path = work / f"report-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"report: {path}; console logs: {work}/boot*.log")
    return code


def script_summary(boots: list[Boot], script: Path, work: Path, build_s: float, total_s: float) -> int:
    """Script mode: each boot's output and exit code, saved beside the console logs."""
    path = work / f"script-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.log"
    with open(path, "w") as out:
        for boot in boots:
            out.write(f"=== boot {boot.number}: script rc {boot.script_rc}, infra {boot.infra}, faults {boot.faults}\n")
            out.write("".join(line + "\n" for line in boot.output))
    print()
    for boot in boots:
        ended = f"exit code {boot.script_rc}" if boot.script_rc is not None else f"did not finish: {boot.infra}"
        print(f"boot {boot.number} ({boot.seconds:.0f} s): {script} {ended}; {len(boot.output)} lines of output")
    print(f"build {build_s:.0f} s, total {total_s / 60:.1f} min; output: {path}; console logs: {work}/boot*.log")
    finished = [b.script_rc for b in boots if b.script_rc is not None]
    return finished[-1] if finished else EXIT_INFRA
