"""Opening index versions for querying: embedded engines, or servers for the strategies they serve."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.embed.batching import batching_dense_encoder, batching_sparse_encoder
from retrieval_assets.core.index.graph import ToolGraph
from retrieval_assets.core.index.layout import IndexLayout, read_build_manifest
from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.models import RetrievalResult, SearchRequest, Strategy
from retrieval_assets.core.retrieval.expansion import VocabularyIndex
from retrieval_assets.core.retrieval.multi_query import LLMReformulator
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.core.stores.base import KEYWORD_PAYLOAD_FIELDS, IndexStore
from retrieval_assets.core.stores.faiss_store import FaissDenseStore
from retrieval_assets.core.stores.qdrant_edge_store import (
    QdrantEdgeStore,
    ShardBusyError,
)
from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore

logger = logging.getLogger(__name__)


class BackendNotAvailableError(RuntimeError):
    """The indexes cannot be served (not built, not promoted, or incomplete)."""


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
    for label, path in (("faiss_index", layout.faiss), ("qdrant_edge_index", layout.qdrant), ("tantivy_index", layout.lexical)):
        if not path.exists():
            raise BackendNotAvailableError(f"no index at {path}: materialize the {label} asset first")
    servers = dict(server_stores or {})
    facets = read_build_manifest(layout.lexical).get("facets", {})
    nl_settings = settings.nl_filters.model_copy(
        update={"known_venues": frozenset(facets.get(settings.nl_filters.venue_field, ()))}
    )
    multi = settings.multi_query
    lexical = servers.get(Strategy.BM25)
    if lexical is None:
        lexical = TantivyLexicalStore.open(layout.lexical)
        lexical.prepare_for_queries()
    batching = settings.query_batching
    return HybridRetriever(
        dense_encoder=batching_dense_encoder(
            dense_encoder, max_wait_ms=batching.max_wait_ms, max_batch=batching.max_batch
        ),
        sparse_encoder=batching_sparse_encoder(
            sparse_encoder, max_wait_ms=batching.max_wait_ms, max_batch=batching.max_batch
        ),
        dense_store=servers.get(Strategy.DENSE) or FaissDenseStore.open(layout.faiss),
        sparse_store=servers.get(Strategy.SPLADE) or QdrantEdgeStore.open(layout.qdrant),
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
        nl_filter_settings=nl_settings,
        context_settings=settings.context_tokens,
        filterable_fields={*KEYWORD_PAYLOAD_FIELDS, *lexical.field_types},
    )


class Searcher:
    """The one query entry point over versioned indexes: the retriever of the promoted version
    (or of a named one), opened by ``open_version`` on first use and kept. Two stay open: the
    promoted one, and the one it replaced, which requests already in flight during a promotion
    finish on."""

    def __init__(self, versions: IndexVersions, open_version: Callable[[IndexVersion], HybridRetriever]) -> None:
        self.versions = versions
        self._open_version = open_version
        self._retrievers: dict[str, HybridRetriever] = {}
        self._opening = threading.Lock()  # two requests after a promotion must not both open it

    def retriever(self, version: str | None = None) -> HybridRetriever:
        """A retriever over ``version``, or over the promoted version as of this call."""
        target = self.versions.version(version) if version else self.versions.promoted()
        if target is None:
            raise BackendNotAvailableError(
                f"no index version is promoted under {self.versions.root}: build and evaluate one first "
                "(retrieval-assets run, or index_build_job then evaluation_job)"
            )
        with self._opening:
            if target.id not in self._retrievers:
                if not target.sealed:
                    raise BackendNotAvailableError(f"index version {target.id} is incomplete: re-run the index build")
                try:
                    self._retrievers[target.id] = self._open_version(target)
                except ShardBusyError:
                    if version is not None or not self._retrievers:
                        raise
                    # The run that promoted it may hold its shard a moment longer: answer from the
                    # version it replaced, and open it on a later request.
                    logger.warning("promoted version %s is still open elsewhere; serving the previous one", target.id)
                    return next(reversed(self._retrievers.values()))
                for stale in list(self._retrievers)[:-2]:
                    self._retrievers.pop(stale).close()
            return self._retrievers[target.id]

    def search(self, query: str, top_k: int = 10, filters: dict[str, Any] | None = None, **options: Any) -> RetrievalResult:
        """See ``SearchRequest`` for the options (tenant_id, strategies, fusion, rerank, expand,
        multi_query, context_files, context_metadata)."""
        return self.retriever().search(query, top_k=top_k, filters=filters, **options)

    def run(self, request: SearchRequest) -> RetrievalResult:
        return self.retriever().run(request)

    def close(self) -> None:
        while self._retrievers:
            self._retrievers.popitem()[1].close()
