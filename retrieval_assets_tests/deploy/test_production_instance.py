"""The nightly flow on the production instance as shipped (``docker/dagster.yaml`` on a real
PostgreSQL server): builds launched through the queued run coordinator and started by the
daemon, the candidate sensor starting the evaluation, the gate, promotion, a rollback; the
``index_writes`` pool honoured across two builds launched at once, and a failed run retried
once by the instance; run retention. Skipped, saying why, where PostgreSQL is not installed."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg2
from dagster import DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus

from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.defs.assets.evaluation import EVALUATED_VERSION_TAG
from retrieval_assets_tests.defs.test_instance_config import INDEX_WRITERS
from retrieval_assets_tests.deploy.production_instance import (
    daemon,
    launch,
    launched,
    production_environment,
    wait_for_runs,
)
from retrieval_assets_tests.servers import PG_USER


def _pool_steps(instance: DagsterInstance, run: DagsterRun) -> list[tuple[float, float, str]]:
    """(start, end, step) of each step of ``run`` that writes into the index_writes pool."""
    started: dict[str, float] = {}
    spans = []
    kinds = {DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE}
    for entry in instance.all_logs(run.run_id, of_type=kinds):
        if entry.step_key not in INDEX_WRITERS or entry.dagster_event is None:
            continue
        if entry.dagster_event.event_type == DagsterEventType.STEP_START:
            started[entry.step_key] = entry.timestamp
        else:
            spans.append((started[entry.step_key], entry.timestamp, entry.step_key))
    return spans


def test_nightly_flow_through_the_daemon_on_postgres(postgres, tiny_beir: Path, tmp_path: Path, monkeypatch):
    catalog = tmp_path / "catalog"
    shutil.copytree(tiny_beir, catalog)
    environment = production_environment(postgres, "nightly", tmp_path, catalog)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    daemon_log = tmp_path / "daemon.log"
    versions = IndexVersions(Path(environment["RETRIEVAL_ASSETS_TEST_HOME"]) / "indexes")

    with DagsterInstance.get() as instance, daemon(environment, daemon_log):
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"

        # Two nightly builds launched at once: queued, started by the daemon, their index writes
        # taking turns in the index_writes pool.
        # In one process each (test_nightly_multiprocess runs a build step by step in processes).
        in_process = {"execution": {"config": {"in_process": {}}}}
        launched([launch(environment, "index_build_job", in_process) for _ in range(2)])
        builds = wait_for_runs(instance, "index_build_job", 2, 420, daemon_log)
        assert [run.status for run in builds] == [DagsterRunStatus.SUCCESS] * 2
        for run in builds:
            kinds = {entry.dagster_event.event_type for entry in instance.all_logs(run.run_id)
                     if entry.dagster_event is not None}
            assert {DagsterEventType.RUN_ENQUEUED, DagsterEventType.RUN_STARTING} <= kinds
        first, second = (_pool_steps(instance, run) for run in builds)
        assert first and second
        overlaps = [(a, b) for a in first for b in second if a[0] < b[1] and b[0] < a[1]]
        assert not overlaps, overlaps

        # The candidate sensor asks for the evaluation; the gate passes the first version and promotes it.
        candidate = versions.sealed()[-1].id
        evaluations = wait_for_runs(instance, "evaluation_job", 1, 300, daemon_log,
                                    **{EVALUATED_VERSION_TAG: candidate})
        assert evaluations[0].status == DagsterRunStatus.SUCCESS
        promoted = versions.promoted()
        assert promoted is not None and promoted.id == candidate

        # The catalog changes: the next build's candidate is evaluated and promoted in turn ...
        corpus = catalog / "corpus.jsonl"
        corpus.write_text("".join(corpus.read_text().splitlines(keepends=True)[:-2]) + "\n")
        launched([launch(environment, "index_build_job", in_process)])
        wait_for_runs(instance, "index_build_job", 3, 300, daemon_log)
        second = versions.sealed()[-1].id
        assert second != candidate
        wait_for_runs(instance, "evaluation_job", 1, 300, daemon_log, **{EVALUATED_VERSION_TAG: second})
        assert versions.promoted().id == second
        # ... and a rollback serves the first again.
        launched([launch(environment, "rollback_job")])
        rollback = wait_for_runs(instance, "rollback_job", 1, 120, daemon_log)
        assert rollback[0].status == DagsterRunStatus.SUCCESS
        assert versions.promoted().id == candidate
        history = [(event["event"], event.get("version")) for event in versions.history()]
        # Each promoted once by its evaluation (a rollback records the switch, then itself).
        assert history == [("promoted", candidate), ("promoted", second), ("promoted", candidate),
                           ("rolled_back", candidate)]

        # A failed run is retried once by the instance (run_retries), from the failed step.
        missing = {**in_process, "resources": {"catalog": {"config": {"path": str(tmp_path / "missing")}}}}
        launched([launch(environment, "index_build_job", missing)])
        failed = wait_for_runs(instance, "index_build_job", 5, 300, daemon_log)[3:]
        assert [run.status for run in failed] == [DagsterRunStatus.FAILURE] * 2
        assert failed[1].tags["dagster/parent_run_id"] == failed[0].run_id
        assert failed[1].tags["dagster/retry_number"] == "1"

        # Run retention: with every run so far 100 days old, run_retention_job deletes those that
        # hold no asset's latest materialization; each asset's current state stays.
        keys = list(instance.get_asset_keys())
        latest = {key: entry.run_id for key, entry in instance.get_latest_materialization_events(keys).items() if entry}
        with psycopg2.connect(host="127.0.0.1", port=postgres.port, user=PG_USER, dbname="nightly") as connection:
            with connection.cursor() as cursor:
                cursor.execute("UPDATE runs SET create_timestamp = create_timestamp - interval '100 days'")
        before = {run.run_id for run in instance.get_runs()}
        launched([launch(environment, "run_retention_job")])
        retention = wait_for_runs(instance, "run_retention_job", 1, 120, daemon_log)
        assert retention[0].status == DagsterRunStatus.SUCCESS
        after = {run.run_id for run in instance.get_runs()}
        assert after == set(latest.values()) | {retention[0].run_id}, (before, after)
        assert {failed[0].run_id, failed[1].run_id, builds[0].run_id} <= before - after
        still = instance.get_latest_materialization_events(keys)
        assert {key: entry.run_id for key, entry in still.items() if entry} == latest
