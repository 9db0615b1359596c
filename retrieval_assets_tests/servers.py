"""Real servers the deployment tests start on loopback: PostgreSQL (Dagster's production storage)
and Redis (the Celery executor's broker). Each is found on this machine or the test is skipped
saying what is missing; ``.ci/run`` installs both from Debian when they are absent."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# The role and database the tests' Dagster instances use (trust authentication on loopback).
PG_USER = "dagster"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"{what} did not listen on 127.0.0.1:{port} within {seconds:.0f} s")


def postgres_bin_dir() -> Path | None:
    """The newest PostgreSQL server's binaries (Debian keeps them out of PATH), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class Postgres:
    """A PostgreSQL server on loopback with its data in a temporary folder."""

    bin_dir: Path
    data_dir: Path
    port: int
    # PostgreSQL refuses to run as root: as root, its commands run as this account.
    run_as: str | None

    def _command(self, *args: str) -> list[str]:
        return ["runuser", "-u", self.run_as, "--", *args] if self.run_as else list(args)

    def pg_ctl(self, action: str, *options: str) -> None:
        subprocess.run(
            self._command(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-w", *options, action),
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        socket_dir = self.data_dir
        self.pg_ctl("start", "-l", str(self.data_dir / "server.log"), "-o",
                    f"-h 127.0.0.1 -p {self.port} -k {socket_dir}")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("stop", "-m", mode)

    def create_database(self, name: str) -> None:
        subprocess.run(
            self._command(str(self.bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER,
                          name),
            check=True,
            capture_output=True,
        )

    def environment(self, database: str) -> dict[str, str]:
        """The variables ``docker/dagster.yaml`` reads its connection from."""
        return {
            "DAGSTER_PG_USERNAME": PG_USER,
            "DAGSTER_PG_PASSWORD": "",
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_DB": database,
        }


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    """Initialise and start a PostgreSQL server in a temporary folder; stop it and remove the
    folder on exit. Skips the calling test, saying why, where no PostgreSQL server is installed
    or it cannot start."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server installed (apt-get install postgresql; .ci/run does it)")
    run_as = "postgres" if os.geteuid() == 0 else None
    if run_as is not None and run_as not in {account.pw_name for account in pwd.getpwall()}:
        pytest.skip("running as root and there is no 'postgres' account to run PostgreSQL as")
    # Not under pytest's temporary folders: as root those are closed to the postgres account.
    root = Path(tempfile.mkdtemp(prefix="retrieval-assets-postgres-"))
    try:
        data_dir = root / "pgdata"
        data_dir.mkdir()
        if run_as is not None:
            account = pwd.getpwnam(run_as)
            root.chmod(0o755)
            os.chown(data_dir, account.pw_uid, account.pw_gid)
        server = Postgres(bin_dir, data_dir, free_port(), run_as)
        try:
            subprocess.run(
                server._command(str(bin_dir / "initdb"), "-D", str(data_dir), "-A", "trust", "-U", PG_USER, "-E",
                                "UTF8"),
                check=True,
                capture_output=True,
            )
            server.start()
        except subprocess.CalledProcessError as failure:
            log = data_dir / "server.log"
            pytest.skip(f"PostgreSQL did not start: {failure.stderr.decode(errors='replace')} "
                        f"{log.read_text() if log.exists() else ''}")
        try:
            yield server
        finally:
            try:
                server.stop("immediate")
            except subprocess.CalledProcessError:
                pass  # stopped already (a test stops and starts it)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def redis_server(root: Path) -> Iterator[str]:
    """A Redis server on loopback that keeps nothing on disk; yields its URL. Skips the calling
    test, saying why, where no Redis server is installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no Redis server installed (apt-get install redis-server; .ci/run does it)")
    port = free_port()
    with open(root / "redis.log", "wb") as log:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(root)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, "Redis")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=20)
