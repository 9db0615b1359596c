"""The indexes written into the candidate version: vocabulary, FAISS, embedded Qdrant, tantivy, servers.

Each starts from the candidate's build mode (``defs.assets.candidate``): reused as it is, a copy
of the promoted version's index with only a delta's changes applied, or built in full. Each
checks that it holds exactly the build's chunk ids.
"""

from pathlib import Path

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    MaterializeResult,
    MetadataValue,
    asset,
)

from retrieval_assets.core.embed.steps import embedding_cache
from retrieval_assets.core.index.build import (
    build_faiss_index,
    build_lexical_index,
    build_qdrant_index,
    point_batches,
    record_listed_chunk_ids,
    sealed_chunk_ids,
    write_vocabulary,
)
from retrieval_assets.core.index.delta import (
    Delta,
    delta_faiss_index,
    delta_held_chunk_ids,
    delta_lexical_index,
    delta_qdrant_index,
    delta_term_counts,
)
from retrieval_assets.core.index.layout import read_build_manifest
from retrieval_assets.core.index.points import PointTables
from retrieval_assets.core.index.versions import CandidateRecord
from retrieval_assets.core.index.vocabulary import (
    build_vocabulary,
    chunk_texts,
    count_terms,
    term_key,
)
from retrieval_assets.core.stores.base import IndexStore
from retrieval_assets.core.stores.faiss.store import FaissDenseStore
from retrieval_assets.core.stores.qdrant.edge import QdrantEdgeStore
from retrieval_assets.core.stores.tantivy.store import TantivyLexicalStore
from retrieval_assets.defs.assets.candidate import (
    INDEX_WRITES_POOL,
    build_metadata,
    candidate_delta,
    candidate_layout,
)
from retrieval_assets.defs.io_manager import StoredTable
from retrieval_assets.defs.metadata import (
    log_progress,
    preview,
    stopwatch,
    table_metadata,
)
from retrieval_assets.defs.resources import (
    IndexBuildResource,
    IndexStorageResource,
    ModelResource,
)

GROUP = "index"
# Tables an index step reads itself: all rows, or only a delta's upserted ones (``StoredTable``);
# embeddings as Arrow lists (``core.embed.vectors``).
DEFERRED = AssetIn(metadata={"deferred": True})
DEFERRED_VECTORS = AssetIn(metadata={"deferred": True, "dtype_backend": "pyarrow"})


def _index_checks(asset_name: str, dense: bool = True) -> list[AssetCheckSpec]:
    specs = [
        AssetCheckSpec(
            "vector_count_matches_chunks",
            asset=asset_name,
            blocking=True,
            description="The index holds exactly one point per chunk of the build.",
        ),
        AssetCheckSpec(
            "chunk_ids_match_chunks",
            asset=asset_name,
            blocking=True,
            description="The index holds exactly the build's chunk ids: none missing, none unexpected (a dense "
            "index built as a delta: its base's checked ids with its upserts and deletes applied, and no other point).",
        ),
    ]
    if dense:
        specs.append(
            AssetCheckSpec(
                "dimension_matches_model",
                asset=asset_name,
                blocking=True,
                description="The index's vector dimension equals the dense encoder's output dimension.",
            )
        )
    return specs


def _index_result(
    store: IndexStore,
    path: Path,
    candidate: CandidateRecord,
    expected: set[str],
    seconds: float,
    dimensions: tuple[int | None, int] | None = None,
    delta: Delta | None = None,
    **metadata: str | bool | int,
) -> MaterializeResult:
    """Metadata and checks of a built index at ``path`` (``expected``: the build's chunk ids);
    ``dimensions`` is (index dim, model dim) for dense indexes. A ``delta``'s store is checked
    by its changes (``delta_held_chunk_ids``). The chunk ids found for the checks are recorded
    for the seal, unless the candidate reuses a sealed version as it is."""
    try:
        listed = delta_held_chunk_ids(store, delta, expected) if delta else store.chunk_ids_given(expected)
        result = _checked(
            store.backend,
            store.count(),
            listed,
            expected,
            seconds,
            dimensions,
            path=str(path),
            **build_metadata(candidate),
            **metadata,
        )
    finally:
        store.close()
    if not candidate.reused:
        record_listed_chunk_ids(path, listed)
    return result


def _checked(
    backend: str,
    count: int,
    stored: set[str],
    expected: set[str],
    seconds: float,
    dimensions: tuple[int | None, int] | None = None,
    **metadata: str | bool | int,
) -> MaterializeResult:
    dimension_check = []
    if dimensions is not None:
        index_dim, model_dim = dimensions
        dimension_check.append(
            AssetCheckResult(
                check_name="dimension_matches_model",
                passed=index_dim == model_dim,
                metadata={"index_dim": index_dim, "model_dim": model_dim},
            )
        )
    return MaterializeResult(
        metadata={"backend": backend, "points": count, "seconds": seconds, **metadata},
        check_results=[
            *dimension_check,
            AssetCheckResult(
                check_name="vector_count_matches_chunks",
                passed=count == len(expected),
                metadata={"points": count, "chunks": len(expected)},
            ),
            AssetCheckResult(
                check_name="chunk_ids_match_chunks",
                passed=stored == expected,
                metadata={"missing": len(expected - stored), "unexpected": len(stored - expected)},
            ),
        ],
    )


def _upserted(delta: Delta, chunks: StoredTable, *vectors: StoredTable) -> list[pd.DataFrame]:
    """The rows of a delta's upserted chunks in the chunks table and each vector table: a few of
    104k on the ACL Anthology."""
    chunk_rows = delta.chunk_rows(chunks.table, delta.plan.upserted)
    return [chunk_rows, *(table.read_where("chunk_id", delta.plan.upserted) for table in vectors)]


@asset(
    group_name=GROUP,
    io_manager_key="parquet_io_manager",
    kinds={"parquet"},
    pool=INDEX_WRITES_POOL,
    ins={"chunks": DEFERRED},
)
def vocabulary(
    context: AssetExecutionContext,
    models: ModelResource,
    storage: IndexStorageResource,
    build: IndexBuildResource,
    chunks: StoredTable,
    index_candidate: CandidateRecord,
) -> MaterializeResult[pd.DataFrame]:
    """Terms from names, descriptions and keywords with their embeddings, for query expansion.

    Written into the candidate version too, where the query resource reads it without Dagster."""
    encoder = models.dense_encoder()
    layout = candidate_layout(storage, index_candidate)
    delta = candidate_delta(storage, index_candidate)
    with stopwatch() as timer:
        if index_candidate.reused:
            frame, stats = pd.read_parquet(layout.vocabulary), None
        else:
            # A delta updates the base's term counts for the changed documents only, reading only their chunks.
            if delta:
                counts = delta_term_counts(delta, delta.chunk_rows(chunks.table))
            else:
                counts = count_terms(chunk_texts(chunks.read()))
            terms_cache = embedding_cache(storage.cache_dir, "terms", encoder)
            frame, stats = build_vocabulary(
                counts, encoder, build.vocabulary, terms_cache, log_progress(context, "vocabulary")
            )
            write_vocabulary(frame, counts, layout)
            terms_cache.compact(list(map(term_key, frame["term"].tolist())))
    sources = frame["sources"].explode().value_counts().to_dict() if len(frame) else {}
    return MaterializeResult(
        value=frame,
        metadata={
            **table_metadata(frame),
            "terms": len(frame),
            "model": encoder.model_name,
            "version": index_candidate.version,
            **build_metadata(index_candidate),
            "terms_encoded": stats.encoded if stats else 0,
            "terms_by_source": MetadataValue.json(sources),
            "path": str(layout.vocabulary),
            "seconds": timer["seconds"],
            "preview": preview(frame, ["term", "doc_freq", "sources"], rows=10),
        },
    )


@asset(
    group_name=GROUP,
    kinds={"faiss"},
    pool=INDEX_WRITES_POOL,
    check_specs=_index_checks("faiss_index"),
    ins={"chunks": DEFERRED, "dense_embeddings": DEFERRED_VECTORS},
)
def faiss_index(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    models: ModelResource,
    build: IndexBuildResource,
    chunks: StoredTable,
    dense_embeddings: StoredTable,
    index_candidate: CandidateRecord,
) -> MaterializeResult:
    """FAISS index over the dense embeddings, with chunk payloads beside it: the exact scan, or an
    HNSW graph for a version of ``dense_index.approximate_from_chunks`` chunks or more."""
    path = candidate_layout(storage, index_candidate).faiss
    delta = candidate_delta(storage, index_candidate)
    with stopwatch() as timer:
        if index_candidate.reused:
            store = FaissDenseStore.open(path)
        elif delta:
            chunk_rows, dense_rows = _upserted(delta, chunks, dense_embeddings)
            store = delta_faiss_index(delta, path, chunk_rows, dense_rows, models.dense_model, build.context_tokens)
        else:
            tables = PointTables.stored(chunks.table, dense_embeddings.table)
            store = build_faiss_index(path, tables, models.dense_model, build.context_tokens, build.dense_index)
    context.log.info(f"FAISS index with {store.count()} vectors at {path}")
    return _index_result(
        store,
        path,
        index_candidate,
        set(chunks.column("chunk_id").tolist()),
        timer["seconds"],
        (store.dim, models.dense_encoder().dim),
        delta,
        model=models.dense_model,
        index_type=store.index_type,
    )


@asset(
    group_name=GROUP,
    kinds={"qdrant"},
    pool=INDEX_WRITES_POOL,
    check_specs=_index_checks("qdrant_edge_index"),
    ins={"chunks": DEFERRED, "dense_embeddings": DEFERRED_VECTORS, "sparse_embeddings": DEFERRED_VECTORS},
)
def qdrant_edge_index(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    models: ModelResource,
    build: IndexBuildResource,
    chunks: StoredTable,
    dense_embeddings: StoredTable,
    sparse_embeddings: StoredTable,
    index_candidate: CandidateRecord,
) -> MaterializeResult:
    """Embedded Qdrant (qdrant-edge) shard with named dense and SPLADE vectors and indexed payloads."""
    version = storage.versions().version(index_candidate.version)
    path = version.layout.qdrant
    models_used = {"dense_model": models.dense_model, "sparse_model": models.sparse_model}
    sealed = sealed_chunk_ids(version) if index_candidate.reused else None
    expected = set(chunks.column("chunk_id").tolist())
    if sealed is not None:
        # The reused version may be the one being served, whose shard this process cannot open;
        # it was checked when sealed, so its build manifest and chunk table stand in.
        manifest = read_build_manifest(path)
        return _checked(
            QdrantEdgeStore.backend,
            manifest["count"],
            sealed,
            expected,
            0.0,
            (manifest["dim"], models.dense_encoder().dim),
            path=str(path),
            **models_used,
            **build_metadata(index_candidate),
        )
    delta = candidate_delta(storage, index_candidate)
    tables = (chunks, dense_embeddings, sparse_embeddings)
    settings = (models.dense_model, models.sparse_model, build.context_tokens)
    with stopwatch() as timer:
        if index_candidate.reused:
            store = QdrantEdgeStore.open(path)
        elif delta:
            chunk_rows, dense_rows, sparse_rows = _upserted(delta, *tables)
            store = delta_qdrant_index(delta, path, chunk_rows, dense_rows, sparse_rows, *settings)
        else:
            stored = PointTables.stored(chunks.table, dense_embeddings.table, sparse_embeddings.table)
            store = build_qdrant_index(path, stored, *settings)
    context.log.info(f"Qdrant shard with {store.count()} points at {path}")
    dimensions = (store.dim, models.dense_encoder().dim)
    return _index_result(store, path, index_candidate, expected, timer["seconds"], dimensions, delta, **models_used)


@asset(
    group_name=GROUP,
    kinds={"tantivy"},
    pool=INDEX_WRITES_POOL,
    check_specs=_index_checks("tantivy_index", dense=False),
    ins={"chunks": DEFERRED},
)
def tantivy_index(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    build: IndexBuildResource,
    chunks: StoredTable,
    index_candidate: CandidateRecord,
) -> MaterializeResult:
    """tantivy BM25 index (one per tenant) with filterable payload fields, context tokens and facet
    values. A delta keeps each unchanged tenant's index (hard links) and rebuilds each changed
    one, as deletes would leave BM25's statistics different from a full build's; an approximate
    (HNSW) version patches a changed tenant's index in place instead (``core.index.delta``)."""
    path = candidate_layout(storage, index_candidate).lexical
    delta = candidate_delta(storage, index_candidate)
    keys = None  # a delta's every chunk id and tenant, whose ids the checks below take too
    with stopwatch() as timer:
        if index_candidate.reused:
            store = TantivyLexicalStore.open(path)
        elif delta:
            keys = chunks.read_columns(["chunk_id", "tenant_id"])
            store = delta_lexical_index(delta, path, keys, chunks.table, build.context_tokens, build.lexical_stemmer)
        else:
            store = build_lexical_index(path, chunks.table, build.context_tokens, build.lexical_stemmer)
    context.log.info(f"tantivy index with {store.count()} documents at {path}")
    tenants: dict[str, str | int] = {}
    if delta:  # None for a reused version
        # How the delta changed each tenant's index; the rest were hard-linked from the base.
        built = read_build_manifest(path)
        rebuilt = built.get("rebuilt_tenants")  # absent: rebuilt whole (a base of an older format)
        tenants = {
            "tenants_rebuilt": "all" if rebuilt is None else ", ".join(rebuilt) or "none",
            "tenants_patched": ", ".join(built.get("patched_tenants", [])) or "none",
            "deleted_in_statistics": sum(built.get("deleted_in_statistics", {}).values()),
        }
        context.log.info(f"tantivy delta: rebuilt {tenants['tenants_rebuilt']}, patched {tenants['tenants_patched']}")
    # Listed whole, delta or not: tantivy would hold a chunk twice where a rebuild repeated it, so
    # its count and a delta's changes alone could miss one that is gone (``delta_held_chunk_ids``).
    expected = set((keys["chunk_id"] if keys is not None else chunks.column("chunk_id")).tolist())
    return _index_result(store, path, index_candidate, expected, timer["seconds"], None, None, **tenants)


@asset(
    group_name=GROUP,
    kinds={"qdrant", "opensearch"},
    pool=INDEX_WRITES_POOL,
    check_specs=[
        AssetCheckSpec(
            "server_counts_match_chunks",
            asset="server_indexes",
            blocking=True,
            description="The Qdrant collection and the OpenSearch index each hold one document per chunk "
            "(passes trivially when no server is configured).",
        )
    ],
    # Read only when a server is configured.
    ins={
        "chunks": DEFERRED,
        "dense_embeddings": DEFERRED_VECTORS,
        "sparse_embeddings": DEFERRED_VECTORS,
    },
)
def server_indexes(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    build: IndexBuildResource,
    chunks: StoredTable,
    dense_embeddings: StoredTable,
    sparse_embeddings: StoredTable,
    index_candidate: CandidateRecord,
):  # no return annotation: Dagster reads one as an output tuple once check_specs are present
    """The candidate version as a Qdrant collection and an OpenSearch index, when QDRANT_URL /
    OPENSEARCH_URL are set (writes retried with backoff); nothing otherwise. Always written in
    full, delta candidates included: each version is its own collection and index."""
    servers = storage.servers()
    if servers is None:
        return MaterializeResult(
            metadata={"configured": False},
            check_results=[
                AssetCheckResult(check_name="server_counts_match_chunks", passed=True, metadata={"configured": False})
            ],
        )
    version = index_candidate.version
    with stopwatch() as timer:
        if index_candidate.reused:
            counts = {backend: len(ids) for backend, ids in servers.chunk_ids(version).items()}
        else:
            stored = PointTables.stored(chunks.table, dense_embeddings.table, sparse_embeddings.table)
            field_types, dim, batches = point_batches(stored, build.context_tokens)
            counts = servers.build(version, dim, field_types, batches, build.lexical_stemmer)
    context.log.info(f"server indexes {servers.name(version)}: {counts}")
    return MaterializeResult(
        metadata={"configured": True, "name": servers.name(version), **counts, "seconds": timer["seconds"]},
        check_results=[
            AssetCheckResult(
                check_name="server_counts_match_chunks",
                passed=all(count == chunks.rows for count in counts.values()),
                metadata={"chunks": chunks.rows, **counts},
            )
        ],
    )
