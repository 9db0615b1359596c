"""What the HTTP layer needs from the query side: one shared retriever, its indexes' health and version."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from retrieval_assets.core.filters import MetadataFilter
from retrieval_assets.core.models import RetrievalResult, SearchRequest, StoreHit
from retrieval_assets.core.pipeline import BUILD_MANIFEST, IndexLayout, read_build_manifest
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.search import BackendNotAvailableError
from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore

if TYPE_CHECKING:
    from retrieval_assets.orchestration.resources import SearchResource

logger = logging.getLogger(__name__)

RetrieverFactory = Callable[[], HybridRetriever]
# Errors that mean "the indexes cannot be served", as opposed to a bad request.
UNAVAILABLE_ERRORS = (BackendNotAvailableError, OSError)
# Backend -> (index directory attribute of IndexLayout, the strategy it serves).
_BACKENDS = {"faiss": ("faiss", "dense"), "qdrant": ("qdrant", "splade"), "tantivy": ("lexical", "bm25")}


class IndexVersion(BaseModel):
    """A fingerprint of the build being served. For now a hash of the three indexes' build
    manifests (content and modification time); index versioning will replace how it is computed."""

    version: str | None
    built_at: str | None


class BackendHealth(BaseModel):
    ready: bool
    count: int | None = None  # points in the index (live for tantivy, from the build manifest otherwise)
    model: str | None = None


class Health(BaseModel):
    status: str  # "ok" when every backend is ready, "unavailable" otherwise
    version: str | None
    built_at: str | None
    strategies: list[str]
    backends: dict[str, BackendHealth]
    vocabulary: bool
    graph: bool
    error: str | None = None


def index_version(layout: IndexLayout) -> IndexVersion:
    digest = hashlib.sha256()
    mtimes: list[float] = []
    for name, (attribute, _) in _BACKENDS.items():
        manifest = getattr(layout, attribute) / BUILD_MANIFEST
        if manifest.is_file():
            stat = manifest.stat()
            digest.update(f"{name}\0{stat.st_mtime_ns}\0".encode())
            digest.update(manifest.read_bytes())
            mtimes.append(stat.st_mtime)
    if not mtimes:
        return IndexVersion(version=None, built_at=None)
    built_at = datetime.fromtimestamp(max(mtimes), tz=UTC).isoformat(timespec="seconds")
    return IndexVersion(version=digest.hexdigest()[:16], built_at=built_at)


class SearchService:
    """One retriever, opened by whichever request comes first and shared by all (it is thread-safe);
    a separate tantivy reader answers document look-ups."""

    def __init__(self, open_retriever: RetrieverFactory, layout: IndexLayout, close: Callable[[], None] | None = None):
        self.layout = layout
        self._open = open_retriever
        self._close = close
        self._lock = threading.Lock()
        self._retriever: HybridRetriever | None = None
        self._lexical: TantivyLexicalStore | None = None

    @classmethod
    def from_resource(cls, search: SearchResource) -> SearchService:
        return cls(search.retriever, search.storage.layout(), close=search.close)

    def retriever(self) -> HybridRetriever:
        # Under a lock: the embedded Qdrant shard allows one open handle per process.
        with self._lock:
            if self._retriever is None:
                self._retriever = self._open()
            return self._retriever

    def run(self, request: SearchRequest) -> RetrievalResult:
        return self.retriever().run(request)

    def fetch_document(self, doc_id: str, tenant_id: str | None) -> StoreHit | None:
        """The indexed document's first chunk, only when it belongs to ``tenant_id`` (if given)."""
        lexical = self._lexical_store()
        if lexical is None:
            return None
        filters = [MetadataFilter(field="tenant_id", any_of=[tenant_id])] if tenant_id is not None else []
        found = lexical.fetch_documents([doc_id], filters)
        return found[0] if found else None

    def _lexical_store(self) -> TantivyLexicalStore | None:
        with self._lock:
            if self._lexical is None and self.layout.lexical.exists():
                try:
                    self._lexical = TantivyLexicalStore.open(self.layout.lexical)
                except UNAVAILABLE_ERRORS as exc:
                    logger.warning("cannot open the lexical index for document look-ups: %s", exc)
            return self._lexical

    def health(self) -> Health:
        error = None
        try:
            strategies = self.retriever().available_strategies
        except UNAVAILABLE_ERRORS as exc:
            strategies, error = [], str(exc)
        backends = {}
        for name, (attribute, strategy) in _BACKENDS.items():
            manifest: dict[str, Any] = read_build_manifest(getattr(self.layout, attribute))
            model = manifest.get("sparse_model" if name == "qdrant" else "dense_model")
            backends[name] = BackendHealth(ready=strategy in strategies, count=manifest.get("count"), model=model)
        lexical = self._lexical_store() if backends["tantivy"].ready else None
        if lexical is not None:
            backends["tantivy"].count = lexical.count()
        version = index_version(self.layout)
        return Health(
            status="ok" if all(b.ready for b in backends.values()) else "unavailable",
            version=version.version,
            built_at=version.built_at,
            strategies=strategies,
            backends=backends,
            vocabulary=self.layout.vocabulary.is_file(),
            graph=self.layout.graph.is_file(),
            error=error,
        )

    def close(self) -> None:
        with self._lock:
            if self._close is not None:
                self._close()
            elif self._retriever is not None:
                self._retriever.close()
            self._retriever = None
            self._lexical = None
