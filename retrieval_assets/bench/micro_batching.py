"""Whether query micro-batching changes rankings: the same queries one at a time, then from
concurrent callers whose query encodings share model calls (``core/embed/batching.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from retrieval_assets.core.embed.base import DenseEncoder
from retrieval_assets.core.embed.batching import BatchingDenseEncoder
from retrieval_assets.core.retrieval.retriever import HybridRetriever

# Concurrent callers: enough that batches form on two cores (the batcher's max_batch is 8).
CALLERS = 8


def batched_ranking_agreement(
    retriever: HybridRetriever,
    encoder: DenseEncoder,
    queries: Sequence[str],
    top_k: int = 10,
    callers: int = CALLERS,
) -> dict[str, Any]:
    """Two checks with ``callers`` threads at once against one query at a time.

    The query vectors of ``encoder`` (the one the retriever was opened with) behind a
    micro-batcher, whether or not the served retriever batches it: identical vectors give
    identical rankings. And the served retriever's top-``top_k`` lists of its default
    configuration, searched concurrently (sharing encoder calls where it batches)."""
    batching = BatchingDenseEncoder(encoder, max_wait_ms=1.0, max_batch=CALLERS)
    try:
        alone = {query: encoder.encode_queries([query])[0] for query in queries}
        with ThreadPoolExecutor(max_workers=callers, thread_name_prefix="bench-caller") as pool:
            shared = list(pool.map(lambda query: batching.encode_queries([query])[0], queries))
        vectors_identical = sum(np.array_equal(alone[q], v) for q, v in zip(queries, shared, strict=True))
        texts_per_call = batching.batcher.texts / max(batching.batcher.calls, 1)
    finally:
        batching.close()

    def top_ids(query: str) -> list[str]:
        return [hit.doc_id for hit in retriever.search(query, top_k=top_k).hits]

    served_alone = [top_ids(query) for query in queries]
    with ThreadPoolExecutor(max_workers=callers, thread_name_prefix="bench-caller") as pool:
        served_together = list(pool.map(top_ids, queries))
    changed = [query for query, a, b in zip(queries, served_alone, served_together, strict=True) if a != b]
    return {
        "queries": len(queries),
        "callers": callers,
        "query_vectors_identical": int(vectors_identical),
        "texts_per_encoder_call": round(texts_per_call, 2),
        "served_batched": isinstance(retriever.dense_encoder, BatchingDenseEncoder),
        f"served_top{top_k}_identical": len(queries) - len(changed),
        "changed_examples": changed[:5],
    }
