"""Celery workers for the deployment tests, started as the compose stack's ``celery-worker``
service starts them (``celery -A retrieval_assets.defs.executor worker``), each with one pool
process, a name of its own and its log in a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from celery import Celery

from retrieval_assets.defs.executor import BROKER_VAR
from retrieval_assets.paths import PROJECT_ROOT


@dataclass
class Worker:
    name: str  # the node name, "<name>@<host>" as Celery reports it
    process: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        """The worker's main process (the pool processes are its children)."""
        return self.process.pid

    def pool_pids(self) -> set[int]:
        """The worker's pool processes now: the main process's children."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return {int(pid) for pid in children.read_text().split()} if children.exists() else set()


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    # The command name in parentheses may hold spaces: the fields after its closing one.
    return int(stat.rsplit(")", 1)[1].split()[1])


def _ping(app: Celery, names: set[str]) -> set[str]:
    replies = app.control.ping(destination=sorted(names), timeout=1.0)
    return {name for reply in replies for name in reply}


@contextmanager
def celery_workers(
    count: int, environment: Mapping[str, str], log_dir: Path, ready_seconds: float = 120.0
) -> Iterator[list[Worker]]:
    """``count`` workers for the broker ``environment`` names (``DAGSTER_CELERY_BROKER_URL``),
    with that environment (Dagster's home and storage, the code location's variables) on top of
    this process's; yields them once every one answers a ping, terminates them on exit."""
    broker = environment[BROKER_VAR]
    host = os.uname().nodename
    env = {**os.environ, **environment, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log_dir.mkdir(parents=True, exist_ok=True)
    workers: list[Worker] = []
    try:
        for number in range(1, count + 1):
            name = f"worker{number}@{host}"
            log = log_dir / f"worker{number}.log"
            command = [
                sys.executable, "-m", "celery", "-A", "retrieval_assets.defs.executor", "worker",
                "--concurrency=1", "--pool=prefork", f"--hostname={name}", "--loglevel=INFO", f"--logfile={log}",
                # No worker-to-worker chatter: faster start, and nothing these tests need.
                "--without-gossip", "--without-mingle",
            ]  # fmt: skip
            with open(log_dir / f"worker{number}.out", "wb") as out:
                # A session of its own: stopping it reaches its pool processes too.
                process = subprocess.Popen(
                    command, cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            workers.append(Worker(name, process, log))
        app = Celery(broker=broker)
        try:
            deadline = time.monotonic() + ready_seconds
            waiting = {worker.name for worker in workers}
            while waiting:
                for worker in workers:
                    if worker.process.poll() is not None:
                        raise RuntimeError(f"{worker.name} exited ({worker.process.returncode}): {_tail(worker)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no answer from {sorted(waiting)} within {ready_seconds:.0f} s")
                waiting -= _ping(app, waiting)
        finally:
            app.close()
        yield workers
    finally:
        _stop(workers)


def _tail(worker: Worker, lines: int = 30) -> str:
    texts = [path.read_text(errors="replace") for path in (worker.log, worker.log.with_suffix(".out")) if path.exists()]
    return "\n".join("\n".join(text.splitlines()[-lines:]) for text in texts)


def _stop(workers: list[Worker], seconds: float = 30.0) -> None:
    """A warm shutdown (SIGTERM: finish the running task, give back the reserved ones), then
    SIGKILL to each worker's own process group for whatever is left."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + seconds
    for worker in workers:
        try:
            worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(worker.pid, signal.SIGKILL)  # the group this worker leads (start_new_session)
        except ProcessLookupError:
            pass
        worker.process.wait(timeout=10)
