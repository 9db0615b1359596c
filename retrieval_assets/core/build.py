"""An incremental build of one candidate index version, in plain Python.

The Dagster assets run these same steps one asset at a time; ``build_candidate`` runs them in
a row for the bench commands and the tests. A build whose fingerprint matches a complete
version reuses it; otherwise unchanged text takes its vectors from the embedding cache and
every index of the new version is written from the current chunks, so removed documents
disappear from all of them.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from retrieval_assets.core import pipeline
from retrieval_assets.core.catalog import CatalogSource
from retrieval_assets.core.embedding_cache import CacheStats
from retrieval_assets.core.encoders.base import DenseEncoder, ProgressCallback, SparseEncoder, encoder_fingerprint
from retrieval_assets.core.graph import GraphBuild, collect_tool_graph, edge_violations, save_edges
from retrieval_assets.core.models import Document
from retrieval_assets.core.query.context_tokens import ContextTokenSettings
from retrieval_assets.core.settings import PipelineSettings, VocabularySettings
from retrieval_assets.core.stores.faiss_store import FaissDenseStore
from retrieval_assets.core.stores.qdrant_edge_store import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore
from retrieval_assets.core.tables import chunks_to_frame
from retrieval_assets.core.versions import IndexVersion, IndexVersions
from retrieval_assets.core.vocabulary import build_vocabulary, term_key

# (stage label) -> progress callback; lets the CLI show tqdm bars and Dagster write log lines.
ProgressFactory = Callable[[str], ProgressCallback | None]


class IndexConsistencyError(RuntimeError):
    """The backends of a version do not hold exactly the chunks it was built from."""


def candidate_fingerprint(
    chunks: pd.DataFrame,
    dense_encoder: DenseEncoder,
    sparse_encoder: SparseEncoder,
    vocabulary: VocabularySettings,
    graph_domain_fields: tuple[str, ...] | list[str],
    context_tokens: ContextTokenSettings,
) -> str:
    return pipeline.build_fingerprint(
        chunks,
        dense=encoder_fingerprint(dense_encoder),
        sparse=encoder_fingerprint(sparse_encoder),
        vocabulary=vocabulary.model_dump(),
        graph_domain_fields=list(graph_domain_fields),
        context_tokens=context_tokens.model_dump(mode="json"),
    )


def backend_chunk_ids(version: IndexVersion) -> dict[str, set[str]]:
    """The chunk ids each embedded backend of ``version`` holds."""
    layout = version.layout
    held = {}
    for name, store_type, path in (
        ("faiss", FaissDenseStore, layout.faiss),
        ("qdrant", QdrantEdgeStore, layout.qdrant),
        ("tantivy", TantivyLexicalStore, layout.lexical),
    ):
        with store_type.open(path) as store:
            held[name] = store.chunk_ids()
    return held


def backend_differences(held: Mapping[str, set[str]], expected: set[str]) -> dict[str, dict[str, int]]:
    """Per backend: how many of the expected chunks it lacks and how many others it holds."""
    return {name: {"missing": len(expected - ids), "unexpected": len(ids - expected)} for name, ids in held.items()}


def disagreeing_backends(differences: Mapping[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """The backends of ``backend_differences`` that lack a chunk or hold one too many."""
    return {name: diff for name, diff in differences.items() if any(diff.values())}


def seal_candidate(
    versions: IndexVersions,
    version: IndexVersion,
    fingerprint: str,
    chunks: pd.DataFrame,
    held: Mapping[str, set[str]],
    **facts: Any,
) -> dict[str, Any]:
    """Mark ``version`` complete once every backend in ``held`` (backend -> the chunk ids it
    holds) holds exactly the build's chunk ids."""
    expected = set(chunks["chunk_id"])
    broken = disagreeing_backends(backend_differences(held, expected))
    if broken:
        raise IndexConsistencyError(f"version {version.id}: backends disagree with the chunks: {broken}")
    return versions.seal(version, fingerprint, chunks=len(expected), documents=int(chunks["doc_id"].nunique()), **facts)


def graph_violations(graph: GraphBuild, documents: list[Document]) -> dict[str, int]:
    return edge_violations(graph.edges, {doc.doc_id: doc.tenant_id for doc in documents})


def publish_graph(graph: GraphBuild, documents: list[Document], path: Path) -> dict[str, int]:
    """Write the tool graph to ``path``; a graph with an edge that names an unknown tool or
    crosses tenants is not served at all (no graph, no expansion). Returns the violations."""
    violations = graph_violations(graph, documents)
    if any(violations.values()):
        path.unlink(missing_ok=True)
    else:
        save_edges(graph.edges, path)
    return violations


@dataclass
class BuildResult:
    version: IndexVersion
    reused: bool  # a complete version with the same fingerprint existed: nothing was built
    documents: int
    quarantined: int
    chunks: int
    encoded: dict[str, CacheStats] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def reembedded_chunks(self) -> int:
        """Chunk texts sent to the dense encoder (the sparse one sees the same set)."""
        return self.encoded["dense"].encoded if "dense" in self.encoded else 0


def build_candidate(
    source: CatalogSource,
    versions: IndexVersions,
    cache_root: Path,
    dense_encoder: DenseEncoder,
    sparse_encoder: SparseEncoder,
    settings: PipelineSettings,
    progress: ProgressFactory = lambda _: None,
) -> BuildResult:
    seconds: dict[str, float] = {}
    started = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal started
        now = time.perf_counter()
        seconds[stage] = round(now - started, 3)
        started = now

    cleaned = pipeline.clean_catalog(pipeline.read_raw_catalog(source), source)
    chunks = pipeline.chunk_documents(cleaned.documents, settings.chunking)
    chunk_frame = chunks_to_frame(chunks)
    context = settings.retrieval.context_tokens
    fingerprint = candidate_fingerprint(
        chunk_frame, dense_encoder, sparse_encoder, settings.vocabulary, settings.graph_domain_fields, context
    )
    version = versions.candidate(fingerprint)
    result = BuildResult(
        version, version.sealed, len(cleaned.documents), len(cleaned.quarantine), len(chunks), seconds=seconds
    )
    lap("clean_and_chunk")
    if result.reused:
        return result

    layout = version.layout
    graph = collect_tool_graph(cleaned.documents, domain_fields=settings.graph_domain_fields)
    publish_graph(graph, cleaned.documents, layout.graph)
    del cleaned, graph  # the chunks carry what the rest needs; a large catalog should not be held twice
    lap("graph")
    dense_cache = pipeline.embedding_cache(cache_root, "dense", dense_encoder)
    sparse_cache = pipeline.embedding_cache(cache_root, "sparse", sparse_encoder)
    terms_cache = pipeline.embedding_cache(cache_root, "terms", dense_encoder)
    block = settings.embedding_block_rows
    dense, result.encoded["dense"] = pipeline.embed_dense(chunks, dense_encoder, dense_cache, progress("dense"), block)
    sparse, result.encoded["sparse"] = pipeline.embed_sparse(
        chunks, sparse_encoder, sparse_cache, progress("sparse"), block
    )
    lap("embed")
    vocabulary, result.encoded["vocabulary"] = build_vocabulary(
        chunks, dense_encoder, settings.vocabulary, terms_cache, progress("vocabulary")
    )
    del chunks  # from here on the chunk table is enough
    pipeline.write_vocabulary(vocabulary, layout)
    terms_cache.compact(list(map(term_key, vocabulary["term"])))
    lap("vocabulary")
    # The qdrant-edge build takes the most memory (segment merges map old and new segments),
    # so it runs while the least else is held, and the SPLADE table goes right after it.
    gc.collect()
    pipeline.build_qdrant_index(
        layout.qdrant, chunk_frame, dense, sparse, dense_encoder.model_name, sparse_encoder.model_name, context
    ).close()
    sparse_cache.compact(list(sparse["content_hash"]))
    del sparse
    lap("qdrant_index")
    for store in (
        pipeline.build_faiss_index(layout.faiss, chunk_frame, dense, dense_encoder.model_name, context),
        pipeline.build_lexical_index(layout.lexical, chunk_frame, context),
    ):
        store.close()
    lap("faiss_and_tantivy")
    seal_candidate(versions, version, fingerprint, chunk_frame, backend_chunk_ids(version))
    dense_cache.compact(list(dense["content_hash"]))
    lap("seal")
    return result
