"""Each strategy's search over its store (BM25, SPLADE, dense), as timed callables the retriever runs in parallel."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from retrieval_assets.core.embed.base import DenseEncoder, SparseEncoder
from retrieval_assets.core.models import StoreHit, Strategy
from retrieval_assets.core.stores.base import DenseStore, LexicalStore, SparseStore
from retrieval_assets.core.stores.filters import MetadataFilter
from retrieval_assets.core.stores.remote import strongest_terms

# (query, depth, filters, expansion terms, tag terms, notes for the diagnostics) -> hits, best first
StrategySearch = Callable[
    [str, int, list[MetadataFilter], Mapping[str, float], Sequence[str], dict[str, Any]], list[StoreHit]
]
ENCODE_NOTE = "_encode"  # a strategy's note of its query encoding, moved to timings and diagnostics


def strategy_searches(
    *,
    lexical_store: LexicalStore | None,
    sparse_store: SparseStore | None,
    sparse_encoder: SparseEncoder | None,
    dense_store: DenseStore | None,
    dense_encoder: DenseEncoder | None,
) -> dict[Strategy, StrategySearch]:
    """The search of every strategy whose store (and query encoder) is there, in BM25, SPLADE, dense order."""
    searches: dict[Strategy, StrategySearch] = {}
    if lexical_store is not None:
        searches[Strategy.BM25] = lambda q, k, f, expansion, tags, _n: lexical_store.search_text(
            q, k, f, expansion_terms=expansion, tag_terms=tags
        )
    if sparse_store is not None and sparse_encoder is not None:

        def search_splade(q: str, k: int, f: list[MetadataFilter], _e: Any, _t: Any, notes: dict) -> list[StoreHit]:
            # An engine with a clause limit gets the query's heaviest terms; the cut is reported.
            encoded = encode_timed(sparse_encoder.encode_queries, q, notes)
            vector, cut = strongest_terms(encoded, sparse_store.max_query_terms)
            if cut:
                notes["splade_query_terms"] = cut
            return sparse_store.search_sparse(vector, k, f)

        searches[Strategy.SPLADE] = search_splade
    if dense_store is not None and dense_encoder is not None:
        searches[Strategy.DENSE] = lambda q, k, f, _e, _t, notes: dense_store.search_dense(
            encode_timed(dense_encoder.encode_queries, q, notes), k, f
        )
    return searches


def encode_timed(encode: Callable[[list[str]], Any], query: str, notes: dict[str, Any]) -> Any:
    """``encode([query])[0]``, noting its wall time and the calling thread's CPU in ms (exact for
    the single-threaded ONNX query session; an encoder's own worker threads are not counted)."""
    started, started_cpu = time.perf_counter(), time.thread_time()
    vector = encode([query])[0]
    notes[ENCODE_NOTE] = ((time.perf_counter() - started) * 1000, (time.thread_time() - started_cpu) * 1000)
    return vector


@dataclass(frozen=True)
class Done:
    """A result computed in the calling thread, read like a pool future's."""

    value: tuple[list[StoreHit], float]

    def result(self) -> tuple[list[StoreHit], float]:
        return self.value


def timed(fn: Callable[..., list[StoreHit]], *args: Any) -> tuple[list[StoreHit], float]:
    """``fn(*args)`` and its wall time in ms."""
    started = time.perf_counter()
    result = fn(*args)
    return result, (time.perf_counter() - started) * 1000
