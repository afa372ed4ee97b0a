"""A private PostgreSQL cluster for tests and the multi-host harness: Debian's binaries, a temporary directory.

PostgreSQL refuses to run as root, so as root its programs run as the `postgres` system user
(Debian's package creates it) in a directory under /tmp that user can reach.
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conftest import free_port

USER = "cordon"
DATABASE = "cordon"
SYSTEM_USER = "postgres"
START_TIMEOUT_S = 60
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def postgres_bin_dir() -> Path | None:
    """Debian's /usr/lib/postgresql/<version>/bin for the highest version installed, or None."""
    candidates = [path for path in Path("/usr/lib/postgresql").glob("*/bin") if (path / "initdb").exists()]
    versions = [(int(path.parent.name), path) for path in candidates if path.parent.name.isdigit()]
    return max(versions)[1] if versions else None


def _as_root() -> bool:
    return os.geteuid() == 0


class PostgresCluster:
    """One throwaway cluster: `start()` it, read `url`, `stop()` it (in a finally) to remove every trace."""

    def __init__(self, workdir: Path | None = None, port: int | None = None):
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed: no /usr/lib/postgresql/<version>/bin/initdb")
        self.bin_dir = bin_dir
        self.workdir = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="cordon-pg-", dir="/tmp"))
        self.port = port if port is not None else free_port()
        self.password = secrets.token_hex(16)
        self.url = ""
        self.data_dir = self.workdir / "data"
        self.log_file = self.workdir / "postgres.log"

    def __enter__(self) -> PostgresCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """initdb, start on 127.0.0.1:<port>, create the `cordon` database; on failure stop and say why."""
        atexit.register(self.stop)  # a Ctrl-C or a crashed harness still removes the cluster
        try:
            self._init()
            self._configure()
            self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", str(START_TIMEOUT_S),
                      "start")  # fmt: skip
            self._wait_until_connectable()
            self._create_database(DATABASE)
        except BaseException as exc:
            log = self._log_tail()
            self.stop()
            if isinstance(exc, Exception):
                raise RuntimeError(f"PostgreSQL did not start: {exc}\n{log}") from exc
            raise
        self.url = self._url(DATABASE)

    def database_url(self, name: str) -> str:
        """The URL of database `name`, created if missing (a fresh database per test keeps tests apart)."""
        self._create_database(name)
        return self._url(name)

    def stop(self) -> None:
        """Stop the server (fast: disconnect clients) and remove the directory. Safe to call twice."""
        if (self.data_dir / "postmaster.pid").exists():
            stopped = self._try("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "30", "stop")
            if not stopped:
                self._kill_postmaster()
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.url = ""
        atexit.unregister(self.stop)

    def pause(self) -> None:
        """Stop the server (fast: its clients disconnected), keeping its data: `resume` starts it again."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "30", "stop")

    def resume(self) -> None:
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", str(START_TIMEOUT_S),
                  "start")  # fmt: skip
        self._wait_until_connectable()

    def connect(self, dbname: str = DATABASE) -> psycopg.Connection[tuple[Any, ...]]:
        """A psycopg connection (autocommit) as the cluster's superuser."""
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=USER, password=self.password, dbname=dbname,
            connect_timeout=5, autocommit=True,
        )  # fmt: skip

    def _url(self, name: str) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{name}"

    def _init(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o700)
        pwfile = self.workdir / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        if _as_root():
            account = pwd.getpwnam(SYSTEM_USER)  # KeyError: Debian's postgresql package was not installed
            for path in (self.workdir, pwfile):
                os.chown(path, account.pw_uid, account.pw_gid)
        try:
            self._run("initdb", "-D", str(self.data_dir), "-A", "scram-sha-256", f"--pwfile={pwfile}", "-U", USER,
                      "-E", "UTF8", "--no-locale", "--no-sync")  # fmt: skip
        finally:
            pwfile.unlink(missing_ok=True)

    def _configure(self) -> None:
        # In postgresql.conf rather than `pg_ctl -o`, which passes its options through a shell.
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.workdir}'",
            # Test data: durability is not wanted, speed is.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
        }
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _wait_until_connectable(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with self.connect("postgres"):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _create_database(self, name: str) -> None:
        if not _NAME.match(name):
            raise ValueError(f"database name {name!r}: lower-case letters, digits and _ only")
        with self.connect("postgres") as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def _argv(self, program: str, *args: str) -> list[str]:
        argv = [str(self.bin_dir / program), *args]
        return ["runuser", "-u", SYSTEM_USER, "--", *argv] if _as_root() else argv

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            self._argv(program, *args), cwd=self.workdir, capture_output=True, text=True, timeout=START_TIMEOUT_S + 30
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")

    def _try(self, program: str, *args: str) -> bool:
        try:
            self._run(program, *args)
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return True

    def _kill_postmaster(self) -> None:
        """The last resort when pg_ctl could not stop it: SIGKILL the postmaster; its backends exit after it."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no server log)"


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster for the whole session, removed at its end."""
    if postgres_bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (Debian's `postgresql` package; `make test` installs it)")
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
