"""What the HTTP layer needs from the query side: the promoted version's retriever, its health and version."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from pydantic import BaseModel

from retrieval_assets.core.index.layout import IndexLayout, read_build_manifest
from retrieval_assets.core.index.versions import IndexVersions
from retrieval_assets.core.models import RetrievalResult, SearchRequest, StoreHit, Strategy
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.retrieval.searcher import BackendNotAvailableError, Searcher
from retrieval_assets.core.stores.base import FieldType
from retrieval_assets.core.stores.filters import MetadataFilter
from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore

logger = logging.getLogger(__name__)

RetrieverFactory = Callable[[], HybridRetriever]
# Errors that mean "the indexes cannot be served", as opposed to a bad request.
UNAVAILABLE_ERRORS = (BackendNotAvailableError, OSError)
# Embedded engine -> (its index directory attribute of IndexLayout, the strategy it serves).
_BACKENDS = {
    "faiss": ("faiss", Strategy.DENSE),
    "qdrant": ("qdrant", Strategy.SPLADE),
    "tantivy": ("lexical", Strategy.BM25),
}


class ServedVersion(BaseModel):
    """The promoted index version and when it was promoted (both None for a fixed, unversioned layout)."""

    version: str | None = None
    promoted_at: str | None = None


# What serves now: the layout (None while nothing is promoted) and its version.
CurrentVersion = Callable[[], tuple[IndexLayout | None, ServedVersion]]


class BackendHealth(BaseModel):
    ready: bool
    count: int | None = None  # points in the index (live for tantivy, from the build manifest otherwise)
    model: str | None = None


class Health(BaseModel):
    status: str  # "ok" when every backend is ready, "unavailable" otherwise
    version: str | None
    promoted_at: str | None
    strategies: list[str]
    backends: dict[str, BackendHealth]
    vocabulary: bool
    graph: bool
    # What ``filters`` may name: each filter field of the served version and its type (data, not
    # schema: another build may have other fields). Empty while no index is served.
    filter_fields: dict[str, FieldType] = {}
    error: str | None = None


def promoted_version(versions: IndexVersions) -> tuple[IndexLayout | None, ServedVersion]:
    pointer = versions.pointer()
    if pointer is None:
        return None, ServedVersion()
    layout = versions.version(pointer["version"]).layout
    return layout, ServedVersion(version=pointer["version"], promoted_at=pointer.get("promoted_at"))


class SearchService:
    """The retriever of whichever version is promoted when a request arrives: a promotion takes
    effect on the next request, while requests in flight finish on the version they started
    with. A separate tantivy reader answers document look-ups."""

    def __init__(
        self, open_retriever: RetrieverFactory, current: CurrentVersion, close: Callable[[], None] | None = None
    ):
        self._open = open_retriever
        self._current = current
        self._close = close
        self._lock = threading.Lock()
        self._lexical: tuple[IndexLayout, TantivyLexicalStore] | None = None

    @classmethod
    def for_searcher(cls, searcher: Searcher) -> SearchService:
        # The searcher keeps one retriever per version and opens the promoted one on demand.
        return cls(searcher.retriever, lambda: promoted_version(searcher.versions), close=searcher.close)

    @classmethod
    def for_layout(cls, open_retriever: RetrieverFactory, layout: IndexLayout) -> SearchService:
        """A fixed, unversioned layout (tests, embedding apps): the factory is called once."""
        opened: list[HybridRetriever] = []

        def retriever() -> HybridRetriever:
            if not opened:
                opened.append(open_retriever())
            return opened[0]

        def close() -> None:
            while opened:
                opened.pop().close()

        return cls(retriever, lambda: (layout, ServedVersion()), close=close)

    def retriever(self) -> HybridRetriever:
        # Under a lock: the embedded Qdrant shard allows one open handle per process.
        with self._lock:
            return self._open()

    def run(self, request: SearchRequest) -> RetrievalResult:
        return self.retriever().run(request)

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
        layout, _ = self._current()
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
        layout, served = self._current()
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
            if self._close is not None:
                self._close()
            self._lexical = None

