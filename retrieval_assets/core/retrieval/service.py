"""The one search front end: the retriever of the served index version, its document look-ups, filter fields and health.

``SearchService`` is what the CLI, the HTTP API and the Dagster search resource call. It follows
the promoted version of an ``IndexVersions`` root (or serves one fixed layout) and opens each
version's ``HybridRetriever`` with ``open_retriever``: embedded engines, or servers for the
strategies they serve.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.batching import batching_dense_encoder, batching_sparse_encoder
from retrieval_assets.core.index.layout import IndexLayout, read_build_manifest
from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.models import RetrievalResult, SearchRequest, StoreHit, Strategy
from retrieval_assets.core.retrieval.expansion import VocabularyIndex
from retrieval_assets.core.retrieval.graph_expansion import ToolGraph
from retrieval_assets.core.retrieval.multi_query import LLMReformulator
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.core.stores.base import (
    KEYWORD_PAYLOAD_FIELDS,
    DenseStore,
    FieldType,
    IndexStore,
    LexicalStore,
    SparseStore,
)
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.filters import MetadataFilter
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore

logger = logging.getLogger(__name__)


class BackendNotAvailableError(RuntimeError):
    """The indexes cannot be served (not built, not promoted, or incomplete)."""


# Errors that mean "the indexes cannot be served", as opposed to a bad request.
UNAVAILABLE_ERRORS = (BackendNotAvailableError, OSError)
# Embedded engine -> (its index directory attribute of IndexLayout, the strategy it serves).
_BACKENDS = {
    "faiss": ("faiss", Strategy.DENSE),
    "qdrant": ("qdrant", Strategy.SPLADE),
    "tantivy": ("lexical", Strategy.BM25),
}
# The key of the one retriever a fixed layout serves (index version ids are never empty).
_FIXED = ""


class ServedVersion(BaseModel):
    """The promoted index version and when it was promoted (both None for a fixed, unversioned layout)."""

    version: str | None = None
    promoted_at: str | None = None


class BackendHealth(BaseModel):
    ready: bool
    count: int | None = None  # points in the index (live for tantivy, from the build manifest otherwise)
    model: str | None = None


class Health(BaseModel):
    """Readiness of the served version. ``public()`` is what a caller without a key is told."""

    status: str  # "ok" when every backend is ready, "unavailable" otherwise
    version: str | None
    promoted_at: str | None = None
    strategies: list[str] | None = None
    backends: dict[str, BackendHealth] | None = None
    vocabulary: bool | None = None
    graph: bool | None = None
    # What ``filters`` may name: each filter field of the served version and its type (data, not
    # schema: another build may have other fields). Empty while no index is served.
    filter_fields: dict[str, FieldType] | None = None
    error: str | None = None

    def public(self) -> Health:
        """Whether the service is up and which version serves; nothing about what it holds."""
        return Health(status=self.status, version=self.version)

    def without_counts(self) -> Health:
        """Counts are of every tenant's chunks: only callers who see the whole service get them."""
        backends = {name: backend.model_copy(update={"count": None}) for name, backend in (self.backends or {}).items()}
        return self.model_copy(update={"backends": backends})


def _wrong_store(strategy: Strategy, store: IndexStore) -> TypeError:
    return TypeError(f"a {type(store).__name__} cannot serve {strategy.value} search")


def open_retriever(
    layout: IndexLayout,
    *,
    dense_encoder: DenseEncoder,
    sparse_encoder: SparseEncoder,
    settings: RetrievalSettings,
    reranker: Reranker | None = None,
    llm_api_key: str | None = None,
    server_stores: Mapping[Strategy, IndexStore] | None = None,
) -> HybridRetriever:
    """A retriever over the indexes in ``layout``; fails clearly when one has not been built.

    ``server_stores`` (strategy -> store) replace the embedded engine of each strategy they
    name. The vocabulary and the tool graph are optional: without them expansion and graph
    expansion have nothing to add, and the diagnostics say so. Concurrent queries share encoder
    calls as ``settings.query_batching`` says (the encoders themselves are not changed: the
    batchers wrap them for this retriever only, and hold no thread to close).
    """
    for label, path in (
        ("faiss_index", layout.faiss),
        ("qdrant_edge_index", layout.qdrant),
        ("tantivy_index", layout.lexical),
    ):
        if not path.exists():
            raise BackendNotAvailableError(f"no index at {path}: materialize the {label} asset first")
    servers = dict(server_stores or {})
    multi = settings.multi_query
    lexical, dense, sparse = servers.get(Strategy.BM25), servers.get(Strategy.DENSE), servers.get(Strategy.SPLADE)
    if lexical is not None and not isinstance(lexical, LexicalStore):
        raise _wrong_store(Strategy.BM25, lexical)
    if dense is not None and not isinstance(dense, DenseStore):
        raise _wrong_store(Strategy.DENSE, dense)
    if sparse is not None and not isinstance(sparse, SparseStore):
        raise _wrong_store(Strategy.SPLADE, sparse)
    if lexical is None:
        lexical = TantivyLexicalStore.open(layout.lexical)
    batching = settings.query_batching
    return HybridRetriever(
        dense_encoder=batching_dense_encoder(
            dense_encoder, max_wait_ms=batching.max_wait_ms, max_batch=batching.max_batch
        ),
        sparse_encoder=batching_sparse_encoder(
            sparse_encoder, max_wait_ms=batching.max_wait_ms, max_batch=batching.max_batch
        ),
        dense_store=dense or FaissDenseStore.open(layout.faiss),
        sparse_store=sparse or QdrantEdgeStore.open_for_reading(layout.qdrant),
        lexical_store=lexical,
        settings=settings,
        vocabulary=VocabularyIndex.load(layout.vocabulary) if layout.vocabulary.is_file() else None,
        graph=ToolGraph.load(layout.graph) if layout.graph.is_file() else None,
        reranker=reranker,
        reformulator=(
            LLMReformulator(multi.llm_base_url, multi.llm_model, llm_api_key, multi.llm_timeout_s)
            if multi.llm_base_url
            else None
        ),
        context_settings=settings.context_tokens,
        known_venues=scoped_venues(read_build_manifest(layout.lexical), settings.nl_filters.venue_field),
        filterable_fields=(
            (lambda tenants: lexical.filter_fields(tenants))  # only fields the scope's chunks hold
            if isinstance(lexical, TantivyLexicalStore)
            else (lambda _: {*KEYWORD_PAYLOAD_FIELDS, *lexical.field_types})
        ),
    )


def scoped_venues(manifest: Mapping[str, Any], venue_field: str) -> Callable[[frozenset[str] | None], frozenset[str]]:
    """The venues the natural-language filter parser knows for a tenant scope (None: every
    tenant), from the lexical build manifest: only venues the scope's documents hold, so that
    "in BetaVenue" stays text for a tenant without it. A version built before venues were kept
    per tenant knows its venues for unscoped queries only, until it is rebuilt."""
    everyone = frozenset(manifest.get("facets", {}).get(venue_field, ()))
    per_tenant: dict[str, frozenset[str]] | None = None
    if "tenant_facets" in manifest:
        per_tenant = {
            tenant: frozenset(facets.get(venue_field, ())) for tenant, facets in manifest["tenant_facets"].items()
        }

    @lru_cache(maxsize=256)
    def venues(tenants: frozenset[str] | None) -> frozenset[str]:
        if tenants is None:
            return everyone
        if per_tenant is None:
            return frozenset()
        return frozenset().union(*(per_tenant.get(tenant, frozenset()) for tenant in tenants))

    return venues


class SearchService:
    """The one query entry point: the retriever of the promoted version (or of a named one),
    opened by ``open_version`` on first use and kept. A promotion takes effect on the next
    request; two retrievers stay open, the promoted one and the one it replaced, which requests
    already in flight during a promotion finish on. A separate tantivy reader answers document
    look-ups and filter fields."""

    def __init__(
        self,
        versions: IndexVersions | None,
        open_version: Callable[[IndexVersion], HybridRetriever] | None = None,
        *,
        fixed: tuple[IndexLayout, Callable[[], HybridRetriever]] | None = None,
    ) -> None:
        """Over ``versions``, opening each with ``open_version``; or, with ``versions=None``, over
        one ``fixed`` (layout, opener) pair: see ``for_layout``."""
        if (versions is None or open_version is None) == (fixed is None):
            raise TypeError("SearchService needs versions and open_version, or fixed=(layout, opener)")
        self.versions = versions
        self._open_version = open_version
        self._fixed = fixed
        self._retrievers: dict[str, HybridRetriever] = {}
        # Opening is serialised: two requests after a promotion must not both open it.
        self._lock = threading.Lock()
        self._lexical: tuple[IndexLayout, TantivyLexicalStore] | None = None

    @classmethod
    def for_layout(cls, open_retriever: Callable[[], HybridRetriever], layout: IndexLayout) -> SearchService:
        """A fixed, unversioned layout (tests, embedding apps): ``open_retriever`` is called once."""
        return cls(None, fixed=(layout, open_retriever))

    def retriever(self, version: str | None = None) -> HybridRetriever:
        """A retriever over ``version``, or over the promoted version as of this call."""
        if self._fixed is not None:
            with self._lock:
                if _FIXED not in self._retrievers:
                    self._retrievers[_FIXED] = self._fixed[1]()
                return self._retrievers[_FIXED]
        assert self.versions is not None and self._open_version is not None
        target = self.versions.version(version) if version else self.versions.promoted()
        if target is None:
            raise BackendNotAvailableError(
                f"no index version is promoted under {self.versions.root}: build and evaluate one first "
                "(retrieval-assets run, or index_build_job then evaluation_job)"
            )
        with self._lock:
            if target.id not in self._retrievers:
                if not target.sealed:
                    raise BackendNotAvailableError(f"index version {target.id} is incomplete: re-run the index build")
                self._retrievers[target.id] = self._open_version(target)
                for stale in list(self._retrievers)[:-2]:
                    self._retrievers.pop(stale).close()
            return self._retrievers[target.id]

    def search(
        self, query: str, top_k: int = 10, filters: dict[str, Any] | None = None, **options: Any
    ) -> RetrievalResult:
        """See ``SearchRequest`` for the options (tenant_id, strategies, fusion, rerank, expand,
        multi_query, context_files, context_metadata)."""
        return self.retriever().search(query, top_k=top_k, filters=filters, **options)

    def run(self, request: SearchRequest) -> RetrievalResult:
        return self.retriever().run(request)

    def served(self) -> tuple[IndexLayout | None, ServedVersion]:
        """What serves now: the layout (None while nothing is promoted) and its version."""
        if self._fixed is not None:
            return self._fixed[0], ServedVersion()
        assert self.versions is not None
        pointer = self.versions.pointer()
        if pointer is None:
            return None, ServedVersion()
        layout = self.versions.version(pointer["version"]).layout
        return layout, ServedVersion(version=pointer["version"], promoted_at=pointer.get("promoted_at"))

    def fetch_document(self, doc_id: str, tenant_id: str | Collection[str] | None) -> StoreHit | None:
        """The indexed document's first chunk, only when it belongs to ``tenant_id`` (or to one of
        several tenants; any tenant if None)."""
        lexical = self._lexical_store()
        if lexical is None:
            return None
        filters = []
        if tenant_id is not None:
            tenants = [tenant_id] if isinstance(tenant_id, str) else sorted(tenant_id)
            filters.append(MetadataFilter(field="tenant_id", any_of=tenants))
        found = lexical.fetch_documents([doc_id], filters)
        return found[0] if found else None

    def filter_fields(self, tenants: Collection[str] | None = None) -> dict[str, FieldType] | None:
        """The served version's filter fields and their types (the identifiers are keywords); with
        ``tenants``, only those their documents have; None while no lexical index is served."""
        lexical = self._lexical_store()
        return None if lexical is None else lexical.filter_fields(tenants)

    def _lexical_store(self) -> TantivyLexicalStore | None:
        layout, _ = self.served()
        with self._lock:
            if layout is not None and (self._lexical is None or self._lexical[0] != layout) and layout.lexical.exists():
                try:
                    self._lexical = (layout, TantivyLexicalStore.open(layout.lexical))
                except UNAVAILABLE_ERRORS as exc:
                    logger.warning("cannot open the lexical index for document look-ups: %s", exc)
            return self._lexical[1] if self._lexical and self._lexical[0] == layout else None

    def health(self) -> Health:
        error = None
        try:
            strategies = self.retriever().available_strategies
        except UNAVAILABLE_ERRORS as exc:
            strategies, error = [], str(exc)
        layout, served = self.served()
        backends = {}
        for name, (attribute, strategy) in _BACKENDS.items():
            manifest: dict[str, Any] = read_build_manifest(getattr(layout, attribute)) if layout else {}
            model = manifest.get("sparse_model" if name == "qdrant" else "dense_model")
            backends[name] = BackendHealth(ready=strategy in strategies, count=manifest.get("count"), model=model)
        lexical = self._lexical_store() if backends["tantivy"].ready else None
        if lexical is not None:
            backends["tantivy"].count = lexical.count()
        return Health(
            status="ok" if all(b.ready for b in backends.values()) else "unavailable",
            version=served.version,
            promoted_at=served.promoted_at,
            strategies=strategies,
            backends=backends,
            vocabulary=layout is not None and layout.vocabulary.is_file(),
            graph=layout is not None and layout.graph.is_file(),
            filter_fields=lexical.filter_fields() if lexical is not None else {},
            error=error,
        )

    def close(self) -> None:
        with self._lock:
            while self._retrievers:
                self._retrievers.popitem()[1].close()
            self._lexical = None
