"""The Celery executor (``retrieval_assets/defs/executor.py``) on the production instance as
shipped (``docker/dagster.yaml`` on a real PostgreSQL server) with a real Redis broker and real
workers (``celery -A retrieval_assets.defs.executor worker``, as the compose ``celery-worker``
service runs them).

A backfill of the embedding warm-up is one run per partition (``embedding_cache_shard`` has no
single-run backfill policy): the 8 hash shards of the catalog's source are 8 runs, launched here
at once, each orchestrated by a process of its own (as the daemon's run workers would each
orchestrate one) and each sending its one step to the workers. Skipped, saying why, where
PostgreSQL or Redis is not installed.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    MultiPartitionKey,
    RunsFilter,
    build_sensor_context,
    execute_job,
    materialize,
    reconstructable,
)
from dagster._core.storage.tags import PARTITION_NAME_TAG, get_multidimensional_partition_tag

from retrieval_assets.defs.executor import BACKEND_VAR, BROKER_VAR, CELERY_SETTINGS, celery_config, executor
from retrieval_assets.defs.partitions import CATALOG_SOURCES, hash_shards
from retrieval_assets.defs.resources import CatalogResource
from retrieval_assets_tests.deploy.celery_workers import Worker, celery_workers, parent_pid
from retrieval_assets_tests.deploy.production_instance import CATALOG_VAR, HOME_VAR, production_environment

SHARDS = hash_shards.get_partition_keys()
STEP = "embedding_cache_shard"


def _tiny_job(name: str):
    """Job ``name`` of the tiny location with the executor ``executor.py`` picks from this
    process's environment: resolved in this process (the runs) and in each worker's pool process
    (the steps), both with the broker's variable set."""
    from dagster_shared.record import copy

    from retrieval_assets.defs.executor import distributed_executor
    from retrieval_assets_tests.deploy import tiny_location

    # This process loaded the definitions before the test named a broker: pick the executor again.
    return copy(tiny_location.defs, executor=distributed_executor()).resolve_job_def(name)


def shards_job():
    return _tiny_job("embedding_shards_job")


def build_job():
    return _tiny_job("index_build_job")


def _resources(environment: dict[str, str]) -> dict:
    from retrieval_assets.runs import deployment_resources

    return deployment_resources(environment[HOME_VAR], CatalogResource(format="beir", path=environment[CATALOG_VAR]))


def _register_sources(instance: DagsterInstance, resources: dict) -> str:
    """What ``catalog_source_sensor`` asks for, applied as the daemon applies it; the one source's name."""
    from retrieval_assets.defs.sensors import catalog_source_sensor

    context = build_sensor_context(instance=instance, resources={"catalog": resources["catalog"]})
    [request] = catalog_source_sensor.evaluate_tick(context).dynamic_partitions_requests
    instance.add_dynamic_partitions(CATALOG_SOURCES, list(request.partition_keys))
    [source] = request.partition_keys
    return source


def _cache_files(home: Path) -> dict[str, list[str]]:
    """The embedding cache, file by file: each folder's files as sorted SHA-256 digests (segment
    names are random per writer; their bytes are what must match)."""
    cache = Path(home) / "embedding_cache"
    found: dict[str, list[str]] = {}
    for path in sorted(cache.rglob("*")):
        if path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found.setdefault(str(path.parent.relative_to(cache)), []).append(f"{path.suffix or path.name}:{digest}")
    return {folder: sorted(digests) for folder, digests in found.items()}


@pytest.fixture(scope="module")
def reference_cache(tiny_beir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The same 8 shards warmed up in this process, one run after another, into another home."""
    from retrieval_assets.definitions import ASSETS
    from retrieval_assets.runs import deployment_resources

    root = tmp_path_factory.mktemp("in_process")
    catalog = root / "catalog"  # the same source name as the Celery tests' catalog
    shutil.copytree(tiny_beir, catalog)
    resources = deployment_resources(root / "home", CatalogResource(format="beir", path=str(catalog)))
    with DagsterInstance.ephemeral() as instance:
        source = _register_sources(instance, resources)
        for shard in SHARDS:
            result = materialize(
                ASSETS,
                selection=AssetSelection.assets(STEP),
                partition_key=MultiPartitionKey({"source": source, "shard": shard}),
                resources=resources,
                instance=instance,
            )
            assert result.success
    files = _cache_files(root / "home")
    assert files and all(files.values())
    return files


@contextmanager
def _celery_deployment(
    postgres, broker: str, database: str, catalog_dir: Path, root: Path, monkeypatch
) -> Iterator[tuple]:
    """The production instance on a database of its own, the broker in the environment of this
    process (the runs) and of two workers; yields (environment, instance, workers, source)."""
    catalog = root / "catalog"
    shutil.copytree(catalog_dir, catalog)
    environment = production_environment(postgres, database, root, catalog)
    environment[BROKER_VAR] = broker
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(BACKEND_VAR, raising=False)  # the backend is the broker
    with DagsterInstance.get() as instance, celery_workers(2, environment, root / "workers") as workers:
        source = _register_sources(instance, _resources(environment))
        yield environment, instance, workers, source


def _run_shard(source: str, shard: str) -> tuple[str, str, bool]:
    """One backfill run: ``shard`` of ``source``, tagged as a backfill tags its runs."""
    key = MultiPartitionKey({"source": source, "shard": shard})
    tags = {
        PARTITION_NAME_TAG: str(key),
        get_multidimensional_partition_tag("source"): source,
        get_multidimensional_partition_tag("shard"): shard,
    }
    with DagsterInstance.get() as instance:
        with execute_job(reconstructable(shards_job), instance=instance, tags=tags) as result:
            return shard, result.run_id, result.success


def _backfill(source: str, meanwhile: Callable[[], None] | None = None) -> dict[str, tuple[str, bool]]:
    """The 8 shard runs at once, each orchestrated by a process of its own as the daemon's run
    workers would (forked from this one: the definitions are imported already; Dagster's run
    setup reconfigures logging, which deadlocks between threads of one process); ``meanwhile``
    runs here while they do. {shard: (run id, success)}."""
    # Fork start: every process forks when the first run is submitted, before any thread starts here.
    with ProcessPoolExecutor(len(SHARDS), mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(_run_shard, source, shard) for shard in SHARDS]
        if meanwhile is not None:
            meanwhile()
        done = [future.result(timeout=300) for future in futures]
    return {shard: (run_id, success) for shard, run_id, success in done}


def _step_starts(instance: DagsterInstance, run_id: str) -> list[int]:
    return [
        entry.dagster_event.pid
        for entry in instance.all_logs(run_id, of_type=DagsterEventType.STEP_START)
        if entry.dagster_event is not None and entry.step_key == STEP
    ]


def _celery_hosts(instance: DagsterInstance, run_id: str) -> list[str]:
    """The workers that took the run's step, from the engine event each one logs as it starts it."""
    hosts = []
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        metadata = entry.dagster_event.engine_event_data.metadata if entry.dagster_event else {}
        if "Celery worker" in metadata:
            hosts.append(str(metadata["Celery worker"].value))
    return hosts


def _materializations(instance: DagsterInstance) -> Counter:
    records = instance.fetch_materializations(AssetKey(STEP), limit=1000).records
    return Counter(record.partition_key for record in records)


def _owner(workers: list[Worker], pid: int) -> str | None:
    parent = parent_pid(pid)
    return next((worker.name for worker in workers if worker.pid == parent), None)


def test_the_executor_is_celery_exactly_where_a_broker_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BROKER_VAR, raising=False)
    assert executor().executor is None  # Dagster's default executor
    monkeypatch.setenv(BROKER_VAR, "redis://broker:6379/0")
    monkeypatch.delenv(BACKEND_VAR, raising=False)
    chosen = executor().executor
    assert chosen is not None and chosen.name == "celery"
    config = celery_config()
    # Read from the environment as each run starts: no URL (or password in it) in the stored config.
    assert config == {"broker": {"env": BROKER_VAR}, "backend": {"env": BROKER_VAR}, "config_source": CELERY_SETTINGS}
    assert {"task_acks_late", "task_reject_on_worker_lost"} <= {k for k, v in CELERY_SETTINGS.items() if v is True}
    assert CELERY_SETTINGS["worker_prefetch_multiplier"] == 1
    monkeypatch.setenv(BACKEND_VAR, "redis://backend:6379/1")
    assert celery_config()["backend"] == {"env": BACKEND_VAR}  # type: ignore[index]


def test_a_shard_backfill_on_two_celery_workers_outlives_a_killed_worker_and_fills_the_cache_the_build_reuses(
    postgres, redis_url, tiny_beir: Path, tmp_path: Path, monkeypatch, reference_cache, record_property
):
    with _celery_deployment(postgres, redis_url, "celery_backfill", tiny_beir, tmp_path, monkeypatch) as deployment:
        environment, instance, workers, source = deployment
        pool_pids = {pid: worker.name for worker in workers for pid in worker.pool_pids()}
        killed: dict = {}

        def kill_first_step() -> None:
            """SIGKILL the worker pool process that runs the first shard step to start."""
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                for run in instance.get_runs(RunsFilter(job_name="embedding_shards_job")):
                    for pid in _step_starts(instance, run.run_id):
                        if pid in pool_pids:
                            os.kill(pid, signal.SIGKILL)
                            killed.update(pid=pid, worker=pool_pids[pid], run_id=run.run_id)
                            return
                time.sleep(0.05)

        started = time.monotonic()
        runs = _backfill(source, meanwhile=kill_first_step)
        seconds = round(time.monotonic() - started, 1)
        assert killed, "no shard step started on a worker"
        assert all(success for _, success in runs.values()), runs
        log = next(worker.log for worker in workers if worker.name == killed["worker"]).read_text()
        assert "signal 9" in log, log[-3000:]

        hosts: Counter = Counter()
        for shard, (run_id, _) in runs.items():
            # The run sent its step to Celery, and a worker's pool process ran it (not this process).
            engine = [e.message or "" for e in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)]
            assert any(f'Submitting celery task for step "{STEP}"' in message for message in engine), engine
            pids, taken = _step_starts(instance, run_id), _celery_hosts(instance, run_id)
            if run_id == killed["run_id"]:
                # Started in the killed process, given back, started again in another one.
                assert len(pids) == 2 and pids[0] == killed["pid"] and pids[1] != killed["pid"], pids
            else:
                assert len(pids) == 1, (shard, pids)
            assert pids[-1] != os.getpid()
            assert _owner(workers, pids[-1]) == taken[-1], (shard, pids, taken)
            hosts[taken[-1]] += 1
        spread = {worker.name: hosts[worker.name] for worker in workers}
        retaken_by = _celery_hosts(instance, killed["run_id"])[-1]
        for name, value in (("shards_per_worker", spread), ("backfill_seconds", seconds), ("killed", killed),
                            ("retaken_by", retaken_by)):
            record_property(name, value)
        print(f"8 shards on 2 Celery workers in {seconds} s: {spread}; killed {killed}, ran again on {retaken_by}")
        # One task reserved per worker process (prefetch 1, late acks): both workers take shards.
        assert sum(spread.values()) == len(SHARDS) and all(spread.values()), spread
        # Every shard materialized exactly once, byte for byte what the same shards write in one process.
        assert _materializations(instance) == {MultiPartitionKey({"source": source, "shard": s}): 1 for s in SHARDS}
        assert _cache_files(Path(environment[HOME_VAR])) == reference_cache

        # The whole build that follows, on the workers too, encodes nothing: every vector is in the cache.
        with execute_job(reconstructable(build_job), instance=instance) as built:
            assert built.success, [e.message for e in built.all_events if e.is_failure]
            build_run = built.run_id
        steps = instance.all_logs(build_run, of_type=DagsterEventType.STEP_START)
        assert len(steps) > 10 and all(_owner(workers, e.dagster_event.pid) for e in steps if e.dagster_event)
        materialized = {
            m.asset_key.to_user_string(): {name: value.value for name, value in m.metadata.items()}
            for event in instance.all_logs(build_run, of_type=DagsterEventType.ASSET_MATERIALIZATION)
            if (m := event.asset_materialization) is not None
        }
        assert materialized["chunks"]["chunks"] > 0
        assert materialized["dense_embeddings"]["encoded"] == 0, materialized["dense_embeddings"]
        assert materialized["sparse_embeddings"]["encoded"] == 0, materialized["sparse_embeddings"]
        assert materialized["index_version"]["sealed"] is True
