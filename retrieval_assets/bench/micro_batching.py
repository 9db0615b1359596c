"""Whether query micro-batching changes rankings: the same queries one at a time, then from
concurrent callers whose query encodings share model calls (``core/embed/batching.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from retrieval_assets.core.embed.batching import BatchingDenseEncoder
from retrieval_assets.core.retrieval.retriever import HybridRetriever

# Concurrent callers: enough that batches form on two cores (the batcher's max_batch is 8).
CALLERS = 8


def batched_ranking_agreement(
    retriever: HybridRetriever, queries: Sequence[str], top_k: int = 10, callers: int = CALLERS
) -> dict[str, Any]:
    """Top-``top_k`` document lists of the retriever's default configuration, one query at a
    time and then from ``callers`` threads at once: how many lists are identical, and how many
    texts the dense encoder's shared calls held on average (1.0 means nothing was shared)."""

    def top_ids(query: str) -> list[str]:
        return [hit.doc_id for hit in retriever.search(query, top_k=top_k).hits]

    alone = [top_ids(query) for query in queries]
    encoder = retriever.dense_encoder
    batcher = encoder.batcher if isinstance(encoder, BatchingDenseEncoder) else None
    calls_before, texts_before = (batcher.calls, batcher.texts) if batcher else (0, 0)
    with ThreadPoolExecutor(max_workers=callers, thread_name_prefix="bench-caller") as pool:
        together = list(pool.map(top_ids, queries))
    calls = batcher.calls - calls_before if batcher else len(queries)
    texts = batcher.texts - texts_before if batcher else len(queries)
    changed = [query for query, a, b in zip(queries, alone, together, strict=True) if a != b]
    return {
        "queries": len(queries),
        "callers": callers,
        f"top{top_k}_identical": len(queries) - len(changed),
        "texts_per_encoder_call": round(texts / max(calls, 1), 2),
        "batched": batcher is not None,
        "changed_examples": changed[:5],
    }
