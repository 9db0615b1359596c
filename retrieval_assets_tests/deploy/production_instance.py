"""The production instance as the deployment tests run it: ``docker/dagster.yaml`` copied
unchanged into a Dagster home whose connection settings point at a test's own PostgreSQL
database, the code location ``tiny_location`` over a catalog and home of the test's, and the
Dagster daemon and CLI as the compose services run them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagster import DagsterInstance, DagsterRun, RunsFilter

from retrieval_assets.defs.retention import FINISHED
from retrieval_assets.paths import PROJECT_ROOT
from retrieval_assets_tests.servers import Postgres

# Where the tiny location (tiny_location.py) takes its home and catalog from.
HOME_VAR = "RETRIEVAL_ASSETS_TEST_HOME"
CATALOG_VAR = "RETRIEVAL_ASSETS_TEST_CATALOG"

BIN = Path(sys.executable).parent
TERMINAL = set(FINISHED)


def production_environment(postgres: Postgres, database: str, root: Path, catalog: Path) -> dict[str, str]:
    """A Dagster home under ``root`` holding ``docker/dagster.yaml`` as shipped and a workspace
    of the tiny location, a fresh database for it, and the variables that reach both."""
    postgres.create_database(database)
    dagster_home = root / "dagster_home"
    dagster_home.mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "docker" / "dagster.yaml", dagster_home / "dagster.yaml")
    workspace = {
        "load_from": [
            {
                "python_module": {
                    "module_name": "retrieval_assets_tests.deploy.tiny_location",
                    "location_name": "retrieval_assets",
                    "working_directory": str(PROJECT_ROOT),
                }
            }
        ]
    }
    (dagster_home / "workspace.yaml").write_text(json.dumps(workspace))
    return {
        **postgres.environment(database),
        "DAGSTER_HOME": str(dagster_home),
        "DAGSTER_STORAGE_DIR": str(root / "dagster_storage"),
        "DAGSTER_COMPUTE_LOGS_DIR": str(root / "compute_logs"),
        HOME_VAR: str(root / "home"),
        CATALOG_VAR: str(catalog),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def stop_group(process: subprocess.Popen) -> None:
    """Stop ``process`` and what it started (the code servers the daemon and the CLI spawn
    outlive their parent otherwise)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    # A code server may outlast the daemon by its heartbeat timeout.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def daemon(environment: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """``dagster-daemon run`` over the workspace, as the compose service starts it."""
    workspace = Path(environment["DAGSTER_HOME"]) / "workspace.yaml"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
            env={**os.environ, **environment},
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        stop_group(process)


def launch(environment: dict[str, str], job: str, config: dict | None = None) -> subprocess.Popen:
    """``dagster job launch``: submits the run to the instance's run coordinator (queued)."""
    workspace = Path(environment["DAGSTER_HOME"]) / "workspace.yaml"
    command = [str(BIN / "dagster"), "job", "launch", "-w", str(workspace), "-j", job]
    if config is not None:
        command += ["--config-json", json.dumps(config)]
    return subprocess.Popen(
        command,
        env={**os.environ, **environment},
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def launched(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        output, _ = process.communicate(timeout=180)
        stop_group(process)
        assert process.returncode == 0, output.decode(errors="replace")


def wait_for_runs(
    instance: DagsterInstance, job: str, count: int, timeout: float, daemon_log: Path, **tags: str
) -> list[DagsterRun]:
    """The first ``count`` runs of ``job`` (with ``tags``), once all of them have finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = instance.get_runs(RunsFilter(job_name=job, tags=tags))
        if len(runs) >= count and all(run.status in TERMINAL for run in runs):
            return list(reversed(runs))  # oldest first
        time.sleep(1)
    statuses = [(run.run_id, run.status) for run in instance.get_runs(RunsFilter(job_name=job))]
    raise TimeoutError(f"{count} run(s) of {job} {tags} did not finish in {timeout:.0f} s: {statuses}\n"
                       f"daemon log:\n{daemon_log.read_text()[-4000:]}")
