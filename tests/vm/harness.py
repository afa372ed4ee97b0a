"""`make test-vm`: the hostile battery through real smolvm microVMs, on a host without usable KVM.

No machine here can boot a microVM directly (their /dev/kvm runs no normal guest kernel). QEMU
in software mode with an emulated AMD EPYC CPU exposes SVM well enough for Debian's kvm_amd,
and smolvm boots real microVMs on that (12-22 s a boot, measured). This harness:

1. builds (cached under $CORDON_DATA_DIR/test-vm) an emulated host from Debian packages and
   PyPI only: a bookworm root with its kernel, a venv with Cordon's dependencies (the
   smolmachines wheel among them), this checkout, the verified guest images, and smolvm's
   runtime copy with its disk templates expanded here at native speed;
2. boots it with QEMU (`-accel tcg,thread=multi -cpu EPYC`); its init (tests/vm/l1-init)
   loads kvm_amd, runs `python -m runner doctor` (the canary must boot), then the
   engine-parametrised hostile battery with `--engine smolvm` in two passes: "warm" (warm
   starts on: runs branch a frozen base VM) runs the whole battery, the freshness checks of
   tests/runner/engines/smolvm/test_warm.py and the notebook-state cases (STATE_CASES); "cold"
   (warm starts off) runs a few single cases (COLD_SELECT) for the cold boot's time;
3. reads the results from the console (`@@` markers), with a watchdog: a silent emulated
   host is stopped after its vCPU state is dumped, and reported as an infrastructure failure;
   a restart carries on with the passes not finished and, in each, the cases not yet reported;
4. prints the report (per pass: the cases, how their VMs started and how long that took; the
   ratio of a branched start's time to a cold boot's; the freshness records) and saves it as
   JSON. Exit 0 only when every case of both passes that applies to a VM was classified as
   expected with a green audit and every freshness record is ok; 1 on any wrong outcome, leak
   or stale branch; 3 when the emulated host itself failed (infrastructure).

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
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any, TextIO

from runner.config import PROJECT_ROOT, paths_from_env
from runner.images import ImageStore
from tests.vm.plugin import BASE, CALIBRATION_JOB, CARRIED, done_entry

SUITE = "bookworm"
L1_PACKAGES = (
    "linux-image-amd64", "kmod", "python3", "python3-venv", "zstd", "procps", "e2fsprogs",
    "iproute2", "ca-certificates", "util-linux", "passwd", "openssl",
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
# The battery's passes, in the order l1-init runs them, and what each is for.
PASSES = {
    "warm": "warm starts on (CORDON_SMOLVM_WARM=true): the whole battery and the freshness checks",
    "cold": "warm starts off (CORDON_SMOLVM_WARM=false): a few single cases, for the cold boot's time",
}
# The cold pass's cases: one of each kind of end a VM must reach (a normal program in each
# runtime, a wall timeout, the guest's OOM, an output cap, a process that outlives its parent).
# The process-cap cases (fork_bomb.py and its kin) do not apply to a VM. Only the per-case test:
# the concurrent one runs two VMs at once and would not time a boot alone.
COLD_SELECT = (
    "test_hostile_case_is_classified and (transform_csv.py or transform_json.js or transform_polars.py"
    " or infinite_loop.py or memory_bomb.py or stdout_flood.py or daemon_double_fork.py)"
)
# Notebook cells through microVMs, in the warm pass: state saved in one VM and restored in the
# next (a data frame among it), what does not carry, a failed cell, the caps, a malicious
# snapshot that runs only in its own VM; one kernel's behaviour through IPython in the guest (the
# history and `_`, the random states, views, `!` under the guest's pseudo-terminal, tracebacks in
# cell terms); in both runtimes. Node ids (the files have more cases, which the namespace engine
# runs in `make test`).
STATE_CASES = (
    *(f"tests/runner/test_cells_kernel.py::{name}" for name in (
        "test_the_display_hook_and_the_history_carry_from_cell_to_cell",
        "test_the_global_random_states_carry_as_in_one_kernel",
        "test_a_view_of_an_array_stays_a_view_in_the_next_cell",
        "test_shell_commands_run_in_the_cells_sandbox_under_its_limits",
        "test_tracebacks_name_the_cell_that_defined_the_code",
    )),
    *(f"tests/runner/test_cells.py::{name}" for name in (
        "test_a_chain_of_cells_reads_a_csv_counts_it_and_prints_from_the_count",
        "test_functions_and_classes_a_cell_defines_work_in_the_next_and_see_its_names",
        "test_an_open_file_is_not_carried_and_the_other_names_still_are",
        "test_a_failing_cell_keeps_what_it_bound_and_records_its_error_in_cell_terms",
        "test_a_state_over_state_max_bytes_ends_output_limit_and_names_the_state",
        "test_restoring_a_state_bigger_than_the_memory_limit_ends_memory_limit_and_says_so",
        "test_a_malicious_snapshot_runs_only_inside_the_sandbox",
    )),
    *(f"tests/runner/test_cells_node.py::{name}" for name in (
        "test_a_let_binding_reaches_the_next_cell",
        "test_a_function_is_listed_as_not_carried_while_the_other_names_carry",
    )),
)  # fmt: skip
# pytest's exit status when nothing was selected: a pass whose selection is empty, or whose
# cases an earlier boot all reported.
PYTEST_NO_TESTS = 5
# A boot given less than this does nothing useful (the emulated host's own boot, the doctor and the
# calibration take minutes): after the first, no boot starts with less left of --limit-s.
MIN_BOOT_S = 300.0


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
        """This checkout as it is now (tracked files with their uncommitted edits, and new files git
        does not ignore: work not yet added is tested too), without var/."""
        target = self.root / L1_PROJECT.lstrip("/")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=PROJECT_ROOT)
        names = listed.stdout.split("\0")
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
        code = "from pathlib import Path; from runner.engines.smolvm.runtime import runtime_copy, engine_version; "
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
    pytest_rc: dict[str, int | None] = field(default_factory=dict)  # per pass that finished
    done: bool = False
    infra: str | None = None  # why the emulated host failed, if it did
    faults: list[str] = field(default_factory=list)  # what its kernel reported (panics, lockups)
    seconds: float = 0.0
    calibrations: list[dict[str, Any]] = field(default_factory=list)  # the budgets' (tests.vm.plugin)
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
            said = dict(word.split("=", 1) for word in rest.split() if "=" in word)
            rc = said.get("rc", "")
            self.boot.pytest_rc[said.get("pass", "")] = int(rc) if rc.isdigit() else None
            log(f"boot {self.boot.number}: pass {said.get('pass', '?')} finished, pytest rc {rc or '?'}")
        elif kind == "CALIBRATION":
            try:
                self.boot.calibrations.append(json.loads(rest))
            except ValueError:
                log(f"unreadable calibration: {rest[:200]}")
            else:
                log(f"boot {self.boot.number}: budgets calibrated: {rest}")
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
            f"{case.get('outcome')} in {_num(case.get('total_s'))} s, {case.get('vm_start') or '-'} start "
            f"{_num(case.get('boot_s'))} s, retries {case.get('retries')}, "
            f"audit {'green' if case.get('cleanup_ok') else 'RED'}"
            if case else record.get("skip_reason", "")[:90]
        )  # fmt: skip
        log(f"{status:7} {record.get('pass') or '-'}: {record['test'].split('::')[-1]}  {detail}")
        if "cordon_freshness" in record:
            log(f"freshness: {json.dumps(record['cordon_freshness'])[:300]}")

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
    """`test_x[case.py-smolvm]` -> `case.py`; a test with no parameter but the engine keeps its name."""
    name, _, params = test.split("::")[-1].partition("[")
    return "-".join(p for p in params.rstrip("]").split("-") if p != "smolvm") or name


def _num(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def _spread(times: list[float]) -> dict[str, Any]:
    """Median and max of some VM start times: None when there are none (unknown, not zero)."""
    return {
        "runs": len(times),
        "median_s": round(median(times), 3) if times else None,
        "max_s": round(max(times), 3) if times else None,
    }


def _cold_reason(case: dict[str, Any]) -> str:
    """Why a run booted cold, as the supervisor put it in the run's engine note."""
    return (case.get("engine_note") or "").partition("booted cold: ")[2].strip() or "no reason given"


def start_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How the VMs of a pass's single runs started (branch, cold), how long that took (boot_s: until
    the program could start), and why runs booted cold. The concurrent test's runs are left out:
    two VMs starting at once on two vCPUs do not time a start alone."""
    runs = [c for r in records if (c := r.get("cordon_case")) and c.get("boot_s") is not None]
    by_start: dict[str, list[float]] = {}
    for c in runs:
        by_start.setdefault(c.get("vm_start") or "unknown", []).append(c["boot_s"])
    cold = [c for c in runs if c.get("vm_start") == "cold"]
    return {
        "all": _spread([c["boot_s"] for c in runs]),
        "by_start": {start: _spread(times) for start, times in sorted(by_start.items())},
        "cold_reasons": dict(Counter(_cold_reason(c) for c in cold).most_common()),
    }


# Ready branches (runner.ready): a run's VM start from its hand-over over a cold boot (issue 30).
READY_TARGET = 0.4


def warm_cold(passes: dict[str, dict[str, Any]], freshness: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The median VM start of the warm pass's branched runs over the cold pass's median (a cold
    boot), the warm pass's own cold boots over the same, and the ready branches' starts (staging,
    hand-over and refresh, until the program could start: the freshness records' ready_start_s)
    over the same; None where a side has no runs."""

    def median_of(name: str, start: str | None) -> float | None:
        starts = passes.get(name, {}).get("starts", {})
        spread = starts.get("all", {}) if start is None else starts.get("by_start", {}).get(start, {})
        return spread.get("median_s")

    branch, cold, warm_pass_cold = median_of("warm", "branch"), median_of("cold", None), median_of("warm", "cold")
    ratios = {
        "branch_median_s": branch,
        "cold_median_s": cold,
        "ratio": round(branch / cold, 3) if branch is not None and cold else None,
        "warm_pass_cold_median_s": warm_pass_cold,
        "warm_pass_cold_ratio": round(warm_pass_cold / cold, 3) if warm_pass_cold is not None and cold else None,
    }
    starts = [t for f in freshness or [] for t in f.get("ready_start_s") or [] if isinstance(t, int | float)]
    if starts:
        ready = round(median(starts), 3)
        ratios.update(ready_median_s=ready, ready_runs=len(starts), ready_target=READY_TARGET,
                      ready_ratio=round(ready / cold, 3) if cold else None)  # fmt: skip
    return ratios


def freshness_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The freshness checks' records (tests/runner/engines/smolvm/test_warm.py), each with its test and pass."""
    found = []
    for r in records:
        if "cordon_freshness" in r:
            fresh = r["cordon_freshness"]
            fresh = fresh if isinstance(fresh, dict) else {"record": fresh}  # then no `ok`: a failure
            found.append({"test": r["test"], "pass": r.get("pass", ""), **fresh})
    return found


def pass_summary(records: list[dict[str, Any]], rc: int | None) -> dict[str, Any]:
    cases = [r for r in records if r.get("cordon_case") or r["status"] != "skipped"]
    return {
        "pytest_rc": rc,
        "cases_run": len(cases),
        "passed": sum(1 for r in cases if r["status"] == "passed"),
        "failed": sum(1 for r in records if r["status"] == "failed"),
        "not_applicable": sum(1 for r in records if r["status"] == "skipped"),
        "starts": start_summary(records),
    }


def print_cases(records: list[dict[str, Any]]) -> None:
    """One pass's table: one row per case (per case of the concurrent test), with how its VM started."""
    header = (
        f"{'case':30} {'expected':28} {'outcome':16} {'start':6} {'boot s':>7} {'run s':>7} {'retries':>7}  "
        f"{'audit':6} result"
    )
    print(header)
    print("-" * len(header))
    for r in records:
        if not r.get("cordon_case") and r["status"] == "skipped":
            continue
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
                f"{name[:30]:30} {expected[:28]:28} {str(c.get('outcome', '-'))[:16]:16} "
                f"{str(c.get('vm_start') or '-')[:6]:6} {_num(c.get('boot_s')):>7} {_num(c.get('wall_s')):>7} "
                f"{c.get('retries', 0):>7}  {audit:6} {result}"
            )


def print_pass(name: str, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    print(f"\n{name} pass: {PASSES.get(name, 'records without a pass')}")
    print_cases(records)
    not_applicable = [r for r in records if r["status"] == "skipped"]
    if not_applicable:
        print("\nnot applicable to a VM (with the reason):")
        for r in not_applicable:
            print(f"  {_case_name(r['test'])[:30]:30} {r.get('skip_reason', '')}")
    for r in records:
        if r["status"] == "failed":
            said = [line for line in r.get("failure", "").splitlines() if line.startswith("E ")][:12]
            print(f"\nFAILED {r['test']}:\n" + "\n".join(said or [r.get("failure", "")[-800:]]))
    rc = summary["pytest_rc"]
    print(
        f"\n  {name} pass: cases run {summary['cases_run']}: passed {summary['passed']}, failed {summary['failed']}; "
        f"not applicable {summary['not_applicable']}; pytest rc {'unknown (not finished)' if rc is None else rc}"
    )
    starts = summary["starts"]
    if not starts["all"]["runs"]:
        print("  VM start: no single run started a VM")
        return
    counts = ", ".join(f"{spread['runs']} {start}" for start, spread in starts["by_start"].items())
    print(f"  VM start (single runs, time until the program could start): {_spread_text(starts['all'])}; {counts}")
    if len(starts["by_start"]) > 1:
        for start, spread in starts["by_start"].items():
            print(f"    {start:7} {_spread_text(spread)}")
    if starts["cold_reasons"]:
        print("  booted cold because: " + "; ".join(f"{n} x {why}" for why, n in starts["cold_reasons"].items()))


def _spread_text(spread: dict[str, Any]) -> str:
    return f"median {_num(spread['median_s'])} s, max {_num(spread['max_s'])} s over {spread['runs']} runs"


def print_warm_cold(ratio: dict[str, Any], passes: dict[str, dict[str, Any]]) -> None:
    print(
        f"\nwarm/cold: VM start median of the warm pass's branched runs {_num(ratio['branch_median_s'])} s / "
        f"of the cold pass's runs {_num(ratio['cold_median_s'])} s = "
        + (f"{ratio['ratio']:.3f} ({1 / ratio['ratio']:.1f}x faster)" if ratio["ratio"] else "unknown")
    )
    if ratio.get("ready_median_s") is not None:
        target = f"target <= {ratio['ready_target']}"
        verdict = "unknown" if ratio["ready_ratio"] is None else f"{ratio['ready_ratio']:.3f}"
        if ratio["ready_ratio"] is not None:
            verdict += f" ({target}: {'pass' if ratio['ready_ratio'] <= ratio['ready_target'] else 'FAIL'})"
        print(
            f"ready/cold: VM start median of the ready branches ({ratio['ready_runs']} runs: staging, hand-over "
            f"and refresh until the program could start) {_num(ratio['ready_median_s'])} s / cold = {verdict}"
        )
    if ratio["warm_pass_cold_median_s"] is not None:
        runs = passes["warm"]["starts"]["by_start"]["cold"]["runs"]
        print(
            f"  the warm pass's cold boots: median {_num(ratio['warm_pass_cold_median_s'])} s over {runs} runs"
            + (f", {ratio['warm_pass_cold_ratio']:.2f} of the cold pass's" if ratio["warm_pass_cold_ratio"] else "")
        )


def start_warnings(passes: dict[str, dict[str, Any]]) -> list[str]:
    """Starts that do not match the pass's setting: not failures of a case, but worth a look."""
    warnings = []
    warm = passes.get("warm", {}).get("starts", {}).get("by_start", {})
    if warm and "branch" not in warm:
        warnings.append("no single run of the warm pass branched (every VM booted cold)")
    branched = passes.get("cold", {}).get("starts", {}).get("by_start", {}).get("branch", {}).get("runs", 0)
    if branched:
        warnings.append(f"{branched} runs of the cold pass branched, with warm starts off")
    return warnings


def doctor_said_no(boot: Boot) -> bool:
    """Whether this boot's doctor reported, last, that the canary microVM cannot boot."""
    reports = [d["report"] for d in boot.doctor if d.get("report")]
    return bool(reports) and not reports[-1].get("engines", {}).get("smolvm")


def restart_helps(boot: Boot) -> bool:
    """Whether a fresh boot may do what this one did not: the emulated host failed (hung, or QEMU
    ended early), which a fresh boot need not repeat; not when its doctor said the canary cannot
    boot (Cordon's answer, which a restart would give again) nor when it finished."""
    return not boot.done and boot.infra is not None and not doctor_said_no(boot)


def summarise(
    boots: list[Boot], version: str, build_s: float, total_s: float, passes: tuple[str, ...] = tuple(PASSES)
) -> tuple[int, dict[str, Any]]:
    """The report of the passes (those planned, in order), its verdict and its exit code."""
    records = [r for boot in boots for r in boot.records]
    cases = [r for r in records if r.get("cordon_case") or r["status"] != "skipped"]
    failed = [r for r in records if r["status"] == "failed"]
    rcs = {name: rc for b in boots for name, rc in b.pytest_rc.items()}
    order = [*passes, *sorted({r.get("pass", "") for r in records} - set(passes))]
    by_pass = {name: [r for r in records if r.get("pass", "") == name] for name in order}
    summaries = {name: pass_summary(by_pass[name], rcs.get(name)) for name in order}
    freshness = freshness_records(records)
    ratio = warm_cold(summaries, freshness)
    stale = [f for f in freshness if f.get("ok") is not True]
    warnings = start_warnings(summaries)
    canary_ok = any(d.get("report", {}).get("engines", {}).get("smolvm") for b in boots for d in b.doctor)
    infra = [
        f"boot {b.number}: {b.infra}" + (f" (kernel: {b.faults[0]})" if b.faults else "") for b in boots if b.infra
    ]
    finished = all(name in rcs for name in passes)
    retries = sum((r.get("cordon_case") or {}).get("retries", 0) for r in records)
    retries += sum(c.get("retries", 0) for r in records for c in r.get("cordon_concurrent") or [])
    print()
    print("=" * 126)
    print(f"make test-vm: the hostile battery through real smolvm microVMs ({version}) under emulated KVM")
    print("=" * 126)
    for name in order:
        print_pass(name, by_pass[name], summaries[name])
    print_warm_cold(ratio, summaries)
    print_freshness(freshness)
    for warning in warnings:
        print(f"WARNING: {warning}")
    print("\ntotals:")
    passed = sum(1 for r in cases if r["status"] == "passed")
    print(f"  cases run {len(cases)} (all passes): passed {passed}, failed {len(failed)}")
    print(f"  retries after a microVM failed (emulation faults, counted): {retries}")
    print(f"  emulated host boots: {len(boots)} ({', '.join(f'{b.seconds:.0f} s' for b in boots)})")
    calibrations = [{"boot": b.number, **c} for b in boots for c in b.calibrations]
    for c in calibrations:
        print(f"  time budgets (boot {c['boot']}, {c.get('pass')} pass): x{c['slowdown']:g}: {c.get('note', '')}")
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
    verdict, code = _verdict(
        failed=bool(failed), stale=bool(stale), canary_ok=canary_ok,
        doctor_said_no=any(doctor_said_no(b) for b in boots), finished=finished and bool(cases), passes=passes,
        rcs=rcs, freshness=bool(freshness),
    )  # fmt: skip
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
        "calibrations": calibrations,
        "passes": summaries,
        "warm_cold": ratio,
        "freshness": freshness,
        "warnings": warnings,
        "boots": [_boot_facts(b) for b in boots],
        "records": records,
    }
    return code, report


def _boot_facts(b: Boot) -> dict[str, Any]:
    return {"number": b.number, "seconds": round(b.seconds, 1), "done": b.done, "pytest_rc": b.pytest_rc,
            "infra": b.infra, "faults": b.faults, "doctor": b.doctor}  # fmt: skip


def print_freshness(freshness: list[dict[str, Any]]) -> None:
    if freshness:
        print("\nfreshness of branched VMs:")
        for f in freshness:
            said = ", ".join(f"{k} {v}" for k, v in f.items() if k not in ("test", "pass", "ok"))
            print(f"  {_case_name(f['test'])} ({f['pass']} pass): {said}: {'ok' if f.get('ok') is True else 'FAILED'}")


def _verdict(
    *, failed: bool, stale: bool, canary_ok: bool, doctor_said_no: bool, finished: bool, passes: tuple[str, ...],
    rcs: dict[str, int | None], freshness: bool,
) -> tuple[str, int]:  # fmt: skip
    """What the passes prove, first reason first: Cordon's failure (1) or the emulated host's (3)."""
    if failed:
        return "FAILED: a case was misclassified or left something behind", EXIT_FAILED
    if stale:
        return "FAILED: a freshness check found branched VMs that were not fresh", EXIT_FAILED
    if not canary_ok and doctor_said_no:
        return "FAILED: the canary microVM did not boot in the emulated host", EXIT_FAILED
    if not canary_ok:  # every boot failed before its doctor could report: QEMU's, proving nothing
        return "INFRASTRUCTURE FAILURE: the emulated host failed before its doctor reported", EXIT_INFRA
    if not finished:
        return f"INFRASTRUCTURE FAILURE: the emulated host did not finish the {'/'.join(passes)} passes", EXIT_INFRA
    if any(rc not in (0, PYTEST_NO_TESTS) for rc in rcs.values()):
        return "FAILED: pytest reported an error outside the cases", EXIT_FAILED
    verdict = "passed: every applicable case classified as expected, every audit green"
    return verdict + (", every freshness record ok" if freshness else ""), EXIT_OK


# --- main -------------------------------------------------------------------------------------


def passes_left(boots: list[Boot], passes: tuple[str, ...]) -> list[str]:
    """The passes no boot finished (its pytest run ended), in order: what a restarted host runs."""
    finished = {name for boot in boots for name in boot.pytest_rc}
    return [name for name in passes if name not in finished]


def carried_calibration(boots: list[Boot]) -> str:
    """The last calibration an earlier boot measured in a microVM (JSON), for the next boot to use:
    the emulated host is the same machine; "" when none did (the floor is not carried)."""
    measured = [c for boot in boots for c in boot.calibrations if c.get("vm_cpu_s")]
    if not measured:
        return ""
    return json.dumps({k: v for k, v in measured[-1].items() if k != "pass"})


def done_entries(boots: list[Boot]) -> str:
    """The done file: every test reported so far, in its pass, which a restarted host skips there."""
    return "".join(done_entry(r.get("pass", ""), r["test"]) + "\n" for boot in boots for r in boot.records)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.vm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="rebuild the emulated host's root from scratch")
    parser.add_argument(
        "-k", dest="select", default="", help="pytest -k expression (a subset of the battery, in both passes)"
    )
    parser.add_argument(
        "--cold-k", default=COLD_SELECT, help="pytest -k expression of the cold pass's cases ('' = no cold pass)"
    )
    parser.add_argument("--silence-s", type=float, default=150.0, help="watchdog: no heartbeat this long = hung")
    parser.add_argument(
        "--limit-s", type=float, default=3000.0, help="upper bound for the emulated host's boots together"
    )
    parser.add_argument(
        "--vmm-as-root", action="store_true",
        help="run the VMMs as root (SMOLVM_VM_UID_DROP=off), not with smolvm's per-VM uids, production's mode",
    )  # fmt: skip
    parser.add_argument("--boots", type=int, default=5, help="emulated host boots at most (1 = no restart)")
    parser.add_argument(
        "--script", type=Path, help="run this Python script in the emulated host instead of the doctor and battery"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
    base_cpu_s = calibration_base() if args.script is None else None
    build_s = time.monotonic() - started
    boots: list[Boot] = []
    done_file = builder.root / "etc" / "cordon-vm-done"
    cold_select = f"({args.cold_k}) and ({args.select})" if args.cold_k and args.select else args.cold_k
    passes = tuple(name for name in PASSES if name != "cold" or cold_select)
    while len(boots) < args.boots:
        done_file.write_text(done_entries(boots))
        builder.configure(
            {
                "CORDON_VM_DONE": "/etc/cordon-vm-done",
                "CORDON_VM_CASE_TIMEOUT_S": "900",
                "CORDON_VM_PASSES": " ".join(passes_left(boots, passes)),
                "CORDON_VM_SELECT": args.select,
                "CORDON_VM_STATE_CASES": " ".join(STATE_CASES),
                "CORDON_VM_COLD_SELECT": cold_select,
                "CORDON_VM_PER_VM_UIDS": "0" if args.vmm_as_root else "1",
                BASE: "" if base_cpu_s is None else f"{base_cpu_s:.4f}",
                CARRIED: carried_calibration(boots),
            },
            args.script,
        )
        remaining = args.limit_s - (time.monotonic() - started - build_s)
        if boots and remaining < MIN_BOOT_S:
            log(f"{remaining:.0f} s left of --limit-s: too little for another boot (at least {MIN_BOOT_S:g} s)")
            break
        boot = boot_once(builder, len(boots) + 1, args.silence_s, max(remaining, MIN_BOOT_S))
        boots.append(boot)
        if args.script is not None:
            if boot.script_rc is not None or not boot.infra:
                break
            log(f"boot {boot.number} failed ({boot.infra}) before the script finished; running it again")
            continue
        if not restart_helps(boot) or not passes_left(boots, passes):
            break  # finished, or the doctor said no: a restart would say it again
        log(f"boot {boot.number} failed ({boot.infra}); restarting with the passes and cases not yet reported")
    if args.script is not None:
        return script_summary(boots, args.script, work, build_s, time.monotonic() - started)
    code, report = summarise(boots, version, build_s, time.monotonic() - started, passes)
    report["cold_select"] = cold_select
    path = work / f"report-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"report: {path}; console logs: {work}/boot*.log")
    return code


def calibration_base(runs: int = 3) -> float | None:
    """CALIBRATION_JOB's CPU seconds here, on the real machine through the namespace engine
    (the median of `runs`): the base the emulated host's budgets are scaled from. None if it
    cannot run here (the battery then keeps the floor, and the report says so)."""
    from runner.spec import Limits, RunSpec
    from runner.supervisor import Supervisor

    supervisor = Supervisor()
    spec = RunSpec(runtime="python", script=CALIBRATION_JOB, engine="namespace", limits=Limits(memory_mib=512))
    seconds = []
    for _ in range(runs):
        result = supervisor.run(spec)
        if result.outcome.value != "succeeded" or not result.cpu_s:
            log(f"calibration base: the job did not succeed here ({result.reason}); budgets keep their floor")
            return None
        seconds.append(result.cpu_s)
    log(f"calibration base: {median(seconds):.3f} s of CPU (runs: {', '.join(f'{s:.3f}' for s in seconds)})")
    return median(seconds)


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
