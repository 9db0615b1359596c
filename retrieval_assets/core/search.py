"""Opening the current indexes for querying, embedded by default, servers when configured."""

from __future__ import annotations

from retrieval_assets.core.encoders.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.pipeline import IndexLayout
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.core.stores.faiss_store import FaissDenseStore
from retrieval_assets.core.stores.qdrant_edge_store import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore


class BackendNotAvailableError(RuntimeError):
    """A configured backend cannot be used (missing index, or no adapter for it yet)."""


def open_retriever(
    layout: IndexLayout,
    *,
    dense_encoder: DenseEncoder,
    sparse_encoder: SparseEncoder,
    settings: RetrievalSettings,
    qdrant_url: str | None = None,
    opensearch_url: str | None = None,
) -> HybridRetriever:
    """A retriever over the indexes in ``layout``; fails clearly when one has not been built."""
    for name, url in (("QDRANT_URL", qdrant_url), ("OPENSEARCH_URL", opensearch_url)):
        if url:
            raise BackendNotAvailableError(
                f"{name} is set, but the server adapters are not part of this release; unset it to use "
                "the embedded engines"
            )
    for label, path in (("faiss_index", layout.faiss), ("qdrant_index", layout.qdrant), ("lexical_index", layout.lexical)):
        if not path.exists():
            raise BackendNotAvailableError(f"no index at {path}: materialize the {label} asset first")
    qdrant = QdrantEdgeStore.open(layout.qdrant)
    return HybridRetriever(
        dense_encoder=dense_encoder,
        sparse_encoder=sparse_encoder,
        dense_store=FaissDenseStore.open(layout.faiss),
        sparse_store=qdrant,
        lexical_store=TantivyLexicalStore.open(layout.lexical),
        settings=settings,
    )
