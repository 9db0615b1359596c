"""The nightly flow through Dagster on a tiny real catalog: build a candidate, let the sensor ask
for its evaluation, promote it through the gate; refuse a candidate built with a broken encoder
config while serving stays unchanged; roll back with the rollback job."""

from __future__ import annotations

import logging
import shutil
import socket
from pathlib import Path

import pytest
from dagster import AssetKey, AssetSelection, DagsterInstance, MultiPartitionKey, build_sensor_context, materialize

from retrieval_assets.definitions import ASSETS, defs
from retrieval_assets.defs.assets.embed import embedding_cache_shard
from retrieval_assets.defs.io_manager import ParquetIOManager, stored_value
from retrieval_assets.defs.jobs import BUILD, EVALUATION, WHOLE_BUILD, rollback_job
from retrieval_assets.defs.partitions import catalog_sources, hash_shards
from retrieval_assets.defs.resources import (
    CatalogResource,
    IndexStorageResource,
    ModelResource,
    SearchResource,
    code_location_resources,
)
from retrieval_assets.defs.sensors import candidate_evaluation_sensor, catalog_source_sensor, document_inbox_sensor
from retrieval_assets_tests import TEST_DATA
from retrieval_assets_tests.builds import GATE_ONLY

QUERY = "vitamin B12 deficiency and homocysteine"
TOOLS = TEST_DATA / "tools_with_relations.jsonl"
QDRANT_KEY = "qdrant-key-7c1d-never-logged"


class Deployment:
    """One home, one Dagster instance, runs materialized as the jobs would materialize them."""

    def __init__(self, home: Path, catalog: Path) -> None:
        self.storage = IndexStorageResource(home=str(home))
        self.catalog = CatalogResource(format="beir", path=str(catalog))
        self.instance = DagsterInstance.ephemeral()

    def run(self, selection, models: ModelResource | None = None, partition_key: str | None = None):
        models = models or ModelResource()
        return materialize(
            ASSETS,
            selection=selection,
            instance=self.instance,
            partition_key=partition_key,
            run_config=GATE_ONLY if selection is EVALUATION or selection is WHOLE_BUILD else None,
            raise_on_error=False,
            resources={
                **code_location_resources(),
                "catalog": self.catalog,
                "models": models,
                "storage": self.storage,
                "search": SearchResource(storage=self.storage, models=models),
                "parquet_io_manager": ParquetIOManager(base_dir=str(self.storage.artifacts_dir)),
            },
        )

    def sensor_run_requests(self) -> list:
        context = build_sensor_context(instance=self.instance, resources={"storage": self.storage})
        return list(candidate_evaluation_sensor.evaluate_tick(context).run_requests)

    def served_answer(self) -> list[str]:
        embedded = IndexStorageResource(home=self.storage.home)
        search = SearchResource(storage=embedded, models=ModelResource())
        try:
            return [hit.doc_id for hit in search.search(QUERY, top_k=5).hits]
        finally:
            search.close()


@pytest.fixture()
def deployment(tiny_beir: Path, tmp_path: Path) -> Deployment:
    catalog = tmp_path / "catalog"
    shutil.copytree(tiny_beir, catalog)
    return Deployment(tmp_path / "home", catalog)


def test_candidate_is_evaluated_promoted_refused_and_rolled_back(deployment: Deployment) -> None:
    versions = deployment.storage.versions()
    built = deployment.run(BUILD)
    assert built.success and versions.promoted() is None  # a build alone never changes serving
    first = built.output_for_node("index_version")
    [request] = deployment.sensor_run_requests()
    assert request.run_key.startswith(f"evaluate-{first.version}-")

    evaluated = deployment.run(EVALUATION)
    assert evaluated.success and versions.promoted().id == first.version
    assert deployment.sensor_run_requests() == []  # evaluated already: the sensor skips it
    served = deployment.served_answer()

    # A deliberately broken encoder config: every text truncated to 16 tokens.
    broken_models = ModelResource(max_length=16)
    rebuilt = deployment.run(BUILD, broken_models)
    broken = rebuilt.output_for_node("index_version").version
    assert rebuilt.success and broken != first.version
    refused = deployment.run(EVALUATION, broken_models)
    [gate] = [c for c in refused.get_asset_check_evaluations() if c.check_name == "promotion_gate"]
    assert not gate.passed and "below the promoted" in gate.metadata["reasons"].value
    # The blocking check stopped the run at the gate: the evaluation step failed on it, and
    # promoted_index never started (it was not left to refuse by itself).
    [failure] = [e for e in refused.all_events if e.is_step_failure]
    assert failure.step_key == "retrieval_evaluation"
    assert "blocking asset check failed" in failure.step_failure_data.error.message
    assert "retrieval_evaluation: promotion_gate" in failure.step_failure_data.error.message
    assert not [e for e in refused.all_events if e.step_key == "promoted_index" and e.is_step_start]
    assert not refused.asset_materializations_for_node("promoted_index")
    assert versions.promoted().id == first.version and deployment.served_answer() == served
    report = versions.version(broken).evaluation()
    assert report["gate"]["passed"] is False and report["compared_with"] == first.version
    assert report["gate"]["comparison"]["ndcg@10"]["candidate"] < report["gate"]["comparison"]["ndcg@10"]["promoted"]
    assert [e["version"] for e in versions.history() if e["event"] == "refused"] == [broken]

    # A real change (one document fewer) passes and is promoted.
    corpus = Path(deployment.catalog.path) / "corpus.jsonl"
    corpus.write_text("\n".join(corpus.read_text().splitlines()[:-2] + corpus.read_text().splitlines()[-1:]) + "\n")
    changed = deployment.run(WHOLE_BUILD)
    assert changed.success
    second = versions.promoted().id
    assert second not in (first.version, broken)
    history = [row["version"] for row in versions.quality_history()]
    assert history == [first.version, broken, second]

    rolled_back = rollback_job.execute_in_process(
        resources={"storage": deployment.storage}, instance=deployment.instance
    )
    assert rolled_back.success and versions.promoted().id == first.version
    assert deployment.served_answer() == served
    [event] = rolled_back.get_asset_materialization_events()
    assert event.asset_key == AssetKey("promoted_index")
    assert event.materialization.metadata["version"].value == first.version

    # Forward again to a named version: the job's materialization and the pointer agree.
    to_second = rollback_job.execute_in_process(
        resources={"storage": deployment.storage},
        instance=deployment.instance,
        run_config={"ops": {"rollback_promoted_version": {"config": {"to_version": second}}}},
    )
    assert to_second.success and versions.promoted().id == second
    [event] = to_second.get_asset_materialization_events()
    assert event.materialization.metadata["version"].value == second
    latest = deployment.instance.get_latest_materialization_event(AssetKey("promoted_index"))
    assert latest.asset_materialization.metadata["version"].value == versions.promoted().id


def test_definitions_schedule_freshness_sensors_and_jobs() -> None:
    graph = defs.resolve_asset_graph()
    for name in ("faiss_index", "qdrant_edge_index", "tantivy_index", "knowledge_graph", "index_version"):
        assert graph.get(AssetKey(name)).freshness_policy is not None, name
    # Promotion happens only when a candidate passes: quiet nights must not read as stale.
    assert graph.get(AssetKey("promoted_index")).freshness_policy is None
    schedules = {schedule.name: schedule for schedule in defs.schedules or []}
    assert set(schedules) == {"nightly_index_build", "weekly_run_retention"}
    nightly = schedules["nightly_index_build"]
    assert nightly.cron_schedule == "0 2 * * *" and nightly.job_name == "index_build_job"
    assert schedules["weekly_run_retention"].job_name == "run_retention_job"
    assert {sensor.name for sensor in defs.sensors} == {
        "candidate_evaluation_sensor",
        "catalog_source_sensor",
        "document_inbox_sensor",
    }
    assert candidate_evaluation_sensor.job_name == "evaluation_job"
    assert document_inbox_sensor.job_name == "document_update_job"
    for job in ("index_build_job", "evaluation_job", "document_update_job", "embedding_shards_job", "rollback_job",
                "run_retention_job"):
        assert defs.resolve_job_def(job) is not None
    # The gate's refusal fails an evaluation run; the instance's run retry must not judge it again.
    assert defs.resolve_job_def("evaluation_job").tags["dagster/max_retries"] == "0"
    build_job = defs.resolve_job_def("index_build_job")
    build_assets = {key.to_user_string() for key in build_job.asset_layer.executable_asset_keys}
    assert "index_version" in build_assets and "promoted_index" not in build_assets


def test_broken_model_config_fails_fast_naming_the_model(deployment: Deployment) -> None:
    result = deployment.run(BUILD, ModelResource(dense_model="no-such-org/no-such-model"))
    assert not result.success
    failures = [event for event in result.all_events if event.is_step_failure]
    # Every step that needs the encoder fails at load time, before any encoding or index write.
    assert {event.step_key for event in failures} == {"dense_embeddings", "index_candidate"}
    assert all("no-such-org/no-such-model" in str(event.event_specific_data.error) for event in failures)
    assert deployment.storage.versions().sealed() == [] and deployment.storage.versions().promoted() is None


def test_new_source_becomes_a_partition_and_shard_runs_fill_the_cache(deployment: Deployment, tmp_path: Path) -> None:
    sources = tmp_path / "sources"
    sources.mkdir()
    shutil.copy(TOOLS, sources / "toolshop.jsonl")
    deployment.catalog = CatalogResource(format="beir", path=deployment.catalog.path, sources_dir=str(sources))
    context = build_sensor_context(instance=deployment.instance, resources={"catalog": deployment.catalog})
    [request] = catalog_source_sensor.evaluate_tick(context).dynamic_partitions_requests
    assert request.partition_keys == ["catalog", "toolshop"]
    deployment.instance.add_dynamic_partitions(catalog_sources.name, list(request.partition_keys))

    warmed = 0
    for shard in hash_shards.get_partition_keys():
        key = MultiPartitionKey({"source": "toolshop", "shard": shard})
        result = deployment.run(AssetSelection.assets(embedding_cache_shard), partition_key=key)
        assert result.success
        [event] = result.asset_materializations_for_node("embedding_cache_shard")
        warmed += event.metadata["dense_encoded"].value
    assert warmed == len(TOOLS.read_text().splitlines())  # every tool in exactly one shard

    built = deployment.run(BUILD)
    [dense] = built.asset_materializations_for_node("dense_embeddings")
    chunks = dense.metadata["vectors"].value
    # The BEIR source was never warmed: only its chunks are encoded; the tools come from the cache.
    assert dense.metadata["encoded"].value == chunks - warmed
    # A source's name is the tenant of its records that do not name one (a few tools say "lab-b").
    tenants = set(stored_value(deployment.storage.artifacts_dir, "chunks")["tenant_id"])
    assert tenants == {"default", "toolshop", "lab-b"}


def test_unreachable_server_fails_the_build_after_retries_and_promotes_nothing(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    assert deployment.run(WHOLE_BUILD).success
    versions = deployment.storage.versions()
    promoted, served = versions.promoted(), deployment.served_answer()
    pointer = versions.pointer()

    with socket.socket() as probe:  # a port nothing listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    deployment.storage = IndexStorageResource(
        home=deployment.storage.home,
        qdrant_url=f"http://127.0.0.1:{port}",
        qdrant_api_key=QDRANT_KEY,
        server_max_retries=2,
        server_initial_backoff_s=0.05,
    )
    corpus = Path(deployment.catalog.path) / "corpus.jsonl"
    corpus.write_text("\n".join(corpus.read_text().splitlines()[1:]) + "\n")  # a real change: a new candidate
    with caplog.at_level(logging.DEBUG):
        result = deployment.run(WHOLE_BUILD)

    assert not result.success
    [failure] = [event for event in result.all_events if event.is_step_failure]
    assert failure.step_key == "server_indexes"
    error = str(failure.event_specific_data.error)
    assert "Qdrant" in error and "after 2 retries" in error
    retries = [r for r in caplog.records if r.name == "retrieval_assets.core.stores.remote"]
    assert len(retries) == 2  # backed off twice, then gave up
    assert QDRANT_KEY not in caplog.text and QDRANT_KEY not in str(failure.event_specific_data.error)
    assert [v.id for v in versions.sealed()] == [promoted.id]  # the candidate was never sealed
    assert versions.pointer() == pointer and deployment.served_answer() == served
