"""Embedded FAISS, Qdrant and tantivy indexes over the chunks and their embeddings."""


from datetime import timedelta

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    FreshnessPolicy,
    MaterializeResult,
    asset,
)

from retrieval_assets.core import pipeline
from retrieval_assets.core.stores.base import IndexStore
from retrieval_assets.orchestration.metadata import stopwatch
from retrieval_assets.orchestration.resources import IndexStorageResource, ModelResource, SearchResource

GROUP = "indexes"
# Nightly builds: warn when an index misses one night, fail when it misses two.
NIGHTLY_FRESHNESS = FreshnessPolicy.time_window(fail_window=timedelta(hours=50), warn_window=timedelta(hours=26))


def _index_checks(asset_name: str, dense: bool = True) -> list[AssetCheckSpec]:
    specs = [
        AssetCheckSpec("vector_count_matches_chunks", asset=asset_name, blocking=True),
        AssetCheckSpec("chunk_ids_match_chunks", asset=asset_name, blocking=True),
    ]
    if dense:
        specs.append(AssetCheckSpec("dimension_matches_model", asset=asset_name, blocking=True))
    return specs


def _index_result(
    store: IndexStore,
    chunks: pd.DataFrame,
    seconds: float,
    dimensions: tuple[int | None, int] | None = None,
    **metadata: object,
) -> MaterializeResult:
    """Metadata and checks of a built index; ``dimensions`` is (index dim, model dim) for dense indexes."""
    count = store.count()
    stored, expected = store.chunk_ids(), set(chunks["chunk_id"])
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
    result = MaterializeResult(
        metadata={"backend": store.backend, "points": count, "seconds": seconds, **metadata},
        check_results=[
            *dimension_check,
            AssetCheckResult(
                check_name="vector_count_matches_chunks",
                passed=count == len(chunks),
                metadata={"points": count, "chunks": len(chunks)},
            ),
            AssetCheckResult(
                check_name="chunk_ids_match_chunks",
                passed=stored == expected,
                metadata={"missing": len(expected - stored), "unexpected": len(stored - expected)},
            ),
        ],
    )
    store.close()
    return result


@asset(group_name=GROUP, freshness_policy=NIGHTLY_FRESHNESS, check_specs=_index_checks("faiss_index"))
def faiss_index(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    models: ModelResource,
    search: SearchResource,
    chunks: pd.DataFrame,
    dense_embeddings: pd.DataFrame,
) -> MaterializeResult:
    """Exact inner-product FAISS index over the dense embeddings, with chunk payloads beside it."""
    path = storage.layout().faiss
    with stopwatch() as timer:
        store = pipeline.build_faiss_index(
            path, chunks, dense_embeddings, models.dense_model, search.retrieval_settings().context_tokens
        )
    context.log.info(f"FAISS index with {store.count()} vectors at {path}")
    return _index_result(
        store,
        chunks,
        timer["seconds"],
        (store.dim, models.dense_encoder().dim),
        path=str(path),
        model=models.dense_model,
    )


@asset(group_name=GROUP, freshness_policy=NIGHTLY_FRESHNESS, check_specs=_index_checks("qdrant_index"))
def qdrant_index(
    context: AssetExecutionContext,
    storage: IndexStorageResource,
    models: ModelResource,
    search: SearchResource,
    chunks: pd.DataFrame,
    dense_embeddings: pd.DataFrame,
    sparse_embeddings: pd.DataFrame,
) -> MaterializeResult:
    """Embedded Qdrant (qdrant-edge) shard with named dense and SPLADE vectors and indexed payloads."""
    path = storage.layout().qdrant
    with stopwatch() as timer:
        store = pipeline.build_qdrant_index(
            path,
            chunks,
            dense_embeddings,
            sparse_embeddings,
            models.dense_model,
            models.sparse_model,
            search.retrieval_settings().context_tokens,
        )
    context.log.info(f"Qdrant shard with {store.count()} points at {path}")
    return _index_result(
        store,
        chunks,
        timer["seconds"],
        (store.dim, models.dense_encoder().dim),
        path=str(path),
        dense_model=models.dense_model,
        sparse_model=models.sparse_model,
    )


@asset(group_name=GROUP, freshness_policy=NIGHTLY_FRESHNESS, check_specs=_index_checks("lexical_index", dense=False))
def lexical_index(
    context: AssetExecutionContext, storage: IndexStorageResource, search: SearchResource, chunks: pd.DataFrame
) -> MaterializeResult:
    """tantivy BM25 index with filterable payload fields, context tokens and facet values."""
    path = storage.layout().lexical
    with stopwatch() as timer:
        store = pipeline.build_lexical_index(path, chunks, search.retrieval_settings().context_tokens)
    context.log.info(f"tantivy index with {store.count()} documents at {path}")
    return _index_result(store, chunks, timer["seconds"], path=str(path))
