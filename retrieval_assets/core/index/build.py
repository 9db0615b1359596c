"""Index steps: name a candidate version by its fingerprint, write FAISS, qdrant-edge and
tantivy indexes into it, and seal it once every backend holds exactly the build's chunks.

The ``index`` assets call these one at a time; nothing else builds an index.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder, encoder_fingerprint
from retrieval_assets.core.embed.cache import content_hash
from retrieval_assets.core.faults import fault_point
from retrieval_assets.core.index.facets import FacetCounts, keyword_fields
from retrieval_assets.core.index.graph import GraphBuild, edge_violations, save_edges
from retrieval_assets.core.index.layout import IndexLayout, write_build_manifest
from retrieval_assets.core.index.points import PointTables
from retrieval_assets.core.index.versions import IndexVersion, IndexVersions
from retrieval_assets.core.io.files import write_json
from retrieval_assets.core.io.parted import PartedTable
from retrieval_assets.core.io.tables import ROW_HASH, chunk_payloads, chunk_row_hashes, write_parquet
from retrieval_assets.core.models import SparseVector, chunk_document
from retrieval_assets.core.query.context_tokens import ContextTokenSettings, record_context_tokens
from retrieval_assets.core.query.nl_filters import author_surnames
from retrieval_assets.core.settings import DenseIndexSettings, VocabularySettings
from retrieval_assets.core.stores.base import (
    REQUIRED_PAYLOAD_FIELDS,
    TAGS_FIELD,
    FieldType,
    Payload,
    Stemmer,
    field_kinds,
    field_types_from_kinds,
    infer_field_types,
)
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy.store import FORMAT_VERSION as TANTIVY_FORMAT_VERSION
from retrieval_assets.core.stores.tantivy.store import MAX_OPEN_WRITERS, TantivyLexicalStore

# Points per slice handed to a Qdrant or OpenSearch build.
UPSERT_ROWS = 4096
# Chunks a full tantivy build makes payloads for at once (payload dicts took ~3.5 KB each).
LEXICAL_SLICE_ROWS = 50_000
# Chunks per slice of a full FAISS build (an HNSW graph takes its points in large batches best).
FAISS_SLICE_ROWS = 16_384
# Vectors an IVF index's k-means sees per cell (FAISS warns below 39, samples down above 256):
# 1M vectors, 4,096 cells: training took 51.5 s on 2 cores (scale.md).
IVF_TRAINING_POINTS_PER_LIST = 64
# Beside each embedded backend's index: the count and digest of the chunk ids its step listed.
LISTED_CHUNK_IDS = "listed_chunk_ids.json"


CHUNK_TABLE_COLUMNS = ["chunk_id", "doc_id", "row_hash"]


def chunk_table(chunks: pd.DataFrame) -> pd.DataFrame:
    """Each chunk's id, document and a hash of its whole row as indexed (text, hash, metadata):
    a version keeps it, and the next build diffs its chunks against it. A chunks frame read with
    its ``ROW_HASH`` column (the chunks asset keeps one) is not hashed again."""
    hashes = chunks[ROW_HASH].to_numpy() if ROW_HASH in chunks else chunk_row_hashes(chunks)
    return pd.DataFrame(
        {"chunk_id": chunks["chunk_id"].to_numpy(), "doc_id": chunks["doc_id"].to_numpy(), "row_hash": hashes}
    )


def _described(settings: Mapping[str, object]) -> str:
    return json.dumps({**settings, "tantivy_format": TANTIVY_FORMAT_VERSION}, sort_keys=True, default=str)


def build_fingerprint(table: pd.DataFrame, **settings: object) -> str:
    """What a build's indexes are made of: every chunk row (its ``chunk_table``: text, hash,
    metadata) plus the models and index settings. Equal fingerprints mean the same indexes."""
    rows = table.sort_values("chunk_id")["row_hash"]
    return content_hash(rows.to_numpy().tobytes().hex(), _described(settings))


def settings_fingerprint(**settings: object) -> str:
    """The models and index settings of a build without its chunks: a delta build starts only
    from a version with the same ones."""
    return content_hash(_described(settings))


def candidate_fingerprints(
    table: pd.DataFrame,
    dense_encoder: DenseEncoder,
    sparse_encoder: SparseEncoder,
    vocabulary: VocabularySettings,
    graph_domain_fields: tuple[str, ...] | list[str],
    context_tokens: ContextTokenSettings,
    lexical_stemmer: Stemmer = "english",
    dense_index: DenseIndexSettings | None = None,
) -> tuple[str, str]:
    """The build fingerprint (the version's name) of a ``chunk_table`` and the settings fingerprint."""
    dense_index = dense_index or DenseIndexSettings()
    settings = {
        "dense": encoder_fingerprint(dense_encoder),
        "sparse": encoder_fingerprint(sparse_encoder),
        "vocabulary": vocabulary.model_dump(),
        "graph_domain_fields": list(graph_domain_fields),
        "context_tokens": context_tokens.model_dump(mode="json"),
        # Named only when not the default, so versions built before the setting keep their names.
        **({"lexical_stemmer": lexical_stemmer} if lexical_stemmer != "english" else {}),
        # Named only for an approximate index: an exact version's name does not depend on the
        # approximate index's settings, and crossing the threshold changes the settings, so no
        # delta mixes the two.
        **(
            {"dense_index": dense_index.model_dump(exclude={"approximate_from_chunks"})}
            if dense_index.index_type(len(table)) != "flat"
            else {}
        ),
    }
    return build_fingerprint(table, **settings), settings_fingerprint(**settings)


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


def write_vocabulary(frame: pd.DataFrame, counts: pd.DataFrame, layout: IndexLayout) -> None:
    """The vocabulary next to the indexes, where the query side reads it, and every term's
    counts, which the next delta build updates."""
    write_parquet(counts, layout.vocabulary_counts)
    write_parquet(frame, layout.vocabulary)
    fault_point("vocabulary")


# A slice of the points of a build: payloads with their dense and sparse vectors.
PointBatch = tuple[list[Payload], np.ndarray, list[SparseVector]]


def point_batches(
    tables: PointTables, context: ContextTokenSettings | None = None, rows: int = UPSERT_ROWS
) -> tuple[dict[str, FieldType], int, Iterator[PointBatch]]:
    """What a Qdrant build (embedded or server) and an OpenSearch build write: the field types,
    the dimension, and the points in slices. Payloads and vectors are made per slice (200k ACL
    chunks' payloads took 700 MB held at once; a SPLADE vector as Python lists ~10 KB). The
    field types are read from a first pass over the payloads, made again for the points."""
    field_types = infer_field_types(
        payload for part in tables.chunks(rows) for payload in index_payloads(part, context)
    )

    def batches() -> Iterator[PointBatch]:
        for part, matrix, sparse in tables.slices(rows):
            if sparse is None:
                raise ValueError("a Qdrant or OpenSearch build needs the sparse embeddings table")
            yield index_payloads(part, context), matrix, sparse

    return field_types, tables.dim, batches()


def build_faiss_index(
    path: Path,
    tables: PointTables,
    model_name: str,
    context: ContextTokenSettings | None = None,
    dense_index: DenseIndexSettings | None = None,
) -> FaissDenseStore:
    """A new FAISS index of every chunk: the exact scan, or an approximate one (IVF or HNSW)
    from ``approximate_from_chunks`` on."""
    dense_index = dense_index or DenseIndexSettings()
    lists = dense_index.lists_for(tables.count)
    store = FaissDenseStore.create(
        path,
        dim=tables.dim,
        index_type=dense_index.index_type(tables.count),
        hnsw_m=dense_index.hnsw_m,
        ef_construction=dense_index.hnsw_ef_construction,
        ef_search=dense_index.hnsw_ef_search,
        ivf_lists=lists,
        ivf_probes=dense_index.ivf_probes,
        ivf_vectors=dense_index.ivf_vectors,
        overwrite=True,
    )
    if store.index_type == "ivf" and tables.count:
        store.train(training_sample(tables, IVF_TRAINING_POINTS_PER_LIST * lists))
    # Written a slice at a time: payload dicts took ~3.5 KB each, 700 MB for 200k ACL chunks at once.
    points = ((index_payloads(part, context), matrix) for part, matrix, _ in tables.slices(FAISS_SLICE_ROWS))
    return write_faiss_points(store, points, model_name)


def training_sample(tables: PointTables, count: int, seed: int = 0) -> np.ndarray:
    """About ``count`` of the tables' dense vectors, drawn at random from every slice (the table's
    order follows its sources, so its head alone would train cells on some of them only)."""
    rng = np.random.default_rng(seed)
    share = min(1.0, count / max(tables.count, 1))
    return np.concatenate([matrix[rng.random(len(matrix)) < share] for matrix in tables.dense(FAISS_SLICE_ROWS)])


def write_faiss_points(
    store: FaissDenseStore,
    points: Iterable[tuple[list[Payload], np.ndarray]],
    model_name: str,
    **facts: object,
) -> FaissDenseStore:
    """Upsert ``points`` (payloads with their vectors, in slices) into ``store`` (new, or a delta's
    copy of the base), save it and its build manifest."""
    for payloads, matrix in points:
        if payloads:
            store.upsert_dense(payloads, matrix)
    fault_point("faiss_index")
    store.finalize()
    write_build_manifest(
        store.directory,
        dense_model=model_name,
        dim=store.dim,
        count=store.count(),
        index_type=store.index_type,
        tombstones=store.tombstones,
        **facts,
    )
    return store


def build_qdrant_index(
    path: Path,
    tables: PointTables,
    dense_model: str,
    sparse_model: str,
    context: ContextTokenSettings | None = None,
) -> QdrantEdgeStore:
    field_types, dim, batches = point_batches(tables, context)
    # Serving searches this shard's SPLADE vectors only (FAISS answers dense queries), so its
    # dense vectors get no HNSW graph (m = 0): building one took most of the step's time, 88 s
    # against 10 s for 30k points, and a search of them, which nothing asks for, scans.
    store = QdrantEdgeStore.create(path, dim=dim, field_types=field_types, hnsw_m=0, overwrite=True)
    return write_qdrant_points(store, batches, dense_model, sparse_model)


def write_qdrant_points(
    store: QdrantEdgeStore,
    batches: Iterator[PointBatch],
    dense_model: str,
    sparse_model: str,
    defer_optimizing: bool = False,
    **facts: object,
) -> QdrantEdgeStore:
    """Upsert points into ``store`` (new, or a delta's copy of the base), optimise it (a delta's
    few points may wait, ``QdrantEdgeStore.finalize``) and write its build manifest."""
    for payloads, vectors, sparse_part in batches:
        store.upsert(payloads, dense=vectors, sparse=sparse_part)
        fault_point("qdrant_edge_index")
    store.finalize(defer_optimizing=defer_optimizing)
    write_build_manifest(
        store.directory, dense_model=dense_model, sparse_model=sparse_model, dim=store.dim, count=store.count(), **facts
    )
    return store


def build_lexical_index(
    path: Path,
    chunks: PartedTable | pd.DataFrame,
    context: ContextTokenSettings | None = None,
    stemmer: Stemmer = "english",
) -> TantivyLexicalStore:
    """A new tantivy index of every chunk, each tenant's in the table's order. Payloads are made
    a slice at a time, twice: first for their field kinds, which fix the index's schema, then to
    be written, in one pass per ``MAX_OPEN_WRITERS`` tenants, so that each tenant's writer opens
    once (as when one batch held every payload: a 1M build that did peaked at 8.2 GB)."""
    kinds = field_kinds(payload for part in _chunk_slices(chunks) for payload in index_payloads(part, context))
    tenants = sorted(_tenant_ids(chunks))
    groups = [tenants[start : start + MAX_OPEN_WRITERS] for start in range(0, len(tenants), MAX_OPEN_WRITERS)]
    batches = (
        (index_payloads(part, context), None)
        for group in groups
        for part in _chunk_slices(chunks, None if len(groups) == 1 else group)
    )
    return write_lexical_index(path, batches, kinds, tenants, stemmer)


def write_lexical_index(
    path: Path,
    batches: Iterable[tuple[list[Payload], Sequence[str | None] | None]],
    kinds: dict[str, dict[str, int]],
    tenants: Collection[str],
    stemmer: Stemmer = "english",
    **facts: object,
) -> TantivyLexicalStore:
    """A new tantivy index of ``tenants``' chunks, from ``batches`` of payloads with their JSON
    text where the caller has it (None: encoded here), each chunk once, whose ``field_kinds``
    are ``kinds``; with its build manifest (``write_lexical_manifest``)."""
    field_types = field_types_from_kinds(kinds)
    store = TantivyLexicalStore.create(path, field_types=field_types, stemmer=stemmer, tenants=tenants, overwrite=True)
    facet_counts, fields = FacetCounts(), keyword_fields(field_types)
    for payloads, encoded in batches:
        store.add(payloads, encoded, new=True)
        facet_counts.add(payloads, fields)
    fault_point("tantivy_index")
    store.finalize()
    write_lexical_manifest(store, facet_counts, kinds, **facts)
    return store


def _chunk_slices(chunks: PartedTable | pd.DataFrame, tenants: Collection[str] | None = None) -> Iterator[pd.DataFrame]:
    """The chunk rows (only ``tenants``' where given), in order, ``LEXICAL_SLICE_ROWS`` at a time."""
    if isinstance(chunks, pd.DataFrame):
        frame = chunks if tenants is None else chunks[chunks["tenant_id"].astype(str).isin(tenants)]
        for start in range(0, len(frame), LEXICAL_SLICE_ROWS):
            yield frame.iloc[start : start + LEXICAL_SLICE_ROWS]
        return
    wanted = None if tenants is None else pa.array(sorted(tenants), pa.large_string())
    for part in chunks.row_slices(LEXICAL_SLICE_ROWS):
        if wanted is not None:
            part = part.filter(pc.is_in(part["tenant_id"].cast(pa.large_string()), wanted))
        yield part.to_pandas()


def _tenant_ids(chunks: PartedTable | pd.DataFrame) -> set[str]:
    if isinstance(chunks, pd.DataFrame):
        return set(chunks["tenant_id"].astype(str).unique().tolist())
    return {str(tenant) for tenant in pc.unique(chunks.column("tenant_id")).to_pylist()}


def write_lexical_manifest(
    store: TantivyLexicalStore, facet_counts: FacetCounts, kinds: dict[str, dict[str, int]], **facts: object
) -> None:
    """The build manifest of a tantivy index: the facets of its payloads (``facet_counts``, saved
    beside it for the next delta), overall and per tenant, and the payloads' ``field_kinds``,
    from which a later delta build derives its filter field types without reading every payload."""
    facets, tenant_facets = facet_counts.facets(keyword_fields(field_types_from_kinds(kinds)))
    facet_counts.save(store.directory)
    write_build_manifest(
        store.directory, count=store.count(), facets=facets, tenant_facets=tenant_facets, field_kinds=kinds, **facts
    )


class IndexConsistencyError(RuntimeError):
    """The backends of a version do not hold exactly the chunks it was built from."""


def sealed_chunk_ids(version: IndexVersion) -> set[str] | None:
    """The chunk ids a sealed version holds, from the chunk table written when its backends were
    checked; None when it is not sealed or predates the table. Reading them opens no store: a
    qdrant-edge shard opens in one process at a time, and a sealed version may be being served."""
    if not (version.sealed and version.layout.chunks.is_file()):
        return None
    return set(pd.read_parquet(version.layout.chunks, columns=["chunk_id"])["chunk_id"].tolist())


def _embedded_backends(
    layout: IndexLayout,
) -> tuple[tuple[str, type[FaissDenseStore | QdrantEdgeStore | TantivyLexicalStore], Path], ...]:
    return (
        ("faiss", FaissDenseStore, layout.faiss),
        ("qdrant", QdrantEdgeStore, layout.qdrant),
        ("tantivy", TantivyLexicalStore, layout.lexical),
    )


def backend_chunk_ids(version: IndexVersion) -> dict[str, set[str]]:
    """The chunk ids each embedded backend of ``version`` holds."""
    held = {}
    for name, store_type, path in _embedded_backends(version.layout):
        with store_type.open(path) as store:
            held[name] = store.chunk_ids()
    return held


def _listing(chunk_ids: Collection[str]) -> dict[str, object]:
    """What is recorded of a listing of chunk ids: their count and a digest of them, the SHA-256
    of each id's 64-bit hash in sorted order (sorting a million ids as strings, then hashing
    each, took 1.0 s a listing; this takes about a third of that)."""
    hashes = pd.util.hash_array(np.fromiter(chunk_ids, dtype=object, count=len(chunk_ids)), categorize=False)
    return {"count": len(chunk_ids), "digest": hashlib.sha256(np.sort(hashes).tobytes()).hexdigest()}


def record_listed_chunk_ids(path: Path, chunk_ids: set[str]) -> None:
    """Note, beside a backend's index, the chunk ids it was found to hold once written and closed."""
    write_json(_listing(chunk_ids), path / LISTED_CHUNK_IDS)


def checked_backend_chunk_ids(version: IndexVersion, expected: set[str]) -> dict[str, set[str]]:
    """What each embedded backend holds, for the seal. A backend whose index step listed exactly
    ``expected`` after writing (``record_listed_chunk_ids``) is not opened and listed again: on
    the ACL Anthology's 104k chunks that took 4.6 s per build. Any other backend is listed, so a
    disagreement is reported with what is missing and what is unexpected."""
    wanted = _listing(expected)
    held = {}
    for name, store_type, path in _embedded_backends(version.layout):
        listed = path / LISTED_CHUNK_IDS
        if listed.is_file() and json.loads(listed.read_text()) == wanted:
            held[name] = expected
            continue
        with store_type.open(path) as store:
            held[name] = store.chunk_ids_given(expected)
    return held


def backend_differences(held: Mapping[str, set[str]], expected: set[str]) -> dict[str, dict[str, int]]:
    """Per backend: how many of the expected chunks it lacks and how many others it holds."""
    # Counted only for a backend whose ids differ: two differences of a million ids took 0.7 s,
    # a comparison a tenth of that (and none for the very set a recorded listing stands for).
    return {
        name: {"missing": 0, "unexpected": 0}
        if ids is expected or ids == expected
        else {"missing": len(expected - ids), "unexpected": len(ids - expected)}
        for name, ids in held.items()
    }


def disagreeing_backends(differences: Mapping[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """The backends of ``backend_differences`` that lack a chunk or hold one too many."""
    return {name: diff for name, diff in differences.items() if any(diff.values())}


def record_candidate_chunks(version: IndexVersion, table: pd.DataFrame) -> None:
    """Write a candidate's ``chunk_table`` when it is named: the seal checks the backends
    against it, and once sealed the next delta build diffs against it. A version is named by
    its chunks, so a re-run writes the same table."""
    write_parquet(table, version.layout.chunks)


def seal_candidate(
    versions: IndexVersions, version: IndexVersion, fingerprint: str, held: Mapping[str, set[str]], **facts: Any
) -> dict[str, Any]:
    """Mark ``version`` complete once every backend in ``held`` (backend -> the chunk ids it
    holds) holds exactly the chunk ids of its chunk table (``record_candidate_chunks``)."""
    table = pd.read_parquet(version.layout.chunks, columns=["chunk_id", "doc_id"])
    # Lists first: iterating an Arrow-backed column makes a scalar per row, several times slower.
    chunk_ids, doc_ids = table["chunk_id"].tolist(), table["doc_id"].tolist()
    expected = set(chunk_ids)
    broken = disagreeing_backends(backend_differences(held, expected))
    if broken:
        raise IndexConsistencyError(f"version {version.id}: backends disagree with the chunks: {broken}")
    fault_point("seal")
    # Two tenants may hold the same id: a document is its (tenant, id), which its chunk id names.
    documents = len({chunk_document(c, d) for c, d in zip(chunk_ids, doc_ids, strict=True)})
    return versions.seal(version, fingerprint, chunks=len(expected), documents=documents, **facts)


def publish_graph(graph: GraphBuild, tenant_of: Mapping[str, str], path: Path) -> dict[str, int]:
    """Write the tool graph to ``path``; a graph with an edge that names an unknown tool or
    crosses tenants (``tenant_of``: each document id's tenant) is not served at all (no graph,
    no expansion). Returns the violations."""
    violations = edge_violations(graph.edges, tenant_of)
    if any(violations.values()):
        path.unlink(missing_ok=True)
    else:
        save_edges(graph.edges, path)
        fault_point("graph")
    return violations
