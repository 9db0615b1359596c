"""The build steps, shared by the Dagster assets and the bench command.

Each step is a plain function over tables so that any asset can be re-materialized alone
from the Parquet output of the one before it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from retrieval_assets.core.catalog import CatalogSource, catalog_file, load_raw_rows
from retrieval_assets.core.chunking import make_chunker
from retrieval_assets.core.cleaning import CleaningResult, CleaningStats, clean_rows
from retrieval_assets.core.embedding_cache import (
    DEFAULT_BLOCK_ROWS,
    BlockEncoder,
    CacheStats,
    EmbeddingCache,
    content_hash,
    encode_with_cache,
)
from retrieval_assets.core.encoders.base import DenseEncoder, ProgressCallback, SparseEncoder, encoder_fingerprint
from retrieval_assets.core.files import write_json
from retrieval_assets.core.models import Chunk, Document, SparseVector
from retrieval_assets.core.query.context_tokens import ContextTokenSettings, record_context_tokens
from retrieval_assets.core.query.nl_filters import author_surnames
from retrieval_assets.core.settings import ChunkingSettings
from retrieval_assets.core.stores.base import (
    REQUIRED_PAYLOAD_FIELDS,
    TAGS_FIELD,
    FieldType,
    Payload,
    infer_field_types,
)
from retrieval_assets.core.stores.faiss_store import FaissDenseStore
from retrieval_assets.core.stores.qdrant_edge_store import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy_store import FORMAT_VERSION as TANTIVY_FORMAT_VERSION
from retrieval_assets.core.stores.tantivy_store import TantivyLexicalStore
from retrieval_assets.core.tables import chunk_payloads, frame_to_raw_rows, raw_rows_to_frame, write_parquet
from retrieval_assets.core.vectors import (
    DENSE_COLUMNS,
    SPARSE_COLUMNS,
    dense_matrix,
    dense_values,
    sparse_values,
    sparse_vectors,
)


@dataclass(frozen=True)
class IndexLayout:
    """Where the embedded indexes of one build live."""

    root: Path

    @property
    def faiss(self) -> Path:
        return self.root / "faiss"

    @property
    def qdrant(self) -> Path:
        return self.root / "qdrant"

    @property
    def lexical(self) -> Path:
        return self.root / "tantivy"

    @property
    def vocabulary(self) -> Path:
        return self.root / "vocabulary.parquet"

    @property
    def graph(self) -> Path:
        return self.root / "graph.parquet"


def read_raw_catalog(source: CatalogSource) -> pd.DataFrame:
    return raw_rows_to_frame(load_raw_rows(source))


def read_raw_catalogs(sources: Sequence[CatalogSource]) -> pd.DataFrame:
    """Every line of every source; the ``source`` column says which file it came from."""
    return raw_rows_to_frame(row for source in sources for row in load_raw_rows(source))


def clean_catalog(raw: pd.DataFrame, source: CatalogSource) -> CleaningResult:
    return clean_rows(frame_to_raw_rows(raw), source.format, source.tenant_id)


def clean_catalogs(raw: pd.DataFrame, sources: Sequence[CatalogSource]) -> CleaningResult:
    """Each source's rows cleaned with its own format and tenant, the results concatenated."""
    results = []
    for source in sources:
        rows = raw[raw["source"] == str(catalog_file(source.path, source.format))]
        results.append(clean_catalog(rows, source))
    unclaimed = len(raw) - sum(r.stats.rows_in for r in results)
    if unclaimed:
        raise ValueError(f"{unclaimed} raw rows come from no configured source: re-materialize raw_catalog")
    return CleaningResult(
        documents=[d for r in results for d in r.documents],
        quarantine=[q for r in results for q in r.quarantine],
        stats=CleaningStats.combine(r.stats for r in results),
    )


def chunk_documents(documents: Sequence[Document], settings: ChunkingSettings) -> list[Chunk]:
    """Chunks with their ``content_hash``: the embedding text under this chunker config."""
    chunker = make_chunker(settings.kind, settings.window_words, settings.overlap_words)
    config = settings.model_dump_json()
    return [
        chunk.model_copy(update={"content_hash": content_hash(config, chunk.embedding_text)})
        for doc in documents
        for chunk in chunker.chunk(doc)
    ]


def _embed(
    chunks: Sequence[Chunk],
    encode_block: BlockEncoder,
    cache: EmbeddingCache,
    columns: list[str],
    progress: ProgressCallback | None,
    block_rows: int,
) -> tuple[pd.DataFrame, CacheStats]:
    keys = [c.content_hash for c in chunks]
    if not all(keys):
        raise ValueError("chunks lack a content_hash: make them with chunk_documents")
    texts = [c.embedding_text for c in chunks]
    values, stats = encode_with_cache(keys, texts, encode_block, cache, block_rows=block_rows, progress=progress)
    values.insert(0, "chunk_id", pd.Series([c.chunk_id for c in chunks], dtype="string"))
    return values[columns], stats


def embed_dense(
    chunks: Sequence[Chunk],
    encoder: DenseEncoder,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> tuple[pd.DataFrame, CacheStats]:
    """Dense vectors of every chunk; only text the cache lacks is encoded."""
    return _embed(
        chunks,
        lambda texts, report: dense_values(np.asarray(encoder.encode_documents(texts, progress=report))),
        cache,
        DENSE_COLUMNS,
        progress,
        block_rows,
    )


def embed_sparse(
    chunks: Sequence[Chunk],
    encoder: SparseEncoder,
    cache: EmbeddingCache,
    progress: ProgressCallback | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> tuple[pd.DataFrame, CacheStats]:
    """SPLADE vectors of every chunk; only text the cache lacks is encoded."""
    return _embed(
        chunks,
        lambda texts, report: sparse_values(encoder.encode_documents(texts, progress=report)),
        cache,
        SPARSE_COLUMNS,
        progress,
        block_rows,
    )


def embedding_cache(cache_root: Path, kind: str, encoder: DenseEncoder | SparseEncoder) -> EmbeddingCache:
    return EmbeddingCache(cache_root / kind, encoder_fingerprint(encoder))


def build_fingerprint(chunks: pd.DataFrame, **settings: object) -> str:
    """What a build's indexes are made of: every chunk row (text, hash, metadata) plus the
    models and index settings. Equal fingerprints mean the same indexes."""
    rows = pd.util.hash_pandas_object(chunks.sort_values("chunk_id").reset_index(drop=True), index=False)
    described = json.dumps({**settings, "tantivy_format": TANTIVY_FORMAT_VERSION}, sort_keys=True, default=str)
    return content_hash(rows.to_numpy().tobytes().hex(), described)


BUILD_MANIFEST = "build.json"
# Points per slice handed to a Qdrant or OpenSearch build.
UPSERT_ROWS = 4096
# Keyword fields with at most this many distinct values are listed as facets (e.g. venues).
MAX_FACET_VALUES = 1000


def _write_manifest(path: Path, **facts: object) -> None:
    write_json(facts, path / BUILD_MANIFEST)


def read_build_manifest(path: Path) -> dict[str, Any]:
    manifest = path / BUILD_MANIFEST
    return json.loads(manifest.read_text()) if manifest.is_file() else {}


def index_payloads(chunks: pd.DataFrame, context: ContextTokenSettings | None = None) -> list[Payload]:
    """Store payloads with the fields derived for querying: ``tags`` (context tokens such as
    ``format:DICOM``, which attached query context matches) and ``author_surnames`` (what
    "by Smith" filters on)."""
    settings = context or ContextTokenSettings()
    payloads = chunk_payloads(chunks)
    for payload in payloads:
        metadata = {k: v for k, v in payload.items() if k not in REQUIRED_PAYLOAD_FIELDS}
        tags = record_context_tokens(metadata, settings)
        if tags:
            payload[TAGS_FIELD] = tags
        authors = payload.get("authors")
        if authors:
            payload["author_surnames"] = author_surnames(authors if isinstance(authors, list) else [str(authors)])
    return payloads


def keyword_facets(payloads: Sequence[Payload], field_types: Mapping[str, FieldType]) -> dict[str, list[str]]:
    """Distinct values of each low-cardinality keyword field, for the NL filter parser."""
    values: dict[str, set[str]] = {field: set() for field, kind in field_types.items() if kind == "keyword"}
    for payload in payloads:
        for field, seen in values.items():
            value = payload.get(field)
            if value is not None and len(seen) <= MAX_FACET_VALUES:
                seen.update(str(v) for v in (value if isinstance(value, list) else [value]))
    return {field: sorted(seen) for field, seen in values.items() if 0 < len(seen) <= MAX_FACET_VALUES}


def write_vocabulary(frame: pd.DataFrame, layout: IndexLayout) -> None:
    """The vocabulary next to the indexes, where the query side reads it."""
    write_parquet(frame, layout.vocabulary)


# A slice of the points of a build: payloads with their dense and sparse vectors.
PointBatch = tuple[list[Payload], np.ndarray, list[SparseVector]]


def point_batches(
    chunks: pd.DataFrame,
    dense: pd.DataFrame,
    sparse: pd.DataFrame,
    context: ContextTokenSettings | None = None,
    rows: int = UPSERT_ROWS,
) -> tuple[dict[str, FieldType], int, Iterator[PointBatch]]:
    """What a Qdrant build (embedded or server) and an OpenSearch build write: the field types,
    the dimension, and the points in slices (SPLADE vectors are made per slice: as Python lists
    they take ~10 KB each, 1 GB for 100k chunks at once)."""
    payloads = index_payloads(chunks, context)
    ids = [p["chunk_id"] for p in payloads]
    matrix = dense_matrix(dense, ids)

    def batches() -> Iterator[PointBatch]:
        for start in range(0, len(payloads), rows):
            part = slice(start, start + rows)
            yield payloads[part], matrix[part], sparse_vectors(sparse, ids[part])

    return infer_field_types(payloads), int(matrix.shape[1]), batches()


def build_faiss_index(
    path: Path, chunks: pd.DataFrame, dense: pd.DataFrame, model_name: str, context: ContextTokenSettings | None = None
) -> FaissDenseStore:
    payloads = index_payloads(chunks, context)
    matrix = dense_matrix(dense, [p["chunk_id"] for p in payloads])
    store = FaissDenseStore.create(path, dim=matrix.shape[1], overwrite=True)
    store.upsert_dense(payloads, matrix)
    store.finalize()
    _write_manifest(path, dense_model=model_name, dim=int(matrix.shape[1]), count=store.count())
    return store


def build_qdrant_index(
    path: Path,
    chunks: pd.DataFrame,
    dense: pd.DataFrame,
    sparse: pd.DataFrame,
    dense_model: str,
    sparse_model: str,
    context: ContextTokenSettings | None = None,
) -> QdrantEdgeStore:
    field_types, dim, batches = point_batches(chunks, dense, sparse, context)
    store = QdrantEdgeStore.create(path, dim=dim, field_types=field_types, overwrite=True)
    for payloads, vectors, sparse_part in batches:
        store.upsert(payloads, dense=vectors, sparse=sparse_part)
    store.finalize()
    _write_manifest(path, dense_model=dense_model, sparse_model=sparse_model, dim=dim, count=store.count())
    return store


def build_lexical_index(
    path: Path, chunks: pd.DataFrame, context: ContextTokenSettings | None = None
) -> TantivyLexicalStore:
    payloads = index_payloads(chunks, context)
    field_types = infer_field_types(payloads)
    store = TantivyLexicalStore.create(path, field_types=field_types, overwrite=True)
    store.add(payloads)
    store.finalize()
    _write_manifest(path, count=store.count(), facets=keyword_facets(payloads, field_types))
    return store
