"""The Dagster code location: every asset, check, resource, job and schedule, assembled once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from dagster import Definitions, EnvVar, build_resources, load_assets_from_modules

from retrieval_assets.orchestration.assets import embeddings, evaluation, graph, indexes, ingestion
from retrieval_assets.orchestration.io_manager import ParquetIOManager
from retrieval_assets.orchestration.jobs import (
    BUILD,
    EVALUATION,
    embedding_shards_job,
    evaluation_job,
    index_build_job,
    nightly_index_build,
    rollback_job,
)
from retrieval_assets.orchestration.resources import (
    CatalogResource,
    ChunkingResource,
    IndexBuildResource,
    IndexStorageResource,
    ModelResource,
    PromotionGateResource,
    SearchResource,
)
from retrieval_assets.orchestration.sensors import candidate_evaluation_sensor, catalog_source_sensor


def _env_or_none(name: str) -> EnvVar | None:
    """Server settings and secrets come from the environment, and only when set."""
    return EnvVar(name) if os.environ.get(name) else None


def code_location_resources() -> dict[str, object]:
    storage = IndexStorageResource(
        qdrant_url=_env_or_none("QDRANT_URL"),
        qdrant_api_key=_env_or_none("QDRANT_API_KEY"),
        qdrant_ca_certs=_env_or_none("QDRANT_CA_CERTS"),
        opensearch_url=_env_or_none("OPENSEARCH_URL"),
        opensearch_user=_env_or_none("OPENSEARCH_USER"),
        opensearch_password=_env_or_none("OPENSEARCH_PASSWORD"),
        opensearch_api_key=_env_or_none("OPENSEARCH_API_KEY"),
        opensearch_ca_certs=_env_or_none("OPENSEARCH_CA_CERTS"),
        # Not secrets: plain settings read once.
        opensearch_verify_certs=os.environ.get("OPENSEARCH_VERIFY_CERTS", "true").lower() not in ("0", "false", "no"),
        opensearch_replicas=int(os.environ.get("OPENSEARCH_REPLICAS", "1")),
        opensearch_snapshot_repository=_env_or_none("OPENSEARCH_SNAPSHOT_REPOSITORY"),
    )
    models = ModelResource()
    return {
        "catalog": CatalogResource(),
        "chunking": ChunkingResource(),
        "models": models,
        "storage": storage,
        "build": IndexBuildResource(),
        "gate": PromotionGateResource(),
        "search": SearchResource(
            storage=storage,
            models=models,
            llm_base_url=_env_or_none("RETRIEVAL_LLM_BASE_URL"),
            llm_api_key=_env_or_none("RETRIEVAL_LLM_API_KEY"),
        ),
        "parquet_io_manager": ParquetIOManager(base_dir=str(storage.artifacts_dir)),
    }


@contextmanager
def configured_storage() -> Iterator[IndexStorageResource]:
    """The code location's storage resource with its EnvVar fields (server secrets) resolved."""
    with build_resources({"storage": defs.resources["storage"]}) as built:
        yield built.storage


@contextmanager
def configured_search() -> Iterator[SearchResource]:
    """The code location's search resource with its EnvVar fields resolved, as a run sees it
    (read straight from ``defs.resources`` they hold the variables' names, not their values)."""
    with build_resources({"search": defs.resources["search"]}) as built:
        yield built.search


ASSETS = load_assets_from_modules([ingestion, embeddings, indexes, graph, evaluation])
# Build, evaluation and promotion in one run: every asset but the partitioned cache warm-up.
WHOLE_BUILD = BUILD | EVALUATION

defs = Definitions(
    assets=ASSETS,
    jobs=[index_build_job, evaluation_job, embedding_shards_job, rollback_job],
    schedules=[nightly_index_build],
    sensors=[candidate_evaluation_sensor, catalog_source_sensor],
    resources=code_location_resources(),
)
