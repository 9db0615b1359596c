"""Opening one index version for querying: embedded engines, or servers for the roles they serve."""

from __future__ import annotations

from collections.abc import Mapping

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.index.graph import ToolGraph
from retrieval_assets.core.index.layout import IndexLayout, read_build_manifest
from retrieval_assets.core.retrieval.rerank.base import Reranker
from retrieval_assets.core.retrieval.expansion import VocabularyIndex
from retrieval_assets.core.retrieval.multi_query import LLMReformulator
from retrieval_assets.core.retrieval.retriever import HybridRetriever
from retrieval_assets.core.settings import RetrievalSettings
from retrieval_assets.core.stores.base import KEYWORD_PAYLOAD_FIELDS, IndexStore
from retrieval_assets.core.stores.faiss_store import FaissDenseStore
from retrieval_assets.core.stores.qdrant_edge_store import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore


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
    server_stores: Mapping[str, IndexStore] | None = None,
) -> HybridRetriever:
    """A retriever over the indexes in ``layout``; fails clearly when one has not been built.

    ``server_stores`` (role -> store: ``dense``, ``sparse``, ``lexical``) replace the embedded
    engine of each role they name. The vocabulary and the tool graph are optional: without
    them expansion and graph expansion have nothing to add, and the diagnostics say so.
    """
    for label, path in (("faiss_index", layout.faiss), ("qdrant_index", layout.qdrant), ("lexical_index", layout.lexical)):
        if not path.exists():
            raise BackendNotAvailableError(f"no index at {path}: materialize the {label} asset first")
    servers = dict(server_stores or {})
    facets = read_build_manifest(layout.lexical).get("facets", {})
    nl_settings = settings.nl_filters.model_copy(
        update={"known_venues": frozenset(facets.get(settings.nl_filters.venue_field, ()))}
    )
    multi = settings.multi_query
    lexical = servers.get("lexical") or TantivyLexicalStore.open(layout.lexical)
    return HybridRetriever(
        dense_encoder=dense_encoder,
        sparse_encoder=sparse_encoder,
        dense_store=servers.get("dense") or FaissDenseStore.open(layout.faiss),
        sparse_store=servers.get("sparse") or QdrantEdgeStore.open(layout.qdrant),
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
