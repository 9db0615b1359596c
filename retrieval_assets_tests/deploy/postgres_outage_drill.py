"""A drill, not a test: stop PostgreSQL for 10 s while a build launched through the daemon runs on
``docker/dagster.yaml``, then report every run, the version history and the failures the instance
recorded (docs/benchmarks/production-instance.md). Its outcome depends on what the run is doing
when the server goes away, so it is run by hand:

    .venv/bin/python -m retrieval_assets_tests.deploy.postgres_outage_drill WORKDIR [--outage-seconds 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets_tests.conftest import write_tiny_beir
from retrieval_assets_tests.deploy.production_instance import (
    HOME_VAR,
    TERMINAL,
    daemon,
    launch,
    launched,
    production_environment,
)
from retrieval_assets_tests.servers import postgres_server

# Stop the server once the running build has logged this many step events: inside its steps.
STEP_EVENTS_BEFORE_OUTAGE = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--outage-seconds", type=float, default=10.0)
    args = parser.parse_args()
    root = args.workdir
    root.mkdir(parents=True, exist_ok=True)
    catalog = write_tiny_beir(root / "catalog")
    started = time.monotonic()

    def say(*parts: object) -> None:
        print(f"[{time.monotonic() - started:7.1f} s]", *parts, flush=True)

    with postgres_server() as postgres:
        environment = production_environment(postgres, "outage", root, catalog)
        os.environ.update(environment)
        versions = IndexVersions(Path(environment[HOME_VAR]) / "indexes")
        log = root / "daemon.log"
        with DagsterInstance.get() as instance, daemon(environment, log):
            launched([launch(environment, "index_build_job", {"execution": {"config": {"in_process": {}}}})])
            say("index_build_job launched")
            while True:
                runs = instance.get_runs(RunsFilter(job_name="index_build_job"))
                running = runs[0] if runs and runs[0].status == DagsterRunStatus.STARTED else None
                step_events = sum(1 for e in instance.all_logs(running.run_id) if e.step_key) if running else 0
                if step_events > STEP_EVENTS_BEFORE_OUTAGE:
                    break
                time.sleep(0.5)
            say(f"run {runs[0].run_id} is inside its steps: PostgreSQL stopped for {args.outage_seconds:.0f} s")
            postgres.stop("immediate")
            time.sleep(args.outage_seconds)
            postgres.start()
            say("PostgreSQL started again")
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:
                runs = instance.get_runs()
                if versions.promoted() is not None and all(run.status in TERMINAL for run in runs):
                    break
                time.sleep(2)
            time.sleep(15)  # a sensor tick more: no second evaluation may follow
            for run in reversed(instance.get_runs()):
                tags = {k: v for k, v in run.tags.items() if "retry" in k or "parent" in k or k == "index_version"}
                say(run.job_name, run.run_id[:8], run.status.value, tags)
            say("version history:", [(event["event"], event.get("version")) for event in versions.history()])
            failures = [
                entry.message
                for run in instance.get_runs()
                for entry in instance.all_logs(run.run_id)
                if entry.dagster_event is not None and entry.dagster_event.is_failure
            ]
            say("failure events:", failures)
        dropped = log.read_text().count("Exception while writing logger call to event log")
        say(f"event writes given up after dagster-postgres's retries: {dropped} (daemon log: {log})")
    shutil.rmtree(root / "catalog")


if __name__ == "__main__":
    main()
